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
