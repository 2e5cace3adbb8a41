"""The proxy's input filter against a real x11vnc on a real Xvfb, judged by what the X server itself receives (issue 12,
items 15, 20, 21 and 22, proxy side): keys held across sessions are released, keysyms outside the allowlist never
reach X (and cannot stop it or turn StickyKeys on), the added default shortcuts and clicks with a modifier are
dropped. Every test has a positive control that sends the same input directly to x11vnc, showing that the X server
would have acted on it."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from proxy.eventlog import verify_log
from proxy.keysyms import RELEASE_KEYSYMS
from proxy.limits import SessionLimits
from proxy.server import RfbProxyServer
from proxy.session import UpstreamTarget
from proxy.tokens import TokenStore
from proxy.vncserver import SAFE_X11VNC_FLAGS
from tests.cdp import wait_for
from tests.proxy.rfbtools import RfbClient, free_port, stop_process, x11vnc_start, xvfb_start
from tests.proxy.test_gateway import db_url, running_gateway, ws_rfb_connect

pytestmark = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("Xvfb", "x11vnc", "xmodmap")),
                                reason="Xvfb, x11vnc and xmodmap are installed by scripts/setup.sh")

XKEYS = Path(__file__).with_name("xkeys.py")
CTRL, SHIFT, ALT = 0xFFE3, 0xFFE1, 0xFFE9
KEY_H, KEY_Q, KEY_Z = 0x68, 0x71, 0x7A
ESCAPE, F4, F7, F10 = 0xFF1B, 0xFFC1, 0xFFC4, 0xFFC7
STICKYKEYS_ENABLE, TERMINATE_SERVER = 0xFE75, 0xFED5
SWITCH_VT_1, CLEAR_GRAB, UNGRAB = 0x1008FE01, 0x1008FE21, 0x1008FE20
X_SHIFT, X_CONTROL = 1, 4  # X modifier state bits


class XInput:
    """Key and button events on the display's root window with their modifier state, from tests/proxy/xkeys.py."""

    def __init__(self, display: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(XKEYS), "listen", display, "--buttons"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self.events: list[tuple[str, int, int]] = []  # (press|release|bpress|brelease, keysym or button, state)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, what, state, _, _ = line.split()
            self.events.append((kind, int(what), int(state)))

    def presses(self) -> list[tuple[int, int]]:
        return [(what, state) for kind, what, state in list(self.events) if kind == "press"]

    def clicks(self) -> list[tuple[int, int]]:
        return [(what, state) for kind, what, state in list(self.events) if kind == "bpress"]

    def wait_for(self, kind: str, what: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e[0] == kind and e[1] == what for e in list(self.events)):
            assert time.monotonic() < deadline, f"{kind} {what:#x} never reached the X server"
            time.sleep(0.02)

    def stop(self) -> None:
        stop_process(self.proc)
        self._thread.join(5)


def held_keys(display: str) -> list[int]:
    out = subprocess.run([sys.executable, str(XKEYS), "held", display], capture_output=True, text=True, check=True,
                         timeout=10).stdout
    return [int(code) for code in out.split()]


def keymap(display: str) -> str:
    return subprocess.run(["xmodmap", "-pke"], env={**os.environ, "DISPLAY": display}, capture_output=True, text=True,
                          check=True, timeout=10).stdout


def events(session_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def display():
    proc, name = xvfb_start()
    try:
        yield name
    finally:
        stop_process(proc)


@pytest.fixture
def vnc(display: str):
    """x11vnc with the enclave's clipboard flags; every key released again afterwards (a test may leave some)."""
    port = free_port()
    proc = x11vnc_start(display, port, list(SAFE_X11VNC_FLAGS))
    try:
        yield port
    finally:
        async def release_all() -> None:
            client = RfbClient()
            await client.connect(port)
            for keysym in RELEASE_KEYSYMS:
                await client.key(keysym, False)
            await client.pointer(0, 1, 1)
            await asyncio.sleep(0.2)
            await client.close()

        asyncio.run(release_all())
        stop_process(proc)


@pytest.fixture
def x(display: str):
    watcher = XInput(display)
    try:
        yield watcher
    finally:
        watcher.stop()


@asynccontextmanager
async def proxy(tmp_path: Path, vnc_port: int, limits: SessionLimits | None = None
                ) -> AsyncIterator[tuple[int, list[tuple[Path, str]]]]:
    """The proxy in front of x11vnc; yields its port and the (folder, reason) of each session that ended."""
    ended: list[tuple[Path, str]] = []
    server = RfbProxyServer(UpstreamTarget("127.0.0.1", vnc_port), tmp_path / "sessions", limits or SessionLimits(),
                            on_session_end=lambda s, reason: ended.append((s.dir, reason)))
    port = await server.start("127.0.0.1", 0)
    try:
        yield port, ended
    finally:
        await server.close()


async def keys(client: RfbClient, sequence: list[tuple[int, bool]]) -> None:
    for keysym, down in sequence:
        await client.key(keysym, down)


async def sentinel(client: RfbClient, x: XInput, keysym: int = KEY_Z) -> None:
    """Type `keysym` and wait until X has it: everything sent before has been processed by x11vnc."""
    await client.key(keysym, True)
    await client.key(keysym, False)
    await asyncio.to_thread(x.wait_for, "press", keysym)


async def direct(port: int, body: Callable[[RfbClient], Awaitable[None]]) -> None:
    client = RfbClient()
    await client.connect(port)
    try:
        await body(client)
    finally:
        await client.close()


async def through_proxy(tmp_path: Path, vnc_port: int, body: Callable[[RfbClient], Awaitable[None]]) -> Path:
    """Run `body` as one client session through the proxy; the session's folder once it has ended."""
    async with proxy(tmp_path, vnc_port) as (port, ended):
        client = RfbClient()
        await client.connect(port)
        await body(client)
        await client.close()
        await wait_for(lambda: ended)
        return ended[0][0]


# --- item 20: keys held across sessions -----------------------------------------------------------------------------

KEY_A = 0x61


def test_keys_held_when_a_session_ends_are_released(tmp_path: Path, display: str, vnc: int, x: XInput) -> None:
    """Ctrl and a pressed through the proxy, then the client leaves without releasing them: x11vnc keeps keys held
    in X when its client leaves (the positive control shows it, for a direct client), so the proxy releases them at
    the end. The releases do not change the keymap."""
    async def leave_holding(client: RfbClient) -> None:
        await keys(client, [(CTRL, True), (KEY_A, True)])
        await asyncio.to_thread(x.wait_for, "press", KEY_A)

    asyncio.run(direct(vnc, leave_holding))
    assert wait_until(lambda: len(held_keys(display)) == 2)  # positive control: both keys stay pressed in X

    async def release(client: RfbClient) -> None:
        await keys(client, [(KEY_A, False), (CTRL, False)])
        await sentinel(client, x)

    asyncio.run(direct(vnc, release))
    assert held_keys(display) == []
    before = keymap(display)
    x.events.clear()

    async def run() -> tuple[Path, str]:
        async with proxy(tmp_path, vnc) as (port, ended):
            client = RfbClient()
            await client.connect(port)
            await keys(client, [(CTRL, True), (KEY_A, True)])
            await asyncio.to_thread(x.wait_for, "press", KEY_A)
            await client.close()
            await wait_for(lambda: ended)
            return ended[0]

    session_dir, reason = asyncio.run(run())
    assert reason == "client closed"
    assert (KEY_A, X_CONTROL) in x.presses()
    assert wait_until(lambda: held_keys(display) == []), held_keys(display)
    assert keymap(display) == before
    resets = [e for e in events(session_dir) if e["event"] == "input_reset"]
    assert [e["when"] for e in resets] == ["start", "end"]
    assert verify_log(session_dir / "events.jsonl").ok


def test_a_modifier_left_held_is_released_when_the_next_session_starts(tmp_path: Path, display: str, vnc: int,
                                                                       x: XInput) -> None:
    """A Ctrl left held in X by an earlier client (a proxy that was killed, another viewer): the next session's
    filter has not seen it pressed, so the proxy releases every key before the first event passes. The h typed next
    reaches X as a plain h, not as Ctrl+H (Chromium's history page)."""
    async def leave_holding(client: RfbClient) -> None:
        await client.key(CTRL, True)
        await asyncio.sleep(0.2)

    asyncio.run(direct(vnc, leave_holding))
    assert wait_until(lambda: len(held_keys(display)) == 1)  # positive control: Ctrl stays pressed in X

    async def run() -> tuple[list[int], Path]:
        async with proxy(tmp_path, vnc) as (port, ended):
            client = RfbClient()
            await client.connect(port)
            await sentinel(client, x)
            held = held_keys(display)
            await sentinel(client, x, KEY_H)
            await client.close()
            await wait_for(lambda: ended)
            return held, ended[0][0]

    held, session_dir = asyncio.run(run())
    assert held == []
    assert [(keysym, state) for keysym, state in x.presses() if keysym in (KEY_Z, KEY_H)] == [(KEY_Z, 0), (KEY_H, 0)]
    start = next(e for e in events(session_dir) if e["event"] == "input_reset")
    assert start["when"] == "start" and start["keys"] >= len(RELEASE_KEYSYMS)


def test_a_replaced_gateway_session_releases_its_keys(tmp_path: Path, display: str, vnc: int, x: XInput) -> None:
    """Ctrl held in one WebSocket session, then a second connection with the same token replaces it: the first one
    releases its keys as it ends, the second before it starts, and its first key reaches X without Ctrl."""
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("rita", f"127.0.0.1:{vnc}", ttl=timedelta(minutes=5))

    async def run() -> tuple[list[int], list[tuple[Path, str]]]:
        async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
            url = f"{base}/websockify?token={issued.token}"
            first, _ = await ws_rfb_connect(http, url)
            await keys(first, [(CTRL, True), (KEY_A, True), (KEY_A, False)])
            await asyncio.to_thread(x.wait_for, "press", KEY_A)
            assert len(held_keys(display)) == 1  # Ctrl is held in X
            second, _ = await ws_rfb_connect(http, url)
            await sentinel(second, x)
            held = held_keys(display)
            await second.close()
            await wait_for(lambda: len(gateway.ended) == 2)
            return held, list(gateway.ended)  # type: ignore[attr-defined]

    try:
        held, ended = asyncio.run(run())
    finally:
        store.dispose()
    assert held == []
    assert (KEY_A, X_CONTROL) in x.presses() and (KEY_Z, 0) in x.presses()
    replaced = next(folder for folder, reason in ended if reason.startswith("replaced"))
    end = [e for e in events(replaced) if e["event"] == "input_reset" and e["when"] == "end"]
    assert len(end) == 1 and end[0]["keys"] >= len(RELEASE_KEYSYMS)


# --- item 21: keysyms outside the allowlist ---------------------------------------------------------------------------

def test_keysyms_outside_the_allowlist_never_reach_x(tmp_path: Path) -> None:
    """StickyKeys_Enable, Terminate_Server, XF86Switch_VT_1, XF86Ungrab, XF86ClearGrab and friends through the proxy:
    X receives none of them (its keymap is unchanged, StickyKeys stays off, Xvfb keeps running) and the log names
    each. The positive control sends StickyKeys_Enable and Terminate_Server straight to x11vnc on the same display:
    the first makes a tapped Ctrl latch onto the next key, the second stops the X server."""
    xvfb, display = xvfb_start()
    port = free_port()
    vnc = x11vnc_start(display, port, list(SAFE_X11VNC_FLAGS))
    x = XInput(display)
    refused = [STICKYKEYS_ENABLE, TERMINATE_SERVER, SWITCH_VT_1, UNGRAB, CLEAR_GRAB, 0xFE01, 0xFE72, 0xFE78, 0xFED0,
               0xFE50, 0xFFE6, 0xFF15, 0xFF20, 0xFFCA, 0x1008FF2E, 0x1005FF10, 0xFD05, 0x00, 0x1B, 0x7F]
    try:
        before = keymap(display)

        async def tap_ctrl_then_a(client: RfbClient) -> None:
            await keys(client, [(CTRL, True), (CTRL, False), (KEY_A, True), (KEY_A, False)])
            await asyncio.to_thread(x.wait_for, "press", KEY_A)

        async def run() -> tuple[Path, str]:
            async with proxy(tmp_path, port) as (proxy_port, ended):
                client = RfbClient()
                await client.connect(proxy_port)
                for keysym in refused:
                    await keys(client, [(keysym, True), (keysym, False)])
                await sentinel(client, x)
                await tap_ctrl_then_a(client)
                await client.close()
                await wait_for(lambda: ended)
                return ended[0]

        session_dir, reason = asyncio.run(run())
        assert reason == "client closed"
        assert xvfb.poll() is None, "the X server stopped"
        assert x.presses() == [(KEY_Z, 0), (CTRL, 0), (KEY_A, 0)]  # nothing else; the a without a latched Ctrl
        assert keymap(display) == before
        log = events(session_dir)
        blocked = [(e["keysym"], e["down"]) for e in log if e["event"] == "key_blocked"]
        assert blocked == [(keysym, down) for keysym in refused for down in (True, False)]
        assert all(e["refused"] and e["shortcut"] is None for e in log if e["event"] == "key_blocked")
        meta = json.loads((session_dir / "meta.json").read_text())
        assert meta["counters"]["keys_refused"] == 2 * len(refused)

        # positive control, straight to the VNC server
        x.events.clear()

        async def sticky(client: RfbClient) -> None:
            await keys(client, [(STICKYKEYS_ENABLE, True), (STICKYKEYS_ENABLE, False)])
            await asyncio.sleep(0.3)
            await tap_ctrl_then_a(client)

        asyncio.run(direct(port, sticky))
        assert keymap(display) != before  # x11vnc added the keysym to the keymap
        assert (KEY_A, X_CONTROL) in x.presses()  # StickyKeys latched the tapped Ctrl onto the a

        async def terminate(client: RfbClient) -> None:
            await keys(client, [(TERMINATE_SERVER, True), (TERMINATE_SERVER, False)])
            await asyncio.sleep(0.5)

        try:
            asyncio.run(direct(port, terminate))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        xvfb.wait(10)  # the X server exited
    finally:
        x.stop()
        stop_process(vnc)
        stop_process(xvfb)


# --- items 15 and 22: added default shortcuts and clicks with a modifier ----------------------------------------------

def test_added_default_shortcuts_never_reach_x(tmp_path: Path, vnc: int, x: XInput) -> None:
    """Ctrl+F4 (closes the kiosk window), Ctrl+Shift+Q (quits), Shift+Escape (task manager), F10 and Shift+F10
    (menus), F7 (caret browsing's dialog) with the proxy's default limits."""
    combos = [(CTRL, True), (F4, True), (F4, False), (CTRL, False),
              (CTRL, True), (SHIFT, True), (KEY_Q, True), (KEY_Q, False), (SHIFT, False), (CTRL, False),
              (SHIFT, True), (ESCAPE, True), (ESCAPE, False), (SHIFT, False),
              (F10, True), (F10, False), (F7, True), (F7, False),
              (SHIFT, True), (F10, True), (F10, False), (SHIFT, False)]
    targets = {F4, KEY_Q, ESCAPE, F10, F7}

    async def send(client: RfbClient) -> None:
        await keys(client, combos)
        await sentinel(client, x)

    asyncio.run(direct(vnc, send))  # positive control: X gets every one of them
    assert targets <= {keysym for keysym, _ in x.presses()}
    x.events.clear()

    session_dir = asyncio.run(through_proxy(tmp_path, vnc, send))
    assert targets.isdisjoint(keysym for keysym, _ in x.presses())
    assert [e["shortcut"] for e in events(session_dir) if e["event"] == "key_blocked"] == [
        "Ctrl+F4", "Ctrl+Shift+Q", "Shift+Escape", "F10", "F7", "F10"]


def test_clicks_with_a_modifier_never_reach_x(tmp_path: Path, vnc: int, x: XInput) -> None:
    """Shift+click (new window), Ctrl+Shift+click and Ctrl+click (new tab), Shift+middle-click, Alt+click (download),
    Shift+right-click (the browser's own context menu): the button press is dropped while the modifier is held; the
    modifier itself and a plain click afterwards pass."""
    clicks = [([SHIFT], 1), ([CTRL, SHIFT], 1), ([SHIFT], 2), ([ALT], 1), ([CTRL], 1), ([SHIFT], 4)]

    async def send(client: RfbClient) -> None:
        await client.pointer(0, 100, 100)
        for modifiers, button in clicks:
            await keys(client, [(m, True) for m in modifiers])
            await client.pointer(button, 100, 100)
            await client.pointer(0, 100, 100)
            await keys(client, [(m, False) for m in reversed(modifiers)])
        await client.pointer(1, 120, 100)  # a plain click passes
        await client.pointer(0, 120, 100)
        await asyncio.to_thread(x.wait_for, "bpress", 1)
        await sentinel(client, x)

    asyncio.run(direct(vnc, send))  # positive control: X gets every click, with the modifier in its state
    assert x.clicks()[:len(clicks)] == [(1, X_SHIFT), (1, X_SHIFT | X_CONTROL), (2, X_SHIFT), (1, 8), (1, X_CONTROL),
                                        (3, X_SHIFT)]
    x.events.clear()

    session_dir = asyncio.run(through_proxy(tmp_path, vnc, send))
    assert x.clicks() == [(1, 0)]  # only the plain click
    dropped = [e for e in events(session_dir) if e["event"] == "click_dropped"]
    assert [(e["buttons"], e["shortcut"]) for e in dropped] == [
        (1, "Shift+Click"), (1, "Ctrl+Click"), (2, "Shift+MiddleClick"), (1, "Alt+Click"), (1, "Ctrl+Click"),
        (4, "Shift+RightClick")]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
