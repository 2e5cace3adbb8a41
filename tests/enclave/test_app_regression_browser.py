"""The regression page in a real (headless) Chromium, as a researcher uses it through the kiosk: choose the model,
outcome and predictors in the form, fit, read the coefficients, see a model that cannot be fitted explained, and save
the analysis; the descriptive and histogram pages load; no Content-Security-Policy violation anywhere."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import aiohttp
import pytest

from tests.enclave.test_app_browser import CHROMIUM, REPO, WATCH_CSP, Page
from tests.enclave.test_app_regression import synthetic_frame
from tests.enclave.test_app_support import SAFESHARE, free_port, read_ready, synthetic_bundle

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="Chromium is installed by scripts/setup.sh")


async def drive(devtools_port: int, app_url: str) -> dict:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(f"http://127.0.0.1:{devtools_port}/json/list") as response:
                    targets = [t for t in await response.json() if t["type"] == "page"]
                if targets:
                    break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no DevTools page target")
        async with session.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = Page(ws)
            await page.call("Page.enable")
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=WATCH_CSP)
            await page.call("Page.navigate", url=app_url + "regression")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('regression-form')")
            # The researcher's clicks: logit of outcome on sex and age, age's reference 40-49, then Fit.
            await page.eval("document.getElementById('model').value = 'logit'")
            await page.eval("document.getElementById('y').value = 'outcome'")
            await page.eval("document.getElementById('x-sex').click()")
            await page.eval("document.getElementById('x-age').click()")
            await page.eval("document.getElementById('ref-age').value = 'age=40-49'")
            await page.eval("document.getElementById('fit').click()")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('coefficients')")
            out = {
                "title": await page.eval("document.title"),
                "url": await page.eval("location.search"),
                "n": await page.eval("document.getElementById('reg-n').textContent"),
                "terms": await page.eval("[...document.querySelectorAll('#coefficients tbody tr')]"
                                         ".map(r => r.cells[0].textContent)"),
            }
            await page.eval("document.getElementById('save-name').value = 'outcome by sex and age'")
            await page.eval("document.querySelector('form.save').requestSubmit()")
            await page.wait_for("location.search.includes('saved=') && document.readyState === 'complete'"
                                " && !!document.getElementById('coefficients')")
            out["saved"] = await page.eval("document.querySelector('.notice').textContent")
            # A model that cannot be fitted: logit of a four-valued outcome.
            await page.eval("document.getElementById('y').value = 'age'")
            await page.eval("document.getElementById('x-age').click()")  # age is the outcome now
            await page.eval("document.getElementById('fit').click()")
            await page.wait_for("document.readyState === 'complete' && !!document.querySelector('p.error')")
            out["error"] = await page.eval("document.querySelector('p.error').textContent")
            titles = []
            for path in ["descriptive?attr=income&by=sex", "histogram?attr=income&bins=8", "histogram?attr=age"]:
                await page.call("Page.navigate", url=app_url + path)
                await page.wait_for("document.readyState === 'complete' && document.title.length > 0")
                titles.append([await page.eval("document.title"),
                               await page.eval("document.querySelectorAll('svg rect, #descriptive-table tr').length")])
            out["pages"] = titles
            out["csp"] = await page.eval("window.__csp")
            return out


def test_regression_in_chromium_without_csp_violations(tmp_path) -> None:
    bundle = synthetic_bundle(tmp_path, synthetic_frame(), quasi_identifiers=["sex", "age"])
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
        out = asyncio.run(asyncio.wait_for(drive(devtools_port, url), 120))
    finally:
        if browser is not None:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()
        app.send_signal(signal.SIGTERM)
        app.wait(15)
    assert out["title"] == "safeshare · regression"
    assert "model=logit" in out["url"] and "x=sex" in out["url"] and "ref=age%3D40-49" in out["url"]
    assert out["n"] == "600"
    assert out["terms"] == ["(intercept)", "sex = m", "age = 20-29", "age = 30-39", "age = 50-59"]
    assert "outcome by sex and age" in out["saved"]
    assert "needs a binary outcome" in out["error"]
    assert [title for title, _ in out["pages"]] == ["safeshare · descriptive statistics", "safeshare · histogram",
                                                    "safeshare · histogram"]
    assert all(count > 0 for _, count in out["pages"]), out["pages"]
    assert out["csp"] == [], out["csp"]
