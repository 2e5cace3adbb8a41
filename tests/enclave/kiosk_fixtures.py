"""Test-side pieces for the kiosk tests: a stand-in app, a server that must never be reached, a kiosk running in
its own event loop thread, and a researcher's keyboard and mouse through the RFB proxy.
"""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
import zlib
import struct
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from enclave.kiosk import Kiosk, KioskConfig, KioskEndpoint
from enclave.kiosk.xlib import TopLevel, XConnection
from proxy.limits import SessionLimits
from proxy.server import RfbProxyServer
from proxy.session import UpstreamTarget
from tests.proxy.rfbtools import PF_32, RfbClient

T = TypeVar("T")

APP_TITLE = "safeshare kiosk test app"
APP_BG = (0x2A, 0x7A, 0xB0)

KEYSYMS = {
    "ctrl": 0xFFE3, "shift": 0xFFE1, "alt": 0xFFE9, "super": 0xFFEB, "return": 0xFF0D, "enter": 0xFF0D,
    "escape": 0xFF1B, "esc": 0xFF1B, "tab": 0xFF09, "down": 0xFF54, "up": 0xFF52, "left": 0xFF51, "right": 0xFF53,
    "home": 0xFF50, "backspace": 0xFF08, "delete": 0xFFFF, "menu": 0xFF67, "q": 0x71,
    **{f"f{n}": 0xFFBE + n - 1 for n in range(1, 13)},
}
STICKYKEYS_ENABLE = 0xFE75
TERMINATE_SERVER = 0xFED5


def keysym(name: str) -> int:
    name = name.lower()
    if name in KEYSYMS:
        return KEYSYMS[name]
    if len(name) == 1:
        return ord(name)
    raise KeyError(name)


def host_address() -> str | None:
    """A non-loopback address of this machine (the page also tries it), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent for a UDP connect
            address = sock.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


APP_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>html,body{margin:0;height:100%%;background:rgb(%(bg)s);font:20px sans-serif;color:#fff}
a{display:block;margin:40px;font-size:40px;color:#fff}</style></head>
<body><a id="out" href="%(other)s/link">a link to another port</a>
<script>
const targets = %(targets)s;
const results = {};
function withTimeout(promise, ms) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), ms))]);
}
async function attempt(name, fn) {
  try { await withTimeout(fn(), 4000); results[name] = "reached"; }
  catch (e) { results[name] = "blocked:" + (e && e.message || e); }
}
(async () => {
  for (const [label, base] of Object.entries(targets)) {
    await attempt("fetch-" + label, () => fetch(base + "/fetch", {mode: "no-cors"}));
    await attempt("img-" + label, () => new Promise((ok, no) => {
      const img = new Image(); img.onload = ok; img.onerror = () => no(new Error("img error")); img.src = base + "/img";
    }));
    await attempt("ws-" + label, () => new Promise((ok, no) => {
      const ws = new WebSocket(base.replace("http", "ws") + "/ws"); ws.onopen = ok; ws.onerror = () => no(new Error("ws"));
    }));
    await attempt("beacon-" + label, async () => { if (!navigator.sendBeacon(base + "/beacon", "x")) throw new Error("no"); });
  }
  await fetch("/report?" + new URLSearchParams(results));
})();
</script></body></html>
"""


class _AppHandler(BaseHTTPRequestHandler):
    server: "AppServer"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = urlsplit(self.path)
        self.server.requests.append(path.path)
        if path.path == "/report":
            self.server.reports.append({k: v[0] for k, v in parse_qs(path.query).items()})
            body, ctype = b"ok", "text/plain"
        elif path.path in ("/", "/index.html"):
            body, ctype = self.server.page().encode(), "text/html; charset=utf-8"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class AppServer(ThreadingHTTPServer):
    """The stand-in analytics app: one page that also tries to reach `targets`, and reports what happened."""

    daemon_threads = True

    def __init__(self, targets: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), _AppHandler)
        self.targets = targets
        self.requests: list[str] = []
        self.reports: list[dict[str, str]] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def page(self) -> str:
        return APP_PAGE % {"title": APP_TITLE, "bg": ",".join(map(str, APP_BG)),
                           "other": next(iter(self.targets.values())), "targets": json.dumps(self.targets)}

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _CountHandler(BaseHTTPRequestHandler):
    server: "CountingServer"

    def do_GET(self) -> None:  # noqa: N802
        self.server.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/gif")
        self.send_header("Access-Control-Allow-Origin", "*")
        gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x00;"
        self.send_header("Content-Length", str(len(gif)))
        self.end_headers()
        self.wfile.write(gif)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


