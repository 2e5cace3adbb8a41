"""The signed output package (package.zip): what leaves the site, and the proof of where it came from.

A ZIP with stored (uncompressed) members in a fixed order, with fixed timestamps and attributes, so that the same
content always gives the same bytes:

    manifest.json               request id, recipient, release and its seal hash, the request's texts, per approved
                                output its files with sha256 and size, its checks and justification, the votes that
                                approved it (checker, vote, comment, time), released_at, key_id
    files/<output_id>/<file>    the approved outputs' files, byte for byte as hashed at submission
    signature.json              {"signature": Ed25519 record by the site's `outputs` key over the manifest's
                                canonical bytes (safeshare.signing.canonical)}

`verify_package` checks the signature against the site's trust store (`outputs` keys), every file's sha256 and size,
that the members are exactly those the manifest lists, and finally that the archive's bytes equal the deterministic
rebuild from what it read: so any changed byte (in a member, a header, a timestamp, a comment, appended data) fails,
not only those the hashes cover. Signing uses released_at as signed_at, and Ed25519 signatures are deterministic, so
rebuilding from the same content with the same key gives the same bytes.
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from safeshare.signing import SignatureError, SigningKey, TrustStore, canonical

from .store import FILE_NAME, MAX_PACKAGE_BYTES, OUTPUT_ID, AirlockStore, sha256

PACKAGE_FORMAT = "safeshare-output-package/1"
MANIFEST = "manifest.json"
SIGNATURE = "signature.json"
FILES_DIR = "files"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_MEMBER = re.compile(r"files/([1-9][0-9]{0,8})/([A-Za-z0-9][A-Za-z0-9._-]{0,99})")


class PackageError(ValueError):
    """A package that does not verify: changed, incomplete, or signed by a key the site does not trust (exit 1)."""


class PackageInputError(ValueError):
    """A package or trust store that cannot be read at all (missing, unreadable, too large): bad input (exit 2)."""


def _vote_record(vote: Any) -> dict[str, Any]:
    if isinstance(vote, Mapping):
        return {"checker": vote["checker"], "vote": vote["vote"], "comment": vote.get("comment", ""),
                "at": vote["at"]}
    at = vote.at.isoformat(timespec="seconds") if hasattr(vote.at, "isoformat") else str(vote.at)
    return {"checker": vote.checker, "vote": vote.vote, "comment": vote.comment, "at": at}


def make_manifest(frozen: Mapping[str, Any], contents: Mapping[str, Mapping[str, bytes]],
                  votes: Mapping[str, Sequence[Any]], released_at: str, key_id: str) -> dict[str, Any]:
    """The manifest of a package: from the frozen request.json, the bytes of the approved outputs (`contents`,
    {output_id: {name: bytes}}) and the votes that decided them."""
    outputs = []
    frozen_outputs = {str(o["output_id"]): o for o in frozen.get("outputs", [])}
    for oid in sorted(contents, key=int):
        source = frozen_outputs[oid]
        outputs.append({
            "output_id": oid, "name": source.get("name"), "kind": source.get("kind"), "status": source.get("status"),
            "checks": source.get("checks", []), "justification": source.get("justification"),
            "files": {name: {"sha256": sha256(data), "size": len(data)} for name, data in sorted(contents[oid].items())},
            "votes": sorted((_vote_record(v) for v in votes.get(oid, [])), key=lambda v: (v["at"], v["checker"])),
        })
    return {"format": PACKAGE_FORMAT, "request_id": frozen["request_id"], "recipient": frozen["recipient"],
            "release": frozen.get("release"), "round": frozen.get("round"), "submitted_at": frozen.get("submitted_at"),
            "context": frozen.get("context"), "controls": frozen.get("controls"), "outputs": outputs,
            "released_at": released_at, "key_id": key_id}


def _member(name: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3
    info.create_version = 20
    info.extract_version = 20
    info.external_attr = (0o100644 & 0xFFFF) << 16
    info.flag_bits = 0
    return info, data


def assemble(manifest: Mapping[str, Any], files: Mapping[str, Mapping[str, bytes]],
             signature: Mapping[str, Any]) -> bytes:
    """The archive's bytes from its parts, always the same for the same parts."""
    members = [_member(MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
                       .encode("ascii"))]
    for oid in sorted(files, key=int):
        for name in sorted(files[oid]):
            members.append(_member(f"{FILES_DIR}/{oid}/{name}", files[oid][name]))
    members.append(_member(SIGNATURE, (json.dumps({"signature": dict(signature)}, indent=1, sort_keys=True) + "\n")
                           .encode("ascii")))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for info, data in members:
            archive.writestr(info, data)
    return buffer.getvalue()


def build_package(frozen: Mapping[str, Any], contents: Mapping[str, Mapping[str, bytes]],
                  votes: Mapping[str, Sequence[Any]], signing_key: SigningKey, released_at: str) -> bytes:
    """The signed package's bytes (see the module docstring). `signed_at` is `released_at`: same content, key and
    time give the same bytes."""
    manifest = make_manifest(frozen, contents, votes, released_at, signing_key.key_id)
    signature = signing_key.sign(canonical(manifest), signed_at=released_at)
    return assemble(manifest, contents, signature)


def signature_of(data: bytes) -> dict[str, Any]:
    """The signature record in a package's bytes (for the key's ledger)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return json.loads(archive.read(SIGNATURE).decode("ascii"))["signature"]


def package_signatures(airlock_root: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The signature records of the packages under SITE/airlock (for a rotation of the outputs key when its ledger
    is missing); unreadable packages are skipped."""
    for path in AirlockStore.at(airlock_root).package_files():
        try:
            yield signature_of(read_package_bytes(path))
        except Exception:  # a damaged package: its signature cannot be recorded, and it does not verify anyway
            continue


