"""End to end in a real headless Chromium: a request taken from a prepared app workspace by the airlock's intake is
reviewed on the custodian service's pages by two checkers, each signed in in their own browser; both approve every
output, and the second approval releases the request as a signed package that verifies against the site's trust
store. The pages run without a single Content-Security-Policy violation and the failing cell is highlighted by the
stylesheet.

Set SAFESHARE_SCREENSHOTS=DIR to keep the screenshots of the queue and of the request page (README's are made so).
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.deploy.review_helpers import PASSWORD, prepare_workspace

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is installed by scripts/setup.sh")

WATCH_CSP = """window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


async def submitted(cdp, expression: str) -> None:
    """Submit a form (`expression` does it) and wait until the page it leads to has loaded."""
    await cdp.evaluate("window.__before = true")
    await cdp.evaluate(expression)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if await cdp.evaluate("!window.__before && document.readyState === 'complete'"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no new page after {expression}")


async def review(cdp, base: str, name: str, request_id: str, shots: Path | None) -> dict:
    """Sign `name` in, open the request from the queue and approve every output; what the pages showed."""
    await cdp.send("Page.enable")
    await cdp.send("Page.addScriptToEvaluateOnNewDocument", source=WATCH_CSP)
    await cdp.navigate(f"{base}/review")
    seen: dict = {"login_path": await cdp.evaluate("location.pathname")}
    await cdp.evaluate(f"document.getElementById('name').value = {name!r}")
    await cdp.evaluate(f"document.getElementById('password').value = {PASSWORD!r}")
    await submitted(cdp, "document.getElementById('login-form').requestSubmit()")
    seen["queue"] = await cdp.evaluate("[...document.querySelectorAll('#queue tbody tr')]"
                                       ".map(r => [...r.cells].map(c => c.textContent.trim()))")
    seen["cookie_visible_to_script"] = await cdp.evaluate("document.cookie")
    if shots is not None:
        await screenshot(cdp, shots / f"review-queue-{name}.png", "#queue")
    await submitted(cdp, f"document.querySelector('#queue a[href=\"/review/requests/{request_id}\"]').click()")
    seen["flagged"] = await cdp.evaluate(
        "[...document.querySelectorAll('#table-1 td.flag-fail')].map(c => [c.parentElement.cells[0].textContent,"
        " c.textContent, getComputedStyle(c).backgroundColor])")
    if shots is not None:
        await screenshot(cdp, shots / f"review-request-{name}.png", "#output-1")  # its table, checks, votes, form
    outputs = await cdp.evaluate("[...document.querySelectorAll('form.vote')].map(f => f.id.split('-').pop())")
    seen["outputs"] = outputs
    for output_id in outputs:
        await cdp.evaluate(f"document.querySelector('#vote-form-{output_id} input[value=approve]').click()")
        await cdp.evaluate(f"document.getElementById('comment-{output_id}').value = 'approved by {name}'")
        await submitted(cdp, f"document.getElementById('vote-form-{output_id}').requestSubmit()")
    seen["message"] = await cdp.evaluate("(document.getElementById('message') || {}).textContent")
    seen["decisions"] = await cdp.evaluate("[...document.querySelectorAll('.decision')].map(d => d.textContent)")
    seen["votes_1"] = await cdp.evaluate("[...document.querySelectorAll('#votes-1 tbody tr')]"
                                         ".map(r => r.cells[0].textContent + ':' + r.cells[1].textContent)")
    seen["state"] = await cdp.evaluate("document.getElementById('request-state').textContent")
    seen["csp"] = await cdp.evaluate("window.__csp")
    return seen


async def screenshot(cdp, path: Path, until: str) -> None:
    """The page from its top down to the end of the element `until` (a CSS selector)."""
    size = await cdp.evaluate(f"[document.documentElement.scrollWidth, Math.ceil(document.querySelector({until!r})"
                              f".getBoundingClientRect().bottom + window.scrollY + 24)]")
    shot = await cdp.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], 2400), "scale": 1})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


