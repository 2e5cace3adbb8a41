"""Starting and stopping the kiosk's child processes so that none outlives the kiosk.

Every child gets its own process group (Chromium forks zygotes, renderers and a GPU process; killing the group reaches
them all) and its output goes to a log file in the kiosk's log folder, never to a pipe that nobody reads.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from safeshare.processes import group_alive, signal_group

log = logging.getLogger("safeshare.kiosk")


def spawn(cmd: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
          pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    """Start `cmd` in a new session (own process group), stdout and stderr appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, pass_fds=tuple(pass_fds), close_fds=True)


def stop_group(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM the whole process group, wait, then SIGKILL what is left; always reaps the leader."""
    pgid = proc.pid  # start_new_session made the leader's pid the group id
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(pgid):
            break
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.error("process %s did not exit after SIGKILL", proc.pid)
    deadline = time.monotonic() + timeout
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def kill_pids(pids: Sequence[int], timeout: float = 3.0) -> None:
    """SIGKILL a set of pids (stragglers found by other means, e.g. in the kiosk's network namespace)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in pids):
        time.sleep(0.05)


def descendants(root: int) -> list[int]:
    """`root` and every process below it, from the parent pids in /proc. Chromium's sandboxed children live in
    namespaces of their own (pid and network), so neither `ip netns pids` nor the process group is sure to find
    them all; the parent chain does."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
