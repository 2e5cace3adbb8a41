"""Clipboard-off settings for the VNC servers an enclave may run, kept next to the proxy that relies on them.

The proxy drops cut text in both directions on its own; the server being configured off as well is the second of
the two independent layers DESIGN.md asks for (the third is the browser policy). The enclave's kiosk builds its
VNC server command line from these, and the proxy tests check that they keep the X selection untouched.
"""
from __future__ import annotations

# x11vnc: -nosel turns off all selection exchange; the others are belt and braces should -nosel change meaning.
SAFE_X11VNC_FLAGS: tuple[str, ...] = (
    "-nosel", "-noprimary", "-nosetprimary", "-noclipboard", "-nosetclipboard",
)

# TigerVNC (Xvnc / x0vncserver) parameters with the same effect.
SAFE_TIGERVNC_PARAMS: tuple[str, ...] = (
    "-AcceptCutText=0", "-SendCutText=0", "-SendPrimary=0", "-SetPrimary=0", "-MaxCutText=0",
)


def x11vnc_command(display: str, *, port: int | None = None, unix_socket: str | None = None,
                   rfbauth_file: str | None = None) -> list[str]:
    """x11vnc listening on localhost (or a Unix socket only), clipboard off, password from an rfbauth file."""
    cmd = ["x11vnc", "-display", display, "-shared", "-forever", "-quiet", "-noxrecord"]
    if unix_socket is not None:
        # -rfbport 0 alone still opens [::]:5900 (IPv6 on every interface); -rfbportv6 -1 closes it. -localhost would
        # turn Unix-socket clients away, so it is only used with a TCP port.
        cmd += ["-unixsock", unix_socket, "-rfbport", "0", "-rfbportv6", "-1"]
    elif port is not None:
        cmd += ["-localhost", "-rfbport", str(port)]
    else:
        raise ValueError("x11vnc needs a port or a Unix socket")
    cmd += ["-rfbauth", rfbauth_file] if rfbauth_file else ["-nopw"]
    return cmd + list(SAFE_X11VNC_FLAGS)
