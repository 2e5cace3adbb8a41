"""Which recorded sessions have outlived their retention period. Deleting them (and logging each deletion) is the
custodian's job: `deploy/audit/retention.py`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from proxy.audit.sessions import SessionSummary, find_sessions


@dataclass(frozen=True)
class Due:
    summary: SessionSummary
    retention_days: int
    due_at: datetime


def due_sessions(root, now: datetime, days_for: Callable[[str | None], int]) -> list[Due]:
    """Ended sessions whose end (or start, for a session that never ended cleanly) is older than the retention
    days `days_for(recipient)` gives. A session still being recorded (no seal) is never due."""
    out = []
    for summary in find_sessions(root):
        if not summary.sealed:
            continue
        ended = summary.end or summary.start
        if ended is None:
            continue
        days = days_for(summary.recipient)
        due_at = ended + timedelta(days=days)
        if due_at <= now:
            out.append(Due(summary, days, due_at))
    return out
