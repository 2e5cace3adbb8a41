"""The websockify front door end to end: noVNC (Debian's, /usr/share/novnc) in headless Chromium, served by the real
`websockify` with safeshare's token plugin (`--web`, as sites serve noVNC today), to `safeshare proxy-for`'s proxy on
its Unix socket, to TigerVNC's Xvnc configured to exchange the clipboard (so that only the proxy stands in the way).

One browser session checks what the built-in gateway guarantees: the token (issued under the demo recipient policy)
connects and the screen is drawn; cut text is dropped in both directions (the X selection never gets the page's
paste, the page never gets the X selection, and the log says so); a burst of key presses is rate-limited and a
kiosk shortcut is blocked; revoking the recipient disconnects noVNC within a second; the revoked, an unknown and an
expired token are refused without a session; the session folder holds the same files as through the gateway and
`safeshare audit verify` (signature, chain, anchors in the database) accepts it.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import pytest

from deploy.site.folder import Site
from policies.recipient import load_recipient_policy
from proxy.tokens import TokenStore, issue_for_policy
from safeshare.cli import main as safeshare_main
from tests.cdp import chromium, wait_for, wait_for_js
from tests.proxy.rfbtools import free_port, stop_process, xvnc_start
from tests.proxy.test_gateway import CANVAS_PIXEL
from tests.proxy.test_websockify import needs_websockify, recipient_proxy, site, websockify  # noqa: F401 (fixture)
from tests.proxy.test_x11 import LEAKY_TIGERVNC, own_selection, selection, send_cut

REPO = Path(__file__).resolve().parents[2]
NOVNC = Path("/usr/share/novnc")
DEMO_POLICY = REPO / "policies" / "examples" / "recipient-demo.yaml"
COLOUR = (0x20, 0x90, 0x40)
XK_CONTROL_L, XK_N, XK_A = 0xFFE3, 0x6E, 0x61

pytestmark = [
    needs_websockify,
    pytest.mark.skipif(not (all(shutil.which(t) for t in ("Xvnc", "xclip", "xsetroot", "chromium"))
                            and (NOVNC / "core" / "rfb.js").is_file()),
                       reason="Xvnc, xclip, chromium and novnc are installed by scripts/setup.sh"),
]

# A site's own noVNC page, served by websockify next to noVNC's modules: the token comes from the page's address.
SESSION_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>session</title></head>
<body><div id="screen" style="width:320px;height:240px"></div>
<script type="module">
import RFB from './core/rfb.js';
const url = new URL('websockify', location.href);
url.protocol = 'ws:';
url.search = '?token=' + encodeURIComponent(new URLSearchParams(location.search).get('token'));
const state = { state: 'connecting', connected: false, clipboard: [] };
window.session = state;
const rfb = new RFB(document.getElementById('screen'), url.href, { wsProtocols: ['binary'] });
state.rfb = rfb;
rfb.addEventListener('connect', () => { state.state = 'connected'; state.connected = true; });
rfb.addEventListener('disconnect', () => { state.state = 'disconnected'; });
rfb.addEventListener('clipboard', (event) => state.clipboard.push(event.detail.text));
</script></body></html>
"""


def web_root(tmp_path: Path) -> Path:
    web = tmp_path / "web"
    web.mkdir()
    for name in ("core", "vendor"):
        (web / name).symlink_to(NOVNC / name)
    (web / "session.html").write_text(SESSION_PAGE)
    return web


