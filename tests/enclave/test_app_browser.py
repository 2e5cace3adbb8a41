"""The cohort builder in a real (headless) Chromium, driven over the DevTools protocol: ticking a value updates the
live count through the JSON endpoint, and the app's own script and style run under its Content-Security-Policy
without a single violation."""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from tests.enclave.test_app_support import SAFESHARE, free_port, read_ready, small_frame, synthetic_bundle

CHROMIUM = "/usr/lib/chromium/chromium"
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="Chromium is installed by scripts/setup.sh")

# Injected before any page script (DevTools scripts are not subject to the page's CSP): collects violations.
WATCH_CSP = """window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


class Page:
    """Just enough of the DevTools protocol: send a command on one page's websocket and await its answer."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params) -> dict:
        message_id = next(self.ids)
        await self.ws.send_json({"id": message_id, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.ws.receive_json(), 20)
            if message.get("id") == message_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def eval(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.eval(expression)
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expression}")


async def drive(devtools_port: int, app_url: str) -> dict:
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 20
        while True:
            try:
                async with session.get(f"http://127.0.0.1:{devtools_port}/json/list") as response:
                    targets = [t for t in await response.json() if t["type"] == "page"]
                if targets:
                    break
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("no DevTools page target")
            await asyncio.sleep(0.1)
        async with session.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = Page(ws)
            await page.call("Page.enable")
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=WATCH_CSP)
            await page.call("Page.navigate", url=app_url + "cohort")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('cohort-count')")
            out = {"title": await page.eval("document.title"),
                   "before": await page.eval("document.getElementById('cohort-count').textContent"),
                   "css": await page.eval("getComputedStyle(document.querySelector('header.top')).position")}
            female = await page.eval("[...document.querySelectorAll('input[name=where]')]"
                                     ".find(b => b.value === 'sex=f').id")
            await page.eval(f"document.getElementById('{female}').click()")
            await page.wait_for("document.getElementById('cohort-count').textContent !== "
                                f"{json.dumps(out['before'])}")
            await page.eval("document.getElementById('f-site-0').click()")  # "east" (natural order)
            await page.wait_for("document.getElementById('cohort-count').textContent === '6'")
            out.update({
                "after": await page.eval("document.getElementById('cohort-count').textContent"),
                "url": await page.eval("location.href"),
                "save_params": await page.eval("document.getElementById('save-params').value"),
                "facet_male": await page.eval("document.getElementById('c-sex-1').textContent"),
            })
            # Save the cohort through the page's form (a same-origin POST from the browser), then it re-opens.
            await page.eval("document.getElementById('save-name').value = 'women in the east'")
            await page.eval("document.querySelector('form.save').requestSubmit()")
            await page.wait_for("location.search.includes('saved=') && document.readyState === 'complete'")
            out["saved_page"] = await page.eval("[document.querySelector('.notice').textContent, "
                                                "document.getElementById('cohort-count').textContent]")
            # Every other page too: no violation anywhere, and the title the kiosk watchdog expects.
            titles = []
            for path in ["", "frequencies?attr=age", "crosstab?row=sex&col=site", "compare?attr=site&a=sex%3Df&b=sex%3Dm",
                         "analyses", "nope"]:
                await page.call("Page.navigate", url=app_url + path)
                await page.wait_for("document.readyState === 'complete' && document.title.length > 0")
                titles.append(await page.eval("document.title"))
            out["titles"] = titles
            out["csp"] = await page.eval("window.__csp")
            # Control: the watcher does see a violation, e.g. a picture from elsewhere (which the policy blocks).
            await page.eval("document.body.insertAdjacentHTML('beforeend', '<img src=\"http://192.0.2.1/x.png\">')")
            out["control"] = await page.wait_for("window.__csp.length > 0 && window.__csp")
            return out


def test_live_cohort_count_in_chromium_without_csp_violations(tmp_path) -> None:
    bundle = synthetic_bundle(tmp_path, small_frame())
    app = subprocess.Popen([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(tmp_path / "state"),
                            "--port", str(free_port()), "--site", str(tmp_path)], cwd=REPO, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    browser = None
    try:
        url = read_ready(app, 60)
        devtools_port = free_port()
        browser = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                                    "--no-first-run", "--disable-extensions", "--window-size=1280,800",
                                    f"--remote-debugging-port={devtools_port}", "--remote-allow-origins=*",
                                    f"--user-data-dir={tmp_path / 'profile'}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        out = asyncio.run(asyncio.wait_for(drive(devtools_port, url), 90))
    finally:
        if browser is not None:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()
        app.send_signal(signal.SIGTERM)
        app.wait(15)
    assert out["title"] == "safeshare · cohort builder"
    assert out["before"] == "40"
    assert out["css"] == "sticky"  # the stylesheet loaded
    # 19 women; of them, site "east" (i % 3 == 2) and even i: i in 2, 8, 14, 20, 26, 32.
    assert out["after"] == "6"
    assert "where=sex%3Df" in out["url"] and "where=site%3Deast" in out["url"]
    assert "where=sex%3Df" in out["save_params"]
    assert out["facet_male"] == "6"  # men in the east: the count beside "m" ignores the sex filter
    assert "women in the east" in out["saved_page"][0] and out["saved_page"][1] == "6"
    assert all(title.startswith("safeshare") for title in out["titles"]), out["titles"]
    assert out["csp"] == [], out["csp"]
    assert out["control"] and out["control"][0].startswith("img-src")
    assert re.match(r"http://127\.0\.0\.1:\d+/", url)
