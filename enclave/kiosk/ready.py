"""The kiosk's events on standard output: one JSON object per line, `{"event": "ready", ...endpoint}` once Xvfb, the
VNC server and Chromium run on the app, `{"event": "failed", "reason": ...}` when it fails later, `{"event": "stopped"}` when it has stopped. `safeshare up`
reads the lines from the kiosk's log and provisioning from the container's; both find them here."""
from __future__ import annotations

import json
from typing import Any

READY = "ready"
FAILED = "failed"
STOPPED = "stopped"


def event_line(event: str, **fields: Any) -> str:
    return json.dumps({"event": event, **fields})


def find_ready(text: str) -> dict[str, Any] | None:
    """The ready event in `text` (a log), or None while there is none."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("event") == READY:
            return event
    return None


__all__ = ["FAILED", "READY", "STOPPED", "event_line", "find_ready"]
