"""Append-only, hash-chained session event log (`sessions/<id>/events.jsonl`).

Each line is one JSON object carrying `prev`, the SHA-256 of the previous line's bytes (without its newline; 64 zeros
for the first line), and is flushed as it is written, so a crash loses at most the event being written and changing,
removing or inserting a line breaks the chain at the next line. `close()` writes a final `seal` line; a log without
one was not closed cleanly. The chain proves integrity relative to its head: an auditor who wants to rule out a
rewrite of the whole file compares the seal's hash with the one the proxy printed or stored elsewhere.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENESIS = "0" * 64


def _line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


class EventLog:
    """Writer for one session's log. Not thread-safe; the proxy writes from its event loop only."""

    def __init__(self, path: Path) -> None:
        # "x": never append to or overwrite an existing log.
        self._file = open(path, "xb", buffering=0)
        self.path = path
        self._prev = GENESIS
        self._seq = 0
        self.closed = False

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
        return log

    @property
    def head(self) -> str:
        """SHA-256 of the last line written."""
        return self._prev

    def write(self, event: str, **fields: Any) -> None:
        if self.closed:
            raise RuntimeError("event log is sealed")
        record: dict[str, Any] = {"seq": self._seq, "t": round(time.time(), 6), "event": event}
        record.update(fields)
        record["prev"] = self._prev
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        self._file.write(line + b"\n")  # unbuffered: one write(2) per event
        self._prev = _line_hash(line)
        self._seq += 1

    def close(self, **fields: Any) -> str:
        """Write the seal line, fsync and close; return the hash of the seal line."""
        if self.closed:
            return self._prev
        self.write("seal", lines=self._seq, **fields)
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
    bad_line: int | None = None  # 1-based line number where the chain broke

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "lines": self.lines, "sealed": self.sealed, "head": self.head, "error": self.error,
                "bad_line": self.bad_line}


def verify_log(path: Path, require_seal: bool = True) -> LogVerification:
    """Check the chain line by line; `ok` needs an intact chain and, unless told otherwise, a final seal."""
    prev = GENESIS
    count = 0
    sealed = False
    with open(path, "rb") as handle:
        data = handle.read()
    if data and not data.endswith(b"\n"):
        return LogVerification(False, count, False, prev, "last line is truncated", data.count(b"\n") + 1)
    for number, line in enumerate(data.splitlines(), start=1):
        if sealed:
            return LogVerification(False, count, True, prev, "line after seal", number)
        try:
            record = json.loads(line)
        except ValueError:
            return LogVerification(False, count, False, prev, "line is not JSON", number)
        if not isinstance(record, dict):
            return LogVerification(False, count, False, prev, "line is not an object", number)
        if record.get("prev") != prev:
            return LogVerification(False, count, False, prev, "hash chain broken", number)
        if record.get("seq") != count:
            return LogVerification(False, count, False, prev, "sequence number out of order", number)
        if record.get("event") == "seal":
            if record.get("lines") != count:
                return LogVerification(False, count, False, prev, "seal counts a different number of lines", number)
            sealed = True
        prev = _line_hash(line)
        count += 1
    if require_seal and not sealed:
        return LogVerification(False, count, False, prev, "log is not sealed", None)
    return LogVerification(True, count, sealed, prev)
