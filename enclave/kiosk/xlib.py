"""The few Xlib calls the kiosk watchdog needs, through ctypes on the system's libX11.

Why not xdotool or python-xlib: the watchdog polls several times a second for as long as a session lasts, so one
long-lived X connection is cheaper and steadier than a subprocess per poll, and libX11 is already on every machine
that runs Xvfb, so no new Python dependency is needed. X errors are expected here (a window can vanish between
listing and inspecting it), so a non-fatal error handler replaces Xlib's default one, which would exit the process.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_lib_name = ctypes.util.find_library("X11") or "libX11.so.6"
_x11 = ctypes.CDLL(_lib_name)
# Connections are used from worker threads (the watchdog runs its X calls in asyncio.to_thread, a test or a status
# command may look at the display meanwhile); Xlib is thread-safe only when this is its first call.
_x11.XInitThreads()

Window = ctypes.c_ulong
Atom = ctypes.c_ulong
_Display_p = ctypes.c_void_p

IS_VIEWABLE = 2
CLIENT_MESSAGE = 33
NO_EVENT_MASK = 0
REVERT_TO_PARENT = 2
CURRENT_TIME = 0
ANY_PROPERTY_TYPE = 0
SUCCESS = 0


class XWindowAttributes(ctypes.Structure):
    _fields_ = [
        ("x", ctypes.c_int), ("y", ctypes.c_int), ("width", ctypes.c_int), ("height", ctypes.c_int),
        ("border_width", ctypes.c_int), ("depth", ctypes.c_int), ("visual", ctypes.c_void_p), ("root", Window),
        ("class_", ctypes.c_int), ("bit_gravity", ctypes.c_int), ("win_gravity", ctypes.c_int),
        ("backing_store", ctypes.c_int), ("backing_planes", ctypes.c_ulong), ("backing_pixel", ctypes.c_ulong),
        ("save_under", ctypes.c_int), ("colormap", ctypes.c_ulong), ("map_installed", ctypes.c_int),
        ("map_state", ctypes.c_int), ("all_event_masks", ctypes.c_long), ("your_event_mask", ctypes.c_long),
        ("do_not_propagate_mask", ctypes.c_long), ("override_redirect", ctypes.c_int), ("screen", ctypes.c_void_p),
    ]


class XClassHint(ctypes.Structure):
    _fields_ = [("res_name", ctypes.c_void_p), ("res_class", ctypes.c_void_p)]


class XClientMessageEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int), ("serial", ctypes.c_ulong), ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p), ("window", Window), ("message_type", Atom), ("format", ctypes.c_int),
        ("data", ctypes.c_long * 5),
    ]


class XKeyEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int), ("serial", ctypes.c_ulong), ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p), ("window", Window), ("root", Window), ("subwindow", Window),
        ("time", ctypes.c_ulong), ("x", ctypes.c_int), ("y", ctypes.c_int), ("x_root", ctypes.c_int),
        ("y_root", ctypes.c_int), ("state", ctypes.c_uint), ("keycode", ctypes.c_uint), ("same_screen", ctypes.c_int),
    ]


class XEvent(ctypes.Union):
    _fields_ = [("type", ctypes.c_int), ("xclient", XClientMessageEvent), ("xkey", XKeyEvent),
                ("pad", ctypes.c_long * 24)]


KEY_PRESS = 2
GRAB_MODE_ASYNC = 1
# Core modifier bits: Shift, Lock, Control, Mod1 (Alt), Mod2 (NumLock), Mod3, Mod4 (Super), Mod5 (AltGr).
MODIFIER_BITS = {"Shift": 1, "Lock": 2, "Ctrl": 4, "Alt": 8, "Mod2": 16, "Mod3": 32, "Super": 64, "Mod5": 128}


_ERROR_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_IO_ERROR_EXIT_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_IO_ERROR_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

_x11.XSetAuthorization.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
_x11.XOpenDisplay.restype = _Display_p
_x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
_x11.XCloseDisplay.argtypes = [_Display_p]
_x11.XDefaultRootWindow.restype = Window
_x11.XDefaultRootWindow.argtypes = [_Display_p]
_x11.XQueryTree.argtypes = [_Display_p, Window, ctypes.POINTER(Window), ctypes.POINTER(Window),
                            ctypes.POINTER(ctypes.POINTER(Window)), ctypes.POINTER(ctypes.c_uint)]
_x11.XGetWindowAttributes.argtypes = [_Display_p, Window, ctypes.POINTER(XWindowAttributes)]
_x11.XGetClassHint.argtypes = [_Display_p, Window, ctypes.POINTER(XClassHint)]
_x11.XFetchName.argtypes = [_Display_p, Window, ctypes.POINTER(ctypes.c_void_p)]
_x11.XFree.argtypes = [ctypes.c_void_p]
_x11.XInternAtom.restype = Atom
_x11.XInternAtom.argtypes = [_Display_p, ctypes.c_char_p, ctypes.c_int]
_x11.XGetWindowProperty.argtypes = [
    _Display_p, Window, Atom, ctypes.c_long, ctypes.c_long, ctypes.c_int, Atom, ctypes.POINTER(Atom),
    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_ulong), ctypes.POINTER(ctypes.c_ulong),
    ctypes.POINTER(ctypes.c_void_p)]
_x11.XSendEvent.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_long, ctypes.POINTER(XEvent)]
_x11.XMoveResizeWindow.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
_x11.XRaiseWindow.argtypes = [_Display_p, Window]
_x11.XSetInputFocus.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_ulong]
_x11.XKillClient.argtypes = [_Display_p, ctypes.c_ulong]
_x11.XSync.argtypes = [_Display_p, ctypes.c_int]
_x11.XGrabKey.argtypes = [_Display_p, ctypes.c_int, ctypes.c_uint, Window, ctypes.c_int, ctypes.c_int, ctypes.c_int]
_x11.XPending.argtypes = [_Display_p]
_x11.XNextEvent.argtypes = [_Display_p, ctypes.POINTER(XEvent)]
_x11.XSetErrorHandler.restype = ctypes.c_void_p
_x11.XSetErrorHandler.argtypes = [_ERROR_HANDLER]
_x11.XSetIOErrorExitHandler.argtypes = [_Display_p, _IO_ERROR_EXIT_HANDLER, ctypes.c_void_p]
_x11.XSetIOErrorExitHandler.restype = None
_x11.XSetIOErrorHandler.argtypes = [_IO_ERROR_HANDLER]
_x11.XSetIOErrorHandler.restype = ctypes.c_void_p
_x11.XDisplayWidth.argtypes = [_Display_p, ctypes.c_int]
_x11.XDisplayHeight.argtypes = [_Display_p, ctypes.c_int]


class XImage(ctypes.Structure):
    """The leading fields of Xlib's XImage (the function table after them is not needed)."""

    _fields_ = [("width", ctypes.c_int), ("height", ctypes.c_int), ("xoffset", ctypes.c_int),
                ("format", ctypes.c_int), ("data", ctypes.c_void_p), ("byte_order", ctypes.c_int),
                ("bitmap_unit", ctypes.c_int), ("bitmap_bit_order", ctypes.c_int), ("bitmap_pad", ctypes.c_int),
                ("depth", ctypes.c_int), ("bytes_per_line", ctypes.c_int), ("bits_per_pixel", ctypes.c_int)]