class CountingServer(ThreadingHTTPServer):
    """A server on every interface that nothing in the kiosk may reach: counts accepted connections and requests."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("0.0.0.0", 0), _CountHandler)
        self.connections = 0
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        conn = super().get_request()
        self.connections += 1
        return conn

    def reset(self) -> None:
        self.connections = 0
        self.requests.clear()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class LoopThread:
    """An event loop in a thread of its own, so that a kiosk keeps running (watchdog, relay) between tests that
    each run their own `asyncio.run`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 90) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class RunningKiosk:
    kiosk: Kiosk
    endpoint: KioskEndpoint
    loop: LoopThread

    def windows(self) -> list[TopLevel]:
        display = self.kiosk.display
        assert display is not None
        with XConnection(display.name, display.cookie) as conn:
            return conn.top_levels()

    def shown(self) -> list[TopLevel]:
        """Mapped, managed top-level windows: what the researcher can see as windows."""
        return [w for w in self.windows() if w.viewable and not w.override_redirect]

    def upstream(self) -> UpstreamTarget:
        return UpstreamTarget.parse(self.endpoint.upstream, self.endpoint.password())


def start_kiosk(config: KioskConfig) -> RunningKiosk:
    loop = LoopThread()
    kiosk = Kiosk(config)
    try:
        endpoint = loop.run(kiosk.start())
    except BaseException:
        loop.close()
        raise
    return RunningKiosk(kiosk, endpoint, loop)


def stop_kiosk(running: RunningKiosk) -> None:
    try:
        running.loop.run(running.kiosk.stop())
    finally:
        running.loop.close()


@dataclass
class Researcher:
    """Keyboard and mouse of a researcher, as RFB messages through the proxy."""

    client: RfbClient
    pace: float = 0.03
    sent: list[str] = field(default_factory=list)

    async def combo(self, text: str, settle: float = 0.25) -> None:
        """Press e.g. "ctrl+shift+i": modifiers down in order, key down and up, modifiers up in reverse."""
        keys = [keysym(part) for part in text.split("+")]
        for key in keys:
            await self.client.key(key, True)
            await asyncio.sleep(self.pace)
        for key in reversed(keys):
            await self.client.key(key, False)
            await asyncio.sleep(self.pace)
        self.sent.append(text)
        await asyncio.sleep(settle)

    async def type(self, text: str) -> None:
        for char in text:
            await self.client.key(ord(char), True)
            await self.client.key(ord(char), False)
            await asyncio.sleep(self.pace)

    async def click(self, x: int, y: int, button: int = 1, settle: float = 0.4, held: str = "") -> None:
        """A click, with modifiers held around it if `held` names them ("shift", "ctrl+shift")."""
        mask = 1 << (button - 1)
        modifiers = [keysym(part) for part in held.split("+")] if held else []
        await self.client.pointer(0, x, y)
        await asyncio.sleep(self.pace)
        for key in modifiers:
            await self.client.key(key, True)
            await asyncio.sleep(self.pace)
        await self.client.pointer(mask, x, y)
        await asyncio.sleep(self.pace)
        await self.client.pointer(0, x, y)
        await asyncio.sleep(self.pace)
        for key in reversed(modifiers):
            await self.client.key(key, False)
            await asyncio.sleep(self.pace)
        self.sent.append(f"{held}+click{button}" if held else f"click{button}")
        await asyncio.sleep(settle)

    async def tap(self, key: int, settle: float = 0.2) -> None:
        """One key (by keysym) down and up."""
        await self.client.key(key, True)
        await asyncio.sleep(self.pace)
        await self.client.key(key, False)
        self.sent.append(f"0x{key:x}")
        await asyncio.sleep(settle)

    async def drag(self, start: tuple[int, int], end: tuple[int, int], steps: int = 12) -> None:
        await self.client.pointer(0, *start)
        await asyncio.sleep(0.1)
        await self.client.pointer(1, *start)
        await asyncio.sleep(0.2)
        for i in range(1, steps + 1):
            x = start[0] + (end[0] - start[0]) * i // steps
            y = start[1] + (end[1] - start[1]) * i // steps
            await self.client.pointer(1, x, y)
            await asyncio.sleep(0.05)
        await self.client.pointer(0, *end)
        await asyncio.sleep(0.5)


