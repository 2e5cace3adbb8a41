"""The kiosk's VNC server: x11vnc on the kiosk display, for the RFB proxy only.

It listens on a Unix socket in a folder only the kiosk's owner can enter (or, if asked, on a localhost TCP port), asks
for a password (a random one per start, in a 0600 file the proxy reads), exchanges no clipboard in either direction,
offers no file transfer, runs no external commands and takes no remote-control commands, and treats every viewer as
exclusive: a new connection (the proxy's next session) replaces the previous one rather than watching along.
"""
from __future__ import annotations

import os
import secrets
import socket
import string
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from enclave.kiosk.display import XDisplay
from enclave.kiosk.procs import spawn, stop_group
from safeshare.endpoints import read_vnc_password

# Same meaning as proxy.vncserver.SAFE_X11VNC_FLAGS (the enclave does not import the proxy; a test keeps them equal).
CLIPBOARD_OFF_FLAGS: tuple[str, ...] = ("-nosel", "-noprimary", "-nosetprimary", "-noclipboard", "-nosetclipboard")
HARDENING_FLAGS: tuple[str, ...] = (
    "-nevershared",  # one viewer at a time: the proxy's current session
    "-forever",      # keep serving after a viewer leaves
    "-norc",         # no ~/.x11vncrc that could change any of this
    "-noremote",     # no -remote/-query control channel
    "-nocmds",       # never run external commands (e.g. -afteraccept, -gone)
    "-nossl",
    "-nolookup",
    "-nobell",
    "-noxrecord",
    "-nowf",         # no wireframe moves (there is no window manager to move anything)
    "-nodpms", "-noserverdpms",
    "-noadd_keysyms",  # a keysym the keyboard lacks is dropped, never added to the keymap (see keyboard.py)
    "-clear_keys",     # release every key held down when x11vnc starts and when it exits
)
PASSWORD_LENGTH = 8  # VNC authentication uses the first eight characters only


@dataclass
class VncEndpoint:
    """Where and how the proxy reaches the kiosk: `upstream` in the proxy's syntax (`unix:PATH` or `HOST:PORT`)."""

    upstream: str
    password_file: Path

    def password(self) -> bytes:
        return read_vnc_password(self.password_file)


def new_password(path: Path) -> None:
    alphabet = string.ascii_letters + string.digits
    text = "".join(secrets.choice(alphabet) for _ in range(PASSWORD_LENGTH))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")


def desktop_name(kiosk_id: str) -> str:
    """The desktop name x11vnc announces in ServerInit: the proxy logs it in every session (`upstream_ready`), which
    ties the kiosk id in the screen watermark to the sessions that showed it."""
    return f"safeshare kiosk {kiosk_id}"


def x11vnc_command(display: XDisplay, password_file: Path, *, unix_socket: Path | None = None,
                   port: int | None = None, listen: str = "127.0.0.1", desktop: str | None = None) -> list[str]:
    cmd = ["x11vnc", "-display", display.name, "-auth", str(display.xauthority), "-passwdfile", str(password_file),
           *HARDENING_FLAGS, *CLIPBOARD_OFF_FLAGS]
    if desktop is not None:
        cmd += ["-desktop", desktop]
    if unix_socket is not None:
        # No TCP listener at all: "-rfbport 0" alone still leaves an IPv6 listener on [::]:5900, hence
        # "-rfbportv6 -1". (-localhost would refuse every Unix-socket client: "localhost" != 127.0.0.1.)
        cmd += ["-unixsock", str(unix_socket), "-rfbport", "0", "-rfbportv6", "-1", "-noipv6"]
    elif port is not None:
        # In a container the gateway reaches the VNC server over the enclave's internal network (`listen` is then
        # the container's address or 0.0.0.0; the network, not the listener, keeps everyone else out).
        where = ["-localhost"] if listen in ("127.0.0.1", "localhost") else ["-listen", listen]
        cmd += ["-rfbport", str(port), *where, "-rfbportv6", "-1", "-noipv6"]
    else:
        raise ValueError("x11vnc needs a Unix socket or a port")
    return cmd


def _answers(unix_socket: Path | None, port: int | None, host: str = "127.0.0.1") -> bool:
    try:
        if unix_socket is not None:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(0.5)
                sock.connect(str(unix_socket))
                return sock.recv(12).startswith(b"RFB ")
        with socket.create_connection((host, port), timeout=0.5) as sock:
            return sock.recv(12).startswith(b"RFB ")
    except OSError:
        return False


@dataclass
class VncServer:
    proc: subprocess.Popen
    endpoint: VncEndpoint
    command: list[str]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_group(self.proc)


def start_x11vnc(display: XDisplay, state: Path, log_path: Path, *, port: int | None = None,
                 timeout: float = 15.0, keep_password: bool = False, listen: str = "127.0.0.1",
                 password_from: Path | None = None, desktop: str | None = None) -> VncServer:
    """Start x11vnc with a fresh password (or the current one, when restarting it under a running proxy that read
    the password file already, or the one in `password_from`, which a custodian shares with the gateway when kiosk
    and gateway run in separate containers); returns once it answers with an RFB greeting."""
    vnc_dir = state / "vnc"
    vnc_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(vnc_dir, 0o700)
    password_file = vnc_dir / "password"
    if password_from is not None:
        text = Path(password_from).read_text().strip()
        if len(text) < 8:
            raise RuntimeError(f"{password_from}: a VNC password of at least 8 characters is required")
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text + "\n")
    elif not (keep_password and password_file.is_file()):
        new_password(password_file)
    unix_socket = None if port is not None else vnc_dir / "rfb.sock"
    if unix_socket is not None:
        unix_socket.unlink(missing_ok=True)
    cmd = x11vnc_command(display, password_file, unix_socket=unix_socket, port=port, listen=listen, desktop=desktop)
    proc = spawn(cmd, log_path, env={**display.env(), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                     "HOME": str(vnc_dir)})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"x11vnc exited with {proc.returncode} (see {log_path})")
        host = "127.0.0.1" if listen in ("127.0.0.1", "localhost", "0.0.0.0") else listen
        if (unix_socket is None or unix_socket.exists()) and _answers(unix_socket, port, host):
            upstream = f"unix:{unix_socket}" if unix_socket is not None else f"{host}:{port}"
            return VncServer(proc, VncEndpoint(upstream, password_file), cmd)
        time.sleep(0.05)
    stop_group(proc)
    raise RuntimeError(f"x11vnc did not answer within {timeout:.0f} s (see {log_path})")
