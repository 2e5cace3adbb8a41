"""The airlock store's format, defined once: `SITE/airlock/<rid>/<request_id>/`, frozen copies of submitted requests.

    request.json              frozen at submission (the site's record of what was asked; see `frozen_request`)
    outputs/<output_id>/<f>   the copied bytes: data.csv, meta.json and any allowlisted file of the output
    supporting/<f>            supporting files for the checkers only (never released)
    package.zip               after release: the signed package (outputs.airlock.package)
and beside the request folders, in SITE/airlock/<rid>/:
    .new-*                    a request folder being written (renamed into place whole)
    .round-<n>-<request_id>-* an earlier round of a returned request (kept, never listed nor released)
    .release-<request_id>.lock  one release of a request at a time

Every reader and writer of the store (the intake, the workflow and release, the package's key rotation, the review
pages, the front door's download, the command line) names its files through `AirlockStore`, so the format changes
here only.

The store is written by the host only (the intake, the release); the enclave never writes here, and a request's
folder is made complete in a hidden sibling (`.new-*`) and renamed into place, so nobody sees half a request. The
hashes taken when copying are kept in request.json and in the site database (records.py); a release re-hashes every
file and refuses on any difference ("checksum mismatch").

Allowlist (everything else is refused with the reason): .csv (UTF-8 text, at most MAX_CSV_ROWS rows), .json (UTF-8
JSON), .png (PNG signature), .txt (UTF-8 text); each file at most MAX_FILE_BYTES, a request at most
MAX_REQUEST_BYTES. An output's rendering.html is never copied: the checkers' pages re-render from data.csv and
meta.json, so no markup made in the enclave reaches a checker's browser.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from safeshare.exchange import exchange

AIRLOCK_DIR = "airlock"
REQUEST_FILE = "request.json"
OUTPUTS_DIR = "outputs"
SUPPORTING_DIR = "supporting"
PACKAGE_FILE = "package.zip"
# an output's files, as the app saves them (STATE/outputs/<id>/, enclave.app.output_store) and the store keeps them
DATA_FILE = "data.csv"
META_FILE = "meta.json"
RENDERING_FILE = "rendering.html"

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_REQUEST_BYTES = 20 * 1024 * 1024
MAX_CSV_ROWS = 10_000
MAX_CSV_COLUMNS = 500  # the review pages show this many columns (deploy/airlock/review_render.py)
MAX_CSV_CELL_CHARS = 500  # and this many characters of a cell: a CSV beyond either is refused, not cut unseen
MAX_OUTPUTS = 50  # outputs in one request
MAX_SUPPORTING = 20  # supporting files in one request
MAX_TEXT = 4000  # context, controls, justification (characters; the app's output_store.MAX_TEXT)
# a package.zip read back (download, verification): it holds at most a request's bytes (MAX_REQUEST_BYTES) plus its
# manifest, so anything larger is not one
MAX_PACKAGE_BYTES = 64 * 1024 * 1024

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# the chunks that draw an image (PNG 1.2 critical chunks and colour/size ancillaries); no text, time or private ones
PNG_CHUNKS = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"sBIT", b"bKGD",
                        b"pHYs"})
PNG_SMALL_CHUNK = 1024  # bytes at most in a chunk other than IDAT (PLTE is 768 at most)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
ALLOWED_TYPES = {".csv": "text/csv", ".json": "application/json", ".png": "image/png", ".txt": "text/plain"}
OUTPUT_FILES_SKIPPED = frozenset({RENDERING_FILE})  # never copied (re-rendered by the review pages)
# what an output may hold: the files the review pages show a checker (the table from data.csv, meta.json's checks
# and analysis, images); any other file would be frozen and released without a checker having seen it
OUTPUT_FILES_SHOWN = frozenset({DATA_FILE, META_FILE})

RID_PATTERN = r"[0-9a-z]{1,32}"
REQUEST_ID = re.compile(rf"(?P<rid>{RID_PATTERN})-(?P<number>[0-9]{{4,9}})-(?P<nonce>[0-9a-f]{{8}})")
OUTPUT_ID = re.compile(r"[1-9][0-9]{0,8}")
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_RID = re.compile(RID_PATTERN)
_LINE_END = re.compile(r"\r\n|\r|\n")
# characters a table cell on the review page does not show: controls (tab, line breaks inside a quoted cell), soft
# hyphen, zero-width characters, direction marks and overrides, line/paragraph separators, the byte-order mark
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f"
                        "\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]")

OUTPUT_STATUSES = ("pass", "review", "fail")  # outputs.checks PASS, REVIEW, FAIL


class StoreError(ValueError):
    """A request or file the airlock refuses (names the file and the reason)."""


class ChecksumMismatch(StoreError):
    """A stored file whose bytes no longer match the hash taken at submission (or one missing or added)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def valid_request_id(text: object) -> bool:
    return isinstance(text, str) and REQUEST_ID.fullmatch(text) is not None


def valid_rid(text: object) -> bool:
    return isinstance(text, str) and _RID.fullmatch(text) is not None


def new_request_id(rid: str, app_number: int) -> str:
    """`<rid>-<app number, 4+ digits>-<8 hex random>`: unique per site, and names whose request it is."""
    if not valid_rid(rid):
        raise StoreError(f"recipient id {rid!r} is not {RID_PATTERN}")
    if not isinstance(app_number, int) or not 0 < app_number <= 999_999_999:
        raise StoreError(f"request number {app_number!r} is not a positive integer")
    return f"{rid}-{app_number:04d}-{secrets.token_hex(4)}"


def rid_of(request_id: str) -> str:
    match = REQUEST_ID.fullmatch(request_id) if isinstance(request_id, str) else None
    if match is None:
        raise StoreError(f"request id {request_id!r} is not <rid>-<number>-<8 hex>")
    return match.group("rid")


def check_name(name: object, where: str = "file") -> str:
    if not isinstance(name, str) or not FILE_NAME.fullmatch(name):
        raise StoreError(f"{where}: name {name!r} is not a plain file name (letters, digits, . _ -; at most 100)")
    return name


def file_type(name: str) -> str:
    """The MIME type of an allowlisted name; StoreError naming the file otherwise."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix not in ALLOWED_TYPES:
        raise StoreError(f"{name}: type {suffix or '(none)'} is not allowed in the airlock (only "
                         f"{', '.join(sorted(ALLOWED_TYPES))})")
    return ALLOWED_TYPES[suffix]


def check_file(name: str, data: bytes, where: str | None = None) -> str:
    """Check one file against the allowlist and bounds; its MIME type, or StoreError with the reason."""
    label = where or name
    check_name(name, label)
    kind = file_type(name)
    if len(data) > MAX_FILE_BYTES:
        raise StoreError(f"{label}: {len(data)} bytes, more than the {MAX_FILE_BYTES} a file may have")
    if kind == "image/png":
        if not data.startswith(PNG_MAGIC):
            raise StoreError(f"{label}: not a PNG image (no PNG signature)")
        _check_png(data, label)
        return kind
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    if "\0" in text:
        raise StoreError(f"{label}: holds a NUL character; not text")
    if kind == "application/json":
        try:
            json.loads(text)
        except (ValueError, RecursionError) as exc:  # nested too deep for the parser: refused like bad JSON
            raise StoreError(f"{label}: not JSON: {exc}") from None
    elif kind == "text/csv":
        _check_csv(text, label)
    return kind


def _check_png(data: bytes, label: str) -> None:
    """A PNG made of image chunks only (PNG_CHUNKS, small but for IDAT), each with its CRC, ending at IEND, whose
    image data inflates to exactly the pixels its header declares (non-interlaced): a text, private or unknown
    chunk, bytes after IEND or after the image's pixels would leave in the package while the checker's page draws
    only the picture. (The pixels themselves can still hide a little: a picture is shown, not read bit by bit.)"""
    pos, kind, idat = len(PNG_MAGIC), b"", []
    while pos < len(data) and kind != b"IEND":
        if pos + 12 > len(data):
            raise StoreError(f"{label}: a PNG chunk is cut short at byte {pos}")
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, end = data[pos + 4:pos + 8], pos + 12 + length
        if end > len(data):
            raise StoreError(f"{label}: a PNG chunk is cut short at byte {pos}")
        if kind not in PNG_CHUNKS or (pos == len(PNG_MAGIC)) != (kind == b"IHDR"):
            raise StoreError(f"{label}: PNG chunk {kind.decode('latin-1')!r} at byte {pos} is not allowed (only "
                             f"image chunks: what a checker sees is what leaves)")
        if kind != b"IDAT" and length > PNG_SMALL_CHUNK:
            raise StoreError(f"{label}: PNG chunk {kind.decode('latin-1')!r} has {length} bytes; at most "
                             f"{PNG_SMALL_CHUNK}")
        if zlib.crc32(data[pos + 4:end - 4]) != int.from_bytes(data[end - 4:end], "big"):
            raise StoreError(f"{label}: PNG chunk {kind.decode('latin-1')!r} at byte {pos} fails its CRC")
        if kind == b"IDAT":
            idat.append(data[pos + 8:end - 4])
        pos = end
    if kind != b"IEND" or pos != len(data):
        raise StoreError(f"{label}: a PNG must end with its IEND chunk ({len(data) - pos} bytes follow it or it "
                         f"has none)")
    ihdr = data[16:29]
    width, height = int.from_bytes(ihdr[0:4], "big"), int.from_bytes(ihdr[4:8], "big")
    depth, colour, interlace = ihdr[8], ihdr[9], ihdr[12]
    if colour not in _PNG_CHANNELS or interlace != 0 or depth not in (1, 2, 4, 8, 16):
        raise StoreError(f"{label}: PNG colour type {colour}, depth {depth}, interlace {interlace} not accepted")
    expected = height * (1 + (width * depth * _PNG_CHANNELS[colour] + 7) // 8)
    inflate = zlib.decompressobj()
    try:
        pixels = inflate.decompress(b"".join(idat), expected + 1)
    except zlib.error as exc:
        raise StoreError(f"{label}: PNG image data does not inflate: {exc}") from None
    if len(pixels) != expected or not inflate.eof or inflate.unused_data or inflate.unconsumed_tail:
        raise StoreError(f"{label}: PNG image data is not exactly the {width}x{height} pixels its header declares")


def _check_csv(text: str, label: str) -> None:
    """Rows (a line ends with CR, LF or CRLF, as the csv module reads them), columns and cell lengths within what
    the review pages show whole: a row past MAX_CSV_ROWS, a column past MAX_CSV_COLUMNS or a cell past
    MAX_CSV_CELL_CHARS would leave in the package without a checker having seen it."""
    ends = len(_LINE_END.findall(text))
    rows = ends + (0 if not text or text.endswith(("\n", "\r")) else 1)
    if rows > MAX_CSV_ROWS:
        raise StoreError(f"{label}: {rows} rows, more than the {MAX_CSV_ROWS} a CSV may have")
    try:
        for number, row in enumerate(csv.reader(io.StringIO(text, newline="")), 1):
            if len(row) > MAX_CSV_COLUMNS:
                raise StoreError(f"{label}: row {number} has {len(row)} columns, more than the {MAX_CSV_COLUMNS} "
                                 f"a CSV may have")
            hidden = next((cell for cell in row if _INVISIBLE.search(cell)), None)
            if hidden is not None:
                char = _INVISIBLE.search(hidden).group()  # type: ignore[union-attr]
                raise StoreError(f"{label}: row {number} has a cell holding {char!r}, a character the review page "
                                 f"cannot show (a tab, line break, control, zero-width or direction mark)")
            longest = max((len(cell) for cell in row), default=0)
            if longest > MAX_CSV_CELL_CHARS:
                raise StoreError(f"{label}: row {number} has a cell of {longest} characters, more than the "
                                 f"{MAX_CSV_CELL_CHARS} a CSV cell may have")
    except csv.Error as exc:
        raise StoreError(f"{label}: not CSV: {exc}") from None


def check_output_file(output_id: str, name: str) -> None:
    """An output's file must be one the review pages show (OUTPUT_FILES_SHOWN or a .png image); StoreError else."""
    if name not in OUTPUT_FILES_SHOWN and not name.lower().endswith(".png"):
        raise StoreError(f"output {output_id}: {name}: an output holds only data.csv, meta.json and .png images "
                         f"(what the checkers are shown); refused")


def check_total(total: int, where: str = "request") -> None:
    if total > MAX_REQUEST_BYTES:
        raise StoreError(f"{where}: {total} bytes in all, more than the {MAX_REQUEST_BYTES} a request may have")


@dataclass(frozen=True)
class FrozenFile:
    name: str
    data: bytes

    @property
    def record(self) -> dict[str, Any]:
        return {"sha256": sha256(self.data), "size": len(self.data)}


@dataclass(frozen=True)
class FrozenOutput:
    """One output as submitted: its record for request.json (without files) and the bytes of its files."""

    output_id: str
    name: str
    kind: str
    status: str
    checks: list[dict[str, Any]]
    justification: str | None
    files: tuple[FrozenFile, ...]
    release: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        return {"output_id": self.output_id, "name": self.name, "kind": self.kind, "status": self.status,
                "checks": self.checks, "justification": self.justification,
                "justification_sha256": sha256(self.justification.encode("utf-8")) if self.justification else None,
                "release": self.release,
                "files": {f.name: f.record for f in sorted(self.files, key=lambda f: f.name)}}


def checks_summary(checks: Any) -> list[dict[str, Any]]:
    """An output's checks as request.json keeps them: rule, status, reason, number of cells (not the cells)."""
    out = []
    for check in checks if isinstance(checks, list) else []:
        if isinstance(check, dict):
            out.append({"rule": str(check.get("rule", ""))[:100], "status": str(check.get("status", ""))[:20],
                        "reason": str(check.get("reason", ""))[:1000],
                        "cells": len(check.get("cells") or []) if isinstance(check.get("cells"), list) else 0})
    return out


def effective_status(status: str, checks: Any, remedied: bool = False) -> str:
    """The status an output is held to: the worst of the status it claims and each of its checks' statuses (an
    unknown check status counts as `review`), and at least `review` when a remedy was applied (as the app combines
    them, enclave.app.output_routes). meta.json is written inside the enclave, so its `status` alone could say
    `pass` over failing checks and skip the justification a `fail` needs; the checks, which the checkers are shown,
    decide. A claimed status outside pass/review/fail is returned as it is (validate_submission refuses it)."""
    if status not in OUTPUT_STATUSES:
        return status
    rank = {name: i for i, name in enumerate(OUTPUT_STATUSES)}
    worst = max(rank[status], rank["review"] if remedied else 0)
    for check in checks if isinstance(checks, list) else []:
        if isinstance(check, dict):
            worst = max(worst, rank.get(check.get("status"), rank["review"]))  # type: ignore[arg-type]
    return OUTPUT_STATUSES[worst]


def request_bytes(request: dict[str, Any]) -> bytes:
    """request.json's bytes exactly (their sha256 is what the database keeps as request_sha256)."""
    return (json.dumps(request, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("utf-8")


class AirlockStore:
    """SITE/airlock: where requests are frozen. Only host processes write here."""

    def __init__(self, site_root: str | os.PathLike[str]) -> None:
        self.site_root = Path(site_root)
        self.root = self.site_root / AIRLOCK_DIR

    @classmethod
    def at(cls, airlock_dir: str | os.PathLike[str], what: str = "airlock folder") -> "AirlockStore":
        """The store whose folder is `airlock_dir` (SITE/airlock, as the gateway's --airlock names it); StoreError
        when the folder is not named as a site's airlock folder is (`what` names the option in the message)."""
        airlock_dir = Path(airlock_dir)
        if airlock_dir.name != AIRLOCK_DIR:
            raise StoreError(f"{what} {airlock_dir}: must be a site's airlock folder (SITE/{AIRLOCK_DIR})")
        return cls(airlock_dir.parent)

    def recipient_dir(self, rid: str) -> Path:
        if not valid_rid(rid):
            raise StoreError(f"recipient id {rid!r} is not {RID_PATTERN}")
        return self.root / rid

    def request_dir(self, request_id: str) -> Path:
        return self.recipient_dir(rid_of(request_id)) / request_id

    def request_file(self, request_id: str) -> Path:
        return self.request_dir(request_id) / REQUEST_FILE

    def output_file(self, request_id: str, output_id: str, name: str) -> Path:
        if not OUTPUT_ID.fullmatch(str(output_id)):
            raise StoreError(f"output id {output_id!r} is not a positive integer")
        return self.request_dir(request_id) / OUTPUTS_DIR / str(output_id) / check_name(name)

    def supporting_file(self, request_id: str, name: str) -> Path:
        return self.request_dir(request_id) / SUPPORTING_DIR / check_name(name)

    def package_file(self, request_id: str) -> Path:
        return self.request_dir(request_id) / PACKAGE_FILE

    def release_lock_file(self, request_id: str) -> Path:
        """The lock that lets one release of `request_id` run at a time (beside the request folder, hidden)."""
        return self.recipient_dir(rid_of(request_id)) / f".release-{request_id}.lock"

    def package_files(self) -> list[Path]:
        """Every released package.zip in the store (SITE/airlock/<rid>/<request_id>/package.zip), sorted."""
        return sorted(self.root.glob(f"*/*/{PACKAGE_FILE}"))

    def exists(self, request_id: str) -> bool:
        return self.request_file(request_id).is_file()

    def read_request(self, request_id: str) -> dict[str, Any]:
        path = self.request_file(request_id)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreError(f"{path}: no such request in the airlock store") from None
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path}: not readable JSON: {exc}") from None
        if not isinstance(document, dict) or document.get("request_id") != request_id:
            raise StoreError(f"{path}: not the request.json of {request_id}")
        return document

    def write(self, request: dict[str, Any], outputs: Iterable[FrozenOutput],
              supporting: Iterable[FrozenFile] = (), replace: bool = False) -> Path:
        """Write a request folder whole: files into a hidden temp folder (fsynced), request.json last, then one
        rename. A request id already present is refused (ids are never reused), except with `replace` (the next
        round of a returned request): the previous round's folder is then kept beside it as
        `.round-<n>-<request_id>` (hidden: never listed, never released)."""
        request_id = request["request_id"]
        target = self.request_dir(request_id)
        if target.exists() and not replace:
            raise StoreError(f"{target}: request {request_id} is already in the store")
        target.parent.mkdir(parents=True, exist_ok=True)
        for leftover in target.parent.glob(".new-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        temp = Path(tempfile.mkdtemp(prefix=".new-", dir=target.parent))
        try:
            for output in outputs:
                folder = temp / OUTPUTS_DIR / output.output_id
                folder.mkdir(parents=True, exist_ok=True)
                for item in output.files:
                    _write_synced(folder / check_name(item.name), item.data)
            items = list(supporting)
            if items:
                (temp / SUPPORTING_DIR).mkdir()
                for item in items:
                    _write_synced(temp / SUPPORTING_DIR / check_name(item.name), item.data)
            _write_synced(temp / REQUEST_FILE, request_bytes(request))
            os.chmod(temp, 0o755)
            if target.exists():
                old_round = int(self.read_request(request_id).get("round", 0))
                kept = target.parent / f".round-{old_round}-{request_id}-{secrets.token_hex(3)}"
                if exchange(temp, target):  # one step: the request folder is never missing
                    os.rename(temp, kept)
                    return target
                os.rename(target, kept)
            os.rename(temp, target)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return target

    def read_output_file(self, request_id: str, output_id: str, name: str) -> bytes:
        return _read_plain(self.output_file(request_id, output_id, name))

    def read_supporting(self, request_id: str, name: str) -> bytes:
        return _read_plain(self.supporting_file(request_id, name))

    def read_frozen_output_file(self, request_id: str, output_id: str, name: str, listed: Any) -> bytes:
        """An output's stored file, only if its bytes are those hashed at submission: `listed` is the output's
        `files` in request.json ({name: {sha256, size}}). ChecksumMismatch when they differ (or it is not listed);
        StoreError / OSError when it cannot be read."""
        return _frozen(self.read_output_file(request_id, output_id, name), name, listed)

    def read_frozen_supporting(self, request_id: str, name: str, listed: Any) -> bytes:
        """A supporting file, only if its bytes are those hashed at submission (`listed`: request.json's
        `supporting`); ChecksumMismatch, StoreError or OSError as read_frozen_output_file."""
        return _frozen(self.read_supporting(request_id, name), name, listed)

    def read_package(self, request_id: str, limit: int = MAX_PACKAGE_BYTES) -> bytes:
        """A released package's bytes, read once: a regular file (no symlink followed), at most `limit` bytes
        (OSError otherwise, naming the file)."""
        return read_package_file(self.package_file(request_id), limit)

    def write_package(self, request_id: str, data: bytes) -> Path:
        """package.zip whole or absent: a temp file in the request folder, synced, renamed."""
        path = self.package_file(request_id)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    def verify(self, request_id: str, request: dict[str, Any] | None = None,
               output_ids: Iterable[str] | None = None) -> dict[str, dict[str, bytes]]:
        """Re-hash every stored file of the outputs `output_ids` (all when None) against request.json's hashes
        (`request`, when given, is the copy the database holds: what counts). Returns {output_id: {name: bytes}}
        read in this pass; raises ChecksumMismatch naming each differing, missing or added file."""
        request = request if request is not None else self.read_request(request_id)
        wanted = None if output_ids is None else {str(o) for o in output_ids}
        problems: list[str] = []
        contents: dict[str, dict[str, bytes]] = {}
        for output in request.get("outputs", []):
            oid = str(output["output_id"])
            if wanted is not None and oid not in wanted:
                continue
            folder = self.request_dir(request_id) / OUTPUTS_DIR / oid
            contents[oid] = _recheck(folder, f"outputs/{oid}", output.get("files", {}), problems, sized=True)
        if problems:
            raise ChecksumMismatch("checksum mismatch: " + "; ".join(problems))
        return contents

    def verify_supporting(self, request_id: str, request: dict[str, Any]) -> None:
        """Re-hash the supporting files against request.json (ChecksumMismatch naming each difference)."""
        problems: list[str] = []
        folder = self.request_dir(request_id) / SUPPORTING_DIR
        _recheck(folder, SUPPORTING_DIR, request.get("supporting", {}) or {}, problems, sized=False)
        if problems:
            raise ChecksumMismatch("checksum mismatch: " + "; ".join(problems))


def _recheck(folder: Path, where: str, listed: dict[str, Any], problems: list[str], sized: bool) -> dict[str, bytes]:
    """Re-hash the files `listed` ({name: {sha256, size}}) in `folder` as frozen; each added, missing, unreadable or
    differing file is appended to `problems` as `where/name: ...` (with `sized`, a differing size counts too).
    Returns {name: bytes} of the files that match."""
    contents: dict[str, bytes] = {}
    for name in sorted(set(_names(folder)) - set(listed)):
        problems.append(f"{where}/{name}: added after submission")
    for name, meta in sorted(listed.items()):
        try:
            data = _read_plain(folder / name)
        except FileNotFoundError:
            problems.append(f"{where}/{name}: missing")
            continue
        except StoreError as exc:
            problems.append(f"{where}/{name}: {exc}")
            continue
        if sha256(data) != meta.get("sha256") or (sized and len(data) != meta.get("size")):
            problems.append(f"{where}/{name}: sha256 {sha256(data)} is not {meta.get('sha256')}")
            continue
        contents[name] = data
    return contents


def _frozen(data: bytes, name: str, listed: Any) -> bytes:
    entry = listed.get(name) if isinstance(listed, dict) else None
    expected = entry.get("sha256") if isinstance(entry, dict) else None
    if sha256(data) != expected:
        raise ChecksumMismatch(f"checksum mismatch: {name}: sha256 {sha256(data)} is not {expected}")
    return data


def read_package_file(path: str | os.PathLike[str], limit: int = MAX_PACKAGE_BYTES) -> bytes:
    """A package's bytes, read once: a regular file (no symlink followed), at most `limit` bytes; OSError naming
    the file otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise OSError(f"{path}: {info.st_size} bytes, more than a package can be")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise OSError(f"{path}: grew past {limit} bytes while read")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _names(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except FileNotFoundError:
        return []


def _read_plain(path: Path) -> bytes:
    """A stored file's bytes (a regular file, not a link; at most MAX_FILE_BYTES)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StoreError(f"{path}: not a plain file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise StoreError(f"{path}: {info.st_size} bytes, more than {MAX_FILE_BYTES}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, 0o644)


__all__ = ["AIRLOCK_DIR", "ALLOWED_TYPES", "AirlockStore", "ChecksumMismatch", "DATA_FILE", "FrozenFile",
           "FrozenOutput", "MAX_CSV_CELL_CHARS", "MAX_CSV_COLUMNS", "MAX_CSV_ROWS", "MAX_FILE_BYTES",
           "MAX_PACKAGE_BYTES", "MAX_REQUEST_BYTES", "META_FILE", "OUTPUT_FILES_SHOWN", "OUTPUT_FILES_SKIPPED",
           "PACKAGE_FILE", "RENDERING_FILE", "REQUEST_FILE", "REQUEST_ID", "StoreError", "check_file", "check_name",
           "check_output_file", "check_total", "checks_summary", "effective_status", "file_type", "new_request_id",
           "read_package_file", "request_bytes", "rid_of", "sha256", "valid_request_id", "valid_rid"]