Z_PIXMAP = 2
ALL_PLANES = 0xFFFFFFFF
_x11.XGetImage.restype = ctypes.POINTER(XImage)
_x11.XGetImage.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_ulong, ctypes.c_int]
_x11.XDestroyImage.argtypes = [ctypes.POINTER(XImage)]
_x11.XCreateSimpleWindow.restype = Window
_x11.XCreateSimpleWindow.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_ulong, ctypes.c_ulong]
_x11.XMapWindow.argtypes = [_Display_p, Window]
_x11.XStoreName.argtypes = [_Display_p, Window, ctypes.c_char_p]

# XKB (part of libX11): the keyboard controls behind StickyKeys and the other AccessX features.
XKB_USE_CORE_KBD = 0x0100
XKB_ALL_COMPONENTS_MASK = 0x7F
XKB_ALL_CONTROLS = 0xF8001FFF  # XkbAllControlsMask
XKB_CONTROLS = {  # XKB's boolean controls (XkbRepeatKeysMask ...), by the names xkbcomp and the XKB spec use
    "RepeatKeys": 1 << 0, "SlowKeys": 1 << 1, "BounceKeys": 1 << 2, "StickyKeys": 1 << 3, "MouseKeys": 1 << 4,
    "MouseKeysAccel": 1 << 5, "AccessXKeys": 1 << 6, "AccessXTimeout": 1 << 7, "AccessXFeedback": 1 << 8,
    "AudibleBell": 1 << 9, "Overlay1": 1 << 10, "Overlay2": 1 << 11, "IgnoreGroupLock": 1 << 12,
}
# What no kiosk keyboard may have on: each changes what later keys mean for everyone on the display (StickyKeys turns
# a tapped Ctrl into a held one, MouseKeys turns keys into clicks, SlowKeys/BounceKeys swallow keys, AccessXKeys
# switches these on from the keyboard, Overlay1/2 remap keys).
ACCESSX_CONTROLS = sum(XKB_CONTROLS[name] for name in (
    "SlowKeys", "BounceKeys", "StickyKeys", "MouseKeys", "MouseKeysAccel", "AccessXKeys", "AccessXTimeout",
    "AccessXFeedback", "Overlay1", "Overlay2"))


