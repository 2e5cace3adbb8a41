"""The copy of a sealed release that one host's enclave mounts, made by provisioning and verified as made.

A bind mount is live: an app container that mounted RELEASES/<dataset>/<id> itself would see every file a writer
of the releases folder adds there (the raw table beside the released one) or replaces, after provisioning and the
app verified the bundle, and no later check would. So provisioning copies the bundle into a custodian-owned folder
that the releases folder's writer cannot write,

    SITE/enclaves/<rid>/release/<dataset>/<id>/     (folders 0755, files 0444, the custodian's user)

copying only what a sealed bundle consists of (its manifest, its seal and the files the manifest lists; a link's
content, never the link), then verifies the copy (`engine.bundle.check_bundle` as release DATASET/ID) before
renaming it into place, and the plan (deploy/plan.py) mounts that copy read-only. What the enclave sees is the
verified copy, whatever the releases folder holds later. Swarm ships the same copy to a node-local volume and
verifies it there (deploy/swarm/ship.py).

The copy's path carries the release's dataset and id, so a changed release is a new copy and a new container spec;
an existing copy is kept while its seal is byte for byte the bundle's and it still verifies (provisioning again
changes nothing), otherwise it is made again. Copies of other releases are removed once the enclave runs the new
one (`prune`), and the recipient's folder on revocation. The cost: one copy of the release per recipient on disk.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from engine.bundle import SEAL, BundleError, check_bundle
from engine.manifest import MANIFEST

RELEASE_DIR = "release"  # SITE/enclaves/<rid>/release/<dataset>/<id>


def copy_path(enclave_dir: Path, release: str) -> Path:
    """Where the copy of release `DATASET/ID` lies in a recipient's enclave folder."""
    dataset, release_id = release.split("/")
    return enclave_dir / RELEASE_DIR / dataset / release_id


def _same_seal(bundle: Path, copy: Path) -> bool:
    try:
        return (copy / SEAL).read_bytes() == (bundle / SEAL).read_bytes()
    except OSError:
        return False


def copy_release(bundle: Path, copy: Path, trust: Path, release: str) -> Path:
    """`copy` holding a verified copy of the sealed bundle `bundle` (release `DATASET/ID`, checked against the
    trust store `trust`); returns `copy`. Raises BundleError when the bundle or the copy does not verify (nothing
    is left half-made)."""
    if copy.is_dir() and not copy.is_symlink() and _same_seal(bundle, copy):
        try:
            check_bundle(copy, trust, release)
            return copy
        except BundleError:
            pass   # damaged: made again below
    verified = check_bundle(bundle, trust, release)
    copy.parent.mkdir(parents=True, exist_ok=True)
    for folder in (copy.parent, copy.parent.parent, copy.parent.parent.parent):
        os.chmod(folder, 0o755)
    staging = Path(tempfile.mkdtemp(prefix=f".{copy.name}.", dir=copy.parent))
    old: Path | None = None
    try:
        for name in (MANIFEST, SEAL, *verified.manifest.files):
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bundle / name, staging / name)   # the content, never a link
        try:   # the copy is what the enclave sees: it must verify itself (the bundle may have changed meanwhile)
            check_bundle(staging, trust, release)
        except BundleError as exc:
            raise BundleError(f"the copy of {bundle} for the enclave does not verify: {exc}") from None
        for path in staging.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o444)
            if path.is_file():
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
        os.chmod(staging, 0o755)
        if copy.exists() or copy.is_symlink():
            old = copy.with_name(f".{copy.name}.old.{os.getpid()}")
            os.replace(copy, old)
        os.replace(staging, copy)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            _remove(old)
    return copy


def prune(enclave_dir: Path, keep: Path) -> None:
    """Remove the copies of other releases in a recipient's enclave folder (after the enclave runs `keep`)."""
    root = enclave_dir / RELEASE_DIR
    if not root.is_dir():
        return
    for dataset in root.iterdir():
        for entry in (dataset.iterdir() if dataset.is_dir() and not dataset.is_symlink() else ()):
            if entry != keep:
                _remove(entry)
        if dataset.is_symlink() or not dataset.is_dir():
            dataset.unlink(missing_ok=True)
        elif dataset != keep.parent and not any(dataset.iterdir()):
            dataset.rmdir()


def remove_all(enclave_dir: Path) -> None:
    """A recipient's enclave folder with its release copies (revocation)."""
    if enclave_dir.exists():
        _remove(enclave_dir)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    shutil.rmtree(path, ignore_errors=True)
