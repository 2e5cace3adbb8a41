"""Child processes of `safeshare up`: started in their own process groups, logged to one folder, stopped in order.

Each component (app, kiosk, gateway) is a `safeshare` subcommand run as a child, so a crash in one is an exit we can
see (and answer by stopping everything: fail closed) rather than an exception somewhere in a shared event loop. The
`up` process makes itself a child subreaper, so grandchildren orphaned by a component that died (Xvfb, x11vnc,
Chromium) are re-parented to it and can be found and stopped: Ctrl+C leaves no stray processes.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from safeshare.processes import signal_group

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux); False where the kernel refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def safeshare_argv(*args: str) -> list[str]:
    """The command line of a `safeshare` subcommand in this interpreter (works from a checkout and a wheel)."""
    return [sys.executable, "-m", "safeshare.cli", *args]


class ComponentFailed(RuntimeError):
    """A component exited or never became ready; the message says which and points at its log."""


@dataclass
class Child:
    """One running component; its stdout and stderr go to `log`."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    started_at: float = field(default_factory=time.time)

    def start(self, env: dict[str, str] | None = None) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab", buffering=0) as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(self.argv)}\n".encode())
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=env)
        self.started_at = time.time()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 8) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for(self, find: Callable[[str], object], timeout: float, what: str) -> object:
        """Poll the log until `find(text)` returns something truthy; fail if the child exits or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            found = find(self.log_text())
            if found:
                return found
            if not self.running():
                code = self.proc.returncode if self.proc is not None else None
                raise ComponentFailed(f"{self.name} exited with {code} before {what} (log {self.log}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise ComponentFailed(f"{self.name}: no {what} within {timeout:.0f} s (log {self.log}):\n{self.tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the component's process group, SIGKILL it after `timeout`; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        signal_group(self.proc.pid, signal.SIGKILL)  # anything left in its group
        return self.proc.returncode


def adopted_children(zombies: bool = False) -> list[int]:
    """Processes whose parent is this process (after subreaping, orphans of the components are among them): the
    living ones, or with `zombies` only the exited ones waiting to be collected."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces: the fields after the last ')' are fixed
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and (fields[0] == "Z") == zombies and int(fields[1]) == me:
            found.append(int(entry.name))
    return found


class OrphanReaper:
    """Collects exited orphans that were re-parented to this subreaper (Chromium's helpers, for instance), so they
    do not linger as zombies: a zombie still counts as a member of its process group, and the kiosk waits for its
    groups to empty before it reports itself stopped. Our own children (`keep`) are left to their Popen objects,
    which need their exit codes."""

    def __init__(self, keep: Callable[[], set[int]], interval: float = 0.2) -> None:
        self.keep = keep
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orphan-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def reap_once(self) -> int:
        keep = self.keep()
        collected = 0
        for pid in adopted_children(zombies=True):
            if pid in keep:
                continue
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    collected += 1
            except ChildProcessError:
                pass
        return collected

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.reap_once()


def reap_strays(timeout: float = 5.0) -> list[int]:
    """Stop whatever descendants are left (their groups too) and collect them; returns the pids that were found."""
    strays = adopted_children()
    for pid in strays:
        signal_group(pid, signal.SIGTERM)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while strays and time.monotonic() < deadline and adopted_children():
        time.sleep(0.05)
        _reap_zombies()
    for pid in adopted_children():
        signal_group(pid, signal.SIGKILL)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap_zombies()
    return strays


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