class XkbModsRec(ctypes.Structure):
    _fields_ = [("mask", ctypes.c_ubyte), ("real_mods", ctypes.c_ubyte), ("vmods", ctypes.c_ushort)]


class XkbControlsRec(ctypes.Structure):
    """The leading fields of Xlib's XkbControlsRec, up to the enabled controls."""

    _fields_ = [("mk_dflt_btn", ctypes.c_ubyte), ("num_groups", ctypes.c_ubyte), ("groups_wrap", ctypes.c_ubyte),
                ("internal", XkbModsRec), ("ignore_lock", XkbModsRec), ("enabled_ctrls", ctypes.c_uint)]


class XkbAnyAction(ctypes.Structure):
    _fields_ = [("type", ctypes.c_ubyte), ("data", ctypes.c_ubyte * 7)]


class XkbSymInterpretRec(ctypes.Structure):
    """One rule of the compatibility map: which action a key gets when it carries `sym`."""

    _fields_ = [("sym", ctypes.c_ulong), ("flags", ctypes.c_ubyte), ("match", ctypes.c_ubyte),
                ("mods", ctypes.c_ubyte), ("virtual_mod", ctypes.c_ubyte), ("act", XkbAnyAction)]


class XkbCompatMapRec(ctypes.Structure):
    _fields_ = [("sym_interpret", ctypes.POINTER(XkbSymInterpretRec)), ("groups", XkbModsRec * 4),
                ("num_si", ctypes.c_ushort), ("size_si", ctypes.c_ushort)]


class XkbServerMapRec(ctypes.Structure):
    """The leading fields of Xlib's XkbServerMapRec: the actions the keys carry."""

    _fields_ = [("num_acts", ctypes.c_ushort), ("size_acts", ctypes.c_ushort), ("acts", ctypes.POINTER(XkbAnyAction))]


class XkbDescRec(ctypes.Structure):
    """The leading fields of Xlib's XkbDescRec, up to the compatibility map."""

    _fields_ = [("dpy", ctypes.c_void_p), ("flags", ctypes.c_ushort), ("device_spec", ctypes.c_ushort),
                ("min_key_code", ctypes.c_ubyte), ("max_key_code", ctypes.c_ubyte),
                ("ctrls", ctypes.POINTER(XkbControlsRec)), ("server", ctypes.POINTER(XkbServerMapRec)),
                ("map", ctypes.c_void_p), ("indicators", ctypes.c_void_p), ("names", ctypes.c_void_p),
                ("compat", ctypes.POINTER(XkbCompatMapRec))]


# XKB key actions a kiosk key may carry: modifiers and groups (set, latch, lock) and none. Everything else acts on the
# server or on everyone's input: Terminate (0x0c) ends the X server, LockControls/SetControls (0x0f/0x0e) switch
# StickyKeys, MouseKeys and the like on, ISOLock (0x0b) may change controls, pointer actions (0x07-0x0a) click,
# SwitchScreen (0x0d), RedirectKey (0x11), device actions (0x12-0x14) and private ones (0x86: XFree86's grab-breaking
# and mode-switching actions) have no business on a kiosk.
XKB_ALLOWED_ACTIONS = frozenset(range(0, 7))
XKB_SYM_INTERP_MASK = 1 << 0
XKB_ALL_COMPAT_MASK = 0x3
XKB_KEY_ACTIONS_MASK = 1 << 4


