"""Signed release names: which sealed bundle a name (RELEASES/<name>, what recipient policies' `release:` says) is.

A release name is a symlink in the releases folder, so a writer of that folder can re-point it at any other genuine
sealed bundle of the site (another dataset's, or one sealed for a more trusted recipient): every seal still verifies,
and the seal cannot say which names point at it. The binding name -> dataset/id is therefore signed too, by the
release key, when the custodian names a release (`safeshare release --name`): RELEASES/<name>.name.json holds

    {format: safeshare-release-name/1, purpose: release-name, name, dataset, release, named_at, signature}

The format (and purpose) keep a name record from ever reading as a seal and a seal from reading as a name record:
each check requires its own format in the signed content. Consumers (provisioning's `resolve_release`,
`verify-release` and `safeshare app` given RELEASES/<name>) check the record's signature against the site's trust
store and refuse a link whose target is not the release its record names, and a name without a record (made
before names were signed): fail closed, the custodian names it again. The record's signature is kept in the release
key's ledger (SITE/keys/release-signing.key.signed) like a seal's, so a rotation records it and it keeps verifying.

An older genuine record of the same name, restored with its old link by a writer of the folder, is refused where
the release key's ledger can be read (provisioning, run by the custodian; `verify-release` run by the custodian):
the record must be the newest the ledger holds for that name. A verifier that cannot read SITE/keys (the app in its
container, another user) does not tell it apart: the name then points at a release the custodian once gave that
name. Deleting a name only makes it refused (nothing is served).
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from safeshare.signing import RELEASE_KEY, SignatureError, SigningKey, TrustStore, canonical, ledger_path

from .bundle_common import PURPOSE, BundleError

NAME_FORMAT = "safeshare-release-name/1"
NAME_PURPOSE = "release-name"
NAME_SUFFIX = ".name.json"


def record_path(releases: str | Path, name: str) -> Path:
    """Where the signed record of release name `name` lies: RELEASES/<name>.name.json, beside its link."""
    return Path(releases) / f"{name}{NAME_SUFFIX}"


def is_name_link(folder: str | Path) -> bool:
    """Whether `folder` is a release name: a symlink whose target lies two levels below the link's own folder
    (RELEASES/<name> -> <dataset>/<id>). A link inside a dataset folder (RELEASES/<dataset>/<id>) is no name."""
    folder = Path(folder)
    if not folder.is_symlink():
        return False
    try:
        where = folder.resolve().relative_to(folder.parent.resolve())
    except (ValueError, OSError):
        return False
    return len(where.parts) == 2


def sign_name(key: SigningKey, name: str, dataset: str, release: str) -> dict:
    """The signed record binding `name` to release `dataset`/`release`."""
    record = {"format": NAME_FORMAT, "purpose": NAME_PURPOSE, "name": name, "dataset": dataset, "release": release,
              "named_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    record["signature"] = key.sign(canonical(record))
    return record


def write_record(releases: str | Path, record: dict) -> Path:
    """Write the record atomically (temporary file, fsync, rename) beside the name's link."""
    path = record_path(releases, record["name"])
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    return path


def named_release(releases: str | Path, name: str, store: TrustStore) -> str:
    """The release (`DATASET/ID`) that the signed record of `name` binds it to; raises BundleError when there is no
    record, it is not signed by a key `store` trusts for releases, it names another name, or it is not the newest
    record of the name in the release key's ledger (where this process can read it: the custodian's)."""
    path = record_path(releases, name)
    rename = (f"name it again: `safeshare release RELEASES/<dataset>/<id> --to RELEASES --name {name}` (or "
              f"`safeshare release OUT --to RELEASES --name {name}`)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"release name {name!r}: {path} missing: the name has no signed record (named before "
                          f"names were signed, or the record was removed), so where it points proves nothing; "
                          f"{rename}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(record, dict):
        raise BundleError(f"{path}: not a JSON object")
    signed = {field: value for field, value in record.items() if field != "signature"}
    try:
        store.verify(PURPOSE, canonical(signed), record.get("signature"))
    except (SignatureError, ValueError) as exc:
        raise BundleError(f"{path}: signature refused: {exc}; {rename}") from None
    if record.get("format") != NAME_FORMAT or record.get("purpose") != NAME_PURPOSE:
        raise BundleError(f"{path}: field 'format' is {record.get('format')!r}, not {NAME_FORMAT!r} (not a name "
                          f"record)")
    if record.get("name") != name:
        raise BundleError(f"{path}: field 'name' is {record.get('name')!r}, not {name!r}: a record of another "
                          f"name is refused")
    dataset, release = record.get("dataset"), record.get("release")
    if not isinstance(dataset, str) or not isinstance(release, str) or not dataset or not release:
        raise BundleError(f"{path}: fields 'dataset' and 'release' must name the release")
    ledger = ledger_path(Path(releases).absolute().parent / RELEASE_KEY)
    newest = newest_in_ledger(ledger, name)
    if newest is not None and newest != record.get("signature"):
        raise BundleError(f"{path}: not the newest record the custodian signed for release name {name!r} (the "
                          f"release key's ledger {ledger} says so): an older record restored in the releases folder "
                          f"is refused; {rename}")
    return f"{dataset}/{release}"


def newest_in_ledger(ledger: Path, name: str) -> dict | None:
    """The signature of the newest name record of `name` in the release key's ledger (which spans rotations: it
    lies beside the key file, SITE/keys, 0600), or None when it holds none or this process cannot read it (a
    verifier that is not the custodian: then an older genuine record of the same name is not told apart)."""
    try:
        data = ledger.read_bytes()
    except OSError:
        return None
    newest = None
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get("signature"), dict):
            newest = entry["signature"]
    return newest


def check_name(link: str | Path, store: TrustStore) -> str:
    """The release a name link must be (its signed record's), refusing a link that points elsewhere: a writer of
    the releases folder re-pointed it. Returns `DATASET/ID`; raises BundleError."""
    link = Path(link)
    wanted = named_release(link.parent, link.name, store)
    target = link.resolve()
    actual = f"{target.parent.name}/{target.name}"
    if actual != wanted:
        raise BundleError(f"release name {link.name!r}: {link} points at {actual}, but its signed name record "
                          f"({record_path(link.parent, link.name)}) says {wanted}: a name re-pointed in the releases "
                          f"folder is refused")
    return wanted


def name_signatures(releases: str | Path) -> list[dict]:
    """The signature record of every name record RELEASES/*.name.json (verified or not): what a release key's
    first ledger adopts and what a rotation without a ledger records, as for seals (`release_signatures`)."""
    found = []
    for path in sorted(Path(releases).glob(f"*{NAME_SUFFIX}")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("signature"), dict):
            found.append(record["signature"])
    return found
