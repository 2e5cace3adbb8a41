"""The kiosk's X display: Xvfb at the recipient's screen size, reachable only with a cookie.

Xvfb without `-auth` lets any local process connect, and an X client can read the screen and inject input, so the
display gets a random MIT-MAGIC-COOKIE-1 that only the kiosk's own clients (VNC server, browser, watchdog) are given.
The authority entry is written with a wildcard family and an empty display number, so it is valid for whatever
display number Xvfb picks for itself with `-displayfd` (no race for a free number). `-accessx` turns off the AccessX
keyboard gestures (Shift pressed five times for StickyKeys, held for SlowKeys); keyboard.py does the rest.
"""
from __future__ import annotations

import os
import secrets
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from enclave.kiosk.procs import spawn, stop_group

FAMILY_WILD = 0xFFFF
COOKIE_NAME = b"MIT-MAGIC-COOKIE-1"


def write_xauthority(path: Path, cookie: bytes) -> None:
    """One wildcard entry in the Xauthority format (big-endian length-prefixed fields), mode 0600."""
    def field(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    entry = struct.pack(">H", FAMILY_WILD) + field(b"") + field(b"") + field(COOKIE_NAME) + field(cookie)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(entry)


@dataclass
class XDisplay:
    """A running Xvfb; `name` is like ":3"."""

    proc: subprocess.Popen
    name: str
    xauthority: Path
    cookie: bytes
    width: int
    height: int

    def env(self) -> dict[str, str]:
        """Environment for an X client of this display (nothing else inherited that could matter)."""
        return {"DISPLAY": self.name, "XAUTHORITY": str(self.xauthority)}

    def stop(self) -> None:
        stop_group(self.proc)


def start_xvfb(width: int, height: int, xauthority: Path, log_path: Path, timeout: float = 15.0) -> XDisplay:
    """Start Xvfb with a fresh cookie; returns once it has told us its display number."""
    cookie = secrets.token_bytes(16)
    write_xauthority(xauthority, cookie)
    read_fd, write_fd = os.pipe()
    try:
        proc = spawn(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24",
                      "-auth", str(xauthority), "-nolisten", "tcp", "-noreset", "-dpi", "96",
                      "-extension", "GLX", "-accessx"],
                     log_path, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    data = b""
    deadline = time.monotonic() + timeout
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while not data.endswith(b"\n") and time.monotonic() < deadline:
            chunk = pipe.read(1)
            if not chunk:
                break
            data += chunk
    if not data.strip().isdigit():
        stop_group(proc)
        raise RuntimeError(f"Xvfb did not start (see {log_path})")
    return XDisplay(proc, ":" + data.decode().strip(), xauthority, cookie, width, height)
