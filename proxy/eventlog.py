"""Append-only, hash-chained session event log (`sessions/<id>/events.jsonl`).

Each line is one JSON object carrying `prev`, the SHA-256 of the previous line's bytes (without its newline; 64 zeros
for the first line), and is flushed as it is written, so a crash loses at most the event being written and changing,
removing or inserting a line breaks the chain at the next line. `close()` writes a final `seal` line; a log without
one was not closed cleanly.

The chain alone proves integrity only against a reader of the folder: a writer re-chains and re-seals. Two things
reach further. The seal line carries the gateway's Ed25519 signature (`signature`, made with `safeshare.signing`)
over the whole seal record, whose `prev` is the head of the chain: nobody without the gateway's key can re-seal a
rewritten log. And the gateway anchors the seal hash, the number of lines and the recording's hash (and, while the
session runs, the current head) in its database, outside the folder (`proxy/anchors.py`).

A seal can only be written by a gateway that is still running at the end; one killed mid-session leaves an unsealed
log, and whoever seals it afterwards (the restarted gateway, `proxy.recovery`) cannot prove that the lines it finds
are the ones its predecessor wrote: a writer of the folder and the database may have rewritten them meanwhile. So
while the session runs, the writer signs **checkpoints** into the log: ordinary chained lines (`event: checkpoint`)
holding the session id and the number of lines before them (`lines`, equal to their `seq`), whose `prev` is the head
of the chain, and the size and SHA-256 of the recording's start that has reached the disk (`recording`), signed
like a seal (`checkpoint_message`). One is written after every control event (`CONTROL_EVENTS`:
connect, handshakes, limits, errors, capture) and every `interval` seconds while lines were added
(`EventLog.checkpoint_due`, polled by the session's watchdog), never per input event. Any rewrite before the last
checkpoint breaks its signature whoever seals later; a recovered seal names the checkpoint it vouches up to, and the
lines after it are reported as an unverifiable tail (proxy/audit/verify.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safeshare.signing import KeyFileError, SigningKey, TrustStore, canonical

GENESIS = "0" * 64
SEAL_FORMAT = b"safeshare-session-seal/1\n"
# A seal written by a gateway that recovered the log of a session it did not run to its end: it vouches only up to
# the checkpoint it names (field `checkpoint`). Its own domain, so that no verifier that does not know checkpoints
# can take its signature for one over the whole log.
RECOVERED_SEAL_FORMAT = b"safeshare-session-recovered-seal/1\n"
CHECKPOINT_FORMAT = b"safeshare-session-checkpoint/1\n"
CHECKPOINT_INTERVAL = 2.0  # seconds between checkpoints while lines are being added
# Events after which the writer signs a checkpoint at once: the session's state changed (who, where, limits, an
# error), not one more input event. A disconnect is followed by the seal in the same step, so it needs none.
CONTROL_EVENTS = frozenset({"connect", "capture_started", "upstream_ready", "client_ready", "limit_hit", "error",
                            "protocol_error", "capture_stopped"})


def _line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def seal_message(seal: dict[str, Any]) -> bytes:
    """The bytes a seal's signature covers: every field of the seal line but the signature itself. `prev` (the head
    of the chain before the seal) makes that cover every earlier line; `session` binds it to its folder. A recovered
    seal that names its checkpoint (field `checkpoint`, even null) is signed in its own domain."""
    domain = RECOVERED_SEAL_FORMAT if "checkpoint" in seal else SEAL_FORMAT
    return domain + canonical({key: value for key, value in seal.items() if key != "signature"})


def checkpoint_message(record: dict[str, Any]) -> bytes:
    """The bytes a checkpoint's signature covers: every field of its line but the signature (`prev`, the head of the
    lines before it, `lines`, their number, `session`, the folder it belongs to, `t`, when it was written)."""
    return CHECKPOINT_FORMAT + canonical({key: value for key, value in record.items() if key != "signature"})


def checkpoint_problem(record: dict[str, Any], index: int, session: str) -> str | None:
    """What is wrong with the checkpoint line at 0-based `index` of session `session`'s log apart from its signature
    (which needs a key or a trust store), or None. The chain itself (`prev`, `seq`) is `verify_log`'s."""
    if record.get("lines") != index:
        return f"checkpoint counts {record.get('lines')!r} lines before it, not {index}"
    if record.get("session") != session:
        return f"checkpoint names session {record.get('session')!r}, not this folder ({session!r})"
    if not record.get("signature"):
        return "checkpoint is not signed"
    return None


