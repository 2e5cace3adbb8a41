"""All images of an enclave, offline: the API that `safeshare images build`, tests, benchmarks and provisioning use.

The chain, each step cached by a content key (an existing tag is reused as it is):

    layer-base   debootstrap + python3/venv/tini + noVNC files (rootfs.py), `docker import`     (debootstrap mode)
                 or base.Dockerfile FROM debian:bookworm-slim with apt in a RUN step             (registry mode)
    runtime      layer-base + /opt/safeshare virtualenv with the pinned dependency wheels (runtime.Dockerfile)
    layer-kiosk  runtime + what apt added for Xvfb/x11vnc/Chromium/fonts (layers.py, or base.Dockerfile)
    app, gateway on runtime;  kiosk on layer-kiosk: the project wheel, a user, healthcheck, entrypoint
                 (deploy/docker/<service>.Dockerfile; tag safeshare/<service>:<key> and :latest)

So an edit of the sources rebuilds three small layers (seconds); the big ones (Debian packages, dependencies) are
shared by the three images and rebuilt only when their inputs change. No build step has a network (`--network none`)
in debootstrap mode: the host fetched everything. Concurrent builds on one host wait for each other (a lock file in
the cache folder). Provisioning should run containers from `image_refs()` (the content tags of the last build).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from deploy.images import dockercli, layers, rootfs, wheels
from deploy.images.rootfs import DEFAULT_CACHE, ImageBuildError

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = REPO / "deploy" / "docker"
REPOSITORY = layers.REPOSITORY
SERVICES = ("app", "gateway", "kiosk")
MANIFEST = "images.json"  # in the cache folder: the tags of the last complete build
BASE_MODES = ("debootstrap", "registry")
REGISTRY_BASE = os.environ.get("SAFESHARE_REGISTRY_BASE", "debian:bookworm-slim")


@dataclass
class BuiltImage:
    """One image of the chain. `built` False: the tag existed and was reused."""

    service: str
    tag: str
    base: str
    built: bool
    seconds: float
    id: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class BuildResult:
    """The three service images plus the steps below them (layers, runtime, wheelhouses) with their timings."""

    images: dict[str, BuiltImage]
    steps: list[BuiltImage] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"images": {k: v.as_dict() for k, v in self.images.items()},
                "steps": [s.as_dict() for s in self.steps], "seconds": round(self.seconds, 2)}


@contextmanager
def _cache_lock(cache: Path, say: Callable[[str], None]) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"images: another build holds {cache / '.lock'}; waiting")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _link_tree(source: Path, target: Path) -> None:
    """Hard links when possible (the wheelhouse and the build context share the cache's file system), else copies."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.name.startswith("."):
            continue
        try:
            os.link(path, target / path.name)
        except OSError:
            shutil.copy2(path, target / path.name)


def _docker_build(name: str, dockerfile: Path, base: str, contents: dict[str, Path], tags: list[str], cache: Path,
                  force: bool, docker: str, network: str = "none", build_args: dict[str, str] | None = None) -> str:
    with tempfile.TemporaryDirectory(prefix=f".ctx-{name}-", dir=cache) as tmp:
        context = Path(tmp)
        shutil.copy2(dockerfile, context / "Dockerfile")
        for folder, source in contents.items():
            _link_tree(source, context / folder)
        log = cache / f"build-{name}.log"
        log.write_text("")
        return dockercli.build(context, tags, log, build_args={"BASE": base, **(build_args or {})},
                               labels={"org.safeshare.image": name}, network=network, no_cache=force, docker=docker)


class _Steps:
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.done: list[BuiltImage] = []

    def record(self, name: str, ref: str, base: str, built: bool, started: float, docker: str | None = None) -> str:
        image_id = dockercli.image_id(ref, docker) if docker else ""
        step = BuiltImage(name, ref, base, built, round(time.monotonic() - started, 2), image_id or "")
        self.done.append(step)
        self.say(f"images: {name:<12} {'built ' if built else 'cached'} {step.seconds:7.1f} s  {ref}")
        return ref


def _registry_layer(name: str, parent: str, packages: list[str], cache: Path, force: bool, docker: str) -> tuple[
        str, bool]:
    """A layer made with apt in a RUN step (sites with a registry and a mirror the build can reach)."""
    dockerfile = DOCKERFILES / "base.Dockerfile"
    parent_id = dockercli.image_id(parent, docker) or parent
    ref = f"{REPOSITORY}/layer-{name}:registry-{_key(parent_id, dockerfile.read_bytes(), ' '.join(packages))}"
    if not force and dockercli.image_id(ref, docker) is not None:
        return ref, False
    _docker_build(f"layer-{name}", dockerfile, parent, {}, [ref, f"{REPOSITORY}/layer-{name}:latest"], cache, force,
                  docker, network="default", build_args={"FROM": parent, "PACKAGES": " ".join(packages)})
    return ref, True


def build_all(cache: Path = DEFAULT_CACHE, force: bool = False, base: str = "debootstrap",
              base_images: dict[str, str] | None = None, say: Callable[[str], None] = print,
              docker: str = dockercli.DOCKER) -> BuildResult:
    """Build (or reuse) every image; `force` rebuilds every step from scratch (debootstrap included).

    `base` is "debootstrap" (offline, the default) or "registry" (`debian:bookworm-slim` or $SAFESHARE_REGISTRY_BASE,
    with apt in RUN steps). `base_images` may name existing images to use instead of building a step: "base" (an
    image with python3, python3-venv, tini and noVNC in /usr/share/novnc) and/or "kiosk" (a runtime image with the
    kiosk packages). Raises ImageBuildError with the failing step's log."""
    if base not in BASE_MODES:
        raise ImageBuildError(f"--base must be one of {', '.join(BASE_MODES)}, got {base!r}")
    given = dict(base_images or {})
    dockercli.check_engine(docker)
    started_all = time.monotonic()
    steps = _Steps(say)
    with _cache_lock(cache, say):
        mirror, security = rootfs.host_mirrors()
        keep: set[Path] = set()

        # 1. the base layer
        started = time.monotonic()
        if "base" in given:
            base_ref = steps.record("layer-base", given["base"], "(given)", False, started, docker)
        elif base == "registry":
            packages = [*rootfs.BASE.packages, *[package for package, _ in rootfs.BASE.files_from]]
            ref, built = _registry_layer("base", REGISTRY_BASE, packages, cache, force, docker)
            base_ref = steps.record("layer-base", ref, REGISTRY_BASE, built, started, docker)
        else:
            folder = rootfs.build_layer(rootfs.BASE, cache, mirror, security, force, say)
            keep.add(folder)
            ref, built = layers.import_base(folder, force, docker)
            base_ref = steps.record("layer-base", ref, "debootstrap", built, started, docker)

        # 2. the wheels (host side) and the runtime: base + dependencies
        started = time.monotonic()
        known = {path for path in cache.iterdir() if (path / ".complete").is_file()}
        deps = wheels.dependency_wheels(cache, force, say)
        project = wheels.project_wheel(cache, force, say)
        keep |= {deps, project}
        steps.record("wheels", f"{deps.name} {project.name}", "pypi", force or not {deps, project} <= known, started)

        started = time.monotonic()
        runtime_file = DOCKERFILES / "runtime.Dockerfile"
        base_id = dockercli.image_id(base_ref, docker) or base_ref
        runtime_ref = f"{REPOSITORY}/runtime:{_key(base_id, runtime_file.read_bytes(), deps.name)}"
        built = force or dockercli.image_id(runtime_ref, docker) is None
        if built:
            _docker_build("runtime", runtime_file, base_ref, {"deps": deps},
                          [runtime_ref, f"{REPOSITORY}/runtime:latest"], cache, force, docker)
            # The first stage (base + wheels + venv, hundreds of MB) stays behind untagged: drop it.
            dockercli.run_docker(["image", "prune", "--force", "--filter", "label=org.safeshare.stage=venv"], docker,
                                 check=False)
        steps.record("runtime", runtime_ref, base_ref, built, started, docker)

        # 3. the kiosk layer on the runtime
        started = time.monotonic()
        if "kiosk" in given:
            kiosk_ref = steps.record("layer-kiosk", given["kiosk"], "(given)", False, started, docker)
        elif base == "registry":
            ref, built = _registry_layer("kiosk", runtime_ref, list(rootfs.KIOSK.packages), cache, force, docker)
            kiosk_ref = steps.record("layer-kiosk", ref, runtime_ref, built, started, docker)
        else:
            folder = rootfs.build_layer(rootfs.KIOSK, cache, mirror, security, force, say)
            keep.add(folder)
            ref, built = layers.build_derived(folder, runtime_ref, cache / "build-layer-kiosk.log", force, docker)
            kiosk_ref = steps.record("layer-kiosk", ref, runtime_ref, built, started, docker)

        # 4. the services
        wheel_files = sorted(project.glob("*.whl"))
        if len(wheel_files) != 1:
            raise ImageBuildError(f"{project} should hold exactly one wheel, holds {len(wheel_files)}")
        wheel_digest = hashlib.sha256(wheel_files[0].read_bytes()).hexdigest()
        images: dict[str, BuiltImage] = {}
        for service in SERVICES:
            started = time.monotonic()
            parent = kiosk_ref if service == "kiosk" else runtime_ref
            dockerfile = DOCKERFILES / f"{service}.Dockerfile"
            parent_id = dockercli.image_id(parent, docker) or parent
            ref = f"{REPOSITORY}/{service}:{_key(parent_id, dockerfile.read_bytes(), wheel_digest)}"
            built = force or dockercli.image_id(ref, docker) is None
            if built:
                _docker_build(service, dockerfile, parent, {"project": project},
                              [ref, f"{REPOSITORY}/{service}:latest"], cache, force, docker)
            else:
                dockercli.tag(ref, f"{REPOSITORY}/{service}:latest", docker=docker)
            steps.record(service, ref, parent, built, started, docker)
            images[service] = steps.done[-1]

        (cache / MANIFEST).write_text(json.dumps({"images": {name: image.as_dict() for name, image in images.items()},
                                                  "steps": [step.as_dict() for step in steps.done
                                                            if step.service not in ("wheels", *SERVICES)]},
                                                 indent=2))
        if base == "debootstrap" and not given:
            rootfs.prune(cache, keep)
        wheels.prune(cache, keep)
    return BuildResult(images, steps.done, time.monotonic() - started_all)


def image_refs(cache: Path = DEFAULT_CACHE) -> dict[str, str]:
    """service -> content tag of the last complete build (what provisioning should run); falls back to :latest."""
    try:
        manifest = json.loads((cache / MANIFEST).read_text())
        return {service: manifest["images"][service]["tag"] for service in SERVICES}
    except (OSError, KeyError, json.JSONDecodeError):
        return {service: f"{REPOSITORY}/{service}:latest" for service in SERVICES}


def prune_images(cache: Path = DEFAULT_CACHE, docker: str = dockercli.DOCKER) -> tuple[list[str], list[str]]:
    """Remove this repository's image tags that the last complete build did not produce (or use as layers), and
    :latest tags that point elsewhere; (removed, kept because a container uses them). Docker removes the untagged
    layers below them that nothing else needs. Explicit (`safeshare images prune`): a shared engine may run enclaves
    on older tags, and those are refused here by the engine itself, never forced."""
    try:
        manifest = json.loads((cache / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        raise ImageBuildError(f"no complete build recorded in {cache / MANIFEST}; build first") from None
    current = {entry["tag"] for entry in manifest.get("steps", [])} | {entry["tag"] for entry in
                                                                         manifest["images"].values()}
    current_ids = {dockercli.image_id(ref, docker) for ref in current}
    listing = dockercli.run_docker(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                                    f"reference={REPOSITORY}/*"], docker)
    removed, in_use = [], []
    for ref in listing.split():
        if ref in current or ref.endswith(":<none>"):
            continue
        if ref.endswith(":latest") and dockercli.image_id(ref, docker) in current_ids:
            continue
        if dockercli.run_docker(["image", "rm", ref], docker, check=False) is None:
            in_use.append(ref)
        else:
            removed.append(ref)
    return removed, in_use


def image_sizes(images: dict[str, BuiltImage], docker: str = dockercli.DOCKER) -> dict[str, int]:
    """Virtual size of each image in bytes (its layers, shared ones included)."""
    return {service: int(dockercli.inspect(image.tag, docker).get("Size", 0)) for service, image in images.items()}


__all__ = ["BuildResult", "BuiltImage", "ImageBuildError", "build_all", "image_refs", "image_sizes", "prune_images",
           "SERVICES"]