_x11.XkbAllocKeyboard.restype = ctypes.POINTER(XkbDescRec)
_x11.XkbAllocKeyboard.argtypes = []
_x11.XkbGetControls.argtypes = [_Display_p, ctypes.c_ulong, ctypes.POINTER(XkbDescRec)]
_x11.XkbFreeKeyboard.argtypes = [ctypes.POINTER(XkbDescRec), ctypes.c_uint, ctypes.c_int]
_x11.XkbGetCompatMap.argtypes = [_Display_p, ctypes.c_uint, ctypes.POINTER(XkbDescRec)]
_x11.XkbSetCompatMap.argtypes = [_Display_p, ctypes.c_uint, ctypes.POINTER(XkbDescRec), ctypes.c_int]
_x11.XkbGetMap.restype = ctypes.POINTER(XkbDescRec)
_x11.XkbGetMap.argtypes = [_Display_p, ctypes.c_uint, ctypes.c_uint]
_x11.XkbChangeEnabledControls.argtypes = [_Display_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint]
_x11.XKeysymToKeycode.restype = ctypes.c_ubyte
_x11.XKeysymToKeycode.argtypes = [_Display_p, ctypes.c_ulong]
_x11.XQueryKeymap.argtypes = [_Display_p, ctypes.c_char * 32]

# XTEST (libXtst, a dependency of x11vnc): the watchdog's own key presses, e.g. closing a tab that must not show.
try:
    _xtst: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("Xtst") or "libXtst.so.6")
    _xtst.XTestFakeKeyEvent.argtypes = [_Display_p, ctypes.c_uint, ctypes.c_int, ctypes.c_ulong]
except OSError:
    _xtst = None


class XDeviceInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_ulong), ("type", Atom), ("name", ctypes.c_char_p), ("num_classes", ctypes.c_int),
                ("use", ctypes.c_int), ("inputclassinfo", ctypes.c_void_p)]


IS_X_KEYBOARD = 1  # XInput's "use" of the core keyboard
IS_X_EXTENSION_KEYBOARD = 3  # ... and of the keyboards attached to it (XInput 1 view of XInput 2 slaves)
# XInput (libXi, a dependency of x11vnc and Chromium): the list of keyboard devices.
try:
    _xi: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("Xi") or "libXi.so.6")
    _xi.XListInputDevices.restype = ctypes.POINTER(XDeviceInfo)
    _xi.XListInputDevices.argtypes = [_Display_p, ctypes.POINTER(ctypes.c_int)]
    _xi.XFreeDeviceList.argtypes = [ctypes.POINTER(XDeviceInfo)]
except OSError:
    _xi = None


@_ERROR_HANDLER
def _ignore_errors(_display: int, _event: int) -> int:
    """BadWindow and friends are normal when windows come and go; the caller checks return values instead."""
    return 0


_x11.XSetErrorHandler(_ignore_errors)

# Connections whose X server went away. Xlib's default reaction to a lost connection is exit(), which would take the
# whole `safeshare up` process down with one kiosk's X server; with an exit handler that returns, Xlib calls on that
# connection fail instead, and `XConnection` turns that into XError.
_dead: set[int] = set()


@_IO_ERROR_HANDLER
def _io_error(display: int) -> int:
    _dead.add(display)  # Xlib's default handler would print and exit here
    return 0


@_IO_ERROR_EXIT_HANDLER
def _connection_lost(display: int, _data: int) -> None:
    _dead.add(display)


_x11.XSetIOErrorHandler(_io_error)

_open_lock = threading.Lock()
COOKIE_NAME = b"MIT-MAGIC-COOKIE-1"


class XError(RuntimeError):
    """The X display could not be opened (the X server is gone or refuses us)."""


@dataclass(frozen=True)
class TopLevel:
    """A direct child of the root window, as the watchdog judges it."""

    window: int
    viewable: bool
    override_redirect: bool
    x: int
    y: int
    width: int
    height: int
    res_name: str
    res_class: str
    title: str
    pid: int | None


