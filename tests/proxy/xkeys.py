"""What the X server itself saw: key events on the root window and the keys held down, over libX11 with ctypes.

    python tests/proxy/xkeys.py listen DISPLAY   prints "ready", then one line per key event:
                                                 "press|release KEYSYM X_TIME_MS MONOTONIC_NS"
    python tests/proxy/xkeys.py listen DISPLAY --buttons
                                                 key and button events with the modifier state X delivered with
                                                 them (1 Shift, 4 Control, 8 Mod1): "press|release|bpress|brelease
                                                 KEYSYM_OR_BUTTON STATE X_TIME_MS MONOTONIC_NS"
    python tests/proxy/xkeys.py held DISPLAY     prints the keycodes currently held down (XQueryKeymap), one line

With no window manager and no windows, the X server's default focus (PointerRoot) delivers keyboard events to the root
window, where this client selects them; other clients (the VNC server) may select them too. The monotonic clock is
the system-wide CLOCK_MONOTONIC, comparable with time.monotonic_ns() in another process on the same machine.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import select
import sys
import time

KEY_PRESS, KEY_RELEASE, BUTTON_PRESS, BUTTON_RELEASE = 2, 3, 4, 5
KEY_PRESS_MASK, KEY_RELEASE_MASK, BUTTON_PRESS_MASK, BUTTON_RELEASE_MASK = 1 << 0, 1 << 1, 1 << 2, 1 << 3


class XKeyEvent(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("serial", ctypes.c_ulong), ("send_event", ctypes.c_int),
                ("display", ctypes.c_void_p), ("window", ctypes.c_ulong), ("root", ctypes.c_ulong),
                ("subwindow", ctypes.c_ulong), ("time", ctypes.c_ulong), ("x", ctypes.c_int), ("y", ctypes.c_int),
                ("x_root", ctypes.c_int), ("y_root", ctypes.c_int), ("state", ctypes.c_uint),
                ("keycode", ctypes.c_uint), ("same_screen", ctypes.c_int)]


class XEvent(ctypes.Union):
    _fields_ = [("type", ctypes.c_int), ("xkey", XKeyEvent), ("pad", ctypes.c_long * 24)]


def _xlib() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("X11") or "libX11.so.6")
    lib.XOpenDisplay.restype = ctypes.c_void_p
    lib.XOpenDisplay.argtypes = [ctypes.c_char_p]
    lib.XDefaultRootWindow.restype = ctypes.c_ulong
    lib.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
    lib.XSelectInput.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_long]
    lib.XFlush.argtypes = [ctypes.c_void_p]
    lib.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.XPending.argtypes = [ctypes.c_void_p]
    lib.XNextEvent.argtypes = [ctypes.c_void_p, ctypes.POINTER(XEvent)]
    lib.XConnectionNumber.argtypes = [ctypes.c_void_p]
    lib.XLookupKeysym.restype = ctypes.c_ulong
    lib.XLookupKeysym.argtypes = [ctypes.POINTER(XKeyEvent), ctypes.c_int]
    lib.XQueryKeymap.argtypes = [ctypes.c_void_p, ctypes.c_char * 32]
    return lib


def _open(lib: ctypes.CDLL, name: str) -> int:
    dpy = lib.XOpenDisplay(name.encode())
    if not dpy:
        sys.exit(f"cannot open display {name}")
    return dpy


def listen(name: str, *flags: str) -> None:
    lib = _xlib()
    dpy = _open(lib, name)
    mask = KEY_PRESS_MASK | KEY_RELEASE_MASK
    if "--buttons" in flags:  # only one client may select button presses on a window; the VNC server does not
        mask |= BUTTON_PRESS_MASK | BUTTON_RELEASE_MASK
    lib.XSelectInput(dpy, lib.XDefaultRootWindow(dpy), mask)
    lib.XSync(dpy, 0)
    print("ready", flush=True)
    fd = lib.XConnectionNumber(dpy)
    event = XEvent()
    while True:
        if not lib.XPending(dpy):
            select.select([fd], [], [], 1.0)
            continue
        lib.XNextEvent(dpy, ctypes.byref(event))
        if event.type in (KEY_PRESS, KEY_RELEASE):
            keysym = lib.XLookupKeysym(ctypes.byref(event.xkey), 0)
            kind = "press" if event.type == KEY_PRESS else "release"
            state = f" {event.xkey.state}" if "--buttons" in flags else ""
            print(f"{kind} {keysym}{state} {event.xkey.time} {time.monotonic_ns()}", flush=True)
        elif event.type in (BUTTON_PRESS, BUTTON_RELEASE):  # XButtonEvent: same layout, `button` where `keycode` is
            kind = "bpress" if event.type == BUTTON_PRESS else "brelease"
            print(f"{kind} {event.xkey.keycode} {event.xkey.state} {event.xkey.time} {time.monotonic_ns()}",
                  flush=True)


def held(name: str) -> None:
    lib = _xlib()
    dpy = _open(lib, name)
    keys = (ctypes.c_char * 32)()
    lib.XQueryKeymap(dpy, keys)
    down = [byte * 8 + bit for byte, value in enumerate(keys.raw) for bit in range(8) if value >> bit & 1]
    print(" ".join(map(str, down)), flush=True)


if __name__ == "__main__":
    {"listen": listen, "held": held}[sys.argv[1]](*sys.argv[2:])
