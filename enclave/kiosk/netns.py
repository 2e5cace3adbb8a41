"""A network namespace for the kiosk browser that can reach the analytics app and nothing else.

A URL policy only stops navigations; a page can still `fetch()`, load an image or open a WebSocket to any address the
browser can reach. So in local mode the browser runs in its own namespace that has only a loopback interface: no
route leaves it. The app's port is made reachable by a listening socket that the kiosk opens *inside* the namespace
(a thread enters the namespace with setns(2) just for the socket() call; a socket stays in the namespace it was
created in) and forwards to the app in the host namespace (see `forward.py`). Nothing else listens there, so every
other address and port is refused, without depending on a firewall being installed.

`ip netns exec` also bind-mounts `/etc/netns/NAME/<entry>` over `/etc/<entry>` in the browser's mount namespace; the
kiosk uses that to give each browser its own `/etc/chromium/policies/managed/`.
"""
from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import socket
import subprocess
import threading
from pathlib import Path

log = logging.getLogger("safeshare.kiosk")

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = Path("/run/netns")
NETNS_ETC_DIR = Path("/etc/netns")

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used here (not root, no `ip`, or the kernel refuses)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15, check=check)


def netns_unavailable_reason() -> str | None:
    """None when the kiosk can make namespaces, else why not (said in logs and by `safeshare kiosk`)."""
    if os.geteuid() != 0:
        return "not running as root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    if not hasattr(_libc, "setns"):
        return "libc has no setns"
    return None


class NetworkNamespace:
    """`ip netns` namespace with loopback up; `delete()` kills whatever still runs inside and removes it."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or f"safeshare-kiosk-{secrets.token_hex(4)}"
        self.path = NETNS_RUN_DIR / self.name
        self.etc_dir = NETNS_ETC_DIR / self.name
        self.created = False

    def create(self) -> "NetworkNamespace":
        reason = netns_unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        result = _ip("netns", "add", self.name, check=False)
        if result.returncode != 0:
            raise NetnsUnavailable(f"ip netns add failed: {result.stderr.strip()}")
        self.created = True
        try:
            _ip("-n", self.name, "link", "set", "lo", "up")
            self.etc_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.etc_dir, 0o755)
        except BaseException:
            self.delete()
            raise
        return self

    def exec_prefix(self) -> list[str]:
        """Command prefix that runs a program inside the namespace (with the /etc/netns bind mounts)."""
        return ["ip", "netns", "exec", self.name]

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.exec_prefix(), *cmd], capture_output=True, timeout=15)

    def pids(self) -> list[int]:
        result = _ip("netns", "pids", self.name, check=False)
        return [int(word) for word in result.stdout.split() if word.isdigit()]

    def interfaces(self) -> list[str]:
        result = _ip("-n", self.name, "-o", "link", "show", check=False)
        return [line.split(":")[1].strip().split("@")[0] for line in result.stdout.splitlines() if ":" in line]

    def add_address(self, address: str) -> None:
        """Give loopback an extra address (the app's, when the app URL is not on 127.0.0.1)."""
        prefix = "/128" if ":" in address else "/32"
        _ip("-n", self.name, "addr", "add", address + prefix, "dev", "lo")

    def listen(self, host: str, port: int, backlog: int = 64) -> socket.socket:
        """A listening TCP socket bound to host:port inside the namespace, non-blocking, for asyncio."""
        result: dict[str, object] = {}

        def enter_and_bind() -> None:
            # setns(2) on a thread changes only that thread's namespace; this thread exists for this call only.
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if _libc.setns(fd, CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns({self.path}): {os.strerror(err)}")
                finally:
                    os.close(fd)
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(backlog)
                sock.setblocking(False)
                result["socket"] = sock
            except BaseException as exc:  # handed to the caller's thread
                result["error"] = exc

        thread = threading.Thread(target=enter_and_bind, name=f"netns-{self.name}", daemon=True)
        thread.start()
        thread.join(10)
        if "error" in result:
            raise result["error"]  # type: ignore[misc]
        if "socket" not in result:
            raise NetnsUnavailable("entering the namespace timed out")
        return result["socket"]  # type: ignore[return-value]

    def delete(self) -> None:
        """Kill every process still inside, remove the namespace and its /etc overrides. Idempotent."""
        from enclave.kiosk.procs import kill_pids

        if self.path.exists():
            stragglers = self.pids()
            if stragglers:
                log.warning("killing %d process(es) left in network namespace %s", len(stragglers), self.name)
                kill_pids(stragglers)
            result = _ip("netns", "del", self.name, check=False)
            if result.returncode != 0 and self.path.exists():
                log.error("ip netns del %s: %s", self.name, result.stderr.strip())
        if self.etc_dir.exists():
            shutil.rmtree(self.etc_dir, ignore_errors=True)
        self.created = False
