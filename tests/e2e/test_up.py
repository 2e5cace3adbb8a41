"""The whole enclave through the real stack, started the way the README starts it: `safeshare up`.

A researcher's headless Chromium opens the printed URL; noVNC must show what the kiosk display shows (compared block
by block with a screenshot taken on the kiosk's X display); clicks sent through noVNC open the cohort page and tick a
filter, and the record count drawn on the screen changes; the session log records those clicks. Ctrl+C then stops
everything: no process of the enclave is left, the session is sealed, the token no longer works.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from proxy.eventlog import verify_log
from tests.cdp import Cdp, chromium, wait_for_js

REPO = Path(__file__).resolve().parents[2]
HAVE_STACK = all(shutil.which(t) for t in ("Xvfb", "x11vnc", "chromium")) and Path("/usr/share/novnc/core/rfb.js").is_file()
pytestmark = pytest.mark.skipif(not HAVE_STACK, reason="Xvfb, x11vnc, chromium and novnc come from scripts/setup.sh")

BLOCK = 16
SIZE = (1280, 800)

# Mean colour per BLOCKxBLOCK block of noVNC's canvas, as one flat list (R, G, B per block, row by row).
CANVAS_BLOCKS = """(() => {
    const canvas = document.querySelector('#screen canvas');
    if (!canvas || canvas.width < %(w)d) return null;
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    const bw = Math.floor(canvas.width / %(b)d), bh = Math.floor(canvas.height / %(b)d), out = [];
    for (let by = 0; by < bh; by++) for (let bx = 0; bx < bw; bx++) {
        let r = 0, g = 0, b = 0;
        for (let y = by * %(b)d; y < (by + 1) * %(b)d; y++) for (let x = bx * %(b)d; x < (bx + 1) * %(b)d; x++) {
            const i = (y * canvas.width + x) * 4; r += data[i]; g += data[i + 1]; b += data[i + 2];
        }
        const n = %(b)d * %(b)d; out.push(Math.round(r / n), Math.round(g / n), Math.round(b / n));
    }
    return out;
})()""" % {"w": SIZE[0], "b": BLOCK}

CANVAS_BOX = """(() => { const c = document.querySelector('#screen canvas'); const r = c.getBoundingClientRect();
    return [r.left, r.top, r.width / c.width, r.height / c.height]; })()"""


def screen_blocks(display: str, xauthority: Path) -> np.ndarray:
    """The kiosk display's own pixels (XGetImage on the root window), averaged like CANVAS_BLOCKS."""
    from enclave.kiosk.xlib import XConnection

    cookie = xauthority.read_bytes()[-16:]
    with XConnection(display, cookie) as conn:
        width, height, raw = conn.screenshot()
    pixels = np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 4)[:, :, [2, 1, 0]].astype(np.float64)
    bh, bw = height // BLOCK, width // BLOCK
    blocks = pixels[:bh * BLOCK, :bw * BLOCK].reshape(bh, BLOCK, bw, BLOCK, 3).mean(axis=(1, 3))
    return np.rint(blocks).reshape(-1)


def kiosk_titles(display: str, xauthority: Path) -> list[str]:
    """Titles of the browser windows shown on the kiosk display (the page title is in the window title)."""
    from enclave.kiosk.xlib import XConnection

    with XConnection(display, xauthority.read_bytes()[-16:]) as conn:
        return [w.title for w in conn.top_levels() if w.viewable and not w.override_redirect and w.title]


def blocks_match(a: np.ndarray, b: np.ndarray, tolerance: float = 8.0, share: float = 0.98) -> float:
    """Share of blocks whose colours agree (the mouse pointer and a blinking caret may differ)."""
    diff = np.abs(a.reshape(-1, 3) - b.reshape(-1, 3)).max(axis=1)
    result = float((diff <= tolerance).mean())
    assert result >= share, f"only {result:.3f} of the blocks agree"
    return result


class UpProcess:
    """`safeshare up --json` as the README runs it; its stdout lines are collected by a thread."""

    def __init__(self, home: Path, listen: str) -> None:
        self.home = home
        self.stderr = open(home.parent / "up.stderr", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--listen", listen, "--json",
             "--size", f"{SIZE[0]}x{SIZE[1]}"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=self.stderr, text=True, start_new_session=True)
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def wait_event(self, event: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.get("event") == event:
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"no {event!r} from safeshare up; stderr:\n{self.stderr_text()}")

    def stderr_text(self) -> str:
        self.stderr.flush()
        return (self.home.parent / "up.stderr").read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
    return found