class KeySource:
    """The gateway's signing key as the file holds it now: re-read when the file changes (a rotation replaces it by
    rename), so that a running gateway signs with the new key from its next seal on without a restart. A key that
    cannot be read any more keeps the last good one in use (and `error` says why); there is no key at all only if
    the first load failed, which `load()` raises (the gateway refuses to start)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self._key: SigningKey | None = None
        self.error: str | None = None

    def load(self) -> SigningKey:
        """The current key; raises KeyFileError when no key was ever readable."""
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp or self._key is None:
                self._key = SigningKey.load(self.path)
                self._stamp = stamp
            self.error = None
        except (OSError, KeyFileError) as exc:
            self.error = str(exc) if isinstance(exc, KeyFileError) else \
                f"{self.path}: signing key not readable: {exc.strerror or exc}"
            if self._key is None:
                raise KeyFileError(self.error) from None
        return self._key


class EventLog:
    """Writer for one session's log. Not thread-safe; the proxy writes from its event loop only."""

    def __init__(self, path: Path) -> None:
        # "x": never append to or overwrite an existing log.
        self._file = open(path, "xb", buffering=0)
        self.path = path
        self._prev = GENESIS
        self._seq = 0
        self.closed = False
        self._checkpoint_key: Callable[[], SigningKey | None] | None = None
        self._checkpoint_extra: Callable[[], dict[str, Any]] | None = None
        self._session = ""
        self.checkpoint_interval = CHECKPOINT_INTERVAL
        self._checkpointed_lines = 0
        self._checkpointed_at = time.monotonic()

    def sign_checkpoints(self, key: Callable[[], SigningKey | None], session: str,
                         interval: float = CHECKPOINT_INTERVAL,
                         extra: Callable[[], dict[str, Any]] | None = None) -> None:
        """Sign checkpoints into this log from now on, with the key `key()` returns at each (None: skip that one;
        the gateway's re-read key, so a rotation applies from the next checkpoint), for session `session`;
        `extra()` adds fields to each (the session: how much of its recording has reached the disk)."""
        self._checkpoint_key = key
        self._session = session
        self.checkpoint_interval = interval
        self._checkpoint_extra = extra

    def checkpoint_due(self, now: float | None = None) -> bool:
        """Whether lines were added since the last checkpoint at least `checkpoint_interval` seconds ago."""
        if self._checkpoint_key is None or self.closed or self._seq == self._checkpointed_lines:
            return False
        return (time.monotonic() if now is None else now) - self._checkpointed_at >= self.checkpoint_interval

    def checkpoint(self) -> bool:
        """Sign a checkpoint of the lines so far (their number and head) into the log; False when this log signs
        none, nothing was added since the last one, or no key is readable now."""
        if self._checkpoint_key is None or self.closed or self._seq == self._checkpointed_lines:
            return False
        key = self._checkpoint_key()
        if key is None:
            return False
        fields: dict[str, Any] = {"session": self._session, "lines": self._seq}
        if self._checkpoint_extra is not None:
            fields.update(self._checkpoint_extra())
        record = self._record("checkpoint", fields)
        record["signature"] = key.sign(checkpoint_message(record))
        self._emit(record)
        self._checkpointed_lines = self._seq
        self._checkpointed_at = time.monotonic()
        return True

    @classmethod
    def resume(cls, path: Path) -> "EventLog":
        """Continue an unsealed log whose writer died (a gateway killed mid-session), so that it can be sealed with
        the reason. Refuses a damaged or already sealed log: that stays exactly as found, for the auditors."""
        check = verify_log(path, require_seal=False)
        if not check.ok or check.sealed:
            raise ValueError(f"{path}: cannot be continued ({check.error or 'already sealed'})")
        log = cls.__new__(cls)
        log._file = open(path, "ab", buffering=0)
        log.path = path
        log._prev = check.head
        log._seq = check.lines
        log.closed = False
        log._checkpoint_key = None
        log._checkpoint_extra = None
        log._session = ""
        log.checkpoint_interval = CHECKPOINT_INTERVAL
        log._checkpointed_lines = log._seq
        log._checkpointed_at = time.monotonic()
        return log

    @property
    def head(self) -> str:
        """SHA-256 of the last line written."""
        return self._prev

    @property
    def lines(self) -> int:
        """Lines written so far (the head is the hash of line number `lines`)."""
        return self._seq

    def _record(self, event: str, fields: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {"seq": self._seq, "t": round(time.time(), 6), "event": event}
        record.update(fields)
        record["prev"] = self._prev
        return record

    def _emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        self._file.write(line + b"\n")  # unbuffered: one write(2) per event
        self._prev = _line_hash(line)
        self._seq += 1

    def write(self, event: str, **fields: Any) -> None:
        if self.closed:
            raise RuntimeError("event log is sealed")
        self._emit(self._record(event, fields))
        if event in CONTROL_EVENTS and self._checkpoint_key is not None:
            self.checkpoint()

    def close(self, signing_key: SigningKey | None = None, **fields: Any) -> str:
        """Write the seal line (signed with `signing_key` when given), fsync and close; return the seal line's
        hash."""
        if self.closed:
            return self._prev
        record = self._record("seal", {"lines": self._seq, **fields})
        if signing_key is not None:
            record["signature"] = signing_key.sign(seal_message(record))
        self._emit(record)
        self.closed = True
        try:
            os.fsync(self._file.fileno())
        finally:
            self._file.close()
        return self._prev


def read_events(path: Path) -> list[dict[str, Any]]:
    """The log's events that parse as JSON objects, in order (none for a missing file). Reading only: whether the
    log is intact is `verify_log`'s question."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def file_digest(path: Path) -> tuple[str, int]:
    """SHA-256 and size of a file the seal vouches for (the screen recording, a capture)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass
class LogVerification:
    ok: bool
    lines: int
    sealed: bool
    head: str
    error: str | None = None
    bad_line: int | None = None  # 1-based number of the line the finding is about (see `verify_log`)
    hashes: list[str] = field(default_factory=list, repr=False)  # SHA-256 of each line, in order

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "lines": self.lines, "sealed": self.sealed, "head": self.head, "error": self.error,
                "bad_line": self.bad_line}


