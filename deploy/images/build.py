"""The service images (app, gateway, kiosk) on the offline bases: the project's wheels plus one Dockerfile each.

The host builds the wheels of the project and of every dependency (it reaches PyPI; containers do not), puts them in
the build context, and the Dockerfiles install them with `pip --no-index`, so no build step needs a network. Each
image is tagged with a hash of its base and its build context, plus `latest`; an image whose tag exists is not built
again. A site with a registry passes its own bases (see deploy/docker/base.Dockerfile) with `--base-image`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deploy.images.rootfs import DEFAULT_CACHE, KIOSK, LAYERS, ImageBuildError, build_layer, import_layer

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = REPO / "deploy" / "docker"
REPOSITORY = "safeshare"
# service -> the offline layer it is built on
SERVICES = {"app": "base", "gateway": "base", "kiosk": "kiosk"}
SOURCE_DIRS = ("engine", "proxy", "enclave", "deploy", "policies", "safeshare", "audit")


@dataclass
class BuiltImage:
    service: str
    tag: str
    base: str
    built: bool  # False: the tag existed already
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _docker_ok(docker: str = "docker") -> None:
    result = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if result.returncode != 0:
        raise ImageBuildError(f"no Docker engine answers ({result.stderr.strip() or result.stdout.strip()}); "
                              "start one with scripts/dockerd.sh")


def source_hash() -> str:
    """Hash of everything that goes into the project's wheel: pyproject.toml and the package sources."""
    digest = hashlib.sha256()
    files = [REPO / "pyproject.toml", REPO / "README.md"]
    for folder in SOURCE_DIRS:
        root = REPO / folder
        if root.is_dir():
            files += [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                      and p.suffix not in (".pyc",)]
    for path in sorted(files):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_wheels(cache: Path, say: Callable[[str], None] = print) -> Path:
    """A wheelhouse with the project and its runtime dependencies, cached by the source hash."""
    target = cache / f"wheels-{source_hash()}"
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wheels.", dir=cache))
    try:
        say(f"images: building wheels of the project and its dependencies into {target.name}")
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(staging),
                                 str(REPO)], capture_output=True, text=True)
        if result.returncode != 0:
            raise ImageBuildError(f"pip wheel failed:\n{result.stderr[-3000:]}")
        (staging / ".complete").write_text("")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _context_hash(wheels: Path, dockerfile: Path, base: str) -> str:
    digest = hashlib.sha256(base.encode() + b"\0" + dockerfile.read_bytes())
    for path in sorted(wheels.glob("*.whl")):
        digest.update(path.name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _image_exists(tag: str, docker: str = "docker") -> bool:
    return subprocess.run([docker, "image", "inspect", tag], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def build_service(service: str, base: str, wheels: Path, cache: Path, force: bool = False,
                  say: Callable[[str], None] = print, docker: str = "docker") -> BuiltImage:
    started = time.monotonic()
    dockerfile = DOCKERFILES / f"{service}.Dockerfile"
    tag = f"{REPOSITORY}/{service}:{_context_hash(wheels, dockerfile, base)}"
    latest = f"{REPOSITORY}/{service}:latest"
    if _image_exists(tag, docker) and not force:
        subprocess.run([docker, "tag", tag, latest], check=True)
        return BuiltImage(service, tag, base, False, time.monotonic() - started)
    with tempfile.TemporaryDirectory(prefix=f"ctx-{service}-", dir=cache) as tmp:
        context = Path(tmp)
        shutil.copytree(wheels, context / "wheels", ignore=shutil.ignore_patterns(".complete"))
        shutil.copy2(dockerfile, context / "Dockerfile")
        log = cache / f"build-{service}.log"
        say(f"images: docker build {tag} on {base} (log {log})")
        with open(log, "w") as out:
            # The classic builder: BuildKit may want to pull its own frontend image, and there is no registry.
            result = subprocess.run([docker, "build", "--network", "none", "--build-arg", f"BASE={base}",
                                     "--label", f"org.safeshare.service={service}",
                                     "-t", tag, "-t", latest, str(context)],
                                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "DOCKER_BUILDKIT": "0"})
        if result.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise ImageBuildError(f"docker build of {service} failed (log {log}):\n{tail}")
    return BuiltImage(service, tag, base, True, time.monotonic() - started)


def build_all(cache: Path = DEFAULT_CACHE, force: bool = False, base_images: dict[str, str] | None = None,
              say: Callable[[str], None] = print, docker: str = "docker") -> dict[str, BuiltImage]:
    """Bases (offline unless `base_images` maps layer names to existing images), wheels, then the three services."""
    _docker_ok(docker)
    bases: dict[str, str] = dict(base_images or {})
    for name, layer in LAYERS.items():
        if name not in bases:
            folder = build_layer(layer, cache, say=say)
            bases[name] = import_layer(folder, f"{REPOSITORY}/layer-{name}", docker)
            subprocess.run([docker, "tag", bases[name], f"{REPOSITORY}/layer-{name}:latest"], check=True)
    wheels = build_wheels(cache, say)
    return {service: build_service(service, bases[layer], wheels, cache, force, say, docker)
            for service, layer in SERVICES.items()}


def image_sizes(images: dict[str, BuiltImage], docker: str = "docker") -> dict[str, int]:
    sizes = {}
    for service, image in images.items():
        out = subprocess.run([docker, "image", "inspect", image.tag, "--format", "{{.Size}}"], capture_output=True,
                             text=True)
        sizes[service] = int(out.stdout.strip() or 0)
    return sizes


def describe(images: dict[str, BuiltImage]) -> str:
    return json.dumps({name: image.as_dict() for name, image in images.items()}, indent=2)


__all__ = ["BuiltImage", "build_all", "build_service", "build_wheels", "image_sizes", "KIOSK"]
