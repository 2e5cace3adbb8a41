"""Session summaries for auditors: what happened in a session, from its event log and metadata, and the filters
`safeshare audit sessions` offers (recipient, release, time range, sessions with blocked or dropped events)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.sessiondir import EVENTS, is_session_folder, read_meta, session_folders
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

    @property
    def flagged(self) -> bool:
        """Anything an auditor should look at: blocked shortcuts, dropped input, clipboard attempts, limit hits."""
        return bool(self.keys_blocked or self.keys_dropped or self.clicks_dropped or self.cut_text_attempts
                    or self.limit_hits)

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "folder": self.folder, "recipient": self.recipient, "release": self.release,
                "start": self.start.isoformat() if self.start else None,
                "end": self.end.isoformat() if self.end else None, "duration": self.duration,
                "end_reason": self.end_reason, "keys": self.keys, "pointer": self.pointer, "clicks": self.clicks,
                "keys_blocked": self.keys_blocked, "keys_dropped": self.keys_dropped,
                "clicks_dropped": self.clicks_dropped, "cut_text_attempts": self.cut_text_attempts,
                "limit_hits": self.limit_hits, "flagged": self.flagged, "sealed": self.sealed}


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def summarize(folder: str | Path) -> SessionSummary:
    """Counts from the event log as it is (run `audit verify` to know whether it is intact)."""
    folder = Path(folder)
    meta = read_meta(folder)
    counts: Counter[str] = Counter()
    first_t = last_t = None
    sealed = False
    previous_mask = 0
    for event in read_events(folder / EVENTS):
        kind = event.get("event")
        t = event.get("t")
        if isinstance(t, (int, float)):
            first_t = t if first_t is None else first_t
            last_t = t
        if kind == "key" and event.get("down"):
            counts["keys"] += 1
        elif kind == "pointer":
            counts["pointer"] += 1
            mask = int(event.get("mask") or 0)
            counts["clicks"] += bin(mask & ~previous_mask & 0x7).count("1")
            previous_mask = mask
        elif kind in ("key_blocked", "key_dropped", "click_dropped", "cut_text_dropped", "limit_hit"):
            counts[kind] += 1
        elif kind == "seal":
            sealed = True
    start, end = _time(meta.get("start")), _time(meta.get("end"))
    if start is None and first_t is not None:
        start = datetime.fromtimestamp(first_t, timezone.utc)
    if end is None and last_t is not None and sealed:
        end = datetime.fromtimestamp(last_t, timezone.utc)
    duration = round((end - start).total_seconds(), 3) if start and end else None
    return SessionSummary(
        session=folder.name, folder=str(folder), recipient=meta.get("recipient"), release=meta.get("release"),
        start=start, end=end, duration=duration, end_reason=meta.get("end_reason"), keys=counts["keys"],
        pointer=counts["pointer"], clicks=counts["clicks"], keys_blocked=counts["key_blocked"],
        keys_dropped=counts["key_dropped"], clicks_dropped=counts["click_dropped"],
        cut_text_attempts=counts["cut_text_dropped"], limit_hits=counts["limit_hit"], sealed=sealed)


def find_sessions(root: str | Path, *, recipient: str | None = None, release: str | None = None,
                  since: datetime | None = None, until: datetime | None = None,
                  flagged: bool = False) -> list[SessionSummary]:
    """Summaries of the sessions under `root` matching every given filter, oldest first. `release` matches the
    bundle (`dataset/id`) or its dataset; the time range applies to the session's start."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such sessions folder")
    out = []
    for folder in session_folders(root):
        if not is_session_folder(folder):
            continue
        summary = summarize(folder)
        if recipient is not None and summary.recipient != recipient:
            continue
        if release is not None and summary.release != release and \
                (summary.release or "").split("/", 1)[0] != release:
            continue
        if since is not None and (summary.start is None or summary.start < since):
            continue
        if until is not None and (summary.start is None or summary.start >= until):
            continue
        if flagged and not summary.flagged:
            continue
        out.append(summary)
    out.sort(key=lambda s: (s.start or datetime.min.replace(tzinfo=timezone.utc), s.session))
    return out
