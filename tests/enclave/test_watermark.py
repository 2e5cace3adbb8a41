"""Issue 24, item 14: a faint, tiled watermark (recipient, kiosk id, time) over the kiosk's screen, outside the
browser's reach, in every frame the researcher sees and in the recording; on by default, switched by the recipient
policy; clicks and keys pass through it; the app's text stays readable.

Two real kiosks (Xvfb, x11vnc, Chromium) show the same page, one under a recipient policy that says nothing about the
watermark (so: on, defaults), one under a policy that switches it off; their screens are compared pixel by pixel,
read with OCR (tesseract), clicked and typed at through VNC, and recorded through the RFB proxy.
"""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from enclave.kiosk import KioskConfig
from enclave.kiosk.config import watermark_settings
from enclave.kiosk.xlib import XConnection
from proxy.limits import SessionLimits
from tests.enclave.kiosk_fixtures import (RunningKiosk, drain, events, start_kiosk, stop_kiosk, through_proxy,
                                          vnc_direct, write_png)

CHROMIUM = "/usr/lib/chromium/chromium"
pytestmark = pytest.mark.skipif(
    not (all(shutil.which(t) for t in ("Xvfb", "x11vnc", "setpriv")) and Path(CHROMIUM).is_file()),
    reason="Xvfb, x11vnc and Chromium are installed by scripts/setup.sh")
needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None,
                                     reason="tesseract-ocr is installed by scripts/setup.sh")

