"""Session summaries for auditors: what happened in a session, from its event log and metadata, and the filters
`safeshare audit sessions` offers (recipient, release, time range, sessions with blocked or dropped events)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.sessiondir import EVENTS, META, is_session_folder, read_meta, session_folders
from proxy.eventlog import read_events


@dataclass(frozen=True)
class SessionSummary:
    session: str
    folder: str
    recipient: str | None
    release: str | None
    start: datetime | None
    end: datetime | None
    duration: float | None
    end_reason: str | None
    keys: int  # key presses forwarded
    pointer: int  # pointer events forwarded
    clicks: int  # button presses forwarded
    keys_blocked: int
    keys_dropped: int
    clicks_dropped: int
    cut_text_attempts: int
    limit_hits: int
    sealed: bool
    problem: str | None = None  # what in the folder could not be read as a session's (file, field, why)
    # sealed by a gateway that recovered the session after a crash: proven only up to its last signed checkpoint,
    # with `unverified_lines` after it (as its seal says; `audit verify` checks it)
    recovered: bool = False
    unverified_lines: int | None = None

    @property
    def flagged(self) -> bool:
        """Anything an auditor should look at: blocked shortcuts, dropped input, clipboard attempts, limit hits, a
        folder that does not read as a session's."""
        return bool(self.keys_blocked or self.keys_dropped or self.clicks_dropped or self.cut_text_attempts
                    or self.limit_hits or self.problem)

    @classmethod
    def unreadable(cls, folder: Path, problem: str) -> "SessionSummary":
        """A folder that could not be summarized: listed with its problem rather than hiding the others."""
        recipient = read_meta(folder).get("recipient")
        return cls(session=folder.name, folder=str(folder), recipient=recipient if isinstance(recipient, str) else None,
                   release=None, start=None, end=None, duration=None, end_reason=None, keys=0, pointer=0, clicks=0,
                   keys_blocked=0, keys_dropped=0, clicks_dropped=0, cut_text_attempts=0, limit_hits=0, sealed=False,
                   problem=problem)

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "folder": self.folder, "recipient": self.recipient, "release": self.release,
                "start": self.start.isoformat() if self.start else None,
                "end": self.end.isoformat() if self.end else None, "duration": self.duration,
                "end_reason": self.end_reason, "keys": self.keys, "pointer": self.pointer, "clicks": self.clicks,
                "keys_blocked": self.keys_blocked, "keys_dropped": self.keys_dropped,
                "clicks_dropped": self.clicks_dropped, "cut_text_attempts": self.cut_text_attempts,
                "limit_hits": self.limit_hits, "flagged": self.flagged, "sealed": self.sealed, "problem": self.problem,
                "recovered": self.recovered, "unverified_lines": self.unverified_lines}


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _text(meta: dict[str, Any], name: str, problems: list[str], folder: Path) -> str | None:
    value = meta.get(name)
    if value is None or isinstance(value, str):
        return value
    problems.append(f"{folder / META}: field {name!r} is {value!r}, not text")
    return None


def unproven_recovery(last: dict[str, Any]) -> bool:
    """A signed seal of a log recovered with no signed checkpoint left: the metadata it signs came from lines nothing
    proves (`audit verify` reports it), so no list takes its recipient, release or times for signed ones."""
    return (last.get("event") == "seal" and last.get("recovered") is True and bool(last.get("signature"))
            and "checkpoint" in last and last.get("checkpoint") is None)


