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


class XEvent(ctypes.Union):
    _fields_ = [("xclient", XClientMessageEvent), ("pad", ctypes.c_long * 24)]


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

    def sync(self) -> None:
        self.check()
        _x11.XSync(self._dpy, 0)
        self.check()
