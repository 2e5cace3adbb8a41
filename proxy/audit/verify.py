"""Integrity of recorded sessions: every finding names the file, the line (for the event log) and the problem.

What a sealed session folder guarantees, and how each guarantee is checked:

* `events.jsonl`: each line carries the SHA-256 of the line before and a sequence number; the last line is the seal,
  which counts the lines. Altered, inserted, removed or reordered lines break the chain or the sequence at a line
  number; a cut-off file lacks its seal or ends mid-line.
* `screen.rfbrec`: the seal line holds the recording's SHA-256 and size, so a truncated or altered recording (or a
  missing one) is found even though the recording has no chain of its own. The records are also parsed, to say where
  a damaged file stops being readable.
* `network.pcap` (when capture was on): the `capture_stopped` event holds its SHA-256 and size.
* `meta.json` is written after the seal and repeats the seal's hash as `log_head`; a different head means the log or
  the metadata was replaced.
* A sessions root may also be checked against the gateways' session table: a session the database knows whose
  folder is gone is reported as missing.

Proving that the whole log was not rewritten from scratch needs the seal hash kept elsewhere (the gateway's
database keeps the folder; `meta.json` keeps the head), which is why the head is printed in every report.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.eventlog import file_digest, read_events, verify_log
from proxy.recording import HEADER, MAGIC, read_recording

EVENTS, META, SCREEN, PCAP = "events.jsonl", "meta.json", "screen.rfbrec", "network.pcap"
KNOWN_FILES = {EVENTS, META, SCREEN, PCAP}


@dataclass(frozen=True)
class Finding:
    file: str  # path of the file (or folder) the finding is about
    problem: str
    line: int | None = None  # 1-based, for the event log

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "problem": self.problem}

    def __str__(self) -> str:
        return f"{self.file}{f':{self.line}' if self.line else ''}: {self.problem}"


@dataclass
class SessionCheck:
    session: str
    folder: str
    lines: int = 0
    sealed: bool = False
    head: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "folder": self.folder, "ok": self.ok, "lines": self.lines,
                "sealed": self.sealed, "head": self.head, "findings": [f.as_dict() for f in self.findings]}


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


def verify_session(folder: str | Path) -> SessionCheck:
    folder = Path(folder)
    check = SessionCheck(folder.name, str(folder))
    findings = check.findings
    events_path, meta_path = folder / EVENTS, folder / META
    if not folder.is_dir():
        findings.append(Finding(str(folder), "missing session folder"))
        return check
    for extra in sorted(p.name for p in folder.iterdir() if p.name not in KNOWN_FILES):
        findings.append(Finding(str(folder / extra), "unexpected file in a session folder"))

    seal: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    if not events_path.is_file():
        findings.append(Finding(str(events_path), "missing"))
    else:
        result = verify_log(events_path)
        check.lines, check.sealed, check.head = result.lines, result.sealed, result.head
        if not result.ok:
            findings.append(Finding(str(events_path), result.error or "invalid", result.bad_line))
        events = read_events(events_path)
        if result.ok and events and events[-1].get("event") == "seal":
            seal = events[-1]

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


def session_folders(root: str | Path) -> list[Path]:
    """Folders under a sessions root that hold (or held) a session, oldest name first."""
    root = Path(root)
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def is_session_folder(path: Path) -> bool:
    return (path / EVENTS).exists() or (path / META).exists()


def verify_path(path: str | Path, known_folders: list[str] | None = None) -> list[SessionCheck]:
    """One session folder, or every session under a sessions root. `known_folders` (from the gateways' session
    table) adds a finding for each session the database knows whose folder is gone."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such session folder or sessions root")
    if is_session_folder(path):
        return [verify_session(path)]
    checks = [verify_session(folder) for folder in session_folders(path)]
    present = {Path(check.folder).resolve() for check in checks}
    for folder in known_folders or []:
        if Path(folder).resolve().parent == path.resolve() and Path(folder).resolve() not in present:
            check = SessionCheck(Path(folder).name, folder)
            check.findings.append(Finding(folder, "missing: the gateway's session table records this session"))
            checks.append(check)
    return checks
