"""The Python wheels that go into the images, built on the host (it reaches PyPI; containers reach nothing).

Two wheelhouses, because they change at very different rates:
- dependencies (`deps-<key>/`): exactly the versions installed in the host's virtualenv, that is the versions the
  tests ran with, for the runtime dependency closure of the `safeshare` distribution (not the test extras). The key
  hashes that pinned list and the Python version. It changes when someone upgrades a dependency.
- the project (`project-<key>/`): one wheel of safeshare, built with `--no-deps` from a copy of the sources (a
  build in the working tree would package whatever stale files its `build/` folder holds). The key hashes the
  sources. It changes at every edit, and takes seconds.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from deploy.images.rootfs import ImageBuildError

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTION = "safeshare"
# The images run the servers (safeshare[enclave]); the engine alone needs none of them.
IMAGE_EXTRAS = ("enclave",)
# What goes into the project wheel (pyproject.toml's packages plus the files setuptools reads).
SOURCE_DIRS = ("engine", "proxy", "enclave", "deploy", "policies", "safeshare", "outputs")
SOURCE_FILES = ("pyproject.toml", "README.md")
KEEP = 3  # wheelhouses of each kind kept in the cache (others are pruned)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_requirements(distribution: str = DISTRIBUTION, extras: tuple[str, ...] = IMAGE_EXTRAS) -> list[str]:
    """`name==version` for every runtime dependency of `distribution` with `extras`, recursively, as installed in this
    interpreter's environment (markers evaluated here). Raises if something is not installed."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # not a runtime dependency of ours; pip always carries a copy
        from pip._vendor.packaging.requirements import Requirement

    pins: dict[str, str] = {}
    pending: list[tuple[str, frozenset[str]]] = [(distribution, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, extras = pending.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ImageBuildError(f"{name} is not installed in {sys.executable}'s environment; run scripts/setup.sh "
                                  "(the images get the versions the host's virtualenv has)") from None
        if _canonical(name) != _canonical(distribution):
            pins[_canonical(dist.metadata["Name"])] = dist.version
        elif extras and not (set(extras) <= set(dist.metadata.get_all("Provides-Extra") or [])):
            raise ImageBuildError(f"{name} as installed does not provide the extras {sorted(extras)}; run "
                                  "scripts/setup.sh")
        for text in dist.requires or []:
            requirement = Requirement(text)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if requirement.marker is not None and not any(requirement.marker.evaluate(env) for env in environments):
                continue
            pending.append((requirement.name, frozenset(requirement.extras)))
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def _python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def deps_key(pins: list[str]) -> str:
    return hashlib.sha256(("\n".join([_python_tag(), *pins])).encode()).hexdigest()[:16]


def _source_files() -> list[Path]:
    files = [REPO / name for name in SOURCE_FILES if (REPO / name).is_file()]
    for folder in SOURCE_DIRS:
        root = REPO / folder
        if root.is_dir():
            files += [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                      and p.suffix not in (".pyc", ".pyo")]
    return sorted(files)


def source_key() -> str:
    """Hash of everything that goes into the project's wheel: file names and contents."""
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _pip(args: list[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                            text=True, cwd=cwd)
    if result.returncode != 0:
        raise ImageBuildError(f"{what} failed:\n{(result.stderr or result.stdout)[-3000:]}")


def _complete(target: Path, staging: Path) -> Path:
    (staging / ".complete").write_text("")
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return target


def dependency_wheels(cache: Path, force: bool = False, say: Callable[[str], None] = print) -> Path:
    """`deps-<key>/`: the pinned dependency wheels and their `requirements.txt`."""
    pins = pinned_requirements()
    target = cache / f"deps-{deps_key(pins)}"
    if (target / ".complete").is_file() and not force:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".deps.", dir=cache))
    try:
        (staging / "requirements.txt").write_text("\n".join(pins) + "\n")
        say(f"images: pip wheel of {len(pins)} pinned dependencies into {target.name}")
        _pip(["wheel", "--quiet", "--wheel-dir", str(staging), "--no-deps", "-r", str(staging / "requirements.txt")],
             "pip wheel of the dependencies")
        return _complete(target, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def project_wheel(cache: Path, force: bool = False, say: Callable[[str], None] = print) -> Path:
    """`project-<key>/`: the safeshare wheel of the current sources."""
    target = cache / f"project-{source_key()}"
    if (target / ".complete").is_file() and not force:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".project.", dir=cache))
    try:
        with tempfile.TemporaryDirectory(prefix="src-", dir=cache) as tmp:
            source = Path(tmp)
            for path in _source_files():
                copy = source / path.relative_to(REPO)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)
            say(f"images: pip wheel of the project into {target.name}")
            # Build isolation: pyproject.toml asks for a newer setuptools than a Debian venv has (pip's cache has it).
            _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(staging), str(source)],
                 "pip wheel of the project")
        return _complete(target, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prune(cache: Path, keep: set[Path]) -> list[Path]:
    """Keep the KEEP newest wheelhouses of each kind (and everything in `keep`); remove the rest."""
    removed = []
    for kind in ("deps", "project", "wheels"):  # "wheels-*": the single wheelhouse of the first version
        folders = sorted((p for p in cache.glob(f"{kind}-*") if p.is_dir()), key=lambda p: p.stat().st_mtime,
                         reverse=True)
        for folder in folders[KEEP if kind != "wheels" else 0:]:
            if folder not in keep:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed
