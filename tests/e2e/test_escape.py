"""Escape attempts through the real front door: a client that speaks RFB over the gateway's noVNC WebSocket endpoint
(`/websockify?token=...`, the demo recipient's token and limits, as `safeshare up` issues them), to the real proxy,
x11vnc, Xvfb and Chromium under the production policy, showing the analytics app's own page layout and script.

Every attempt is one test (one kiosk and one gateway for the module). During each attempt a thread samples the kiosk
display's windows every 50 ms; afterwards the test asserts that the attempt changed nothing: at no sample was there
anything but the one kiosk window with the app page's own title (a window the watchdog closes a moment later still
counts, and so does a new tab, which changes the title), the app was asked for no page (a tab opened in the
background, a download, a reload), the page area of the screen looks as before (a dialog drawn inside the window, such
as caret browsing's, dims it), the watchdog had nothing to clean up (no window closed, no tab closed, no browser
restart), Xvfb still runs and StickyKeys is off. Between attempts the kiosk is brought back to a clean state (keys
released, the app shown), so that one failure does not hide the next. A control at the start shows that the checks
see a window that the watchdog removes within a fraction of a second.

The cases are those of the adversarial review (issue 12, "Kiosk findings") and more: Chromium's shortcuts for new
windows and tabs, closing, browser pages, developer tools, files, the task manager, caret browsing, menus, full
screen; clicks with modifiers and other buttons on one of the app's links; a modifier held across a reconnect or a
replaced session; keysyms outside the keyboard (StickyKeys_Enable, the AccessX gesture, Terminate_Server last).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from enclave.kiosk import KioskConfig
from enclave.kiosk.netns import netns_unavailable_reason
from tests.enclave.kiosk_fixtures import (STICKYKEYS_ENABLE, TERMINATE_SERVER, Researcher, RunningKiosk,
                                          WindowMonitor, keysym, start_kiosk, stop_kiosk)
from tests.proxy.rfbtools import PF_32, RfbClient

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/lib/chromium/chromium"
DEMO_POLICY = REPO / "policies" / "examples" / "recipient-demo.yaml"
APP_TITLE = "safeshare"  # every page of the app starts its title with this (deploy/local.py gives it to the kiosk)
WIDTH, HEIGHT = 1280, 800

pytestmark = [
    pytest.mark.skipif(not (all(shutil.which(t) for t in ("Xvfb", "x11vnc", "setpriv")) and os.path.isfile(CHROMIUM)),
                       reason="Xvfb, x11vnc and Chromium are installed by scripts/setup.sh"),
    pytest.mark.skipif(netns_unavailable_reason() is not None,
                       reason=f"network namespaces: {netns_unavailable_reason()}"),
]


# ---- the app's pages, as the kiosk sees them ------------------------------------------------------------------------


class _AppPageHandler(BaseHTTPRequestHandler):
    """Every path answers with the app's real base page (header, navigation links, app.js, app.css) under the app's
    own security headers; /static/ serves the app's real static files. The escape attempts need the app's links and
    script, not its data, so no release bundle is involved."""

    server: "AppPages"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        from enclave.app.pages import env
        from enclave.app.security import SECURITY_HEADERS

        path = urlsplit(self.path).path
        self.server.requests.append(path)
        static = REPO / "enclave" / "app" / "static"
        if path.startswith("/static/"):
            file = static / path.removeprefix("/static/")
            if file.parent != static or not file.is_file():
                self.send_error(404)
                return
            body = file.read_bytes()
            ctype = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}.get(file.suffix, "text/plain")
        else:
            title = path.strip("/") or "overview"  # each page its own title: a new tab on it shows
            body = env.get_template("base.html").render(title=title, nav=path, dataset="synth",
                                                        release_id="0123456789abcdef", query="").encode()
            ctype = "text/html; charset=utf-8"
        self.send_response(200)
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class AppPages(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AppPageHandler)
        self.requests: list[str] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


# ---- an RFB client over the gateway's WebSocket ---------------------------------------------------------------------


class _WsWriter:
    """What RfbClient writes to: each write() becomes one binary WebSocket message, in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._task = asyncio.create_task(self._send())

    async def _send(self) -> None:
        while True:
            data = await self._queue.get()
            try:
                await self.ws.send_bytes(data)
            except (ConnectionError, RuntimeError):
                pass  # the gateway closed the session (a replaced or refused one): later writes go nowhere
            finally:
                self._queue.task_done()

    def write(self, data: bytes) -> None:
        self._queue.put_nowait(bytes(data))

    async def drain(self) -> None:
        await self._queue.join()

    def close(self) -> None:
        self._task.cancel()