def logged_meta(folder: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The session's metadata as its log holds it: the seal's signed `meta` (start, end, end reason, front door,
    counters, limits), else the connect line's (the start, in the chain, for a session still running), else
    meta.json as found (sessions recorded before the log held it). meta.json is a copy that a writer of the folder
    can edit to move a session out of a time range; `audit verify` reports where it differs from the seal."""
    last = events[-1] if events else {}
    if unproven_recovery(last):
        return {}
    if last.get("event") == "seal" and isinstance(last.get("meta"), dict):
        return last["meta"]
    first = events[0] if events else {}
    if first.get("event") == "connect" and isinstance(first.get("meta"), dict):
        return first["meta"]
    return read_meta(folder)


def summarize(folder: str | Path) -> SessionSummary:
    """Counts from the event log as it is (run `audit verify` to know whether it is intact), with the metadata the
    log holds (`logged_meta`). A field of the wrong type is left out of the counts and named in `problem`."""
    folder = Path(folder)
    events = read_events(folder / EVENTS)
    meta = logged_meta(folder, events)
    counts: Counter[str] = Counter()
    first_t = last_t = None
    sealed = False
    previous_mask = 0
    problems: list[str] = []
    seal: dict[str, Any] = {}
    for number, event in enumerate(events, 1):
        kind = event.get("event")
        t = event.get("t")
        if isinstance(t, (int, float)):
            first_t = t if first_t is None else first_t
            last_t = t
        if kind == "key" and event.get("down"):
            counts["keys"] += 1
        elif kind == "pointer":
            counts["pointer"] += 1
            mask = event.get("mask") or 0
            if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < 256:
                problems.append(f"{folder / EVENTS}: event {number}: field 'mask' is {mask!r}, not a button mask")
                continue
            counts["clicks"] += bin(mask & ~previous_mask & 0x7).count("1")
            previous_mask = mask
        elif kind in ("key_blocked", "key_dropped", "click_dropped", "cut_text_dropped", "limit_hit"):
            counts[kind] += 1
        elif kind == "seal":
            sealed, seal = True, event
    unverified = seal.get("unverified_lines")
    unproven = unproven_recovery(events[-1] if events else {})
    if unproven:
        problems.append(f"{folder / EVENTS}: recovered with no signed checkpoint left: its recipient, release and "
                        f"times are unproven (audit verify)")
    recipient, release = _text(meta, "recipient", problems, folder), _text(meta, "release", problems, folder)
    end_reason = _text(meta, "end_reason", problems, folder)
    start, end = _time(meta.get("start")), _time(meta.get("end"))
    if start is None and first_t is not None and not unproven:
        start = datetime.fromtimestamp(first_t, timezone.utc)
    if end is None and last_t is not None and sealed and not unproven:
        end = datetime.fromtimestamp(last_t, timezone.utc)
    duration = round((end - start).total_seconds(), 3) if start and end else None
    return SessionSummary(
        session=folder.name, folder=str(folder), recipient=recipient, release=release,
        start=start, end=end, duration=duration, end_reason=end_reason, keys=counts["keys"],
        pointer=counts["pointer"], clicks=counts["clicks"], keys_blocked=counts["key_blocked"],
        keys_dropped=counts["key_dropped"], clicks_dropped=counts["click_dropped"],
        cut_text_attempts=counts["cut_text_dropped"], limit_hits=counts["limit_hit"], sealed=sealed,
        problem="; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "") or None,
        recovered=seal.get("recovered") is True,
        unverified_lines=unverified if isinstance(unverified, int) and not isinstance(unverified, bool) else None)


def find_sessions(root: str | Path, *, recipient: str | None = None, release: str | None = None,
                  since: datetime | None = None, until: datetime | None = None,
                  flagged: bool = False) -> list[SessionSummary]:
    """Summaries of the sessions under `root` matching every given filter, oldest first. `release` matches the
    bundle (`dataset/id`) or its dataset; the time range applies to the session's start. A folder that cannot be
    summarized is listed with its `problem` (and no start: the time range does not hide it), never hiding the
    others."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such sessions folder")
    out = []
    for folder in session_folders(root):
        if not is_session_folder(folder):
            continue
        try:
            summary = summarize(folder)
        except Exception as exc:  # one bad folder must not hide the others: it is listed as bad
            summary = SessionSummary.unreadable(folder, f"{folder}: cannot be read as a session: "
                                                        f"{type(exc).__name__}: {exc}")
        if recipient is not None and summary.recipient != recipient:
            continue
        if release is not None and summary.release != release and \
                (summary.release or "").split("/", 1)[0] != release:
            continue
        undated = summary.start is None and summary.problem is not None  # shown whatever the range
        if since is not None and not undated and (summary.start is None or summary.start < since):
            continue
        if until is not None and not undated and (summary.start is None or summary.start >= until):
            continue
        if flagged and not summary.flagged:
            continue
        out.append(summary)
    out.sort(key=lambda s: (s.start or datetime.min.replace(tzinfo=timezone.utc), s.session))
    return out