WIDTH, HEIGHT = 1280, 800
COLOUR = (0xC8, 0xC8, 0xC8)  # the default watermark colour (policies.recipient.WatermarkPolicy)
RECIPIENT = "wm-researcher"
FIELD = (40, 520, 1200, 590)  # the page's text field: left, top, right, bottom
WORDS = ("Regression coefficients for household income by education level and region were estimated on the "
         "released table with robust standard errors. Younger respondents reported higher mobility while older "
         "groups showed stable earnings across every surveyed decade. The median weekly hours worked remained "
         "close to forty in most occupations, with notable exceptions among farming and private household "
         "service workers. Marital status and relationship categories follow the published census definitions.")

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>watermark test page</title>
<style>html,body{margin:0;height:100%%;background:#fff;color:#111;font:24px sans-serif;overflow:hidden}
p{margin:20px 40px;line-height:1.6}
#field{position:absolute;left:%(l)dpx;top:%(t)dpx;width:%(w)dpx;height:%(h)dpx;font:24px sans-serif;
border:1px solid #888;padding:0;box-sizing:border-box;outline:none;caret-color:transparent}</style></head>
<body><p>%(words)s</p><input id="field" autocomplete="off">
<script>
document.addEventListener("mousedown", e => fetch("/click?" + new URLSearchParams(
  {x: e.clientX, y: e.clientY, target: e.target.id || e.target.tagName})));
document.getElementById("field").addEventListener("input", e => fetch("/typed?" + new URLSearchParams(
  {value: e.target.value})));
window.addEventListener("load", () => fetch("/loaded"));
</script></body></html>
""" % {"l": FIELD[0], "t": FIELD[1], "w": FIELD[2] - FIELD[0], "h": FIELD[3] - FIELD[1], "words": WORDS}


class _Handler(BaseHTTPRequestHandler):
    server: "PageServer"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        parts = urlsplit(self.path)
        if parts.path == "/":
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.server.seen.append((parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class PageServer(ThreadingHTTPServer):
    """The stand-in app: one page of known words and a text field; what the page reports is in `seen`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, dict[str, str]]] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def reports(self, path: str) -> list[dict[str, str]]:
        return [query for seen_path, query in list(self.seen) if seen_path == path]

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def wait_for(predicate, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def screen(running: RunningKiosk) -> np.ndarray:
    """The kiosk display's root window as RGB (what x11vnc serves and the proxy records)."""
    display = running.kiosk.display
    assert display is not None
    with XConnection(display.name, display.cookie) as conn:
        width, height, raw = conn.screenshot()
    return np.frombuffer(raw, np.uint8).reshape(height, width, 4)[:, :, [2, 1, 0]].copy()


def save(path: Path, rgb: np.ndarray) -> None:
    bgrx = np.zeros(rgb.shape[:2] + (4,), np.uint8)
    bgrx[..., :3] = rgb[..., ::-1]
    write_png(path, bgrx.tobytes(), rgb.shape[1], rgb.shape[0])


def ocr_words(path: Path) -> list[str]:
    out = subprocess.run(["tesseract", str(path), "-", "--psm", "6"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return ["".join(c for c in word if c.isalnum()).lower() for word in out.stdout.split()]


def is_colour(rgb: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return (rgb == np.array(colour, np.uint8)).all(axis=2)


@dataclass
class Screens:
    marked: RunningKiosk
    plain: RunningKiosk
    page: PageServer
    with_mark: np.ndarray  # the screens as the kiosks first showed the page, before any test clicked or typed
    without: np.ndarray
    folder: Path
    pinned: datetime  # the marked kiosk's watermark clock, held still so that no minute turns between two looks

    def hold_clock(self) -> None:
        """Back to the pinned minute, and wait until the stamp shows it."""
        watermark = self.marked.kiosk.watchdog.watermark
        watermark.clock = lambda: self.pinned
        assert wait_for(lambda: watermark.lines[1] == self.pinned.strftime("%Y-%m-%d %H:%M UTC"), 5, 0.05)


def _policy(folder: Path, name: str, extra: str = "") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"recipient: {RECIPIENT}\nscreen: {WIDTH}x{HEIGHT}\n{extra}")
    return path


@pytest.fixture(scope="module")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Screens]:
    folder = tmp_path_factory.mktemp("watermark")
    page = PageServer()
    started: list[RunningKiosk] = []
    try:
        for name, extra in (("marked", ""), ("plain", "watermark:\n  enabled: false\n")):
            # as `safeshare kiosk --policy` reads it: the first policy does not mention the watermark at all
            settings = watermark_settings(_policy(folder, name, extra), None, None)
            config = KioskConfig(app_url=page.url, state_dir=folder / name, width=WIDTH, height=HEIGHT,
                                 network="auto", watermark=settings)
            started.append(start_kiosk(config))
        assert wait_for(lambda: len(page.reports("/loaded")) >= 2, 30), "the page did not load in both kiosks"
        time.sleep(1.5)  # the last paint after the load event
        marked, plain = started
        pinned = datetime.now(timezone.utc)
        live = marked.kiosk.watchdog.watermark.lines[1]  # the kiosk's own clock: now, UTC, to the minute
        assert live in {(pinned + timedelta(minutes=d)).strftime("%Y-%m-%d %H:%M UTC") for d in (-1, 0)}, live
        shots = Screens(marked, plain, page, np.zeros(0), np.zeros(0), folder, pinned)
        shots.hold_clock()
        shots.with_mark, shots.without = screen(marked), screen(plain)
        save(folder / "marked.png", shots.with_mark)
        save(folder / "plain.png", shots.without)
        yield shots
    finally:
        for running in started:
            stop_kiosk(running)
        page.close()


def overlay_mask(running: RunningKiosk) -> np.ndarray:
    watchdog = running.kiosk.watchdog
    assert watchdog is not None and watchdog.watermark is not None and watchdog.watermark.mask is not None
    return watchdog.watermark.mask


# ---- on by default, tiled over the whole screen, off when the policy says so ----------------------------------------

def test_watermark_is_drawn_in_tiles_over_the_whole_screen(screens: Screens) -> None:
    """What the researcher's screen shows differs from the same page without a watermark exactly on pixels of the
    watermark's colour, spread over every part of the screen, and on few of them."""
    mark, plain = screens.with_mark, screens.without
    differs = (mark != plain).any(axis=2)
    assert differs.any(), "the screen is the same as without a watermark: no watermark is drawn"
    assert is_colour(mark, COLOUR)[differs].all(), "the screen differs from the page by more than the watermark"
    share = differs.mean()
    assert 0.002 < share < 0.03, f"the watermark changes {share:.2%} of the screen's pixels"
    # tiled: every cell of a 5 x 4 grid over the screen has some of it
    cells = differs.reshape(4, HEIGHT // 4, 5, WIDTH // 5).sum(axis=(1, 3))
    assert (cells > 100).all(), f"watermark pixels per screen cell:\n{cells}"
    # and it is the kiosk's own overlay: its mask, in its colour, on every pixel of the mask
    mask = overlay_mask(screens.marked)
    assert is_colour(mark, COLOUR)[mask].all()
    assert differs.sum() <= mask.sum()  # (a mask pixel over page pixels of the same grey changes nothing)
    print(f"watermark: {mask.mean():.2%} of the screen's pixels, {share:.2%} changed on this page")


def test_the_watermark_window_is_on_top_and_names_the_kiosk(screens: Screens) -> None:
    kiosk = screens.marked.kiosk
    assert kiosk.endpoint is not None and kiosk.endpoint.kiosk_id == kiosk.kiosk_id and len(kiosk.kiosk_id) == 8
    watermark = kiosk.watchdog.watermark
    assert watermark.lines[0] == f"{RECIPIENT}  kiosk {kiosk.kiosk_id}"
    assert watermark.lines[1] == screens.pinned.strftime("%Y-%m-%d %H:%M UTC")
    windows = [w for w in screens.marked.windows() if w.viewable]
    assert windows[-1].window == watermark.overlay.window and windows[-1].override_redirect
    assert windows[-1].title == "safeshare watermark"


def test_the_stamp_on_the_screen_is_the_recipient_the_kiosk_and_the_time(screens: Screens) -> None:
    """Where the page is blank, the screen's watermark pixels are exactly the expected text (written here from the
    recipient, the kiosk's id and the current minute) as the X server's font draws it, tiled and dithered."""
    from enclave.kiosk.overlay import render_text
    from enclave.kiosk.watermark import text_block, tile_mask

    kiosk = screens.marked.kiosk
    shown_minute = datetime.strptime(kiosk.watchdog.watermark.lines[1], "%Y-%m-%d %H:%M UTC").replace(
        tzinfo=timezone.utc)
    assert shown_minute.strftime("%Y-%m-%d %H:%M") == screens.pinned.strftime("%Y-%m-%d %H:%M")
    lines = [f"{RECIPIENT}  kiosk {kiosk.kiosk_id}", shown_minute.strftime("%Y-%m-%d %H:%M UTC")]
    with XConnection(kiosk.display.name, kiosk.display.cookie) as conn:
        expected = tile_mask(text_block([render_text(conn, line) for line in lines], 2), WIDTH, HEIGHT, 0.5)
    blank = (screens.without == 255).all(axis=2)
    drawn = is_colour(screens.with_mark, COLOUR)
    assert (drawn[blank] == expected[blank]).all()
    assert expected[blank].sum() > 0.9 * expected.sum()


def test_a_policy_can_switch_it_off(screens: Screens) -> None:
    """The second kiosk's policy says `watermark: {enabled: false}`: no overlay window, and where the first kiosk
    draws its watermark the second shows the page."""
    plain = screens.plain.kiosk
    assert plain.watchdog.watermark is None and plain.endpoint.watermark == "off"
    assert not [w for w in screens.plain.windows() if w.title == "safeshare watermark"]
    mask = overlay_mask(screens.marked)
    coloured = is_colour(screens.without, COLOUR)[mask].mean()
    assert coloured < 0.01, f"{coloured:.1%} of the watermark's pixels have its colour without a watermark"


# ---- legibility ---------------------------------------------------------------------------------------------------

@needs_tesseract
def test_the_apps_text_stays_readable(screens: Screens) -> None:
    """OCR reads the page's words as well with the watermark as without; the watermark changes a small share of the
    text's own (dark) pixels."""
    known = {"".join(c for c in w if c.isalnum()).lower() for w in WORDS.split()}
    read_plain = set(ocr_words(screens.folder / "plain.png")) & known
    read_marked = set(ocr_words(screens.folder / "marked.png")) & known
    assert len(read_plain) >= 0.9 * len(known), f"OCR misses words even without a watermark: {known - read_plain}"
    missed = read_plain - read_marked
    assert len(missed) <= 2, f"with the watermark OCR misses {sorted(missed)}"
    mark, plain = screens.with_mark.astype(int), screens.without.astype(int)
    text = plain.sum(axis=2) < 3 * 128  # the page's glyph pixels (dark on white)
    under = overlay_mask(screens.marked) & text
    changed = (np.abs(mark - plain).max(axis=2) > 0) & text
    assert under.sum() > 50, "the watermark does not cross the page's text here: the test would prove nothing"
    share = changed.sum() / text.sum()
    assert share < 0.04, f"the watermark changes {share:.2%} of the text's pixels"
    print(f"legibility: OCR read {len(read_marked)}/{len(known)} known words with the watermark, "
          f"{len(read_plain)}/{len(known)} without; {share:.2%} of the text's pixels changed")


# ---- input passes through -----------------------------------------------------------------------------------------

def test_clicks_and_keys_at_a_watermark_glyph_reach_the_page(screens: Screens) -> None:
    """A click exactly on a watermark pixel over the page's text field focuses the field (the page sees the click at
    that point) and what is typed then arrives: the overlay takes no input."""
    mask = overlay_mask(screens.marked)
    left, top, right, bottom = FIELD
    inside = np.argwhere(mask[top + 4:bottom - 4, left + 4:right - 4])
    assert len(inside), "no watermark pixel over the text field"
    y, x = (int(v) for v in inside[len(inside) // 2] + (top + 4, left + 4))
    assert is_colour(screens.with_mark, COLOUR)[y, x]
    running, page = screens.marked, screens.page
    before = len(page.reports("/click"))

    async def click_and_type() -> None:
        client = await vnc_direct(running.endpoint.upstream, running.endpoint.password())
        try:
            await client.pointer(0, x, y)
            await asyncio.sleep(0.1)
            await client.pointer(1, x, y)
            await asyncio.sleep(0.1)
            await client.pointer(0, x, y)
            await asyncio.sleep(0.5)
            for char in "hello":
                await client.key(ord(char), True)
                await client.key(ord(char), False)
                await asyncio.sleep(0.05)
            await drain(client, 1.0)
        finally:
            await client.close()

    asyncio.run(click_and_type())
    clicks = wait_for(lambda: page.reports("/click")[before:], 5)
    assert clicks and clicks[0] == {"x": str(x), "y": str(y), "target": "field"}, clicks
    assert wait_for(lambda: any(r["value"] == "hello" for r in page.reports("/typed")), 5), page.reports("/typed")


# ---- every frame: kept on top, current, in the recording ----------------------------------------------------------

def test_it_comes_back_above_a_window_mapped_over_it_and_when_unmapped(screens: Screens) -> None:
    """Another X client (the browser's own menus are such windows) maps an override-redirect window over the whole
    screen, and unmaps the watermark: within a watchdog poll or two the watermark is on top again."""
    import ctypes

    from enclave.kiosk.overlay import CW_OVERRIDE_REDIRECT, XSetWindowAttributes
    from enclave.kiosk.xlib import _x11

    running = screens.marked
    watermark = running.kiosk.watchdog.watermark
    display = running.kiosk.display
    with XConnection(display.name, display.cookie) as conn:
        attrs = XSetWindowAttributes()
        attrs.override_redirect = 1
        cover = _x11.XCreateWindow(conn._dpy, conn.root, 0, 0, WIDTH, HEIGHT, 0, 0, 1, None, CW_OVERRIDE_REDIRECT,
                                   ctypes.byref(attrs))
        _x11.XMapRaised(conn._dpy, cover)
        conn.sync()

        def on_top() -> bool:
            shown = [w.window for w in conn.top_levels() if w.viewable]
            return shown[-1] == watermark.overlay.window and cover in shown

        assert wait_for(on_top, 2, 0.02), "the watermark stayed under a window mapped above it"
        assert watermark.raises >= 1
        repairs = watermark.raises + watermark.redraws
        _x11.XUnmapWindow(conn._dpy, watermark.overlay.window)
        conn.sync()
        assert not conn.describe(watermark.overlay.window).viewable
        assert wait_for(on_top, 2, 0.02), "the watermark stayed unmapped"
        # (mapped again as unmapped, or raised by a look just before the unmap, whose XMapRaised maps it too)
        assert watermark.raises + watermark.redraws > repairs
        _x11.XDestroyWindow(conn._dpy, cover)
        conn.sync()


def test_the_time_is_redrawn_when_the_minute_changes(screens: Screens) -> None:
    running = screens.marked
    watermark = running.kiosk.watchdog.watermark
    before = screen(running)
    later = datetime.now(timezone.utc) + timedelta(hours=3, minutes=7)
    watermark.clock = lambda: later
    try:
        assert wait_for(lambda: watermark.lines[1] == later.strftime("%Y-%m-%d %H:%M UTC"), 2, 0.05)
        time.sleep(0.3)
        after = screen(running)
        changed = (before != after).any(axis=2)
        assert 0 < changed.mean() < 0.01 and is_colour(after, COLOUR)[watermark.mask].all()
    finally:
        screens.hold_clock()


def test_the_recording_has_the_watermark_and_the_log_names_the_kiosk(screens: Screens, tmp_path: Path) -> None:
    """A session through the RFB proxy: the recording's decoded screen carries the watermark on every one of its
    pixels, and the session's hash-chained log names the kiosk id the watermark shows (the auditor's join from a
    stamp on a picture to its session)."""
    from proxy.audit.rfbdecode import Replay

    running = screens.marked

    async def body(client) -> None:
        await client.set_encodings((0, 1, -239))  # the cursor as its own pseudo-rectangle, not drawn into the screen
        await client.request(incremental=False)
        await client.read_update(timeout=15)
        for _ in range(6):  # x11vnc polls the screen: let its copy catch up with a redraw just before
            await asyncio.sleep(0.25)
            await client.request(incremental=True)
            await drain(client, 0.25)

    _, folder = asyncio.run(through_proxy(running.upstream(), tmp_path / "sessions", SessionLimits(), body))
    replay = Replay(folder / "screen.rfbrec")
    assert [m for m in replay.messages() if m.kind == "update"]
    decoded = replay.framebuffer.image
    mask = overlay_mask(running)
    assert decoded.shape == (HEIGHT, WIDTH, 3)
    assert is_colour(decoded, COLOUR)[mask].all(), ("the recording lacks watermark pixels",
                                                     np.argwhere(mask & ~is_colour(decoded, COLOUR))[:20].tolist())
    ready = [e for e in events(folder) if e["event"] == "upstream_ready"]
    assert ready and ready[0]["name"] == f"safeshare kiosk {running.kiosk.kiosk_id}", ready


def test_what_the_watermark_adds_to_the_stream(screens: Screens, tmp_path: Path) -> None:
    """The proxy does not change (the watermark is in the X display); what the VNC server sends does, a little: a full
    screen of the page with the watermark against without (zlib, as the proxy forwards it), and the update that
    redraws the time once a minute."""
    import json

    async def full(client) -> None:
        await client.request(incremental=False)
        await client.read_update(timeout=15)

    async def full_then_minute(client) -> None:
        await full(client)
        await drain(client, 0.5)
        watermark.clock = lambda: screens.pinned + timedelta(minutes=1)
        await asyncio.sleep(0.5)  # a watchdog poll redraws, x11vnc sees the change
        await client.request(incremental=True)
        await client.read_update(timeout=15)

    def server_bytes(running: RunningKiosk, body, name: str) -> int:
        async def run():
            async def connected(client) -> None:
                await client.set_encodings((6, 0))
                await body(client)
            return await through_proxy(running.upstream(), tmp_path / name, SessionLimits(), connected)

        _, folder = asyncio.run(run())
        return json.loads((folder / "meta.json").read_text())["counters"]["server_bytes"]

    watermark = screens.marked.kiosk.watchdog.watermark
    try:
        with_mark = server_bytes(screens.marked, full, "marked")
        without = server_bytes(screens.plain, full, "plain")
        with_minute = server_bytes(screens.marked, full_then_minute, "minute")
    finally:
        screens.hold_clock()
    minute = with_minute - with_mark
    print(f"stream: a full screen {without / 1e3:.0f} kB without the watermark, {with_mark / 1e3:.0f} kB with it; "
          f"the minute's redraw {minute / 1e3:.1f} kB")
    assert with_mark < 1.6 * without
    assert 0 < minute < 0.25 * with_mark