@dataclass
class GatewayConnection:
    """One researcher connection: noVNC's WebSocket, then RFB (security None: the token was the authentication)."""

    http: aiohttp.ClientSession
    ws: aiohttp.ClientWebSocketResponse
    client: RfbClient
    pump: asyncio.Task

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, url: str) -> "GatewayConnection":
        ws = await http.ws_connect(url, protocols=("binary",))
        reader = asyncio.StreamReader(limit=1 << 24)

        async def pump() -> None:
            try:
                async for message in ws:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        reader.feed_data(message.data)
            finally:
                reader.feed_eof()

        task = asyncio.create_task(pump())
        client = RfbClient()
        client.reader, client.writer = reader, _WsWriter(ws)  # type: ignore[assignment]
        async with asyncio.timeout(15):
            assert (await reader.readexactly(12)).startswith(b"RFB 003.")
            client.writer.write(b"RFB 003.008\n")
            (count,) = await reader.readexactly(1)
            assert 1 in await reader.readexactly(count)
            client.writer.write(b"\x01")
            assert await reader.readexactly(4) == b"\0\0\0\0"
            client.writer.write(b"\x01")
            client.width, client.height = struct.unpack(">HH", await reader.readexactly(4))
            await reader.readexactly(16)
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            client.name = await reader.readexactly(length)
        client.writer.write(b"\x00\x00\x00\x00" + PF_32)
        await client.set_encodings((0,))  # no framebuffer request is ever sent: only input matters here
        return cls(http, ws, client, task)

    def researcher(self) -> Researcher:
        return Researcher(self.client, pace=0.1)  # 10 presses a second: the demo limit, no key dropped

    async def close(self) -> None:
        self.client.writer.close()  # type: ignore[attr-defined]
        await self.ws.close()
        self.pump.cancel()
        await asyncio.gather(self.pump, return_exceptions=True)


@dataclass
class DirectConnection:
    """The same interface on the kiosk's own VNC server (VNC authentication, no proxy)."""

    client: RfbClient

    def researcher(self) -> Researcher:
        return Researcher(self.client, pace=0.1)

    async def close(self) -> None:
        self.client.writer.close()


# ---- the enclave for the whole module -------------------------------------------------------------------------------


