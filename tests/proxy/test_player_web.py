"""The web player in headless Chromium, served by the custodian service to an auditor key: it loads a recorded
session, plays at 16x, seeks to a marker, and the frame it shows there equals the screen the researcher had at that
moment (captured from the X server during the session). Custodian keys and no key are refused."""
from __future__ import annotations

import asyncio
import base64
import shutil
from pathlib import Path

import aiohttp
import httpx
import numpy as np
import pytest

from deploy.custodian.api import create_app
from deploy.provision import Provisioner
from deploy.site.folder import Site
from tests.cdp import chromium, wait_for_js
from tests.proxy.test_player import changing_session  # noqa: F401 - fixture
from tests.proxy.test_replay import HEIGHT, WIDTH, needs_x, x_screen  # noqa: F401 - fixture
from tests.served import served

needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is installed by setup.sh")

CANVAS = """(() => {
    const c = document.getElementById('screen');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let s = ''; for (let i = 0; i < d.length; i += 32768) s += String.fromCharCode.apply(null, d.subarray(i, i + 32768));
    return [c.width, c.height, btoa(s)];
})()"""


def canvas_image(value) -> np.ndarray:
    width, height, data = value
    return np.frombuffer(base64.b64decode(data), np.uint8).reshape(height, width, 4)[:, :, :3]


@pytest.fixture
def service(changing_session, tmp_path: Path):  # noqa: F811
    folder, truths = changing_session
    site = Site(tmp_path / "site")
    site.prepare()
    shutil.copytree(folder, site.sessions / folder.name)
    provisioner = Provisioner(site)
    keys = {"auditor": provisioner.records.add_key("aud", "auditor"),
            "custodian": provisioner.records.add_key("ops", "custodian")}
    with served(create_app(provisioner, expiry_interval=None)) as base:
        yield {"base": base, "keys": keys, "session": folder.name, "truths": truths, "provisioner": provisioner}
    provisioner.close()


@needs_x
@needs_chromium
def test_player_plays_seeks_to_a_marker_and_shows_what_the_researcher_saw(service, tmp_path: Path) -> None:
    base, session = service["base"], service["session"]
    auth = lambda role: {"Authorization": f"Bearer {service['keys'][role]}"}  # noqa: E731
    assert httpx.get(f"{base}/audit/sessions").status_code == 401
    assert httpx.get(f"{base}/audit/sessions", headers=auth("custodian")).status_code == 403
    assert httpx.get(f"{base}/audit/sessions/{session}/player", headers=auth("custodian")).status_code == 403
    assert httpx.get(f"{base}/audit/sessions/..%2Fdb/verify", headers=auth("auditor")).status_code == 404
    listed = httpx.get(f"{base}/audit/sessions", headers=auth("auditor")).json()
    assert [item["session"] for item in listed] == [session] and listed[0]["flagged"]
    # recorded by a bare proxy, not the site's gateway: intact, but neither signed nor anchored, so not verified
    verdict = httpx.get(f"{base}/audit/sessions/{session}/verify", headers=auth("auditor")).json()
    assert not verdict["ok"]
    problems = " ".join(str(finding) for finding in verdict["findings"])
    assert "not signed" in problems or "unsigned" in problems, verdict
    assert "anchor missing" in problems and "chain broken" not in problems, verdict
    seen: dict[str, object] = {}

    async def run() -> None:
        async with aiohttp.ClientSession() as http, chromium(tmp_path, http, window="1000,900") as cdp:
            await cdp.navigate(f"{base}/player")
            await wait_for_js(cdp, "window.player && window.player.state === 'idle'")
            await cdp.evaluate(f"window.player.open({service['keys']['auditor']!r}, {session!r})")
            await wait_for_js(cdp, "window.player.state === 'ready' || window.player.error", timeout=30)
            seen["error"] = await cdp.evaluate("window.player.error")
            seen["index"] = await cdp.evaluate("({duration: player.index.duration, start: player.index.start, "
                                               "markers: player.index.markers, keys: player.index.keys})")
            await cdp.evaluate("player.setSpeed(16); player.play()")
            seen["played"] = await wait_for_js(
                cdp, "player.state === 'paused' && player.t >= player.index.duration && player.appliedFrame",
                timeout=15)
            seen["end"] = canvas_image(await cdp.evaluate(CANVAS))
            await cdp.evaluate("document.querySelector('.marker.blocked').click()")
            await wait_for_js(cdp, "Math.abs(player.t - Number(document.querySelector('.marker.blocked')"
                                   ".dataset.t)) < 1e-6")
            await asyncio.sleep(0.5)  # the seek's fetch and drawing
            seen["marker"] = canvas_image(await cdp.evaluate(CANVAS))
            seen["wall"] = await cdp.evaluate("player.shownWall().getTime() / 1000")
            seen["pointer"] = await cdp.evaluate("player.pointerDrawn")
            await cdp.evaluate("player.filterKeys('ctrl')")
            seen["visible_keys"] = await cdp.evaluate(
                "Array.from(document.querySelectorAll('#keys li:not(.hidden) .label')).map(e => e.textContent)")
            await cdp.evaluate("document.querySelector('#keys li:not(.hidden)').click()")
            await asyncio.sleep(0.3)
            seen["after_key_click"] = await cdp.evaluate("player.t")

    asyncio.run(run())
    assert seen["error"] is None
    truths = service["truths"]
    index = seen["index"]
    (blocked,) = [m for m in index["markers"] if m["kind"] == "blocked"]
    assert blocked["detail"] == "Ctrl+N"
    # the marker falls after the second capture and before the third change: the second screen is shown
    assert truths[1][0] - index["start"] < blocked["t"] < truths[2][0] - index["start"]
    assert np.array_equal(seen["marker"], truths[1][1])
    assert np.array_equal(seen["end"], truths[2][1])  # played to the end: the last screen
    assert seen["wall"] <= index["start"] + blocked["t"] + 1e-3
    assert seen["pointer"] is True  # the researcher's pointer (from the input log) on its own layer
    assert seen["visible_keys"] == ["<Ctrl+n>"] and abs(seen["after_key_click"] - blocked["t"]) < 0.01
    assert [k["label"] for k in index["keys"]] == ["<Ctrl+n>", "x"]
    viewed = service["provisioner"].records.events(action="session-viewed")
    assert viewed and viewed[-1].actor == "api:aud"
