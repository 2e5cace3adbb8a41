"""Integrity of recorded sessions: every finding names the file, the line (for the event log) and the problem.

What a sealed session folder guarantees, and how each guarantee is checked:

* `events.jsonl`: each line carries the SHA-256 of the line before and a sequence number; the last line is the seal,
  which counts the lines. Altered, inserted, removed or reordered lines break the chain or the sequence; the finding
  names the altered line itself (see `proxy.eventlog.verify_log`). A cut-off file lacks its seal or ends mid-line.
* The seal is signed by the gateway's key (`signature`, over every field of the seal line, whose `prev` is the head
  of the chain and whose `session` names the folder); checked against the site's trust store (purpose `gateway`).
  Without the key nobody can re-seal a rewritten log. A seal without a signature is reported as unsigned (sessions
  sealed before signing existed, or by `safeshare proxy`, which has no key).
* `screen.rfbrec`: the seal line holds the recording's SHA-256 and size, so a truncated or altered recording (or a
  missing one) is found even though the recording has no chain of its own. The records are also parsed, to say where
  a damaged file stops being readable.
* `network.pcap` (when capture was on): the `capture_stopped` event holds its SHA-256 and size.
* `meta.json` is written after the seal and repeats the seal's hash as `log_head`, and the recipient and release of
  the log's `connect` event; a difference means the log or the metadata was replaced. The seal holds meta.json's
  other fields too (`meta`: start, end, end reason, front door, counters, limits), so an edit there is a finding.
* Checkpoints (`event: checkpoint`, signed by the gateway's key while the session ran): each must count the lines
  before it, name this folder and carry a signature the trust store accepts. A log sealed by its gateway at the end
  is proven whole by the seal. A log whose seal was written by a gateway that recovered it after a crash
  (`recovered`) is proven only up to its last valid checkpoint: the lines after it are an unverifiable tail, and
  the session is reported `partial` (not ok unless `allow_partial`), with the number of lines proven and not.
* With the gateways' sessions table (`anchors`, proxy/anchors.py): the seal hash, the number of lines and the
  recording's hash must be the ones the gateway anchored when the session ended, the log must extend the head it
  anchored while the session ran, a session without a row (or whose row has no seal) is reported, a row whose
  folder is gone is reported (unless retention deleted it), and each signed seal names the session the gateway
  sealed before it, which must be there with that seal (or have been deleted by retention).

Against whom: a reader of the folder learns nothing they could use to forge; a writer of the folder can delete or
rewrite files but cannot re-sign (the signature) nor change the database (the anchors); a writer of the folder and
the database can rewrite both copies of the anchor, but still cannot sign a new seal without the gateway's key, nor
make a restarted gateway vouch for anything after the last checkpoint its key signed while the session ran.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.anchors import Anchor, extends
from proxy.eventlog import check_checkpoints, file_digest, read_events, seal_message, verify_log
from proxy.recording import HEADER, MAGIC, read_recording
from proxy.sessiondir import EVENTS, KNOWN_FILES, META, PCAP, SCREEN, is_session_folder, session_folders
from safeshare.signing import SignatureError, TrustStore



@dataclass(frozen=True)
class Finding:
    file: str  # path of the file (or folder) the finding is about
    problem: str
    line: int | None = None  # 1-based, for the event log

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "problem": self.problem}

    def __str__(self) -> str:
        return f"{self.file}{f':{self.line}' if self.line else ''}: {self.problem}"


# signature states
SIGNED, UNSIGNED, BAD_SIGNATURE, NOT_CHECKED = "signed", "unsigned", "invalid", "not checked"
# anchor states
ANCHORED, NO_ANCHOR, ANCHOR_DIFFERS, LIVE = "anchored", "missing", "differs", "running"
_NO_ROW = object()


@dataclass
class SessionCheck:
    session: str
    folder: str
    lines: int = 0
    sealed: bool = False
    head: str | None = None
    findings: list[Finding] = field(default_factory=list)
    signature: str = NOT_CHECKED  # signed | unsigned | invalid | not checked
    signed_by: str | None = None  # key id
    anchor: str = NOT_CHECKED  # anchored | missing | differs | running | not checked
    previous: dict[str, Any] | None = None  # the session the gateway sealed before this one (from the seal)
    # What the signatures prove of the log: its first `verified_lines` lines (all of them under a gateway's seal, up
    # to the last valid checkpoint otherwise); `unverified_lines` after them were found by a gateway that recovered
    # the session and are proven by nothing (the lines that recovery itself wrote are not counted).
    verified_lines: int = 0
    unverified_lines: int = 0
    checkpoints: int = 0  # valid signed checkpoints
    recovered: bool = False  # sealed by a gateway that did not run the session to its end
    partial_note: str | None = None  # why only a prefix is proven (recovered seal)
    # the start of the recording that last proven checkpoint vouches for: {"bytes": size, "sha256": digest}
    recording_proven: dict[str, Any] | None = None
    allow_partial: bool = False

    @property
    def partial(self) -> bool:
        """Only a prefix of the log is proven: its seal was written by a gateway that recovered it."""
        return self.partial_note is not None

    @property
    def ok(self) -> bool:
        return not self.findings and (not self.partial or self.allow_partial)

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "folder": self.folder, "ok": self.ok, "lines": self.lines,
                "sealed": self.sealed, "head": self.head, "signature": self.signature, "signed_by": self.signed_by,
                "anchor": self.anchor, "partial": self.partial, "recovered": self.recovered,
                "verified_lines": self.verified_lines, "unverified_lines": self.unverified_lines,
                "checkpoints": self.checkpoints, "partial_note": self.partial_note,
                "recording_proven": self.recording_proven,
                "findings": [f.as_dict() for f in self.findings]}


def _check_sealed_file(folder: Path, name: str, expected: dict[str, Any], what: str,
                       findings: list[Finding]) -> None:
    path = folder / name
    if not path.is_file():
        findings.append(Finding(str(path), f"missing (the seal records a {what} of {expected.get('bytes')} bytes)"))
        return
    digest, size = file_digest(path)
    want_size = expected.get("bytes")
    if isinstance(want_size, int) and size < want_size:
        findings.append(Finding(str(path), f"truncated: {size} of {want_size} bytes sealed"))
    elif isinstance(want_size, int) and size > want_size:
        findings.append(Finding(str(path), f"{size - want_size} bytes more than sealed ({want_size})"))
    elif digest != expected.get("sha256"):
        findings.append(Finding(str(path), "altered: SHA-256 differs from the sealed one"))


def _check_recording_readable(path: Path, findings: list[Finding], cut_end_expected: bool = False) -> None:
    offset = len(MAGIC)
    try:
        for _kind, _seconds, payload in read_recording(path, tolerate_cut_end=cut_end_expected):
            offset += HEADER.size + len(payload)
    except ValueError as exc:
        findings.append(Finding(str(path), f"unreadable from byte {offset}: {exc}"))


def _check_signature(check: SessionCheck, seal: dict[str, Any], trust: TrustStore | None, allow_unsigned: bool,
                     events_path: str) -> None:
    """The seal's signature, by a key the site trusts for `gateway`, over this seal in this folder."""
    previous = seal.get("previous")
    check.previous = previous if isinstance(previous, dict) else None
    record = seal.get("signature")
    if not record:
        check.signature = UNSIGNED
        if trust is not None and not allow_unsigned:
            check.findings.append(Finding(events_path, "seal is not signed (sealed before signing, by a proxy "
                                                       "without a key, or its signature was removed): it proves "
                                                       "nothing against a writer of the folder", check.lines))
        return
    if seal.get("session") != check.session:
        check.signature = BAD_SIGNATURE
        check.findings.append(Finding(events_path, f"seal names session {seal.get('session')!r}, not this folder "
                                                   f"({check.session!r})", check.lines))
        return
    if trust is None:
        return
    try:
        key = trust.verify("gateway", seal_message(seal), record)
    except SignatureError as exc:
        check.signature = BAD_SIGNATURE
        check.findings.append(Finding(events_path, f"seal signature: {exc}", check.lines))
        return
    check.signature, check.signed_by = SIGNED, key.key_id


def _check_anchor(check: SessionCheck, seal: dict[str, Any], hashes: list[str], anchor: Anchor | None,
                  allow_unsigned: bool) -> None:
    """The folder against what the gateway anchored in its sessions table."""
    events_path, folder = str(Path(check.folder) / EVENTS), check.folder
    legacy = allow_unsigned and check.signature == UNSIGNED
    if anchor is None:
        check.anchor = NO_ANCHOR
        if not legacy:
            check.findings.append(Finding(folder, "anchor missing: the gateways' session table has no row for this "
                                                  "session"))
        return
    check.anchor = ANCHORED
    if anchor.anchor_lines and not extends(hashes, anchor.anchor_head, anchor.anchor_lines):
        check.anchor = ANCHOR_DIFFERS
        if len(hashes) < anchor.anchor_lines:
            check.findings.append(Finding(events_path, f"{anchor.anchor_lines - len(hashes)} line(s) missing: the "
                                                       f"gateway anchored {anchor.anchor_lines} lines, the log has "
                                                       f"{len(hashes)}"))
        else:
            check.findings.append(Finding(events_path, "rewritten: this is not the line the gateway anchored "
                                                       f"(head {anchor.anchor_head})", anchor.anchor_lines))
    if anchor.seal_hash:
        if check.head != anchor.seal_hash or check.lines != anchor.events:
            check.anchor = ANCHOR_DIFFERS
            check.findings.append(Finding(events_path, f"seal differs from the anchor: the gateway sealed "
                                                       f"{anchor.events} lines ending in {anchor.seal_hash}, the log "
                                                       f"has {check.lines} lines ending in {check.head}"))
        recording = seal.get("recording") if seal else None
        sealed_sha = recording.get("sha256") if isinstance(recording, dict) else None
        if anchor.recording_sha256 and sealed_sha != anchor.recording_sha256:
            check.anchor = ANCHOR_DIFFERS
            check.findings.append(Finding(str(Path(folder) / SCREEN), "recording hash in the seal differs from the "
                                                                      "one the gateway anchored"))
    elif anchor.ended:
        check.anchor = NO_ANCHOR
        if not legacy:
            check.findings.append(Finding(folder, "anchor missing: the session ended but the gateways' session table "
                                                  "holds no seal hash for it"))
    else:
        check.anchor = LIVE


def _check_proven(check: SessionCheck, records: list[dict[str, Any]], hashes: list[str], seal: dict[str, Any],
                  trust: TrustStore | None, events_path: str) -> None:
    """How much of an intact chain the signatures prove: the checkpoints (each a finding if it proves nothing), then
    the whole log under a gateway's seal, or a prefix under a recovered seal (`partial`)."""
    proven, bad = check_checkpoints(records, check.session, trust)
    for line, problem in bad:
        check.findings.append(Finding(events_path, problem, line))
    check.checkpoints = len(proven)
    if seal and not seal.get("recovered"):
        check.verified_lines = check.lines
        return
    # the lines a recovery found: a recovered seal follows its own `disconnect` line
    found = check.lines
    if seal:
        found -= 1
        if found >= 1 and records[found - 1].get("event") == "disconnect" and records[found - 1].get("recovered"):
            found -= 1
    line = max([number for number in proven if number <= found], default=0)
    if seal and "checkpoint" in seal:
        named = seal.get("checkpoint")
        number = named.get("line") if isinstance(named, dict) else 0
        if number and (number not in proven or not isinstance(number, int) or hashes[number - 1] != named.get("hash")):
            check.findings.append(Finding(events_path, f"the recovered seal vouches up to line {number!r}, which is "
                                                       "not a valid signed checkpoint of this log", check.lines))
    check.verified_lines, check.unverified_lines = line, found - line
    recording = _check_recording_prefix(check, records[line - 1]) if line else None
    if not seal:
        return  # not sealed: a finding already; the numbers say how much a recovery could vouch for
    if line == 0 and found >= 1 and seal.get("signature") and "checkpoint" in seal:
        # A gateway that signs its seals signs a checkpoint right after every control event, the connect line
        # first: a log it recovered with no checkpoint left has lost them (a writer of the folder and the database
        # stripped them, rewrote the connect line's recipient and start, and had a restarted gateway sign that), or
        # was invented. Nothing of it is proven, its metadata included: a finding, not an accepted partial.
        check.findings.append(Finding(events_path, "recovered by a gateway that signs checkpoints, but no signed "
                                                   "checkpoint is left in the log: nothing of it is proven, its "
                                                   "recipient and start included (checkpoints removed, or the "
                                                   "session invented)", check.lines))
    check.recovered = True
    when = ""
    if line:
        t = records[line - 1].get("t")
        if isinstance(t, (int, float)):
            when = f", written {datetime.fromtimestamp(t, timezone.utc).isoformat(timespec='seconds')}"
    proven_text = (f"lines 1-{line} are proven by the gateway's signed checkpoint at line {line}{when}" if line
                   else "no line is proven by a signed checkpoint")
    legacy = "" if "checkpoint" in seal else " (sealed by a gateway without checkpoints, which signed the whole " \
                                             "log it found)"
    screen = (f"the recording's first {recording} bytes are proven by that checkpoint, the rest is as found at "
              f"recovery" if recording is not None else "so is the recording, sealed as found at recovery")
    check.partial_note = (f"recovered: the gateway stopped during this session and a later one sealed it{legacy}; "
                          f"{proven_text}; the {found - line} line(s) after it are an unverifiable tail (they may "
                          f"have been rewritten, and lines may have been removed after it); {screen}")


def _check_recording_prefix(check: SessionCheck, point: dict[str, Any]) -> int | None:
    """The start of the recording that the checkpoint `point` vouches for (its size and SHA-256 when written) must
    be the start of the file; returns that size, or None when the checkpoint names none."""
    recording = point.get("recording")
    size, digest = (recording.get("bytes"), recording.get("sha256")) if isinstance(recording, dict) else (None, None)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(digest, str):
        return None
    path = Path(check.folder) / SCREEN
    where = f"the gateway's signed checkpoint at line {check.verified_lines} vouches for its first {size} bytes"
    try:
        with open(path, "rb") as handle:
            hasher = hashlib.sha256()
            left = size
            while left and (chunk := handle.read(min(left, 1 << 20))):
                hasher.update(chunk)
                left -= len(chunk)
    except OSError:
        check.findings.append(Finding(str(path), f"missing or unreadable: {where}"))
        return size
    if left:
        check.findings.append(Finding(str(path), f"truncated: {size - left} bytes, {where}"))
    elif hasher.hexdigest() != digest:
        check.findings.append(Finding(str(path), f"altered within its first {size} bytes: {where}"))
    else:
        check.recording_proven = {"bytes": size, "sha256": digest}
    return size


def _difference(found: Any, sealed: Any) -> str:
    """How a meta.json field differs from the sealed one; for objects (counters, limits), the keys that differ."""
    if isinstance(found, dict) and isinstance(sealed, dict):
        keys = sorted(k for k in set(found) | set(sealed) if found.get(k, _NO_ROW) != sealed.get(k, _NO_ROW))
        parts = [f"{k}: {found[k]!r} (sealed {sealed[k]!r})" if k in found and k in sealed else
                 f"{k}: {'missing' if k not in found else repr(found[k])} (sealed "
                 f"{'missing' if k not in sealed else repr(sealed[k])})" for k in keys[:5]]
        more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
        return f"differs from the signed seal in {', '.join(parts)}{more}"
    return f"is {found!r}, the signed seal says {sealed!r}"


def _check_meta(check: SessionCheck, meta: dict[str, Any], seal: dict[str, Any], reported: set[str],
                meta_path: str) -> None:
    """meta.json against the metadata the seal signed (every field but log_head, which is checked on its own)."""
    sealed = seal.get("meta")
    if not isinstance(sealed, dict):
        return
    for name in sorted((set(meta) | set(sealed)) - {"log_head"} - reported):
        if name not in meta:
            check.findings.append(Finding(meta_path, f"field '{name}' is missing, the signed seal says "
                                                     f"{sealed[name]!r}"))
        elif name not in sealed:
            check.findings.append(Finding(meta_path, f"field '{name}' is not in the signed seal's metadata"))
        elif meta[name] != sealed[name]:
            check.findings.append(Finding(meta_path, f"field '{name}' {_difference(meta[name], sealed[name])}"))


def verify_session(folder: str | Path, trust: TrustStore | None = None, anchor: Anchor | None | object = _NO_ROW,
                   allow_unsigned: bool = False, allow_partial: bool = False) -> SessionCheck:
    """Check one session folder. `trust` (the site's trust store) checks the signatures of the seal and the
    checkpoints: without it they are `not checked`. `anchor` is the session's row in the gateways' sessions table,
    or None when the table has none (a finding); leave it out to not compare with the database. `allow_unsigned`
    accepts unsigned seals (and their missing anchors) of sessions sealed before signing existed: they are still
    reported as such. `allow_partial` accepts a recovered session proven only up to its last checkpoint (`ok`);
    it is still reported `partial`, with its unverifiable tail.
    """
    folder = Path(folder)
    check = SessionCheck(folder.name, str(folder), allow_partial=allow_partial)
    findings = check.findings
    events_path, meta_path = folder / EVENTS, folder / META
    if not folder.is_dir():
        findings.append(Finding(str(folder), "missing session folder"))
        return check
    for extra in sorted(p.name for p in folder.iterdir() if p.name not in KNOWN_FILES):
        findings.append(Finding(str(folder / extra), "unexpected file in a session folder"))

    seal: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    hashes: list[str] = []
    if not events_path.is_file():
        findings.append(Finding(str(events_path), "missing"))
    else:
        result = verify_log(events_path, require_seal=False)
        check.lines, check.sealed, check.head, hashes = result.lines, result.sealed, result.head, result.hashes
        if not result.ok:
            findings.append(Finding(str(events_path), result.error or "invalid", result.bad_line))
        elif not result.sealed:
            findings.append(Finding(str(events_path), "log is not sealed"))
        events = read_events(events_path)
        if result.ok and events and events[-1].get("event") == "seal":
            seal = events[-1]
        if result.ok:
            _check_proven(check, events, hashes, seal, trust, str(events_path))
    if seal:
        _check_signature(check, seal, trust, allow_unsigned, str(events_path))
    if anchor is not _NO_ROW:
        _check_anchor(check, seal, hashes, anchor, allow_unsigned)  # type: ignore[arg-type]

    meta: dict[str, Any] | None = None
    if not meta_path.is_file():
        findings.append(Finding(str(meta_path), "missing"))
    else:
        try:
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as exc:
            findings.append(Finding(str(meta_path), f"not readable JSON: {exc}"))
            meta = None
    if meta is not None:
        if meta.get("session") != folder.name:
            findings.append(Finding(str(meta_path), f"field 'session' is {meta.get('session')!r}, the folder is "
                                                    f"{folder.name!r}"))
        if check.head is not None and check.sealed and meta.get("log_head") != check.head:
            findings.append(Finding(str(meta_path), "field 'log_head' differs from the hash of the log's seal line"))
        connect = events[0] if events and events[0].get("event") == "connect" else None
        reported: set[str] = set()
        for name in ("recipient", "release"):
            if connect is not None and name in connect and meta.get(name) != connect.get(name):
                reported.add(name)
                findings.append(Finding(str(meta_path), f"field '{name}' is {meta.get(name)!r}, the log's connect "
                                                        f"event says {connect.get(name)!r}"))
        if seal:
            _check_meta(check, meta, seal, reported, str(meta_path))

    if seal:
        recording = seal.get("recording")
        if isinstance(recording, dict):
            _check_sealed_file(folder, SCREEN, recording, "recording", findings)
            if (folder / SCREEN).is_file():
                # a recovered session's recording may end inside a record: its writer was killed there
                _check_recording_readable(folder / SCREEN, findings, recording.get("complete") is False)
        elif (folder / SCREEN).is_file() or (meta or {}).get("recording"):
            findings.append(Finding(str(folder / SCREEN), "not covered by the seal (no recording hash in it)"))
        stopped = [e for e in events if e.get("event") == "capture_stopped"]
        if stopped and stopped[-1].get("sha256"):
            _check_sealed_file(folder, PCAP, stopped[-1], "network capture", findings)
        elif (folder / PCAP).is_file():
            findings.append(Finding(str(folder / PCAP), "not covered by the seal (no capture hash in the log)"))
    return check