@dataclass
class Enclave:
    app: AppPages
    kiosk: RunningKiosk
    gateway: Any
    store: Any
    url: str  # the researcher's WebSocket URL with the token
    links: dict[str, tuple[int, int]]  # centres of the app's navigation links on the kiosk screen
    sessions: Path
    notes: list[str] = field(default_factory=list)

    direct: bool = False  # connect straight to the kiosk's VNC server (the proxy's filter out of the way)

    async def connect(self, http: aiohttp.ClientSession) -> "GatewayConnection | DirectConnection":
        if self.direct:
            from tests.enclave.kiosk_fixtures import vnc_direct

            endpoint = self.kiosk.endpoint
            return DirectConnection(await vnc_direct(endpoint.upstream, endpoint.password(), encodings=(0,)))
        return await GatewayConnection.open(http, self.url)

    def menu_shown(self) -> bool:
        """Whether a menu (a mapped override-redirect window of some size, not the screen watermark) is open."""
        from enclave.kiosk.overlay import OVERLAY_NAME

        return any(w.viewable and w.override_redirect and w.width > 40 and w.height > 40 and w.title != OVERLAY_NAME
                   for w in self.kiosk.windows())

    def xconn(self):
        from enclave.kiosk.xlib import XConnection

        display = self.kiosk.kiosk.display
        assert display is not None
        return XConnection(display.name, display.cookie)

    def sticky_keyboards(self) -> list[int]:
        from enclave.kiosk.xlib import XKB_CONTROLS

        with self.xconn() as conn:
            return [d for d in conn.keyboards() if conn.xkb_enabled_controls(d) & XKB_CONTROLS["StickyKeys"]]

    def clean_slate(self) -> None:
        """Between attempts: nothing held down, no StickyKeys, the app alone on screen (left over by a failed attempt
        only; a passing attempt leaves nothing to clean)."""
        from enclave.kiosk.xlib import ACCESSX_CONTROLS

        with self.xconn() as conn:
            held = conn.release_keys()
            for device in conn.keyboards():
                conn.xkb_disable_controls(ACCESSX_CONTROLS, device)
            conn.send_keys(0xFF1B)  # Escape: leaves a dialog drawn inside the window (nothing on the app's page)
        if held:
            self.notes.append(f"released keys left held: {held}")
        asyncio.run(self._blur())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.only_the_app():
                time.sleep(0.4)
                if self.only_the_app():
                    return
            time.sleep(0.2)
        raise AssertionError(f"the kiosk does not show the app alone: {self.kiosk.shown()}")

    async def _blur(self) -> None:
        """A click on an empty part of the page, so that no link keeps the keyboard focus of a previous attempt (a
        Return typed later would follow it)."""
        from tests.enclave.kiosk_fixtures import vnc_direct

        client = await vnc_direct(self.kiosk.endpoint.upstream, self.kiosk.endpoint.password(), encodings=(0,))
        try:
            await Researcher(client).click(WIDTH // 2, HEIGHT - 60, settle=0.2)
        finally:
            client.writer.close()

    def only_the_app(self) -> bool:
        shown = self.kiosk.shown()
        return len(shown) == 1 and shown[0].title.startswith(APP_TITLE) and shown[0].width == WIDTH


async def _link_centres(app_url: str, profile: Path) -> dict[str, tuple[int, int]]:
    """Where the app's navigation links are on a 1280x800 kiosk screen: the same page laid out by a headless
    Chromium at that size (the kiosk window has no browser chrome in kiosk mode)."""
    from tests.cdp import chromium, wait_for_js

    async with aiohttp.ClientSession() as http, chromium(profile, http, window=f"{WIDTH},{HEIGHT}") as cdp:
        await cdp.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1,
                       mobile=False)
        await cdp.navigate(app_url)
        boxes = await wait_for_js(cdp, """(() => {
            const out = {};
            for (const a of document.querySelectorAll('header nav a')) {
                const r = a.getBoundingClientRect();
                if (r.width > 0) out[a.getAttribute('href')] = [Math.round(r.left + r.width / 2),
                                                                 Math.round(r.top + r.height / 2)];
            }
            return Object.keys(out).length ? out : null; })()""", timeout=20)
    return {href: (x, y) for href, (x, y) in boxes.items()}


