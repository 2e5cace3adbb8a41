"""A release request made in a real (headless) Chromium, as a researcher does it through the kiosk, and taken by the
real host-side intake: save an output from an analysis page, start a request from the outputs page with its texts,
add the output with a justification, submit; the intake freezes it in the site's airlock store and the page shows
the airlock's state and request id; two checkers return it for changes, the page shows their comments, the
researcher replaces the output by a remedied one and submits again, which the intake takes as round 2; withdrawn
from its page, the airlock withdraws it. No Content-Security-Policy violation anywhere."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tests.cdp import Cdp, chromium, wait_for_js
from tests.enclave.test_app_browser import CHROMIUM, REPO, WATCH_CSP
from tests.enclave.test_app_outputs import outputs_frame
from tests.enclave.test_app_support import SAFESHARE, free_port, read_ready, synthetic_bundle

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="Chromium is installed by scripts/setup.sh")

intake = pytest.importorskip("outputs.airlock.intake")


class Host:
    """The site side of the test: the airlock store and database under SITE, the intake over the app's workspace,
    and two checkers voting through the same `Airlock` class the review pages use."""

    def __init__(self, site: Path, state: Path, bundle: Path) -> None:
        from outputs.airlock.workspace import Workspace

        seal = json.loads((bundle / "seal.json").read_text())
        release = f"{bundle.parent.name}/{bundle.name}"
        self.site = site
        self.db_url = f"sqlite:///{site / 'site.sqlite'}"
        self.workspace = Workspace(state, "alice", "r1", release, _seal_sha256(seal))

    def run_intake(self) -> None:
        result = intake.run_intake(self.site, [self.workspace], db_url=self.db_url)
        assert not result.errors, result.errors

    def vote_changes(self, request_id: str, output_id: str) -> None:
        from outputs.airlock.workflow import Airlock

        airlock = Airlock.open(self.site, self.db_url)
        try:
            airlock.vote(request_id, output_id, "carol", "changes", "please suppress the small cell")
            airlock.vote(request_id, output_id, "dave", "changes", "round or suppress <b>it</b>")
        finally:
            airlock.close()


def _seal_sha256(seal: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(seal, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def text(cdp: Cdp, element_id: str) -> str | None:
    return await cdp.evaluate(f"(document.getElementById({element_id!r}) || {{}}).textContent")


async def submit_form(cdp: Cdp, form_js: str) -> None:
    """Submit a form as a click would (the kiosk has no other way) and wait for the next page to load."""
    await cdp.evaluate("window.__previousDocument = true")
    await cdp.evaluate(f"{form_js}.requestSubmit()")
    await wait_for_js(cdp, "!window.__previousDocument && document.readyState === 'complete'", 15)


async def screenshot(cdp: Cdp, name: str) -> None:
    """The whole page as PNG into $SAFESHARE_SCREENSHOTS (nothing without it)."""
    folder = os.environ.get("SAFESHARE_SCREENSHOTS")
    if not folder:
        return
    width, height = await cdp.evaluate("[document.documentElement.scrollWidth, "
                                       "document.documentElement.scrollHeight]")
    shot = await cdp.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": width, "height": min(height, 2400), "scale": 1})
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / name).write_bytes(base64.b64decode(shot["data"]))


async def drive(tmp_path: Path, app_url: str, host: Host) -> dict:
    out: dict = {"csp": []}
    async with aiohttp.ClientSession() as http, chromium(tmp_path, http, "1280,800") as cdp:
        await cdp.send("Page.enable")
        await cdp.send("Page.addScriptToEvaluateOnNewDocument", source=WATCH_CSP)

        async def csp() -> None:
            out["csp"] += await cdp.evaluate("window.__csp") or []

        # an output with a failing small cell, saved from its analysis page
        await cdp.navigate(app_url + "crosstab?row=sex&col=race&pct=none")
        await cdp.evaluate("document.getElementById('output-name').value = 'sex by race'")
        await submit_form(cdp, "document.getElementById('output-form')")
        out["output_status"] = await text(cdp, "output-status")
        output_id = (await cdp.evaluate("location.pathname")).rsplit("/", 1)[1]
        out["output_id"] = output_id
        await csp()
        # from the outputs page to a new request with its texts
        await cdp.navigate(app_url + "outputs")
        await cdp.evaluate("window.__previousDocument = true")
        await cdp.evaluate("document.getElementById('requests-link').click()")
        await wait_for_js(cdp, "!window.__previousDocument && document.readyState === 'complete' && "
                               "!!document.getElementById('new-request-form')", 15)
        await cdp.evaluate("document.getElementById('new-context').value = 'Table 1 of the ward study'")
        await cdp.evaluate("document.getElementById('new-controls').value = 'cells of at least 10 records'")
        await submit_form(cdp, "document.getElementById('new-request-form')")
        out["created_at"] = await cdp.evaluate("location.pathname")
        out["missing_before"] = await text(cdp, "request-missing")
        await csp()
        # the output, with its justification
        await cdp.evaluate(f"document.getElementById('add-output').value = '{output_id}'")
        await cdp.evaluate("document.getElementById('add-justification').value = 'the 3 is published in the "
                           "ward report'")
        await submit_form(cdp, "document.getElementById('add-output-form')")
        out["rows"] = await cdp.evaluate("[...document.querySelectorAll('#request-outputs tbody tr')]"
                                         ".map(r => [r.cells[0].textContent, r.cells[2].textContent])")
        out["missing_after"] = await text(cdp, "request-missing")
        await screenshot(cdp, "app-request-draft.png")
        await submit_form(cdp, "document.getElementById('submit-form')")
        out["after_submit"] = await text(cdp, "request-state")
        out["frozen"] = await cdp.evaluate("!document.getElementById('texts-form')")
        await csp()
        # the host takes it: the page shows the airlock's state and request id
        await asyncio.to_thread(host.run_intake)
        await cdp.navigate(app_url + "requests/1")
        out["after_intake"] = await text(cdp, "request-state")
        request_id = await text(cdp, "host-request-id")
        out["request_id"] = request_id
        # two checkers ask for changes; the intake refreshes the status; the page shows their comments
        await asyncio.to_thread(host.vote_changes, request_id, output_id)
        await asyncio.to_thread(host.run_intake)
        await cdp.navigate(app_url + "requests/1")
        out["after_return"] = await text(cdp, "request-state")
        out["comments"] = await cdp.evaluate(f"[...document.querySelectorAll('#decision-{output_id} li')]"
                                             ".map(li => li.textContent)")
        await screenshot(cdp, "app-request-returned.png")
        await csp()
        # remedy the output on its page, replace it in the request (the remedied one is preselected), resubmit
        await cdp.navigate(app_url + f"outputs/{output_id}")
        await cdp.evaluate("document.getElementById('remedy-kind').value = 'suppress'")
        await submit_form(cdp, "document.getElementById('apply-remedy').form")
        remedied = (await cdp.evaluate("location.pathname")).rsplit("/", 1)[1]
        out["remedied"] = remedied
        await cdp.navigate(app_url + "requests/1")
        await submit_form(cdp, f"document.getElementById('replace-{output_id}').form")
        out["rows_replaced"] = await cdp.evaluate("[...document.querySelectorAll('#request-outputs tbody tr')]"
                                                  ".map(r => r.cells[0].textContent)")
        await submit_form(cdp, "document.getElementById('submit-form')")
        out["after_resubmit"] = await text(cdp, "request-state")
        await asyncio.to_thread(host.run_intake)
        await cdp.navigate(app_url + "requests/1")
        out["after_second_intake"] = await text(cdp, "request-state")
        out["round"] = await text(cdp, "airlock-status")
        await cdp.navigate(app_url + "requests")
        out["listed"] = await cdp.evaluate("[...document.querySelectorAll('#requests tbody tr')]"
                                           ".map(r => [r.cells[0].textContent, r.cells[1].textContent])")
        out["new_form_while_open"] = await cdp.evaluate("!!document.getElementById('new-request-form')")
        # withdrawn from its page: the airlock withdraws it, and a new request can be started
        await cdp.navigate(app_url + "requests/1")
        await submit_form(cdp, "document.getElementById('withdraw-form')")
        out["after_withdraw"] = await text(cdp, "request-state")
        await asyncio.to_thread(host.run_intake)
        await cdp.navigate(app_url + "requests")
        out["listed_after_withdraw"] = await cdp.evaluate(
            "[...document.querySelectorAll('#requests tbody tr')].map(r => r.cells[1].textContent)")
        out["new_form_after"] = await cdp.evaluate("!!document.getElementById('new-request-form')")
        await cdp.navigate(app_url + "requests/1")
        out["host_after_withdraw"] = await text(cdp, "host-state")
        await csp()
    return out


def test_a_request_made_in_chromium_is_taken_by_the_intake_returned_and_resubmitted(tmp_path) -> None:
    bundle = synthetic_bundle(tmp_path, outputs_frame(), quasi_identifiers=["sex", "race", "age"])
    state = tmp_path / "state"
    site = tmp_path / "site"
    site.mkdir()
    app = subprocess.Popen([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(state),
                            "--port", str(free_port()), "--site", str(tmp_path), "--recipient", "alice"], cwd=REPO,
                           text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = read_ready(app, 60)
        out = asyncio.run(asyncio.wait_for(drive(tmp_path, url, Host(site, state, bundle)), 180))
    finally:
        app.send_signal(signal.SIGTERM)
        app.wait(15)
    output_id = out["output_id"]
    assert out["output_status"] == "fail"
    assert out["created_at"] == "/requests/1"
    assert "holds no output" in out["missing_before"]
    assert out["rows"] == [[output_id, "fail"]] and out["missing_after"] is None
    assert out["after_submit"] == "submitting" and out["frozen"]
    assert out["after_intake"] == "submitted" and out["request_id"].startswith("r1-0001-")
    assert out["after_return"] == "returned"
    assert any("please suppress the small cell" in c for c in out["comments"])
    assert any("round or suppress <b>it</b>" in c for c in out["comments"])  # text, never markup
    assert out["rows_replaced"] == [out["remedied"]]
    assert out["after_resubmit"] == "submitting"
    assert out["after_second_intake"] == "submitted" and "round 2" in out["round"]
    assert out["listed"] == [["1", "submitted"]] and not out["new_form_while_open"]
    assert out["after_withdraw"] == "withdrawing" and out["host_after_withdraw"] == "withdrawn"
    assert out["listed_after_withdraw"] == ["withdrawn"] and out["new_form_after"]
    assert out["csp"] == [], out["csp"]
    # what the host froze: the remedied output with the justification carried over
    from outputs.airlock.store import AirlockStore

    frozen = AirlockStore(site).read_request(out["request_id"])
    assert [str(o["output_id"]) for o in frozen["outputs"]] == [out["remedied"]]
    assert frozen["round"] == 2 and frozen["context"] == "Table 1 of the ward study"