async def element_box(cdp: Cdp, selector: str) -> tuple[float, float, float, float]:
    box = await wait_for_js(cdp, f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        if (!e) return null; const r = e.getBoundingClientRect();
        return r.width > 0 ? [r.left, r.top, r.width, r.height] : null; }})()""")
    return tuple(box)


async def click_through_novnc(cdp: Cdp, x: float, y: float) -> None:
    """A researcher's click at kiosk pixel (x, y), as mouse events on noVNC's canvas."""
    left, top, sx, sy = await cdp.evaluate(CANVAS_BOX)
    px, py = left + x * sx, top + y * sy
    await cdp.send("Input.dispatchMouseEvent", type="mouseMoved", x=px, y=py)
    await asyncio.sleep(0.1)
    await cdp.send("Input.dispatchMouseEvent", type="mousePressed", x=px, y=py, button="left", clickCount=1)
    await asyncio.sleep(0.05)
    await cdp.send("Input.dispatchMouseEvent", type="mouseReleased", x=px, y=py, button="left", clickCount=1)


async def canvas_blocks(cdp: Cdp) -> np.ndarray:
    return np.array(await wait_for_js(cdp, CANVAS_BLOCKS, timeout=20), dtype=np.float64)


def region(blocks: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    grid = blocks.reshape(SIZE[1] // BLOCK, SIZE[0] // BLOCK, 3)
    x0, y0 = int(box[0] // BLOCK), int(box[1] // BLOCK)
    x1, y1 = int((box[0] + box[2]) // BLOCK) + 1, int((box[1] + box[3]) // BLOCK) + 1
    return grid[y0:y1, x0:x1]


def test_safeshare_up_end_to_end(tmp_path: Path) -> None:
    from tests.proxy.rfbtools import free_port

    home = tmp_path / "home"
    home.mkdir()
    up = UpProcess(home, f"127.0.0.1:{free_port()}")
    seen: dict[str, object] = {}
    try:
        ready = up.wait_event("ready", 120)
        seen["ready_seconds"] = ready["seconds"]

        status = subprocess.run([sys.executable, "-m", "safeshare.cli", "status", "--home", str(home), "--json"],
                                capture_output=True, text=True, cwd=REPO, timeout=30)
        seen["status_rc"] = status.returncode
        seen["status"] = json.loads(status.stdout)
        second = subprocess.run([sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--json"],
                                capture_output=True, text=True, cwd=REPO, timeout=60)
        seen["second_rc"], seen["second_err"] = second.returncode, second.stderr

        async def researcher() -> None:
            async with aiohttp.ClientSession() as http, \
                    chromium(tmp_path / "researcher", http, window="1400,1000") as cdp, \
                    chromium(tmp_path / "layout", http, window=f"{SIZE[0]},{SIZE[1]}") as layout:
                await layout.send("Emulation.setDeviceMetricsOverride", width=SIZE[0], height=SIZE[1],
                                  deviceScaleFactor=1, mobile=False)
                await cdp.send("Page.enable")
                await cdp.navigate(ready["url"])
                seen["state"] = await wait_for_js(cdp, "window.safeshare && window.safeshare.state === "
                                                       "'connected' && window.safeshare.state", timeout=20)
                # what noVNC drew is what the kiosk display shows
                await asyncio.sleep(1.0)
                received = await canvas_blocks(cdp)
                shown = await asyncio.to_thread(screen_blocks, ready["display"], home / "kiosk" / "xauthority")
                seen["overview_match"] = blocks_match(received, shown)
                seen["overview_not_blank"] = float(received.std())

                # where the app puts its controls, from the same page laid out at the kiosk's size
                await layout.navigate(ready["app"])
                link = await element_box(layout, "a[href*='cohort']")
                await click_through_novnc(cdp, link[0] + link[2] / 2, link[1] + link[3] / 2)
                seen["link_click"] = (link[0] + link[2] / 2, link[1] + link[3] / 2)
                href = await layout.evaluate("document.querySelector(\"a[href*='cohort']\").href")
                await layout.navigate(href)
                checkbox = await element_box(layout, "input[type=checkbox][id^='f-']")
                count_box = await element_box(layout, "#cohort-count")
                # the click opened the cohort page in the kiosk (its window title is the page's title)
                xauthority = home / "kiosk" / "xauthority"
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    seen["titles"] = await asyncio.to_thread(kiosk_titles, ready["display"], xauthority)
                    if any("cohort" in t.lower() for t in seen["titles"]):
                        break
                    await asyncio.sleep(0.3)
                await asyncio.sleep(1.0)
                before = await canvas_blocks(cdp)
                shown = await asyncio.to_thread(screen_blocks, ready["display"], xauthority)
                seen["cohort_match"] = blocks_match(before, shown)
                seen["page_changed"] = float(np.abs(before - received).max())
                target = (checkbox[0] + checkbox[2] / 2, checkbox[1] + checkbox[3] / 2)
                await click_through_novnc(cdp, *target)
                seen["checkbox_click"] = target
                deadline = time.monotonic() + 10
                change = 0.0
                while time.monotonic() < deadline and change <= 8:
                    await asyncio.sleep(0.3)
                    after = await canvas_blocks(cdp)
                    change = float(np.abs(region(after, count_box) - region(before, count_box)).max())
                seen["count_change"] = change

        asyncio.run(researcher())

        up.proc.send_signal(signal.SIGINT)
        seen["exit"] = up.proc.wait(90)
        seen["stopped"] = up.wait_event("stopped", 5)
    finally:
        up.kill()
        up.stderr.close()

    assert seen["ready_seconds"] < 90, seen
    status = seen["status"]
    assert seen["status_rc"] == 0 and status["running"] and status["healthy"], status
    # the custodian service on HOME: the airlock's intake and the checkers' review pages
    assert set(status["components"]) == {"app", "kiosk", "gateway", "custodian"}
    assert seen["second_rc"] == 1 and "already runs" in seen["second_err"]
    assert seen["state"] == "connected"
    assert seen["overview_not_blank"] > 5  # the app's page, not an empty screen
    assert len(seen["titles"]) == 1 and "cohort" in seen["titles"][0].lower(), seen  # the click opened the page
    assert seen["page_changed"] > 8, seen
    assert seen["count_change"] > 8, seen  # ticking a filter changed the count on the screen
    assert seen["exit"] == 0, up.stderr_text()
    assert processes_mentioning(str(home)) == []
    assert not (home / "up.json").exists()

    sessions = list((home / "sessions").iterdir())
    assert len(sessions) == 1
    log = sessions[0] / "events.jsonl"
    assert verify_log(log).ok
    from proxy.audit.verify import verify_session

    check = verify_session(sessions[0])  # what an auditor runs: chain, seal, sealed recording hash, meta head
    assert check.ok, check.findings
    from proxy.audit.player import prepare

    player = prepare(sessions[0], tmp_path / "player-cache")  # noVNC's real encodings decode end to end
    assert player.frames and player.index["width"] >= 1000
    assert player.frame_at(player.index["duration"]).std() > 10  # the app's page, not a blank screen
    events = [json.loads(line) for line in log.read_text().splitlines()]
    presses = [(e["x"], e["y"]) for e in events if e.get("event") == "pointer" and e.get("mask") == 1]
    for x, y in (seen["link_click"], seen["checkbox_click"]):
        assert any(abs(px - x) <= 2 and abs(py - y) <= 2 for px, py in presses), (x, y, presses)
    meta = json.loads((sessions[0] / "meta.json").read_text())
    assert meta["end"] and meta["end_reason"], meta

    from proxy.tokens import REVOKED, TokenRefused, TokenStore
    from safeshare.sitedb import site_db_file

    assert site_db_file(home).is_file() and not (home / "safeshare.db").exists()  # laid out as a site (issue 24)
    store = TokenStore(f"sqlite:///{site_db_file(home)}")
    try:
        token = ready["url"].split("token=", 1)[1]
        with pytest.raises(TokenRefused) as refused:
            store.verify(token)
        assert refused.value.reason == REVOKED
    finally:
        store.dispose()