@pytest.fixture(scope="module")
def enclave(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Enclave]:
    from proxy.gateway import Gateway
    from policies.recipient import load_recipient_policy
    from proxy.tokens import TokenStore

    root = tmp_path_factory.mktemp("escape")
    app = AppPages()
    links = asyncio.run(_link_centres(app.url, root / "layout"))
    running = start_kiosk(KioskConfig(app_url=app.url, state_dir=root / "kiosk", width=WIDTH, height=HEIGHT,
                                      network="netns", app_title=APP_TITLE))
    store = TokenStore(f"sqlite:///{root / 'safeshare.db'}")
    policy = load_recipient_policy(DEMO_POLICY)
    issued = store.issue(policy.recipient, running.endpoint.upstream,
                         password_file=str(running.endpoint.password_file), target_name="escape-test",
                         release="synth/0123456789abcdef", policy_file=str(DEMO_POLICY))
    gateway = Gateway(store, root / "sessions", novnc_dir=None, default_limits=policy.limits)
    try:
        port = running.loop.run(gateway.start("127.0.0.1", 0))
        enclave = Enclave(app, running, gateway, store, f"http://127.0.0.1:{port}/websockify?token={issued.token}",
                          links, root / "sessions")
        enclave.clean_slate()
        yield enclave
    finally:
        try:
            running.loop.run(gateway.close())
        finally:
            stop_kiosk(running)
            store.dispose()
            app.shutdown()
            app.server_close()


# ---- the attempts -----------------------------------------------------------------------------------------------------

Attempt = Callable[[Enclave, aiohttp.ClientSession], Awaitable[None]]
LINK = "/cohort"  # one of the app's navigation links (same origin: only a new window or tab would be an escape)


def shortcut(combo: str, then: tuple[str, ...] = ()) -> Attempt:
    """A key combination (and keys typed after it), in one session."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        connection = await enclave.connect(http)
        try:
            r = connection.researcher()
            await r.combo(combo, settle=0.3)
            for key in then:
                await r.combo(key, settle=0.2)
            await asyncio.sleep(1.0)
        finally:
            await connection.close()
    return run


def typed(combo: str, text: str) -> Attempt:
    """A combination, then text and Return (an address typed into whatever the combination opened)."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        connection = await enclave.connect(http)
        try:
            r = connection.researcher()
            await r.combo(combo, settle=0.3)
            await r.type(text)
            await r.combo("return", settle=1.2)
        finally:
            await connection.close()
    return run


