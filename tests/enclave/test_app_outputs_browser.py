"""Outputs in a real (headless) Chromium, as a researcher makes one through the kiosk: fit a regression from the form,
"Save as output", and see the output's status and checks on its page; a cross-tabulation with a small cell saved the
same way shows the failing cell highlighted with its reason; no Content-Security-Policy violation anywhere."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import aiohttp
import pytest

from tests.enclave.test_app_browser import CHROMIUM, REPO, WATCH_CSP, Page
from tests.enclave.test_app_outputs import outputs_frame
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
            # OLS of income on x0 and x1 in the batch of 12 records: 9 residual degrees of freedom
            await page.eval("document.getElementById('model').value = 'ols'")
            await page.eval("document.getElementById('y').value = 'income'")
            await page.eval("document.getElementById('x-x0').click()")
            await page.eval("document.getElementById('x-x1').click()")
            await page.eval("[...document.querySelectorAll('input[name=where]')]"
                            ".find(b => b.value === 'batch=b12').checked = true")
            await page.eval("document.getElementById('fit').click()")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('coefficients')")
            out = {"df": await page.eval("document.getElementById('reg-df-resid').textContent")}
            await page.eval("document.getElementById('output-name').value = 'income model'")
            await page.eval("document.getElementById('output-form').requestSubmit()")
            await page.wait_for("location.pathname.startsWith('/outputs/') && document.readyState === 'complete'"
                                " && !!document.getElementById('output-checks')")
            out["title"] = await page.eval("document.title")
            out["status"] = await page.eval("document.getElementById('output-status').textContent")
            out["checks"] = await page.eval("[...document.querySelectorAll('#output-checks tbody tr')]"
                                            ".map(r => [...r.cells].map(c => c.textContent))")
            out["terms"] = await page.eval("[...document.querySelectorAll('#output-table tbody th')]"
                                           ".map(c => c.textContent)")
            # a cross-tabulation with a small cell, saved as an output from its page
            await page.call("Page.navigate", url=app_url + "crosstab?row=sex&col=race&pct=none")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('output-form')")
            await page.eval("document.getElementById('output-name').value = 'sex by race'")
            await page.eval("document.getElementById('output-form').requestSubmit()")
            await page.wait_for("location.pathname.startsWith('/outputs/') && document.readyState === 'complete'"
                                " && !!document.getElementById('output-table')")
            out["flagged"] = await page.eval("[...document.querySelectorAll('#output-table td.flag-fail')]"
                                             ".map(c => [c.parentElement.cells[0].textContent, c.textContent,"
                                             " getComputedStyle(c).backgroundColor])")
            out["headers"] = await page.eval("[...document.querySelectorAll('#output-table thead th')]"
                                             ".map(c => c.textContent)")
            await page.call("Page.navigate", url=app_url + "outputs")
            await page.wait_for("document.readyState === 'complete' && !!document.getElementById('outputs')")
            out["listed"] = await page.eval("[...document.querySelectorAll('#outputs tbody tr')]"
                                            ".map(r => [r.cells[1].textContent, r.cells[3].textContent])")
            out["nav_lines"] = await page.eval("new Set([...document.querySelectorAll('header nav a')]"
                                               ".map(a => a.getBoundingClientRect().top)).size")
            out["nav"] = await page.eval("[...document.querySelectorAll('header nav a')].map(a => a.textContent)")
            out["csp"] = await page.eval("window.__csp")
            return out


def test_regression_saved_as_output_shows_its_checks_in_chromium(tmp_path) -> None:
    bundle = synthetic_bundle(tmp_path, outputs_frame(), quasi_identifiers=["sex", "race", "age"])
    app = subprocess.Popen([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(tmp_path / "state"),
                            "--port", str(free_port()), "--site", str(tmp_path), "--recipient", "alice"], cwd=REPO,
                           text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
    assert out["df"] == "9"
    assert out["title"].startswith("safeshare · output")
    assert out["status"] == "fail"
    dof = next(row for row in out["checks"] if row[0] == "dof")
    assert dof[1] == "fail" and "9 residual degrees of freedom, fewer than 10" in dof[3]
    assert out["terms"] == ["(intercept)", "x0", "x1"]
    (row_label, text, colour), = out["flagged"]
    assert row_label == "Female" and text.startswith("3") and "fewer than 10 records" in text
    assert colour not in ("rgba(0, 0, 0, 0)", "")  # highlighted by the stylesheet, not by inline style
    assert ["sex by race", "fail"] in out["listed"] and ["income model", "fail"] in out["listed"]
    assert out["nav"][-1] == "Outputs" and out["nav_lines"] == 1  # one line at the kiosk's 1280 px
    assert out["csp"] == [], out["csp"]
