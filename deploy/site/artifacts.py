"""What `safeshare site deploy` prepares on the machine that runs Ansible before any host is touched.

Why here and not on the hosts: the hosts of an enclave site reach no package registry, no image registry and no PyPI
(the test's targets reach nothing either), while the machine that runs Ansible (the control host itself, or an
operator's machine next to it) reaches the Debian mirror its own apt uses and PyPI. So everything a host installs is
made here, once, and shipped as three kinds of files, each named by its content so that shipping is idempotent:

    ARTIFACTS/apt/repo/                   .debs of the hosts' Debian packages with their dependency closure, and a
    ARTIFACTS/apt/apt-<key>.tar           flat `Packages` index: a local apt repository (`deb [trusted=yes] file:...`)
    ARTIFACTS/wheels/wheels-<key>.tar     the control host's virtualenv: pinned dependency wheels of safeshare[deploy]
                                          (the versions of this virtualenv) plus the project's wheel
    ARTIFACTS/images/<name>-<id>.tar      `docker save` of the offline images (`safeshare images build`), loaded
                                          with `docker load` on the hosts; never pulled from a registry

The flat repository is unsigned (`trusted=yes` on the hosts): its .debs were fetched here by apt, which checked them
against the mirror's signed Release files, and they reach the hosts over Ansible's connection, not a network mirror.

`artifacts.json` lists them for the playbook (`ansible-playbook -e @artifacts.json`). Everything is reused when its
inputs did not change (a second deploy prepares nothing). The archives are plain tar files: the .debs, wheels and
image layers are compressed already.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_ARTIFACTS = Path(os.environ.get("SAFESHARE_SITE_CACHE", "/var/cache/safeshare/site"))
MANIFEST = "artifacts.json"

# Debian packages of each kind of host (what the roles install when missing). python3 for Ansible itself, python3-venv
# for the control host's virtualenv; docker.io (the engine), iptables (its host rule), logrotate.
CONTROL_PACKAGES = ("python3", "python3-venv", "logrotate", "iptables", "docker.io")
ENCLAVE_PACKAGES = ("python3", "logrotate", "iptables", "docker.io")
# Packages of which the control host gets only files, without their dependencies (as the images do: rootfs.BASE):
# the gateway serves noVNC's JavaScript, and Debian's novnc package would add nodejs, numpy and X libraries.
FILES_ONLY = ("novnc",)
# Images each kind of host gets by default (the roles' defaults say the same): enclaves run app and kiosk, the
# control host the gateway. Names are services of the build (app, gateway, kiosk) or its steps (layer-base, ...).
CONTROL_IMAGES = ("gateway",)
ENCLAVE_IMAGES = ("app", "kiosk")
# The extra the control host's virtualenv gets: the custodian service and gateway (enclave) plus provisioning (deploy).
CONTROL_EXTRAS = ("deploy",)


class ArtifactError(RuntimeError):
    """Something the hosts need could not be prepared here; the message says which step and why."""


@dataclass
class Artifacts:
    """Paths on this machine and the keys the roles compare with what a host has."""

    root: str  # the folder itself (the control host's trust.json is fetched into it for the enclave hosts)
    apt_archive: str
    apt_key: str
    apt_packages: dict[str, list[str]]
    wheels_archive: str
    wheels_key: str
    images: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> ref, id, archive (when shipped)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_vars(self) -> dict:
        """The playbook's variables (prefixed, so they cannot clash with an inventory's)."""
        return {"safeshare_artifacts": asdict(self)}


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    except FileNotFoundError:
        raise ArtifactError(f"{what}: {argv[0]} is not installed") from None
    if result.returncode != 0:
        raise ArtifactError(f"{what} failed (exit {result.returncode}): {(result.stderr or result.stdout)[-2000:]}")
    return result.stdout


def _tar(folder: Path, target: Path) -> None:
    """An uncompressed tar of `folder`'s files, written atomically, with fixed metadata so equal inputs give equal
    bytes (whatever file times the download left)."""
    tmp = target.with_name(f".{target.name}.tmp")
    with tarfile.open(tmp, "w") as archive:
        for path in sorted(folder.iterdir()):
            info = archive.gettarinfo(str(path), arcname=path.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as handle:
                archive.addfile(info, handle)
    os.replace(tmp, target)


def _prune(folder: Path, pattern: str, keep: Path) -> None:
    for path in folder.glob(pattern):
        if path != keep:
            path.unlink(missing_ok=True)


# --- the local apt repository ------------------------------------------------------------------------------------

class DebianApt:
    """apt restricted to the Debian mirrors the host's apt uses (deploy.images.rootfs.host_mirrors), with its own
    lists under `root`: the host may also use other repositories (a newer nodejs from a vendor, say), and what the
    hosts get must be plain Debian bookworm, as the images are. The lists are refreshed once a day."""

    def __init__(self, root: Path) -> None:
        from deploy.images.rootfs import SUITE, host_mirrors

        self.root = root
        mirror, security = host_mirrors()
        (root / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (root / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        for empty in ("sources.list.d", "preferences.d"):
            (root / empty).mkdir(exist_ok=True)
        # an empty dpkg status: what this machine has installed (from any repository) must not become a candidate
        (root / "status").touch()
        sources = root / "sources.list"
        text = (f"deb {mirror} {SUITE} main\ndeb {mirror} {SUITE}-updates main\n"
                f"deb {security} {SUITE}-security main\n")
        if not sources.is_file() or sources.read_text() != text:
            sources.write_text(text)
            for stale in (root / "lists").glob("*_*"):
                stale.unlink()
        self.options = ["-o", f"Dir::Etc::sourcelist={sources}",
                        "-o", f"Dir::Etc::sourceparts={root / 'sources.list.d'}",
                        "-o", f"Dir::State::Lists={root / 'lists'}", "-o", f"Dir::Cache={root / 'cache'}",
                        "-o", "Dir::Etc::preferences=/dev/null",
                        "-o", f"Dir::Etc::preferencesparts={root / 'preferences.d'}",
                        "-o", f"Dir::State::status={root / 'status'}",
                        "-o", "APT::Sandbox::User=root"]

    def update(self, say: Callable[[str], None], max_age: float = 86400.0) -> None:
        lists = [p for p in (self.root / "lists").glob("*_Packages*")]
        if lists and time.time() - min(p.stat().st_mtime for p in lists) < max_age:
            return
        say(f"site: apt-get update of the Debian mirrors into {self.root / 'lists'}")
        _run(["apt-get", *self.options, "update", "-qq"], "apt-get update")

    def closure(self, packages: Iterable[str]) -> list[str]:
        """The packages and everything they depend on (no recommends or suggests). Essential packages a host already
        has are in it too: apt on the host keeps what it has at the same version."""
        text = _run(["apt-cache", *self.options, "depends", "--recurse", "--no-recommends", "--no-suggests",
                     "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages],
                    "apt-cache depends")
        names = {line.strip() for line in text.splitlines() if line and not line.startswith(" ")}
        # virtual packages are printed as <name>; a real provider is in the closure already
        return sorted(name for name in names if not name.startswith("<"))

    def uris(self, packages: list[str]) -> dict[str, str]:
        """file name -> URI of each package's candidate version (`apt-get download --print-uris`: nothing fetched)."""
        out = _run(["apt-get", *self.options, "download", "--print-uris", *packages], "apt-get download --print-uris")
        found = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0].startswith("'"):
                found[parts[1]] = parts[0].strip("'")
        return found

    def download(self, packages: list[str], folder: Path) -> None:
        _run(["apt-get", *self.options, "download", "-qq", *packages], "apt-get download", cwd=folder)


