"""One recorded session's folder (`SESSIONS/<session id>/`): its file names, and reading and writing its meta.json.

The recorder (proxy.session), the auditors' tools (proxy.audit), the gateway and retention all name the files
through here, so a change of the format is made once:

    events.jsonl    the hash-chained event log, sealed by its last line (proxy.eventlog); its connect line holds
                    meta.json as first written, signed checkpoints (head, line count, recording start on disk)
                    follow control events and every few seconds, and the seal holds meta.json's final fields
    meta.json       who, what, when; rewritten atomically at the start and end, repeats the seal's hash as log_head;
                    a copy for tools: what counts is the log's (proxy.audit.sessions.logged_meta)
    screen.rfbrec   the screen recording (proxy.recording), hashed in the seal
    network.pcap    the session's network capture when enabled (proxy.capture), hashed in the log
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

EVENTS = "events.jsonl"
META = "meta.json"
SCREEN = "screen.rfbrec"
PCAP = "network.pcap"
KNOWN_FILES = frozenset({EVENTS, META, SCREEN, PCAP})


def is_session_folder(path: Path) -> bool:
    """Whether `path` holds (or held) a session: it has an event log or a meta.json."""
    return (path / EVENTS).exists() or (path / META).exists()


def session_folders(root: str | Path) -> list[Path]:
    """Folders under a sessions root that hold (or held) a session, oldest name first."""
    root = Path(root)
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def read_meta(folder: Path) -> dict[str, Any]:
    """A session's meta.json as far as it reads ({} when missing, unreadable or not an object)."""
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """Replace meta.json whole (written to a temporary file, synced, renamed): a reader never sees half of it."""
    path = folder / META
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(meta, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


__all__ = ["EVENTS", "KNOWN_FILES", "META", "PCAP", "SCREEN", "is_session_folder", "read_meta", "session_folders",
           "write_meta"]
