"""Headless Chromium driven over the DevTools protocol, for tests that need a real browser (noVNC, the app).

Debian's chromium with a throwaway profile, listening for DevTools on 127.0.0.1 only; every test gets its own.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp


async def wait_for(predicate: Callable[[], object], timeout: float = 5.0, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError("condition not reached in time")


class Cdp:
    """A minimal Chrome DevTools protocol client (one page target)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._next = 0
        self._pending: dict[int, asyncio.Future] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            future = self._pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)

    async def send(self, method: str, **params) -> dict:
        self._next += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[self._next] = future
        await self.ws.send_json({"id": self._next, "method": method, "params": params})
        async with asyncio.timeout(15):
            data = await future
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data["result"]

    async def evaluate(self, expression: str):
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def navigate(self, url: str) -> None:
        """Navigate and wait until the new document has loaded (the old one carries a marker, the new one not)."""
        await self.evaluate("window.__previousDocument = true")
        await self.send("Page.navigate", url=url)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if await self.evaluate("!window.__previousDocument && document.readyState === 'complete'"):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"page {url} did not load")

    async def close(self) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self.ws.close()


@asynccontextmanager
async def chromium(tmp_path: Path, http: aiohttp.ClientSession, window: str = "800,600") -> AsyncIterator[Cdp]:
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio", "--password-store=basic",
         f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         f"--window-size={window}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    cdp = None
    try:
        port_file = profile / "DevToolsActivePort"
        await wait_for(lambda: port_file.is_file() and port_file.read_text().count("\n") >= 1, 20, 0.05)
        port = int(port_file.read_text().splitlines()[0])
        async with asyncio.timeout(15):
            while True:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                    pages = [t for t in await response.json() if t["type"] == "page"]
                if pages:
                    break
                await asyncio.sleep(0.05)
        cdp = Cdp(await http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0))
        yield cdp
    finally:
        if cdp is not None:
            await cdp.close()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


async def wait_for_js(cdp: Cdp, expression: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = await cdp.evaluate(expression)
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"{expression!r} stayed {value!r}; page state: "
                         f"{await cdp.evaluate('window.safeshare && window.safeshare.state')}")
