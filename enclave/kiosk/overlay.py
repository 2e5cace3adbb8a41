"""A shaped, click-through X window over everything on the kiosk display, and text rendered with the X server's font.

The kiosk's display has no compositor, so a window cannot be partly transparent. What X does offer is the SHAPE
extension: a window's *bounding* shape says which of its pixels exist at all (everything else shows what lies
below, untouched), and its *input* shape says which pixels take pointer events. The overlay is an override-redirect
window (no window manager, no focus, the watchdog leaves it alone) the size of the screen whose bounding shape is a
1-bit mask and whose input shape is empty: it paints its background colour on the mask's pixels only, and every
click and motion goes to the window below, as if it were not there. Keys never reach it (it never takes the focus).

Text is drawn by the X server itself into a 1-bit pixmap with its built-in "fixed" font (6x13, Latin-1, compiled
into every X server, so the kiosk image needs no font package and Python no imaging library) and read back as a numpy
array; enclave/kiosk/watermark.py makes the mask from it. The calls go through the same libX11 as xlib.py, on one of
its XConnections, so they share its error handling (a vanished window is a failed call, never an exit).
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

from enclave.kiosk.xlib import Window, XConnection, XError, XImage, XWindowAttributes, Z_PIXMAP, _x11

FONT = b"fixed"
OVERLAY_NAME = "safeshare watermark"  # the overlay window's WM_NAME (tests tell it from a menu by it)
SHAPE_BOUNDING, SHAPE_INPUT = 0, 2
SHAPE_SET = 0
UNSORTED = 0
INPUT_OUTPUT = 1
COPY_FROM_PARENT = 0
CW_BACK_PIXEL = 1 << 1
CW_BORDER_PIXEL = 1 << 3
CW_OVERRIDE_REDIRECT = 1 << 9
LSB_FIRST = 0
TRUE_COLOR = 4

_Display_p = ctypes.c_void_p
Pixmap = ctypes.c_ulong
_GC = ctypes.c_void_p


class XSetWindowAttributes(ctypes.Structure):
    _fields_ = [("background_pixmap", Pixmap), ("background_pixel", ctypes.c_ulong), ("border_pixmap", Pixmap),
                ("border_pixel", ctypes.c_ulong), ("bit_gravity", ctypes.c_int), ("win_gravity", ctypes.c_int),
                ("backing_store", ctypes.c_int), ("backing_planes", ctypes.c_ulong),
                ("backing_pixel", ctypes.c_ulong), ("save_under", ctypes.c_int), ("event_mask", ctypes.c_long),
                ("do_not_propagate_mask", ctypes.c_long), ("override_redirect", ctypes.c_int),
                ("colormap", ctypes.c_ulong), ("cursor", ctypes.c_ulong)]


class XCharStruct(ctypes.Structure):
    _fields_ = [("lbearing", ctypes.c_short), ("rbearing", ctypes.c_short), ("width", ctypes.c_short),
                ("ascent", ctypes.c_short), ("descent", ctypes.c_short), ("attributes", ctypes.c_ushort)]


class XFontStruct(ctypes.Structure):
    _fields_ = [("ext_data", ctypes.c_void_p), ("fid", ctypes.c_ulong), ("direction", ctypes.c_uint),
                ("min_char_or_byte2", ctypes.c_uint), ("max_char_or_byte2", ctypes.c_uint),
                ("min_byte1", ctypes.c_uint), ("max_byte1", ctypes.c_uint), ("all_chars_exist", ctypes.c_int),
                ("default_char", ctypes.c_uint), ("n_properties", ctypes.c_int), ("properties", ctypes.c_void_p),
                ("min_bounds", XCharStruct), ("max_bounds", XCharStruct), ("per_char", ctypes.c_void_p),
                ("ascent", ctypes.c_int), ("descent", ctypes.c_int)]


class XVisual(ctypes.Structure):
    """The leading fields of Xlib's Visual."""

    _fields_ = [("ext_data", ctypes.c_void_p), ("visualid", ctypes.c_ulong), ("class_", ctypes.c_int),
                ("red_mask", ctypes.c_ulong), ("green_mask", ctypes.c_ulong), ("blue_mask", ctypes.c_ulong)]


_x11.XCreateWindow.restype = Window
_x11.XCreateWindow.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                               ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_ulong,
                               ctypes.POINTER(XSetWindowAttributes)]
