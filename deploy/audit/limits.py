"""Bounds on what the custodian service writes to the audit log for requests anyone can send.

Two kinds of event would otherwise cost one row per request:

- `auth-failed` (no key, a malformed header, an unknown or a revoked key): anyone who can reach the port can send
  these, so they are written for at most PER_SOURCE each source address per WINDOW seconds and at most GLOBAL in all;
  the rest are counted and written as one summary event per source (sources beyond the first GLOBAL of a window
  share one summary) when the window ends. A flood therefore writes at most 2 * GLOBAL + 1 rows a window whatever its
  size (PER_SOURCE + 1 from a single source), and memory holds at most GLOBAL + 1 sources. Fixed windows: a source
  may write 2 * PER_SOURCE rows across a window boundary, never more.
- `session-viewed`: the player fetches a session's frames by HTTP range many times while it plays, so a view is
  written once per (key, session, endpoint) per VIEW_INTERVAL seconds: the audit trail says who looked at which
  session, through which endpoint, and when a look started, not how many byte ranges it took.

Both use a monotonic clock that a test can replace; the audit writer is the Records instance of the service.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

WINDOW = 60.0
PER_SOURCE = 10
GLOBAL = 50
VIEW_INTERVAL = 300.0
MAX_VIEWS_TRACKED = 10_000
OTHERS = "*"  # the summary bucket of sources beyond the global bound
AUTH_ACTOR = "api:unauthenticated"


class AuditWriter(Protocol):
    def audit(self, actor: str, action: str, outcome: str, recipient: str | None = None, **detail: Any) -> int: ...


@dataclass
class _Source:
    written: int = 0
    dropped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class AuthFailureLog:
    """Writes `auth-failed` events, rate-limited per source address (see the module docstring)."""

    def __init__(self, records: AuditWriter, *, window: float = WINDOW, per_source: int = PER_SOURCE,
                 global_limit: int = GLOBAL, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.records, self.window, self.per_source, self.global_limit = records, window, per_source, global_limit
        self.clock, self.wall = clock, wall
        self._lock = threading.Lock()
        self._start = clock()
        self._wall_start = wall()
        self._sources: dict[str, _Source] = {}
        self._written = 0

    def record(self, source: str, reason: str, **detail: Any) -> None:
        """One failed authentication from `source`: written, or counted for the window's summary."""
        with self._lock:
            summaries = self._roll()
            entry = self._sources.get(source)
            if entry is None and len(self._sources) >= self.global_limit:
                entry = self._sources.setdefault(OTHERS, _Source(written=self.per_source))
            elif entry is None:
                entry = self._sources[source] = _Source()
            write = entry.written < self.per_source and self._written < self.global_limit
            if write:
                entry.written += 1
                self._written += 1
            else:
                entry.dropped += 1
                entry.reasons[reason] = entry.reasons.get(reason, 0) + 1
        self._write(summaries)
        if write:
            self.records.audit(AUTH_ACTOR, "auth-failed", "refused", None, reason=reason, source=source, **detail)

    def flush(self, force: bool = False) -> int:
        """Write the summaries of a window that has ended (or of the current one with `force`, at shutdown);
        returns how many summary events were written."""
        with self._lock:
            summaries = self._roll(force)
        self._write(summaries)
        return len(summaries)

    def _roll(self, force: bool = False) -> list[dict[str, Any]]:
        """Close the window if it has ended; the summaries to write (called under the lock)."""
        now = self.clock()
        if not force and now - self._start < self.window:
            return []
        wall_end = self.wall()
        summaries = [{"source": source, "dropped": entry.dropped, "reasons": dict(sorted(entry.reasons.items())),
                      "since": self._wall_start, "until": wall_end}
                     for source, entry in self._sources.items() if entry.dropped]
        self._sources.clear()
        self._written = 0
        self._start, self._wall_start = now, wall_end
        return summaries

    def _write(self, summaries: list[dict[str, Any]]) -> None:
        from datetime import datetime, timezone

        for summary in summaries:
            since, until = (datetime.fromtimestamp(summary.pop(name), timezone.utc).isoformat(timespec="seconds")
                            for name in ("since", "until"))
            self.records.audit(AUTH_ACTOR, "auth-failed", "refused", None, summary=True, since=since, until=until,
                               **summary)


class ViewLog:
    """Writes `session-viewed` at most once per (key, session, endpoint) per `interval` seconds."""

    def __init__(self, records: AuditWriter, *, interval: float = VIEW_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.records, self.interval, self.clock = records, interval, clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str], float] = {}

    def record(self, key_name: str, role: str, session: str, endpoint: str, recipient: str | None) -> bool:
        """Write the view unless the same key viewed the same session through the same endpoint within the interval;
        True when an event was written. The event is written before the data is served: if it cannot be written,
        the request fails (closed)."""
        now = self.clock()
        ident = (key_name, session, endpoint)
        with self._lock:
            last = self._last.get(ident)
            if last is not None and now - last < self.interval:
                return False
            if len(self._last) >= MAX_VIEWS_TRACKED:
                self._last = {k: t for k, t in self._last.items() if now - t < self.interval}
                if len(self._last) >= MAX_VIEWS_TRACKED:  # bounded memory; at worst a view is written again
                    self._last.clear()
        self.records.audit(f"api:{key_name}", "session-viewed", "ok", recipient, session=session,
                           endpoint=endpoint, role=role)
        with self._lock:
            self._last[ident] = now
        return True
