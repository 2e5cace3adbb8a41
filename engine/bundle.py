"""Sealed release bundles and their verification by every consumer.

`seal_release` copies a `safeshare deid` output folder into RELEASES/<dataset>/<id>/ only when its manifest verifies
and its gate passed, and adds `seal.json` holding the SHA-256 of the manifest. `verify_bundle` is what consumers (the
analytics app) call before touching data: a missing file, a changed byte, a hand-edited manifest or a failed gate
raises `BundleError`. The copy is made in a temporary folder and renamed into place, so a bundle is either whole or
absent.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

SEAL = "seal.json"
MANIFEST = "manifest.json"


class BundleError(RuntimeError):
    """A release bundle that must not be used (refused: exit 1 at the command line)."""


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise BundleError(f"{path}: missing")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{path}: not a JSON object")
    return manifest


def verify_output(folder: str | Path) -> dict:
    """Check a deid output folder: every listed file matches its hash, data matches data_sha256, gate passed."""
    folder = Path(folder)
    manifest = _load_manifest(folder)
    files = manifest.get("files")
    if not isinstance(files, dict) or "data.parquet" not in files:
        raise BundleError(f"{folder / MANIFEST}: field 'files' must list data.parquet with its sha256")
    if files["data.parquet"] != manifest.get("data_sha256"):
        raise BundleError(f"{folder / MANIFEST}: data_sha256 does not match files['data.parquet']")
    for name, expected in files.items():
        path = folder / name
        if Path(name).name != name:
            raise BundleError(f"{folder / MANIFEST}: file name {name!r} is not a plain file name")
        if not path.is_file():
            raise BundleError(f"{path}: listed in the manifest but missing")
        actual = _sha256_file(path)
        if actual != expected:
            raise BundleError(f"{path}: sha256 {actual} does not match the manifest's {expected}")
    gate = manifest.get("gate")
    if not isinstance(gate, dict) or gate.get("passed") is not True:
        reasons = gate.get("reasons") if isinstance(gate, dict) else ["no gate verdict in the manifest"]
        raise BundleError(f"{folder}: the release gate did not pass: {'; '.join(map(str, reasons or []))}")
    return manifest


def verify_bundle(folder: str | Path) -> dict:
    """Verify a sealed bundle (seal, manifest, data, gate); return its manifest or raise BundleError."""
    folder = Path(folder)
    seal_path = folder / SEAL
    if not seal_path.is_file():
        raise BundleError(f"{seal_path}: missing: the bundle is not sealed")
    try:
        seal = json.loads(seal_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BundleError(f"{seal_path}: not readable JSON: {exc}") from None
    manifest_sha = _sha256_file(folder / MANIFEST) if (folder / MANIFEST).is_file() else None
    if manifest_sha is None or seal.get("manifest_sha256") != manifest_sha:
        raise BundleError(f"{folder / MANIFEST}: does not match the seal (edited after sealing?)")
    return verify_output(folder)


def seal_release(output: str | Path, releases: str | Path) -> Path:
    """Copy a verified deid output into RELEASES/<dataset>/<id>/ with a seal; raise BundleError when refused."""
    output = Path(output)
    manifest = verify_output(output)
    dataset = str(manifest.get("dataset", ""))
    if not dataset or Path(dataset).name != dataset or dataset.startswith("."):
        raise BundleError(f"{output / MANIFEST}: field 'dataset' is not a usable name: {dataset!r}")
    release_id = manifest["data_sha256"][:16]
    target = Path(releases) / dataset / release_id
    if target.exists():
        verify_bundle(target)
        return target  # sealing the same data twice changes nothing
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{release_id}.", dir=target.parent))
    try:
        for name in [MANIFEST, *manifest["files"]]:
            shutil.copy2(output / name, staging / name)
        verify_output(staging)  # what was copied is what was verified
        seal = {
            "format": "safeshare-seal/1",
            "dataset": dataset,
            "release": release_id,
            "manifest_sha256": _sha256_file(staging / MANIFEST),
            "data_sha256": manifest["data_sha256"],
            "sealed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (staging / SEAL).write_text(json.dumps(seal, indent=2) + "\n", encoding="utf-8")
        for path in staging.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        os.chmod(staging, 0o755)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def name_release(releases: str | Path, name: str, bundle: str | Path) -> Path:
    """Point RELEASES/<name> (a relative symlink) at a sealed bundle, replacing an older one atomically.

    Recipient policies name releases (`release: adult-k5`); the name moves to a new bundle when the custodian seals
    a new one, while sessions keep recording the bundle id they actually saw."""
    releases, bundle = Path(releases), Path(bundle)
    if not name or set(name) - _NAME_CHARS or name.startswith(".") or len(name) > 100:
        raise BundleError(f"release name {name!r}: use letters, digits, '-', '_' and '.' (not first), at most 100")
    link = releases / name
    if link.exists() and not link.is_symlink():
        raise BundleError(f"{link}: exists and is not a release name (a dataset folder has that name)")
    verify_bundle(bundle)
    try:
        relative = bundle.resolve().relative_to(releases.resolve())
    except ValueError:
        raise BundleError(f"{bundle}: not inside the releases store {releases}") from None
    temporary = releases / f".{name}.{os.getpid()}.link"
    temporary.unlink(missing_ok=True)
    os.symlink(relative, temporary)
    os.replace(temporary, link)
    return link


def resolve_release(releases: str | Path, reference: str) -> Path:
    """The sealed bundle a policy's `release` names: `<dataset>/<id>`, a name made by `name_release`, or a dataset
    that holds exactly one bundle. Raises BundleError naming what exists when the reference fits nothing."""
    releases = Path(releases)
    if not reference or reference.startswith(("/", ".")) or ".." in Path(reference).parts:
        raise BundleError(f"release {reference!r}: not a release reference")
    candidate = releases / reference
    if candidate.is_symlink() or (candidate / SEAL).is_file():
        target = candidate.resolve()
        if releases.resolve() not in target.parents:
            raise BundleError(f"release {reference!r}: {candidate} points outside {releases}")
        verify_bundle(target)
        return target
    if candidate.is_dir():
        bundles = sorted(p for p in candidate.iterdir() if (p / SEAL).is_file())
        if len(bundles) == 1:
            verify_bundle(bundles[0])
            return bundles[0].resolve()
        if len(bundles) > 1:
            choices = ", ".join(f"{reference}/{p.name}" for p in bundles)
            raise BundleError(f"release {reference!r} is ambiguous: {choices} (name one with safeshare release "
                              f"--name, or give dataset/id)")
    known = sorted(p.name for p in releases.iterdir()) if releases.is_dir() else []
    raise BundleError(f"release {reference!r}: no such sealed release in {releases} "
                      f"(there: {', '.join(known) or 'nothing'})")
