"""What a kiosk that died without stopping left behind, and cleaning it up on the next start.

A clean `stop()` removes everything, but a kiosk process killed with SIGKILL (or a machine that lost power) cannot;
its Xvfb, x11vnc and browser would keep running and its network namespace would stay. So a running kiosk keeps a
record in its state folder (`kiosk.json`: pids, namespace, browser home, a system policy file it wrote), and the next
kiosk on the same state folder tidies up first. A pid is only killed if its command line still names this kiosk's
state folder or browser home, so a reused pid of some other program is never touched.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from enclave.kiosk.netns import NetworkNamespace
from enclave.kiosk.procs import kill_pids

log = logging.getLogger("safeshare.kiosk")

RECORD_NAME = "kiosk.json"


def write_record(state_dir: Path, record: dict[str, Any]) -> None:
    path = state_dir / RECORD_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, path)


def remove_record(state_dir: Path) -> None:
    (state_dir / RECORD_NAME).unlink(missing_ok=True)


def _mentions(pid: int, markers: list[str]) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(marker.encode() in cmdline for marker in markers if marker)


def clean_previous(state_dir: Path) -> bool:
    """Remove what a previous kiosk on `state_dir` left; True if there was a record to act on."""
    path = state_dir / RECORD_NAME
    if not path.is_file():
        return False
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return False
    markers = [str(state_dir), record.get("home") or ""]
    stale = [pid for pid in record.get("pids", []) if _mentions(int(pid), markers)]
    if stale:
        log.warning("a previous kiosk on %s did not stop: killing %d process(es)", state_dir, len(stale))
        kill_pids(stale)
    if record.get("netns"):
        NetworkNamespace(record["netns"]).delete()
    if record.get("home"):
        shutil.rmtree(record["home"], ignore_errors=True)
    if record.get("system_policy"):
        Path(record["system_policy"]).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    return True