def link_click(button: int = 1, held: str = "") -> Attempt:
    """A click on one of the app's links with `held` modifiers."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        connection = await enclave.connect(http)
        try:
            await connection.researcher().click(*enclave.links[LINK], button=button, held=held, settle=1.2)
        finally:
            await connection.close()
    return run


async def _link_menu(enclave: Enclave, http: aiohttp.ClientSession) -> None:
    """A right click on a link; if a context menu opens, its second entry ("Open link in new window")."""
    connection = await enclave.connect(http)
    try:
        r = connection.researcher()
        await r.click(*enclave.links[LINK], button=3, settle=0.8)
        if enclave.menu_shown():
            for key in ("down", "down", "return"):
                await r.combo(key, settle=0.25)
        else:
            await r.combo("escape", settle=0.25)
        await asyncio.sleep(1.0)
    finally:
        await connection.close()


def key_on_link(combo: str) -> Attempt:
    """Tab to a link of the app (the keyboard's way to it, no click that would follow it), then `combo` on it."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        connection = await enclave.connect(http)
        try:
            r = connection.researcher()
            await r.combo("tab", settle=0.15)
            await r.combo("tab", settle=0.3)
            await r.combo(combo, settle=1.2)
        finally:
            await connection.close()
    return run


async def _drag_link(enclave: Enclave, http: aiohttp.ClientSession) -> None:
    connection = await enclave.connect(http)
    try:
        r = connection.researcher()
        x, y = enclave.links[LINK]
        await r.drag((x, y), (WIDTH - 5, HEIGHT - 5))
        await asyncio.sleep(1.0)
    finally:
        await connection.close()


def held_across_reconnect(then: str) -> Attempt:
    """Finding 20: Ctrl down, the WebSocket closed without a release, a new connection, then `then` (e.g. "h",
    "shift+delete"), which the new session's filter sees without a modifier."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        first = await enclave.connect(http)
        await first.client.key(keysym("ctrl"), True)
        await asyncio.sleep(0.3)
        await first.close()
        await asyncio.sleep(0.5)
        second = await enclave.connect(http)
        try:
            await second.researcher().combo(then, settle=1.2)
        finally:
            await second.close()
    return run


def held_across_replacement(then: str) -> Attempt:
    """Finding 20: Ctrl down on one connection, a second connection with the same token replaces it, then `then`."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        first = await enclave.connect(http)
        await first.client.key(keysym("ctrl"), True)
        await asyncio.sleep(0.3)
        second = await enclave.connect(http)  # the gateway ends the first session
        try:
            await asyncio.sleep(0.5)
            await second.researcher().combo(then, settle=1.2)
        finally:
            await second.close()
            await first.close()
    return run


def keysyms_then(syms: tuple[int, ...], then: tuple[str, ...]) -> Attempt:
    """Finding 21: keysyms outside the keyboard (each tapped), then Ctrl tapped, then the keys in `then`."""
    async def run(enclave: Enclave, http: aiohttp.ClientSession) -> None:
        connection = await enclave.connect(http)
        try:
            r = connection.researcher()
            for sym in syms:
                await r.tap(sym, settle=0.1)
            await asyncio.sleep(0.3)
            await r.tap(keysym("ctrl"), settle=0.2)
            for key in then:
                await r.combo(key, settle=0.3)
            await asyncio.sleep(1.0)
        finally:
            await connection.close()
    return run


SHIFT = 0xFFE1
ATTEMPTS: dict[str, Attempt] = {
    # new windows and tabs, closing
    "ctrl+n": shortcut("ctrl+n"),
    "ctrl+t": shortcut("ctrl+t"),
    "ctrl+shift+n": shortcut("ctrl+shift+n"),
    "ctrl+w": shortcut("ctrl+w"),
    "ctrl+f4": shortcut("ctrl+f4"),
    "alt+f4": shortcut("alt+f4"),
    "ctrl+shift+w": shortcut("ctrl+shift+w"),
    "ctrl+shift+q": shortcut("ctrl+shift+q"),
    # browser pages
    "ctrl+h": shortcut("ctrl+h"),
    "ctrl+j": shortcut("ctrl+j"),
    "ctrl+shift+delete": shortcut("ctrl+shift+delete"),
    "ctrl+shift+o": shortcut("ctrl+shift+o"),
    "ctrl+shift+b": shortcut("ctrl+shift+b"),
    "f1": shortcut("f1"),
    "alt+home": shortcut("alt+home"),
    "alt+left": shortcut("alt+left"),
    "ctrl+l+url": typed("ctrl+l", "chrome://settings"),
    "alt+d+url": typed("alt+d", "chrome://gpu"),
    "f6+url": typed("f6", "file:///etc/"),
    "ctrl+k+search": typed("ctrl+k", "x"),
    # files, printing, source, developer tools
    "ctrl+o": shortcut("ctrl+o"),
    "ctrl+s": shortcut("ctrl+s"),
    "ctrl+p": shortcut("ctrl+p"),
    "ctrl+u": shortcut("ctrl+u"),
    "f12": shortcut("f12"),
    "ctrl+shift+i": shortcut("ctrl+shift+i"),
    "ctrl+shift+j": shortcut("ctrl+shift+j"),
    "ctrl+shift+c": shortcut("ctrl+shift+c"),
    # browser windows and dialogs of its own: task manager, caret browsing, menus, full screen
    "shift+escape": shortcut("shift+escape"),
    "f7": shortcut("f7"),
    "f10": shortcut("f10", then=("down", "return")),
    "shift+f10": shortcut("shift+f10", then=("down", "return")),
    "alt+f": shortcut("alt+f", then=("down", "return")),
    "menu-key": shortcut("menu", then=("down", "return")),
    "f11": shortcut("f11"),
    "f5": shortcut("f5"),
    "super": shortcut("super"),
    "ctrl+alt+backspace": shortcut("ctrl+alt+backspace"),
    # clicks on one of the app's links
    "shift+click": link_click(held="shift"),
    "ctrl+click": link_click(held="ctrl"),
    "ctrl+shift+click": link_click(held="ctrl+shift"),
    "alt+click": link_click(held="alt"),
    "middle-click": link_click(button=2),
    "shift+middle-click": link_click(button=2, held="shift"),
    "right-click+open-in-new-window": _link_menu,
    "drag-link": _drag_link,
    "shift+return-on-link": key_on_link("shift+return"),
    "ctrl+return-on-link": key_on_link("ctrl+return"),
    # a modifier held across a reconnect or a replaced session (finding 20)
    "ctrl-held-reconnect+h": held_across_reconnect("h"),
    "ctrl-held-reconnect+j": held_across_reconnect("j"),
    "ctrl-held-reconnect+shift+delete": held_across_reconnect("shift+delete"),
    "ctrl-held-reconnect+n": held_across_reconnect("n"),
    "ctrl-held-replaced+h": held_across_replacement("h"),
    # keysyms outside the keyboard (finding 21)
    "stickykeys_enable+ctrl+n": keysyms_then((STICKYKEYS_ENABLE,), ("n",)),
    "stickykeys_enable+ctrl+h": keysyms_then((STICKYKEYS_ENABLE,), ("h",)),
    "shift-five-times+ctrl+n": keysyms_then((SHIFT,) * 5, ("n",)),
    "terminate_server": keysyms_then((TERMINATE_SERVER,), ()),  # last: on a kiosk without defences, the end
}


def page_area(enclave: Enclave) -> bytes:
    """Every 7th pixel of the screen below the app's header: the page's empty main area, which a dialog drawn inside
    the window (caret browsing's, a permission prompt) dims or covers."""
    with enclave.xconn() as conn:
        width, height, raw = conn.screenshot()
    return b"".join(raw[(y * width + x) * 4:(y * width + x) * 4 + 3]
                    for y in range(200, height - 20, 7) for x in range(20, width - 40, 7))


def settled_page_area(enclave: Enclave, timeout: float = 5.0) -> bytes:
    """The page area once two looks 0.3 s apart agree: on a loaded machine Chromium can be caught mid-repaint (after
    the blur click, or after the watermark's minute redraw exposes what lay under its glyphs), and a half-painted
    screen is not a dialog. A dialog stays, so it is still in the settled look."""
    deadline = time.monotonic() + timeout
    last = page_area(enclave)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = page_area(enclave)
        if _changed(last, now) < 0.005:
            return now
        last = now
    return last


def _palette(area: bytes) -> list[tuple[str, float]]:
    """The three commonest colours of a page area and their shares, for a failure's message."""
    from collections import Counter

    counts = Counter(area[i:i + 3] for i in range(0, len(area), 3))
    total = max(sum(counts.values()), 1)
    return [(c.hex(), round(n / total, 3)) for c, n in counts.most_common(3)]


def _changed(before: bytes, after: bytes) -> float:
    pixels = len(before) // 3
    return sum(before[i:i + 3] != after[i:i + 3] for i in range(0, len(before), 3)) / max(pixels, 1)


def test_control_the_checks_see_a_window_the_watchdog_removes(enclave: Enclave) -> None:
    """A second browser window (a second Chromium invocation on the kiosk's profile asks the running browser for
    one): the watchdog closes it within a fraction of a second, and the window samples still show it; the same
    checks then find nothing for each attempt below."""
    import subprocess

    from enclave.kiosk.browser import browser_env

    enclave.clean_slate()
    k = enclave.kiosk.kiosk
    closed = k.watchdog.closed
    cmd = k._browser_command()
    cmd[-1:] = ["--new-window", k.config.app_url]
    env = browser_env({"DISPLAY": k.display.name, "XAUTHORITY": str(k._home / "xauthority")}, k._home)
    # The watchdog can close the window between two samples on a loaded machine (CI missed it once), so its close
    # waits until the samples have shown the window: this control is about what the samples can see.
    act = k.watchdog._act

    def act_once_sampled(plan: Any) -> None:
        deadline = time.monotonic() + 5
        while plan.close and time.monotonic() < deadline and not any(len(s) == 2 for _, s in monitor.samples):
            time.sleep(0.01)
        act(plan)

    with WindowMonitor(enclave.kiosk) as monitor:
        k.watchdog._act = act_once_sampled
        try:
            subprocess.run(cmd, env=env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 10
            while k.watchdog.closed == closed and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            del k.watchdog._act
        time.sleep(0.5)
    assert k.watchdog.closed > closed
    assert any(len(shown) == 2 for _, shown in monitor.samples), "the samples missed the second window"
    enclave.clean_slate()


# What the app's own page must stop even if the proxy let it through (finding 22: "the app's links should not be
# openable in new windows at all"): the same attempts straight to the VNC server.
LINK_ATTEMPTS = ("shift+click", "ctrl+click", "ctrl+shift+click", "alt+click", "middle-click", "shift+middle-click",
                 "right-click+open-in-new-window", "drag-link", "shift+return-on-link", "ctrl+return-on-link")


@pytest.mark.parametrize("name", LINK_ATTEMPTS)
def test_the_apps_links_open_nowhere_without_the_proxy(enclave: Enclave, name: str) -> None:
    enclave.direct = True
    try:
        check_attempt(enclave, name)
    finally:
        enclave.direct = False


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_escape_attempt_through_the_gateway(enclave: Enclave, name: str) -> None:
    check_attempt(enclave, name)


def check_attempt(enclave: Enclave, name: str) -> None:
    """Run one attempt and assert that it changed nothing (see the module docstring)."""
    kiosk = enclave.kiosk.kiosk
    display = kiosk.display
    assert display is not None and display.proc.poll() is None, f"Xvfb is gone ({kiosk.failure})"
    enclave.clean_slate()
    watchdog = kiosk.watchdog
    assert watchdog is not None
    before = (watchdog.closed, watchdog.tabs_closed, watchdog.restarts, kiosk.browser_starts)
    title = enclave.kiosk.shown()[0].title
    screen = settled_page_area(enclave)
    requests = len(enclave.app.requests)

    async def attempt() -> None:
        async with aiohttp.ClientSession() as http:
            await asyncio.wait_for(ATTEMPTS[name](enclave, http), 60)

    with WindowMonitor(enclave.kiosk) as monitor:
        asyncio.run(attempt())
        time.sleep(0.5)
    xvfb_runs = display.proc.poll() is None and not kiosk.failed.is_set()
    sticky = enclave.sticky_keyboards() if xvfb_runs else []
    after = (watchdog.closed, watchdog.tabs_closed, watchdog.restarts, kiosk.browser_starts)
    seen = [(round(t - monitor.samples[0][0], 2), shown) for t, shown in monitor.samples
            if len(shown) != 1 or shown[0][1] != title]
    loaded = enclave.app.requests[requests:]
    assert xvfb_runs, f"{name}: Xvfb stopped ({kiosk.failure})"
    assert sticky == [], f"{name}: StickyKeys is on for keyboard devices {sticky}"
    assert seen == [], f"{name}: the kiosk showed other windows or pages: {seen[:3]} ... {seen[-1:]}"
    assert after == before, (f"{name}: the watchdog had to act (closed windows, closed tabs, restarts, browser "
                             f"starts: {before} -> {after}); {watchdog.events[-3:]}")
    assert loaded == [], f"{name}: the browser asked the app for {loaded} (a tab in the background, a download?)"
    now = settled_page_area(enclave)
    changed = _changed(screen, now)
    assert changed < 0.02, (f"{name}: {changed:.0%} of the page area changed (a dialog in the window?); colours "
                            f"before {_palette(screen)}, after {_palette(now)}")
    assert enclave.only_the_app(), f"{name}: {enclave.kiosk.shown()}"