def test_two_checkers_approve_a_request_in_chromium(tmp_path: Path) -> None:
    import aiohttp

    from deploy.custodian.api import create_app
    from deploy.custodian.people import People
    from deploy.provision import Provisioner
    from deploy.site.folder import Site
    from outputs.airlock.intake import run_intake
    from outputs.airlock.package import verify_package
    from outputs.airlock.records import AirlockRecords
    from outputs.airlock.store import AirlockStore
    from outputs.airlock.workflow import Airlock
    from outputs.airlock.workspace import Workspace
    from tests.cdp import chromium
    from tests.served import served

    provisioner = Provisioner(Site(tmp_path / "site"))
    people = People(provisioner.records.engine, scrypt_n=2 ** 10)
    for name in ("carol", "dave"):
        people.add(name, "checker", PASSWORD)
    airlock = Airlock(AirlockStore(provisioner.site.root), AirlockRecords(provisioner.records.engine))
    state = tmp_path / "workspace"  # what the kiosk app leaves: two saved outputs, request 1 in the outbox
    prepare_workspace(state)
    workspace = Workspace(state, "alice", "r1alice", "adult/20261126T000000Z", "ab" * 32)
    taken = run_intake(provisioner.site.root, [workspace], airlock=airlock)
    assert not taken.errors, taken.errors
    (request_id,) = [r.request_id for r in airlock.records.requests(recipient="alice")]
    shots = Path(os.environ["SAFESHARE_SCREENSHOTS"]) if os.environ.get("SAFESHARE_SCREENSHOTS") else None
    seen: dict[str, dict] = {}

    async def run() -> None:
        async with aiohttp.ClientSession() as http:
            for name in ("carol", "dave"):  # each in a browser (profile) of their own
                async with chromium(tmp_path / name, http, window="1280,900") as cdp:
                    seen[name] = await review(cdp, base, name, request_id, shots)

    with served(create_app(provisioner, expiry_interval=None)) as base:
        asyncio.run(asyncio.wait_for(run(), 180))
    try:
        carol, dave = seen["carol"], seen["dave"]
        assert carol["login_path"] == "/review/login"
        assert carol["queue"][0][:4] == [request_id, "alice", "adult/20261126T000000Z", "submitted"]
        assert carol["cookie_visible_to_script"] == ""  # HttpOnly
        (row, text, colour), = carol["flagged"]
        assert row == "Female" and text == "3" and colour not in ("rgba(0, 0, 0, 0)", "")
        assert carol["outputs"] == ["1", "2"] and dave["outputs"] == ["1", "2"]
        assert carol["state"] == "submitted" and carol["decisions"] == ["pending", "pending"]
        assert carol["votes_1"] == ["carol:approve"]  # her own vote only, until a second checker has voted
        assert dave["state"] == "released" and dave["decisions"] == ["approved", "approved"]
        assert "packaged and signed" in dave["message"]
        assert sorted(dave["votes_1"]) == ["carol:approve", "dave:approve"]
        assert carol["csp"] == [] and dave["csp"] == []
        record = airlock.get(request_id)
        assert record.state == "released" and airlock.store.package_file(request_id).is_file()
        manifest = verify_package(airlock.store.package_file(request_id), provisioner.site.trust_file)
        assert manifest["request_id"] == request_id and "carol" in json.dumps(manifest) and \
            "dave" in json.dumps(manifest)
        # the researcher's workspace is told (status written by the intake, never by the enclave)
        run_intake(provisioner.site.root, [workspace], airlock=airlock)
        assert json.loads((state / "airlock" / "status" / "1.json").read_text())["state"] == "released"
        votes = [(v.checker, v.vote, v.comment) for v in airlock.records.votes(request_id)]
        assert sorted(votes) == [("carol", "approve", "approved by carol"), ("carol", "approve", "approved by carol"),
                                 ("dave", "approve", "approved by dave"), ("dave", "approve", "approved by dave")]
        signed_in = [e.actor for e in provisioner.records.events(action="review-sign-in")]
        assert signed_in == ["review:carol", "review:dave"]
    finally:
        provisioner.close()