class XConnection:
    """One X client connection; not thread-safe, so one owner calls it at a time."""

    def __init__(self, display: str, cookie: bytes | None = None) -> None:
        """`cookie` is the display's MIT-MAGIC-COOKIE-1; set only for this open, so that several kiosks in one
        process each use their own and the process environment (XAUTHORITY) is left alone."""
        with _open_lock:
            if cookie is not None:
                _x11.XSetAuthorization(COOKIE_NAME, len(COOKIE_NAME), cookie, len(cookie))
            try:
                self._dpy = _x11.XOpenDisplay(display.encode())
            finally:
                if cookie is not None:
                    _x11.XSetAuthorization(None, 0, None, 0)
        if not self._dpy:
            raise XError(f"cannot open X display {display}")
        # Xlib may hand out the address of a connection that died and was freed before: a fresh one is alive.
        _dead.discard(self._dpy)
        _x11.XSetIOErrorExitHandler(self._dpy, _connection_lost, None)
        self.root = _x11.XDefaultRootWindow(self._dpy)
        self._atoms: dict[str, int] = {}

    def close(self) -> None:
        if self._dpy:
            if self._dpy in _dead:
                _dead.discard(self._dpy)  # the connection is gone; XCloseDisplay would only fail again
            else:
                _x11.XCloseDisplay(self._dpy)
                # Closing may itself find the server gone (the handler records the address), and the freed
                # address can come back from the next XOpenDisplay: never leave it marked dead.
                _dead.discard(self._dpy)
            self._dpy = None

    def check(self) -> None:
        """Raise XError if the X server connection was lost (its server died or disconnected us)."""
        if not self._dpy or self._dpy in _dead:
            raise XError("the X server connection is lost")

    def __enter__(self) -> "XConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def atom(self, name: str) -> int:
        if name not in self._atoms:
            self._atoms[name] = _x11.XInternAtom(self._dpy, name.encode(), 0)
        return self._atoms[name]

    def screen_size(self) -> tuple[int, int]:
        return _x11.XDisplayWidth(self._dpy, 0), _x11.XDisplayHeight(self._dpy, 0)

    def children(self, window: int | None = None) -> list[int]:
        """Children of a window, bottom to top in stacking order."""
        root_ret, parent_ret = Window(), Window()
        kids = ctypes.POINTER(Window)()
        count = ctypes.c_uint()
        if not _x11.XQueryTree(self._dpy, window or self.root, ctypes.byref(root_ret), ctypes.byref(parent_ret),
                               ctypes.byref(kids), ctypes.byref(count)):
            return []
        try:
            return [kids[i] for i in range(count.value)]
        finally:
            if kids:
                _x11.XFree(kids)

    def describe(self, window: int) -> TopLevel | None:
        """Attributes, class, title and pid of a window; None when it vanished meanwhile."""
        attrs = XWindowAttributes()
        if not _x11.XGetWindowAttributes(self._dpy, window, ctypes.byref(attrs)):
            return None
        res_name = res_class = ""
        hint = XClassHint()
        if _x11.XGetClassHint(self._dpy, window, ctypes.byref(hint)):
            res_name = ctypes.string_at(hint.res_name).decode(errors="replace") if hint.res_name else ""
            res_class = ctypes.string_at(hint.res_class).decode(errors="replace") if hint.res_class else ""
            for pointer in (hint.res_name, hint.res_class):
                if pointer:
                    _x11.XFree(pointer)
        return TopLevel(window, attrs.map_state == IS_VIEWABLE, bool(attrs.override_redirect), attrs.x, attrs.y,
                        attrs.width, attrs.height, res_name, res_class, self.title(window),
                        self._cardinal(window, "_NET_WM_PID"))

    def top_levels(self) -> list[TopLevel]:
        """Every child of the root window that still exists, bottom to top."""
        self.check()
        out = []
        for window in self.children():
            info = self.describe(window)
            if info is not None:
                out.append(info)
        self.check()
        return out

    def title(self, window: int) -> str:
        """_NET_WM_NAME (UTF-8) if set, else WM_NAME: Chromium sets both to the page title plus " - Chromium"."""
        data = self._property(window, "_NET_WM_NAME", self.atom("UTF8_STRING"))
        if data is not None:
            return data.decode(errors="replace")
        name = ctypes.c_void_p()
        if _x11.XFetchName(self._dpy, window, ctypes.byref(name)) and name.value:
            try:
                return ctypes.string_at(name.value).decode("latin-1")
            finally:
                _x11.XFree(name)
        return ""

    def _property(self, window: int, name: str, req_type: int) -> bytes | None:
        actual_type, actual_format = Atom(), ctypes.c_int()
        nitems, after = ctypes.c_ulong(), ctypes.c_ulong()
        data = ctypes.c_void_p()
        status = _x11.XGetWindowProperty(self._dpy, window, self.atom(name), 0, 1 << 16, 0, req_type,
                                         ctypes.byref(actual_type), ctypes.byref(actual_format), ctypes.byref(nitems),
                                         ctypes.byref(after), ctypes.byref(data))
        if status != SUCCESS or not data.value:
            return None
        try:
            if actual_type.value == 0:
                return None
            unit = {8: 1, 16: ctypes.sizeof(ctypes.c_short), 32: ctypes.sizeof(ctypes.c_long)}[actual_format.value]
            return ctypes.string_at(data.value, nitems.value * unit)
        finally:
            _x11.XFree(data)

    def _cardinal(self, window: int, name: str) -> int | None:
        data = self._property(window, name, ANY_PROPERTY_TYPE)
        if not data or len(data) < ctypes.sizeof(ctypes.c_long):
            return None
        return ctypes.c_long.from_buffer_copy(data[:ctypes.sizeof(ctypes.c_long)]).value

    def supports_delete(self, window: int) -> bool:
        """Whether the window lists WM_DELETE_WINDOW in WM_PROTOCOLS (a polite close would be understood)."""
        data = self._property(window, "WM_PROTOCOLS", ANY_PROPERTY_TYPE)
        if not data:
            return False
        size = ctypes.sizeof(ctypes.c_long)
        atoms = {ctypes.c_ulong.from_buffer_copy(data[i:i + size]).value for i in range(0, len(data), size)}
        return self.atom("WM_DELETE_WINDOW") in atoms

    def request_close(self, window: int) -> None:
        """Ask the window's client to close it, as a window manager's close button does (ICCCM WM_DELETE_WINDOW)."""
        event = XEvent()
        event.xclient.type = CLIENT_MESSAGE
        event.xclient.window = window
        event.xclient.message_type = self.atom("WM_PROTOCOLS")
        event.xclient.format = 32
        event.xclient.data[0] = self.atom("WM_DELETE_WINDOW")
        event.xclient.data[1] = CURRENT_TIME
        _x11.XSendEvent(self._dpy, window, 0, NO_EVENT_MASK, ctypes.byref(event))
        self.sync()

    def kill_client(self, window: int) -> None:
        """Disconnect the X client that owns the window: the last resort for a window that ignores a close."""
        _x11.XKillClient(self._dpy, window)
        self.sync()

    def move_resize(self, window: int, x: int, y: int, width: int, height: int) -> None:
        _x11.XMoveResizeWindow(self._dpy, window, x, y, width, height)
        self.sync()

    def raise_and_focus(self, window: int) -> None:
        _x11.XRaiseWindow(self._dpy, window)
        _x11.XSetInputFocus(self._dpy, window, REVERT_TO_PARENT, CURRENT_TIME)
        self.sync()

    def create_test_window(self, title: str, width: int = 200, height: int = 150) -> int:
        """A plain top-level window from this connection (tests use it as a foreign window to be closed)."""
        window = _x11.XCreateSimpleWindow(self._dpy, self.root, 20, 20, width, height, 0, 0, 0xFFFFFF)
        _x11.XStoreName(self._dpy, window, title.encode())
        _x11.XMapWindow(self._dpy, window)
        self.sync()
        return window

    def screenshot(self) -> tuple[int, int, bytes]:
        """The root window as (width, height, rows of 4-byte pixels in the server's order, BGRX on Xvfb at depth
        24): what the display shows, for checking what a VNC client received against the screen itself."""
        self.check()
        width, height = self.screen_size()
        image = _x11.XGetImage(self._dpy, self.root, 0, 0, width, height, ALL_PLANES, Z_PIXMAP)
        self.check()
        if not image:
            raise XError("XGetImage failed")
        try:
            info = image.contents
            if info.bits_per_pixel != 32:
                raise XError(f"unexpected {info.bits_per_pixel} bits per pixel")
            raw = ctypes.string_at(info.data, info.bytes_per_line * height)
            stride = info.bytes_per_line
        finally:
            _x11.XDestroyImage(image)
        if stride != width * 4:
            raw = b"".join(raw[row * stride:row * stride + width * 4] for row in range(height))
        return width, height, raw

    def keyboards(self) -> list[int]:
        """Ids of every keyboard device of the server (XInput): the core keyboard and its slaves, among them the XTEST
        keyboard a VNC server types with. Each has its own XKB keymap, controls and compatibility map, and the core
        keyboard takes over the keymap of whichever slave typed last, so all of them must be made safe."""
        self.check()
        if _xi is None:  # the core keyboard alone would leave the XTEST keyboard, the one a VNC server uses, unchecked
            raise XError("libXi (XInput) is not installed: the display's keyboards cannot be listed")
        count = ctypes.c_int()
        devices = _xi.XListInputDevices(self._dpy, ctypes.byref(count))
        if not devices:
            raise XError("XListInputDevices failed (no XInputExtension?)")
        try:
            return [int(devices[i].id) for i in range(count.value) if devices[i].use in (IS_X_KEYBOARD,
                                                                                          IS_X_EXTENSION_KEYBOARD)]
        finally:
            _xi.XFreeDeviceList(devices)

    @contextmanager
    def _xkb_keyboard(self, device: int) -> Iterator:
        """A keyboard description for `device` that the server's replies are read into, freed afterwards."""
        self.check()
        desc = _x11.XkbAllocKeyboard()
        if not desc:
            raise XError("XkbAllocKeyboard failed")
        try:
            desc.contents.device_spec = device
            yield desc
        finally:
            _x11.XkbFreeKeyboard(desc, XKB_ALL_COMPONENTS_MASK, 1)

    def _read_compat_map(self, desc) -> XkbCompatMapRec:
        if _x11.XkbGetCompatMap(self._dpy, XKB_ALL_COMPAT_MASK, desc) != SUCCESS or not desc.contents.compat:
            raise XError("XkbGetCompatMap failed (no XKEYBOARD extension?)")
        return desc.contents.compat.contents

    def xkb_enabled_controls(self, device: int = XKB_USE_CORE_KBD) -> int:
        """The XKB boolean controls that are on for `device` (a mask of XKB_CONTROLS values)."""
        with self._xkb_keyboard(device) as desc:
            if _x11.XkbGetControls(self._dpy, XKB_ALL_CONTROLS, desc) != SUCCESS or not desc.contents.ctrls:
                raise XError("XkbGetControls failed (no XKEYBOARD extension?)")
            return int(desc.contents.ctrls.contents.enabled_ctrls)

    def xkb_disable_controls(self, mask: int, device: int = XKB_USE_CORE_KBD) -> None:
        """Switch the XKB boolean controls in `mask` off for `device`."""
        self.check()
        if not _x11.XkbChangeEnabledControls(self._dpy, device, mask, 0):
            raise XError("XkbChangeEnabledControls failed (no XKEYBOARD extension?)")
        self.sync()

    def xkb_disarm_compat_map(self, device: int = XKB_USE_CORE_KBD) -> int:
        """Turn every rule of the server's compatibility map that would give a key an action outside
        XKB_ALLOWED_ACTIONS into "no action", and have the server recompute the actions of all keys. A keysym that a
        VNC server later adds to the keymap (e.g. Terminate_Server, StickyKeys_Enable) then does nothing. Returns how
        many rules were changed."""
        with self._xkb_keyboard(device) as desc:
            compat = self._read_compat_map(desc)
            changed = 0
            for i in range(compat.num_si):
                action = compat.sym_interpret[i].act
                if action.type not in XKB_ALLOWED_ACTIONS:
                    action.type = 0
                    ctypes.memset(action.data, 0, 7)
                    changed += 1
            if not _x11.XkbSetCompatMap(self._dpy, XKB_SYM_INTERP_MASK, desc, 1):
                raise XError("XkbSetCompatMap failed")
            self.sync()
            return changed

    def xkb_armed_actions(self, device: int = XKB_USE_CORE_KBD) -> list[str]:
        """What could still act on the server: action types outside XKB_ALLOWED_ACTIONS in the compatibility map's
        rules (as "interpret 0xKEYSYM: 0xTYPE") and on the keys themselves (as "key action 0xTYPE")."""
        with self._xkb_keyboard(device) as desc:
            compat = self._read_compat_map(desc)
            found = [f"interpret 0x{compat.sym_interpret[i].sym:x}: 0x{compat.sym_interpret[i].act.type:02x}"
                     for i in range(compat.num_si) if compat.sym_interpret[i].act.type not in XKB_ALLOWED_ACTIONS]
        keymap = _x11.XkbGetMap(self._dpy, XKB_KEY_ACTIONS_MASK, device)
        if not keymap or not keymap.contents.server:
            raise XError("XkbGetMap failed (no XKEYBOARD extension?)")
        try:
            server = keymap.contents.server.contents
            found += [f"key action 0x{server.acts[i].type:02x}" for i in range(server.num_acts)
                      if server.acts[i].type not in XKB_ALLOWED_ACTIONS]
        finally:
            _x11.XkbFreeKeyboard(keymap, XKB_ALL_COMPONENTS_MASK, 1)
        return found

    def pressed_keycodes(self) -> list[int]:
        """Keycodes the X server believes are held down now (XQueryKeymap)."""
        self.check()
        bits = (ctypes.c_char * 32)()
        _x11.XQueryKeymap(self._dpy, bits)
        raw = bytes(bits)
        return [byte * 8 + bit for byte in range(32) for bit in range(8) if raw[byte] >> bit & 1]

    def keycode(self, keysym: int) -> int:
        """The keycode that produces `keysym` in the current keymap, 0 if none does."""
        return int(_x11.XKeysymToKeycode(self._dpy, keysym))

    def release_keys(self) -> list[int]:
        """Release (XTEST) every key the server believes is held down; returns their keycodes."""
        self.check()
        held = self.pressed_keycodes()
        if _xtst is None or not held:
            return held if _xtst is not None else []
        for code in held:
            _xtst.XTestFakeKeyEvent(self._dpy, code, 0, CURRENT_TIME)
        self.sync()
        return held

    def grab_key(self, keysym: int, modifier_sets: list[int]) -> bool:
        """Passive grabs on the root window for `keysym` with each of the modifier masks: the key pressed with one of
        them goes to this connection instead of the focused window (as a window manager's global shortcuts do).
        False if no key produces the keysym."""
        self.check()
        code = self.keycode(keysym)
        if not code:
            return False
        for mask in modifier_sets:
            _x11.XGrabKey(self._dpy, code, mask, self.root, 0, GRAB_MODE_ASYNC, GRAB_MODE_ASYNC)
        self.sync()
        return True

    def grabbed_presses(self) -> list[tuple[int, int]]:
        """(keycode, modifier state) of every grabbed key press that arrived since the last call (the queue is
        drained: releases and anything else are discarded)."""
        self.check()
        presses = []
        event = XEvent()
        while _x11.XPending(self._dpy):
            _x11.XNextEvent(self._dpy, ctypes.byref(event))
            if event.type == KEY_PRESS:
                presses.append((int(event.xkey.keycode), int(event.xkey.state)))
        self.check()
        return presses

    def send_keys(self, *keysyms: int) -> bool:
        """Press `keysyms` in order and release them in reverse (XTEST), e.g. Control_L, w for Ctrl+W.
        False when XTEST or a keysym's key is missing (nothing is sent then)."""
        self.check()
        if _xtst is None:
            return False
        codes = [self.keycode(sym) for sym in keysyms]
        if not all(codes):
            return False
        for code in codes:
            _xtst.XTestFakeKeyEvent(self._dpy, code, 1, CURRENT_TIME)
        for code in reversed(codes):
            _xtst.XTestFakeKeyEvent(self._dpy, code, 0, CURRENT_TIME)
        self.sync()
        return True

    def sync(self) -> None:
        self.check()
        _x11.XSync(self._dpy, 0)
        self.check()