_x11.XDestroyWindow.argtypes = [_Display_p, Window]
_x11.XUnmapWindow.argtypes = [_Display_p, Window]
_x11.XMapRaised.argtypes = [_Display_p, Window]
_x11.XDefaultVisual.restype = ctypes.POINTER(XVisual)
_x11.XDefaultVisual.argtypes = [_Display_p, ctypes.c_int]
_x11.XDefaultDepth.argtypes = [_Display_p, ctypes.c_int]
_x11.XLoadQueryFont.restype = ctypes.POINTER(XFontStruct)
_x11.XLoadQueryFont.argtypes = [_Display_p, ctypes.c_char_p]
_x11.XFreeFont.argtypes = [_Display_p, ctypes.POINTER(XFontStruct)]
_x11.XTextWidth.argtypes = [ctypes.POINTER(XFontStruct), ctypes.c_char_p, ctypes.c_int]
_x11.XCreatePixmap.restype = Pixmap
_x11.XCreatePixmap.argtypes = [_Display_p, Window, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint]
_x11.XFreePixmap.argtypes = [_Display_p, Pixmap]
_x11.XCreateBitmapFromData.restype = Pixmap
_x11.XCreateBitmapFromData.argtypes = [_Display_p, Window, ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint]
_x11.XCreateGC.restype = _GC
_x11.XCreateGC.argtypes = [_Display_p, Window, ctypes.c_ulong, ctypes.c_void_p]
_x11.XFreeGC.argtypes = [_Display_p, _GC]
_x11.XSetForeground.argtypes = [_Display_p, _GC, ctypes.c_ulong]
_x11.XSetFont.argtypes = [_Display_p, _GC, ctypes.c_ulong]
_x11.XFillRectangle.argtypes = [_Display_p, Window, _GC, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
_x11.XDrawString.argtypes = [_Display_p, Window, _GC, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]

try:
    _xext: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("Xext") or "libXext.so.6")
    _xext.XShapeQueryExtension.argtypes = [_Display_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    _xext.XShapeCombineMask.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_int, ctypes.c_int, Pixmap,
                                        ctypes.c_int]
    _xext.XShapeCombineRectangles.argtypes = [_Display_p, Window, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                              ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
except OSError:  # libXext comes with x11vnc and Chromium; without it the overlay cannot be made (and says so)
    _xext = None


def _dpy(conn: XConnection) -> int:
    conn.check()
    return conn._dpy  # noqa: SLF001 (the same library's connection; xlib.py keeps it private to everyone else)


def render_text(conn: XConnection, line: str) -> np.ndarray:
    """`line` as the X server's built-in fixed font draws it: a boolean array (13 rows, 6 columns a character), True
    on the glyphs' pixels. Characters outside Latin-1 become "?"."""
    dpy = _dpy(conn)
    data = line.encode("latin-1", errors="replace")
    font = _x11.XLoadQueryFont(dpy, FONT)
    if not font:
        raise XError("the X server has no 'fixed' font")
    try:
        info = font.contents
        width = max(1, _x11.XTextWidth(font, data, len(data)))
        height = info.ascent + info.descent
        pixmap = _x11.XCreatePixmap(dpy, conn.root, width, height, 1)
        gc = _x11.XCreateGC(dpy, pixmap, 0, None)
        try:
            _x11.XSetForeground(dpy, gc, 0)
            _x11.XFillRectangle(dpy, pixmap, gc, 0, 0, width, height)
            _x11.XSetForeground(dpy, gc, 1)
            _x11.XSetFont(dpy, gc, info.fid)
            _x11.XDrawString(dpy, pixmap, gc, 0, info.ascent, data, len(data))
            image = _x11.XGetImage(dpy, pixmap, 0, 0, width, height, 1, Z_PIXMAP)
            conn.check()
            if not image:
                raise XError("XGetImage of the text failed")
            try:
                img = image.contents
                if img.bits_per_pixel != 1:
                    raise XError(f"a 1-bit pixmap came back with {img.bits_per_pixel} bits per pixel")
                raw = np.frombuffer(ctypes.string_at(img.data, img.bytes_per_line * height), np.uint8)
                order = "little" if img.bitmap_bit_order == LSB_FIRST else "big"
                bits = np.unpackbits(raw.reshape(height, img.bytes_per_line), axis=1, bitorder=order)
                return bits[:, :width].astype(bool)
            finally:
                _x11.XDestroyImage(image)
        finally:
            _x11.XFreeGC(dpy, gc)
            _x11.XFreePixmap(dpy, pixmap)
    finally:
        _x11.XFreeFont(dpy, font)


def x_bitmap(mask: np.ndarray) -> bytes:
    """A boolean array in the X bitmap format XCreateBitmapFromData reads: rows padded to bytes, first pixel in the
    lowest bit."""
    return np.packbits(np.ascontiguousarray(mask, dtype=bool), axis=1, bitorder="little").tobytes()


def true_colour_pixel(conn: XConnection, rgb: tuple[int, int, int]) -> int:
    """The pixel value of `rgb` on the display's default visual, which must be TrueColor (Xvfb's at depth 24)."""
    visual = _x11.XDefaultVisual(_dpy(conn), 0)
    if not visual or visual.contents.class_ != TRUE_COLOR:
        raise XError("the display's default visual is not TrueColor")
    v = visual.contents
    pixel = 0
    for value, mask in zip(rgb, (v.red_mask, v.green_mask, v.blue_mask)):
        shift = (mask & -mask).bit_length() - 1
        top = mask >> shift
        pixel |= (value * top // 255) << shift
    return pixel


class Overlay:
    """The shaped, click-through window. Every method runs on the owning connection's thread."""

    def __init__(self, conn: XConnection, rgb: tuple[int, int, int], name: str = OVERLAY_NAME) -> None:
        if _xext is None:
            raise XError("libXext (the SHAPE extension's client library) is not installed")
        dpy = _dpy(conn)
        event_base, error_base = ctypes.c_int(), ctypes.c_int()
        if not _xext.XShapeQueryExtension(dpy, ctypes.byref(event_base), ctypes.byref(error_base)):
            raise XError("the X server has no SHAPE extension")
        self.conn = conn
        self.width, self.height = conn.screen_size()
        attrs = XSetWindowAttributes()
        attrs.background_pixel = true_colour_pixel(conn, rgb)
        attrs.border_pixel = 0
        attrs.override_redirect = 1
        self.window = int(_x11.XCreateWindow(dpy, conn.root, 0, 0, self.width, self.height, 0, COPY_FROM_PARENT,
                                             INPUT_OUTPUT, None, CW_BACK_PIXEL | CW_BORDER_PIXEL
                                             | CW_OVERRIDE_REDIRECT, ctypes.byref(attrs)))
        if not self.window:
            raise XError("XCreateWindow failed for the overlay")
        _x11.XStoreName(dpy, self.window, name.encode())
        # No input shape at all: pointer events fall through to the browser wherever the overlay is drawn.
        _xext.XShapeCombineRectangles(dpy, self.window, SHAPE_INPUT, 0, 0, None, 0, SHAPE_SET, UNSORTED)
        self.set_mask(np.zeros((self.height, self.width), bool))
        conn.sync()

    def set_mask(self, mask: np.ndarray) -> None:
        """Show the overlay's colour exactly on `mask`'s True pixels (a (height, width) boolean array)."""
        if mask.shape != (self.height, self.width):
            raise ValueError(f"mask {mask.shape} for a {self.width}x{self.height} overlay")
        dpy = _dpy(self.conn)
        data = x_bitmap(mask)
        bitmap = _x11.XCreateBitmapFromData(dpy, self.window, data, self.width, self.height)
        if not bitmap:
            raise XError("XCreateBitmapFromData failed")
        try:
            _xext.XShapeCombineMask(dpy, self.window, SHAPE_BOUNDING, 0, 0, bitmap, SHAPE_SET)
        finally:
            _x11.XFreePixmap(dpy, bitmap)
        self.conn.sync()

    def exists(self) -> tuple[bool, bool]:
        """(still there, mapped): another client can unmap or destroy any window on an X display."""
        attrs = XWindowAttributes()
        if not _x11.XGetWindowAttributes(_dpy(self.conn), self.window, ctypes.byref(attrs)):
            return False, False
        return True, attrs.map_state != 0

    def show(self) -> None:
        """Map the overlay on top of every other window (or put it back on top)."""
        _x11.XMapRaised(_dpy(self.conn), self.window)
        self.conn.sync()

    def destroy(self) -> None:
        if self.conn._dpy:  # noqa: SLF001 (a closed connection took its windows with it)
            _x11.XDestroyWindow(self.conn._dpy, self.window)  # noqa: SLF001
            self.conn.sync()


__all__ = ["OVERLAY_NAME", "Overlay", "render_text", "true_colour_pixel", "x_bitmap"]
