"""The recording decoder against real VNC servers: whatever encoding the client asked for, the screen decoded from
the recording equals the X server's own pixels (exactly for lossless encodings, closely for Tight's JPEG)."""
from __future__ import annotations

import asyncio
import ctypes
import os
import subprocess

import numpy as np
import pytest

from proxy.audit.rfbdecode import Replay
from proxy.limits import SessionLimits
from tests.proxy.rfbtools import RfbClient, free_port, stop_process, x11vnc_start, xvfb_start
from tests.proxy.test_controls import proxied_session
from tests.proxy.test_gateway import HAVE_X

WIDTH, HEIGHT = 320, 240
needs_x = pytest.mark.skipif(not HAVE_X, reason="Xvfb, x11vnc and xsetroot are installed by scripts/setup.sh")


def picture() -> np.ndarray:
    """Smooth gradients (Tight's gradient filter, JPEG), noise (raw tiles) and flat bands (palettes, runs)."""
    h, w = 120, 200
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 2) % 256], axis=-1).astype(np.uint8)
    rng = np.random.default_rng(7)
    rgb[:40, 150:] = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    rgb[80:, :60] = (250, 250, 250)
    rgb[95:100, :60] = (10, 10, 10)
    return rgb


def put_image(display: str, x: int, y: int, rgb: np.ndarray) -> None:
    """XPutImage onto the root window (Xvfb at depth 24 keeps BGRX pixels)."""
    from enclave.kiosk import xlib

    lib = xlib._x11
    lib.XDefaultVisual.restype = ctypes.c_void_p
    lib.XDefaultGC.restype = ctypes.c_void_p
    lib.XCreateImage.restype = ctypes.c_void_p
    lib.XCreateImage.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_int, ctypes.c_int]
    lib.XPutImage.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                              ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
    h, w, _ = rgb.shape
    bgrx = np.zeros((h, w, 4), np.uint8)
    bgrx[..., :3] = rgb[..., ::-1]
    buffer = ctypes.create_string_buffer(bgrx.tobytes())
    with xlib.XConnection(display) as conn:
        dpy = ctypes.c_void_p(conn._dpy) if isinstance(conn._dpy, int) else conn._dpy
        image = lib.XCreateImage(dpy, lib.XDefaultVisual(dpy, 0), 24, 2, 0, buffer, w, h, 32, 0)
        lib.XPutImage(dpy, conn.root, lib.XDefaultGC(dpy, 0), image, 0, 0, x, y, w, h)
        conn.sync()


def screen(display: str) -> np.ndarray:
    from enclave.kiosk.xlib import XConnection

    with XConnection(display) as conn:
        width, height, raw = conn.screenshot()
    return np.frombuffer(raw, np.uint8).reshape(height, width, 4)[:, :, [2, 1, 0]]


@pytest.fixture(scope="module")
def x_screen():
    if not HAVE_X:
        pytest.skip("Xvfb and x11vnc are installed by scripts/setup.sh")
    xvfb, display = xvfb_start(WIDTH, HEIGHT)
    vnc = None
    try:
        subprocess.run(["xsetroot", "-mod", "4", "4", "-fg", "#e06020", "-bg", "#2040a0"],
                       env={**os.environ, "DISPLAY": display}, check=True, timeout=10)
        put_image(display, 40, 40, picture())
        port = free_port()
        vnc = x11vnc_start(display, port, ["-nosel", "-noprimary", "-noclipboard", "-nosetclipboard"])
        yield display, port
    finally:
        if vnc is not None:
            stop_process(vnc)
        stop_process(xvfb)


def record(tmp_path, port: int, encodings: tuple[int, ...]):
    async def body(proxy_port: int) -> None:
        client = RfbClient()
        await client.connect(proxy_port, encodings)
        await client.request(False)
        await asyncio.sleep(1.0)
        await client.request(True)
        await asyncio.sleep(0.3)
        await client.close()

    folder, _ = asyncio.run(proxied_session(tmp_path / "sessions", port, SessionLimits(), body))
    return folder


@needs_x
@pytest.mark.parametrize("encodings, lossless", [
    ((0,), True), ((6, 0), True), ((2, 0), True), ((16, 0), True), ((7, 0), True), ((7, -32 + 8, 0), False),
    ((1, 16, 0), True),
], ids=["raw", "zlib", "rre", "zrle", "tight", "tight-jpeg", "copyrect-zrle"])
def test_decoded_recording_equals_the_screen(tmp_path, x_screen, encodings, lossless) -> None:
    display, port = x_screen
    folder = record(tmp_path, port, encodings)
    replay = Replay(folder / "screen.rfbrec")
    updates = [m for m in replay.messages() if m.kind == "update"]
    assert updates and updates[0].box == (0, 0, WIDTH, HEIGHT) and updates[0].seconds > 0
    decoded = replay.framebuffer.image
    truth = screen(display)
    assert decoded.shape == truth.shape
    difference = np.abs(decoded.astype(int) - truth.astype(int))
    if lossless:
        assert difference.max() == 0, (encodings, np.argwhere(difference.max(axis=2) > 0)[:5])
    else:
        assert difference.mean() < 4 and np.percentile(difference, 99) < 40, difference.mean()


def test_gradient_filter_against_the_rfb_definition() -> None:
    """undo_gradient against a direct transcription of the Tight gradient filter (RFB 3.8, Tight encoding):
    P[y][x] = V[y][x] + clamp(P[y][x-1] + P[y-1][x] - P[y-1][x-1]), neighbours outside the rectangle are 0."""
    from proxy.audit.rfbdecode import undo_gradient

    rng = np.random.default_rng(5)
    residual = rng.integers(0, 256, (7, 11, 3), dtype=np.uint8)
    expected = np.zeros((7, 11, 3), np.uint8)
    for y in range(7):
        for x in range(11):
            for c in range(3):
                left = int(expected[y, x - 1, c]) if x else 0
                up = int(expected[y - 1, x, c]) if y else 0
                corner = int(expected[y - 1, x - 1, c]) if x and y else 0
                expected[y, x, c] = (int(residual[y, x, c]) + min(max(left + up - corner, 0), 255)) % 256
    assert np.array_equal(undo_gradient(residual), expected)