def read_package_bytes(path: str | os.PathLike[str]) -> bytes:
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise PackageInputError(f"{path}: not a file")
        if size > MAX_PACKAGE_BYTES:
            raise PackageInputError(f"{path}: {size} bytes, more than a package can have ({MAX_PACKAGE_BYTES})")
        return path.read_bytes()
    except OSError as exc:
        raise PackageInputError(f"{path}: not readable: {exc.strerror or exc}") from None


def verify_package_bytes(data: bytes, trust: TrustStore, where: str = "package") -> dict[str, Any]:
    """The manifest of a package that verifies; PackageError saying what does not."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
        if len(names) != len(set(names)):
            raise PackageError(f"{where}: a member name appears twice")
        if not names or names[0] != MANIFEST or names[-1] != SIGNATURE:
            raise PackageError(f"{where}: members are not manifest.json, files/..., signature.json")
        manifest = json.loads(archive.read(MANIFEST).decode("ascii"))
        signature_doc = json.loads(archive.read(SIGNATURE).decode("ascii"))
        files: dict[str, dict[str, bytes]] = {}
        for name in names[1:-1]:
            match = _MEMBER.fullmatch(name)
            if match is None:
                raise PackageError(f"{where}: member {name!r} is not files/<output>/<file>")
            files.setdefault(match.group(1), {})[match.group(2)] = archive.read(name)
    except PackageError:
        raise
    except Exception as exc:  # anything zipfile or json raise on changed bytes (even "encrypted"): not intact
        raise PackageError(f"{where}: not an intact package: {exc!r}") from None
    try:
        return _verify_parts(data, trust, where, manifest, signature_doc, files)
    except PackageError:
        raise
    except Exception as exc:  # a manifest of unexpected shape
        raise PackageError(f"{where}: manifest.json is malformed: {exc!r}") from None


def _verify_parts(data: bytes, trust: TrustStore, where: str, manifest: Any, signature_doc: Any,
                  files: dict[str, dict[str, bytes]]) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("format") != PACKAGE_FORMAT:
        raise PackageError(f"{where}: manifest.json is not a {PACKAGE_FORMAT} manifest")
    if not isinstance(signature_doc, dict) or not isinstance(signature_doc.get("signature"), dict):
        raise PackageError(f"{where}: signature.json holds no signature")
    signature = signature_doc["signature"]
    try:
        key = trust.verify("outputs", canonical(manifest), signature)
    except SignatureError as exc:
        raise PackageError(f"{where}: {exc}") from None
    if manifest.get("key_id") != key.key_id:
        raise PackageError(f"{where}: manifest names key {manifest.get('key_id')}, signed by {key.key_id}")
    listed: dict[str, dict[str, Any]] = {}
    for output in manifest.get("outputs") or []:
        oid = str(output.get("output_id"))
        if not OUTPUT_ID.fullmatch(oid) or oid in listed or not isinstance(output.get("files"), dict):
            raise PackageError(f"{where}: manifest output {oid!r} is malformed or listed twice")
        if not all(isinstance(n, str) and FILE_NAME.fullmatch(n) for n in output["files"]):
            raise PackageError(f"{where}: output {oid}: a file name is not plain")
        listed[oid] = output["files"]
    present = {(oid, name) for oid, named in files.items() for name in named}
    wanted = {(oid, name) for oid, named in listed.items() for name in named}
    if present != wanted:
        extra = sorted(f"files/{o}/{n}" for o, n in present - wanted)
        missing = sorted(f"files/{o}/{n}" for o, n in wanted - present)
        raise PackageError(f"{where}: members differ from the manifest (extra: {extra or 'none'}; missing: "
                           f"{missing or 'none'})")
    for oid, named in listed.items():
        for name, meta in named.items():
            body = files[oid][name]
            if not isinstance(meta, dict) or sha256(body) != meta.get("sha256") or len(body) != meta.get("size"):
                raise PackageError(f"{where}: files/{oid}/{name}: sha256 {sha256(body)} is not the "
                                   f"{meta.get('sha256') if isinstance(meta, dict) else meta} the manifest lists")
    if assemble(manifest, files, signature) != data:
        raise PackageError(f"{where}: the archive's bytes differ from its deterministic rebuild (a header, "
                           f"timestamp, comment or appended byte was changed)")
    return manifest


def verify_package(path: str | os.PathLike[str], trust: TrustStore | str | os.PathLike[str]) -> dict[str, Any]:
    """Verify package.zip at `path` against `trust` (a TrustStore or the path of SITE/trust.json); the manifest, or
    PackageError (changed / untrusted: exit 1) or PackageInputError (unreadable package or trust store: exit 2)."""
    if not isinstance(trust, TrustStore):
        from safeshare.signing import KeyFileError

        try:
            trust = TrustStore.load(trust)
        except KeyFileError as exc:
            raise PackageInputError(str(exc)) from None
    return verify_package_bytes(read_package_bytes(path), trust, str(path))


__all__ = ["MANIFEST", "MAX_PACKAGE_BYTES", "PACKAGE_FORMAT", "PackageError", "PackageInputError", "SIGNATURE",
           "assemble", "build_package", "make_manifest", "package_signatures", "read_package_bytes", "signature_of",
           "verify_package", "verify_package_bytes"]