def _packages_index(repo: Path) -> bytes:
    """A flat repository's `Packages` file (what dpkg-scanpackages writes), so no dpkg-dev is needed here."""
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        control = _run(["dpkg-deb", "-f", str(deb)], f"dpkg-deb -f {deb.name}").rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    return "\n".join(stanzas).encode()


def apt_repository(root: Path, packages: Iterable[str], say: Callable[[str], None],
                   files_only: Iterable[str] = FILES_ONLY) -> tuple[Path, str]:
    """(tar of the repository, its key). Fetches only .debs it lacks; the key hashes the file names (which carry the
    versions), so a mirror update gives a new key and the hosts install from the new repository."""
    apt = DebianApt(root / "debian")
    apt.update(say)
    wanted = apt.closure(packages)
    uris = apt.uris(sorted({*wanted, *files_only}))
    if not uris:
        raise ArtifactError(f"apt-get download --print-uris gave nothing for {', '.join(wanted)}")
    key = hashlib.sha256("\n".join(sorted(uris)).encode()).hexdigest()[:16]
    archive = root / f"apt-{key}.tar"
    if archive.is_file():
        return archive, key
    repo = root / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    missing = [name for name in uris if not (repo / name).is_file()]
    if missing:
        say(f"site: apt-get download of {len(missing)} package(s) into {repo}")
        names = [name.split("_", 1)[0] for name in missing]
        apt.download(names, repo)
    for path in repo.glob("*.deb"):
        if path.name not in uris:
            path.unlink()
    absent = [name for name in uris if not (repo / name).is_file()]
    if absent:
        raise ArtifactError(f"apt-get download left out {', '.join(absent[:5])}")
    (repo / "Packages").write_bytes(_packages_index(repo))
    _tar(repo, archive)
    _prune(root, "apt-*.tar", archive)
    return archive, key