def verify_path(path: str | Path, known_folders: list[str] | None = None, *, trust: TrustStore | None = None,
                anchors: dict[str, Anchor] | None = None, deleted: dict[str, Any] | None = None,
                allow_unsigned: bool = False, allow_partial: bool = False) -> list[SessionCheck]:
    """One session folder, or every session under a sessions root (see `verify_session` for `trust` and
    `allow_unsigned`). `anchors` (the gateways' sessions table by session id) compares each folder with its row,
    reports rows whose folder is gone and, from the signed seals, sessions sealed before another whose folder is
    gone; `deleted` (session id -> seal hash, from the `session-deleted` audit events) names the sessions retention
    deleted, which are not missing. `known_folders` (folders the table records) is the older, folder-only form."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such session folder or sessions root")

    def one(folder: Path) -> SessionCheck:
        if anchors is None:
            return verify_session(folder, trust, allow_unsigned=allow_unsigned, allow_partial=allow_partial)
        return verify_session(folder, trust, anchors.get(folder.name), allow_unsigned, allow_partial)

    if is_session_folder(path):
        return [one(path)]
    checks = [one(folder) for folder in session_folders(path)]
    deleted = deleted or {}
    present = {Path(check.folder).resolve(): check for check in checks}
    by_id = {check.session: check for check in checks}
    missing: dict[str, tuple[str, str]] = {}  # folder -> (session, why)
    root = path.resolve()
    for folder in known_folders or []:
        missing[folder] = (Path(folder).name, "missing: the gateway's session table records this session")
    for anchor in (anchors or {}).values():
        missing[anchor.folder] = (anchor.session_id, "missing: the gateway's session table records this session")
    for check in checks:
        previous = check.previous if anchors is not None else None
        if not previous or not isinstance(previous.get("session"), str):
            continue
        name, seal = previous["session"], previous.get("seal")
        before = by_id.get(name)
        if before is not None:
            if before.head != seal:
                before.findings.append(Finding(before.folder, f"not the session sealed before {check.session}: its "
                                                              f"signed seal names {name} with seal {seal}"))
        elif name not in deleted:
            folder = str(path / name)
            missing.setdefault(folder, (name, f"missing: {check.session}'s signed seal names it as the session "
                                              f"sealed before, and no retention deletion is recorded"))
    for folder, (session, why) in missing.items():
        resolved = Path(folder).resolve()
        if resolved.parent != root or resolved in present or session in deleted:
            continue
        check = SessionCheck(session, folder)
        check.findings.append(Finding(folder, why))
        checks.append(check)
    return checks