async def drain(client: RfbClient, seconds: float) -> None:
    """Keep reading server messages for a while (so that the server never blocks on a full socket)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        try:
            await asyncio.wait_for(client.read_message(), max(0.01, deadline - loop.time()))
        except asyncio.TimeoutError:
            break


async def grab(client: RfbClient) -> bytes:
    """A full framebuffer, fresh (non-incremental request)."""
    await drain(client, 0.2)
    await client.request(incremental=False)
    await client.read_update(timeout=15)
    return bytes(client.fb)


def share_of_colour(fb: bytes, width: int, height: int, colour: tuple[int, int, int], step: int = 7) -> float:
    """Fraction of sampled pixels (BGRX) that have `colour`."""
    hits = total = 0
    for y in range(0, height, step):
        row = y * width * 4
        for x in range(0, width, step):
            i = row + x * 4
            total += 1
            hits += (fb[i + 2], fb[i + 1], fb[i]) == colour
    return hits / total


def write_png(path: Path, fb: bytes, width: int, height: int) -> None:
    """BGRX framebuffer to PNG (for a person looking at a failure)."""
    raw = bytearray()
    for y in range(height):
        raw.append(0)
        row = fb[y * width * 4:(y + 1) * width * 4]
        for x in range(width):
            raw += bytes((row[x * 4 + 2], row[x * 4 + 1], row[x * 4]))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + chunk(b"IEND", b""))


async def through_proxy(upstream: UpstreamTarget, sessions: Path, limits: SessionLimits,
                        body: Callable[[RfbClient], Awaitable[T]]) -> tuple[T, Path]:
    """Run `body` with an RFB client connected through a fresh proxy; returns its result and the session folder."""
    ended: list[Path] = []
    server = RfbProxyServer(upstream, sessions, limits, on_session_end=lambda s, _reason: ended.append(s.dir))
    port = await server.start("127.0.0.1", 0)
    client = RfbClient()
    try:
        await client.connect(port, encodings=(0, 1))
        result = await body(client)
    finally:
        await client.close()
        async with asyncio.timeout(10):
            while not ended:
                await asyncio.sleep(0.02)
        await server.close()
    return result, ended[0]


def events(session_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def headless_control(url: str, profile: Path, seconds: int = 8) -> None:
    """Positive control: an ordinary headless Chromium, no policy, no namespace, opens the app page, whose script
    then does reach the other server; shows that the kiosk test would see a leak."""
    subprocess.run(["/usr/lib/chromium/chromium", "--headless=new", "--no-sandbox", f"--user-data-dir={profile}",
                    "--disable-gpu", f"--virtual-time-budget={seconds * 1000}", "--dump-dom", url],
                   capture_output=True, timeout=60)


async def vnc_direct(upstream: str, password: bytes, encodings: tuple[int, ...] = (0, 1)) -> RfbClient:
    """An RFB client straight to the kiosk's VNC server (VNC authentication, no proxy in between): what a keysym
    that got past the proxy would meet."""
    from proxy.rfb import vnc_auth_response

    if upstream.startswith("unix:"):
        reader, writer = await asyncio.open_unix_connection(upstream[5:], limit=1 << 22)
    else:
        host, port = upstream.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 22)
    client = RfbClient()
    client.reader, client.writer = reader, writer
    async with asyncio.timeout(15):
        assert (await reader.readexactly(12)).startswith(b"RFB 003.")
        writer.write(b"RFB 003.008\n")
        (count,) = await reader.readexactly(1)
        assert 2 in await reader.readexactly(count), "the VNC server does not offer VNC authentication"
        writer.write(b"\x02")
        writer.write(vnc_auth_response(password, await reader.readexactly(16)))
        assert await reader.readexactly(4) == b"\0\0\0\0", "VNC authentication failed"
        writer.write(b"\x01")
        client.width, client.height = struct.unpack(">HH", await reader.readexactly(4))
        await reader.readexactly(16)
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        client.name = await reader.readexactly(length)
    client.fb = bytearray(client.width * client.height * 4)
    writer.write(b"\x00\x00\x00\x00" + PF_32)
    await client.set_encodings(encodings)
    return client


class WindowMonitor:
    """Samples the kiosk display's shown windows every `step` seconds in a thread, so that a test sees a second
    window or a wrong title even if the watchdog removes it a moment later."""

    def __init__(self, running: "RunningKiosk", step: float = 0.05) -> None:
        self.running = running
        self.step = step
        self.samples: list[tuple[float, list[tuple[int, str]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        display = self.running.kiosk.display
        assert display is not None
        with XConnection(display.name, display.cookie) as conn:
            while not self._stop.is_set():
                try:
                    shown = [(w.window, w.title) for w in conn.top_levels() if w.viewable and not w.override_redirect]
                except Exception as exc:  # the display went away: that is a finding too
                    self.samples.append((time.monotonic(), [(-1, f"X error: {exc}")]))
                    return
                self.samples.append((time.monotonic(), shown))
                self._stop.wait(self.step)

    def __enter__(self) -> "WindowMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def mark(self) -> int:
        """Index of the next sample (to look at what happened after this point)."""
        return len(self.samples)

    def anomalies(self, ok_title: Callable[[str], bool], since: int = 0) -> list[tuple[float, list[tuple[int, str]]]]:
        """Samples that showed anything but exactly one window whose title `ok_title` accepts."""
        return [(t, shown) for t, shown in self.samples[since:]
                if len(shown) != 1 or not ok_title(shown[0][1])]

    def longest_run(self, bad: Callable[[list[tuple[int, str]]], bool], since: int = 0,
                    until: int | None = None) -> float:
        """The longest stretch of time (seconds) over which consecutive samples were all `bad`."""
        longest, start = 0.0, None
        for t, shown in self.samples[since:until]:
            if bad(shown):
                start = t if start is None else start
                longest = max(longest, t - start)
            else:
                start = None
        return longest