# --- the control host's wheels ------------------------------------------------------------------------------------

def wheelhouse(root: Path, say: Callable[[str], None]) -> tuple[Path, str]:
    """(tar of the wheels, its key): the pinned closure of safeshare[deploy] at this virtualenv's versions, and the
    project's wheel of the current sources (deploy.images.wheels, which the images use too)."""
    from deploy.images import wheels
    from deploy.images.rootfs import ImageBuildError

    try:
        pins = wheels.pinned_requirements(extras=CONTROL_EXTRAS)
    except ImageBuildError as exc:
        raise ArtifactError(str(exc)) from None
    source = wheels.source_key()
    key = hashlib.sha256("\n".join([wheels.deps_key(pins), source]).encode()).hexdigest()[:16]
    archive = root / f"wheels-{key}.tar"
    if archive.is_file():
        return archive, key
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wheels-", dir=root) as tmp:
        house = Path(tmp)
        (house / "requirements.txt").write_text("\n".join(pins) + "\n")
        say(f"site: pip wheel of {len(pins)} pinned dependencies and the project")
        _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--quiet", "--no-deps",
              "--wheel-dir", str(house), "-r", str(house / "requirements.txt")], "pip wheel of the dependencies")
        try:
            project = wheels.project_wheel(root / "project", say=say)
        except ImageBuildError as exc:
            raise ArtifactError(str(exc)) from None
        for wheel in project.glob("*.whl"):
            shutil.copy2(wheel, house / wheel.name)
        (house / "project.txt").write_text("".join(w.name for w in project.glob("*.whl")) + "\n")
        _tar(house, archive)
    _prune(root, "wheels-*.tar", archive)
    return archive, key


# --- the images ---------------------------------------------------------------------------------------------------

def built_images(cache: Path | None = None) -> dict[str, dict[str, str]]:
    """name -> {ref, id} of the last complete offline build: the services and the steps below them."""
    from deploy.images.build import MANIFEST as IMAGES_MANIFEST
    from deploy.images.rootfs import DEFAULT_CACHE

    path = (cache or DEFAULT_CACHE) / IMAGES_MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        raise ArtifactError(f"no complete image build recorded in {path}") from None
    entries = [*manifest.get("steps", []), *manifest["images"].values()]
    return {entry["service"]: {"ref": entry["tag"], "id": entry.get("id", "")} for entry in entries}


def build_images(say: Callable[[str], None]) -> dict[str, dict[str, str]]:
    """The offline build (`safeshare images build`): cached by content, about a second when nothing changed."""
    from deploy.images.build import build_all
    from deploy.images.rootfs import ImageBuildError

    try:
        build_all(say=say)
    except ImageBuildError as exc:
        raise ArtifactError(f"safeshare images build: {exc}") from None
    return built_images()


def save_images(root: Path, images: dict[str, dict[str, str]], names: Iterable[str],
                say: Callable[[str], None]) -> None:
    """`docker save` each named image into root/<name>-<id>.tar unless it is there (adds `archive` to its entry)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in sorted(set(names)):
        if name not in images:
            raise ArtifactError(f"no image {name!r} in the offline build (known: {', '.join(sorted(images))})")
        entry = images[name]
        image_id = entry["id"].removeprefix("sha256:")[:16]
        archive = root / f"{name}-{image_id}.tar"
        if not archive.is_file():
            say(f"site: docker save {entry['ref']} -> {archive}")
            tmp = archive.with_name(f".{archive.name}.tmp")
            _run(["docker", "save", "-o", str(tmp), entry["ref"]], f"docker save {entry['ref']}")
            os.replace(tmp, archive)
        _prune(root, f"{name}-*.tar", archive)
        entry["archive"] = str(archive)


def prepare(root: Path, images: Iterable[str], say: Callable[[str], None] = print, build: bool = True) -> Artifacts:
    """Everything the playbook ships, made or reused under `root`; writes root/artifacts.json."""
    seconds: dict[str, float] = {}
    started = time.monotonic()
    apt_archive, apt_key = apt_repository(root / "apt", {*CONTROL_PACKAGES, *ENCLAVE_PACKAGES}, say)
    seconds["apt"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    wheels_archive, wheels_key = wheelhouse(root / "wheels", say)
    seconds["wheels"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    built = build_images(say) if build else built_images()
    seconds["images_build"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    save_images(root / "images", built, images, say)
    seconds["images_save"] = round(time.monotonic() - started, 2)
    artifacts = Artifacts(str(root.absolute()), str(apt_archive), apt_key, {"control": list(CONTROL_PACKAGES),
                                                      "enclave": list(ENCLAVE_PACKAGES)},
                          str(wheels_archive), wheels_key, built, seconds)
    (root / MANIFEST).write_text(json.dumps(artifacts.as_vars(), indent=2))
    return artifacts