def _seq_of(record: Any) -> int | None:
    seq = record.get("seq") if isinstance(record, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _prev_of(line: bytes) -> Any:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("prev") if isinstance(record, dict) else None


def _locate_break(index: int, record: dict[str, Any], lines: list[bytes], hashes: list[str]) -> tuple[str, int]:
    """Which line a broken link points at. Line `index` (0-based) names a predecessor hash that is not the hash of
    the line before it. Reported, as (problem, 1-based line):

    * the line before was altered (the usual case: its content changed, so its hash is no longer the one this line
      chains to) -> that line, "altered";
    * this line's own `prev` field was altered (the line after it still chains to it) -> this line, "altered";
    * lines were removed (its sequence number is ahead of its position) -> this line, "N line(s) removed before";
    * lines were inserted (its sequence number is behind its position) -> the first inserted line, "inserted";
    * lines were reordered (it chains to a line that comes later) -> this line, "out of order".
    """
    claimed, seq = record.get("prev"), _seq_of(record)
    number = index + 1
    later = [j for j in range(index + 1, len(hashes)) if hashes[j] == claimed]
    if later:
        return f"out of order: this line follows line {later[0] + 1} in the hash chain", number
    if seq is not None and seq > index:
        return (f"{seq - index} line(s) removed before this line (its sequence number is {seq}, line {number} "
                f"should hold {index})"), number
    if seq is not None and seq < index:
        return (f"{index - seq} line(s) inserted here: line {number} has sequence number {seq}, so lines "
                f"{seq + 1}-{index} are not part of the chain"), seq + 1
    if seq == index:
        if index + 1 < len(lines) and _prev_of(lines[index + 1]) != hashes[index]:
            return "altered: its 'prev' field no longer names the line before it", number
        if index == 0:
            return "altered: the first line does not start the hash chain", number
        return f"altered: line {number} chains to a different line than this one", index
    return "hash chain broken", number


def verify_log(path: Path, require_seal: bool = True) -> LogVerification:
    """Check the chain line by line; `ok` needs an intact chain and, unless told otherwise, a final seal. A broken
    link is located as `_locate_break` says (an altered line is reported as itself, not as the line after it)."""
    prev = GENESIS
    count = 0
    sealed = False
    with open(path, "rb") as handle:
        data = handle.read()
    if data and not data.endswith(b"\n"):
        return LogVerification(False, count, False, prev, "last line is truncated", data.count(b"\n") + 1)
    lines = data.splitlines()
    hashes = [_line_hash(line) for line in lines]

    def failed(error: str, number: int | None, is_sealed: bool = False) -> LogVerification:
        return LogVerification(False, count, is_sealed, prev, error, number, hashes)

    for index, line in enumerate(lines):
        number = index + 1
        if sealed:
            return failed("line after seal", number, True)
        try:
            record = json.loads(line)
        except ValueError:
            return failed("line is not JSON", number)
        if not isinstance(record, dict):
            return failed("line is not an object", number)
        if record.get("prev") != prev:
            return failed(*_locate_break(index, record, lines, hashes))
        if record.get("seq") != count:
            return failed("sequence number out of order", number)
        if record.get("event") == "seal":
            if record.get("lines") != count:
                return failed("seal counts a different number of lines", number)
            sealed = True
        prev = hashes[index]
        count += 1
    if require_seal and not sealed:
        return failed("log is not sealed", None)
    return LogVerification(True, count, sealed, prev, hashes=hashes)


def check_checkpoints(records: list[dict[str, Any]], session: str,
                      trust: TrustStore | None) -> tuple[list[int], list[tuple[int, str]]]:
    """The checkpoints of a log whose chain verified (`records`: its lines, in order): the 1-based numbers of the
    lines they prove (each checkpoint proves itself and every line before it), and (line, problem) for each that
    proves nothing: a wrong count or session, no signature, or a signature `trust` (purpose `gateway`) refuses.
    Without `trust` the signatures are not checked (a reader's check)."""
    good: list[int] = []
    bad: list[tuple[int, str]] = []
    for index, record in enumerate(records):
        if record.get("event") != "checkpoint":
            continue
        problem = checkpoint_problem(record, index, session)
        if problem is None and trust is not None:
            try:
                trust.verify("gateway", checkpoint_message(record), record.get("signature"))
            except ValueError as exc:  # SignatureError, or a field that cannot be encoded
                problem = f"checkpoint signature: {exc}"
        if problem is None:
            good.append(index + 1)
        else:
            bad.append((index + 1, problem))
    return good, bad