def test_novnc_through_websockify_has_the_gateways_controls(tmp_path: Path, site: Site) -> None:
    port = free_port()
    xvnc, display = xvnc_start(port, LEAKY_TIGERVNC)
    owners: list[subprocess.Popen] = []
    store = TokenStore(site.db_url)
    policy = load_recipient_policy(DEMO_POLICY)
    recipient = policy.recipient
    far = datetime.now(timezone.utc) + timedelta(hours=1)
    issued = issue_for_policy(store, policy, DEMO_POLICY, f"127.0.0.1:{port}", expires_at=far)
    seen: dict[str, object] = {}
    page_secret = f"page-secret-{time.time_ns()}"
    x_secret = f"x-selection-secret-{time.time_ns()}".encode()

    async def state(cdp) -> dict:
        return await cdp.evaluate("({state: session.state, connected: session.connected, "
                                  "clipboard: session.clipboard})")

    async def refused(cdp, base: str, token: str) -> dict:
        await cdp.navigate(f"{base}/session.html?token={token}")
        await wait_for_js(cdp, "window.session && session.state === 'disconnected'", timeout=10)
        return await state(cdp)

    async def run() -> None:
        # positive control: this server takes cut text from its clients (only the proxy stands in the way)
        direct = f"direct-control-{time.time_ns()}".encode()
        seen["control"] = any(direct in text for text in await send_cut(port, direct, display))
        subprocess.run(["xsetroot", "-solid", "#%02x%02x%02x" % COLOUR], env={**os.environ, "DISPLAY": display},
                       check=True, timeout=10)
        async with recipient_proxy(site, recipient) as proxy, websockify(site, web_root(tmp_path)) as address, \
                aiohttp.ClientSession() as http, chromium(tmp_path, http) as cdp:
            base = f"http://{address}"
            await cdp.navigate(f"{base}/session.html?token={issued.token}")
            await wait_for_js(cdp, "window.session && session.state === 'connected'", timeout=15)
            seen["pixel"] = await wait_for_js(
                cdp, f"(p => p && p.join() === '{','.join(map(str, COLOUR))}' && p)({CANVAS_PIXEL})")
            (connection,) = proxy.connections
            session = connection.session

            # clipboard, page to enclave: noVNC sends it, the X selections never get it
            await cdp.evaluate(f"session.rfb.clipboardPasteFrom({json.dumps(page_secret)})")
            await wait_for(lambda: session.counters["cut_text_dropped"] >= 1, 5)
            await asyncio.sleep(0.3)
            seen["x_selections"] = [await asyncio.to_thread(selection, display, which)
                                    for which in ("primary", "clipboard")]
            # clipboard, enclave to page: the X selection changes, Xvnc sends it, the page never gets it
            owners.append(await asyncio.to_thread(own_selection, display, x_secret))
            await wait_for(lambda: session.counters["cut_text_dropped"] >= 2, 5)
            await asyncio.sleep(0.5)

            # input: a burst of 80 presses against the demo policy's bucket (30, then 10/s); Ctrl+N is blocked
            await cdp.evaluate(f"for (let i = 0; i < 80; i++) session.rfb.sendKey({XK_A}, 'KeyA');")
            await cdp.evaluate(f"session.rfb.sendKey({XK_CONTROL_L}, 'ControlLeft', true);"
                               f"session.rfb.sendKey({XK_N}, 'KeyN');"
                               f"session.rfb.sendKey({XK_CONTROL_L}, 'ControlLeft', false);")
            await wait_for(lambda: session.counters["keys_blocked"] >= 1, 5)
            seen["counters"] = dict(session.counters)
            seen["page"] = await state(cdp)

            revoked_at = time.monotonic()
            await asyncio.to_thread(store.revoke, recipient=recipient, reason="test")
            await wait_for_js(cdp, "session.state === 'disconnected'", timeout=3)
            seen["revoke_seconds"] = time.monotonic() - revoked_at
            await wait_for(lambda: not proxy.connections, 5)

            folders = set(site.sessions.iterdir())
            seen["revoked"] = await refused(cdp, base, issued.token)
            seen["unknown"] = await refused(cdp, base, "not-a-token-at-all-0123456789")
            soon = datetime.now(timezone.utc) + timedelta(seconds=1)
            expiring = issue_for_policy(store, policy, DEMO_POLICY, f"127.0.0.1:{port}", expires_at=soon)
            await asyncio.sleep((soon - datetime.now(timezone.utc)).total_seconds() + 0.1)
            seen["expired"] = await refused(cdp, base, expiring.token)
            seen["new_folders"] = set(site.sessions.iterdir()) - folders
            seen["proxy_refused"] = proxy.refused

    try:
        asyncio.run(run())
    finally:
        for owner in owners:
            stop_process(owner)
        stop_process(xvnc)

    assert seen["control"], "the positive control: Xvnc must accept cut text from a direct client"
    assert seen["pixel"] == list(COLOUR)
    assert all(page_secret.encode() not in text for text in seen["x_selections"]), seen["x_selections"]
    counters = seen["counters"]
    assert counters["keys_dropped"] >= 30 and counters["keys_blocked"] >= 1, counters
    assert seen["page"]["clipboard"] == [] and seen["page"]["state"] == "connected"
    print(f"revocation to noVNC's disconnect through websockify: {seen['revoke_seconds']:.3f} s; keys: {counters}")
    assert seen["revoke_seconds"] < 1.0, seen["revoke_seconds"]
    for name in ("revoked", "unknown", "expired"):
        assert seen[name] == {"state": "disconnected", "connected": False, "clipboard": []}, (name, seen[name])
    assert seen["new_folders"] == set() and seen["proxy_refused"] == 0  # refused by the plugin, before the proxy

    (folder,) = site.sessions.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["events.jsonl", "meta.json", "screen.rfbrec"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["via"] == "websockify" and meta["recipient"] == recipient and meta["end_reason"] == "token revoked"
    assert meta["limits"] == policy.limits.model_dump(mode="json")
    log = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    directions = {e["direction"] for e in log if e["event"] == "cut_text_dropped"}
    assert directions == {"client_to_server", "server_to_client"}
    assert any(e["event"] == "key_dropped" and e["limit"] == "keys" for e in log)
    assert any(e["event"] == "key_blocked" and e.get("shortcut") == "Ctrl+N" for e in log)
    text = (folder / "events.jsonl").read_bytes() + (folder / "screen.rfbrec").read_bytes()
    assert page_secret.encode() not in text and x_secret not in text
    assert safeshare_main(["audit", "verify", str(folder), "--db", site.db_url, "--site", str(site.root)]) == 0
