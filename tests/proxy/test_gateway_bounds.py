"""Bounds of the gateway (issue 12, item 13): a request head must arrive within a few seconds, the WebSocket's origin
check compares against the configured origins and never against the Host header, a bad `?token=` does not log the
user out, and pending RFB handshakes are capped here too."""
from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from proxy import gateway as gateway_module
from proxy import session as session_module
from proxy.gateway import COOKIE
from proxy.tokens import TokenStore
from tests.proxy.rfbtools import FakeVncServer
from tests.proxy.test_gateway import db_url, running_gateway


def test_slow_header_connections_are_closed(tmp_path: Path) -> None:
    """Twenty connections that send their request head one byte every half second: the gateway closes each one a
    few seconds after it opened (it kept them for an hour before), while a normal request is still answered."""
    store = TokenStore(db_url(tmp_path))

    async def run() -> tuple[list[float], int]:
        async with running_gateway(tmp_path, store) as (_, base):
            port = int(base.rsplit(":", 1)[1])
            streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
            opened = time.monotonic()
            closed_after: dict[int, float] = {}
            head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200

            async def trickle(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                for byte in head:
                    try:
                        writer.write(bytes([byte]))
                        await writer.drain()
                    except ConnectionError:
                        break
                    try:
                        if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                            break
                    except asyncio.TimeoutError:
                        continue
                    except ConnectionError:
                        break
                closed_after[i] = time.monotonic() - opened
                writer.close()

            trickling = asyncio.gather(*(trickle(i, r, w) for i, (r, w) in enumerate(streams)))
            async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as response:
                status = response.status
            async with asyncio.timeout(gateway_module.HEADER_TIMEOUT * 4):
                await trickling
            return sorted(closed_after.values()), status

    try:
        closed_after, status = asyncio.run(run())
    finally:
        store.dispose()
    assert status == 200
    assert len(closed_after) == 20
    assert closed_after[-1] < gateway_module.HEADER_TIMEOUT * 3  # the head of 230 bytes would need two minutes


def test_origin_is_checked_against_the_configured_origins_not_the_host_header(tmp_path: Path) -> None:
    """A page on another site that reaches the gateway under its own name (DNS rebinding) sends Host and Origin
    that agree with each other: refused. The gateway's own address and the configured public URL are accepted."""
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("olaf", "127.0.0.1:1", ttl=timedelta(minutes=5))
    fake = FakeVncServer()

    async def attempt(http: aiohttp.ClientSession, url: str, **headers: str) -> int:
        try:
            ws = await http.ws_connect(url, protocols=("binary",), headers=headers)
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status
        await ws.close()
        return 101

    async def run() -> dict[str, int]:
        fake_port = await fake.start()
        store.ensure_target(f"127.0.0.1:{fake_port}", name="127.0.0.1:1")
        try:
            async with running_gateway(tmp_path, store, allowed_origins=("https://safeshare.example/",)) as (
                    gateway, base), aiohttp.ClientSession() as http:
                port = base.rsplit(":", 1)[1]
                url = f"{base}/websockify?token={issued.token}"
                results = {
                    "rebound": await attempt(http, url, Host=f"evil.example:{port}",
                                             Origin=f"http://evil.example:{port}"),
                    "rebound-https": await attempt(http, url, Host="evil.example", Origin="https://evil.example"),
                    "own address": await attempt(http, url, Origin=base),
                    "localhost": await attempt(http, url, Origin=f"http://localhost:{port}"),
                    "public url": await attempt(http, url, Origin="https://safeshare.example"),
                    "public url, other port": await attempt(http, url, Origin="https://safeshare.example:8443"),
                    "no origin (not a browser)": await attempt(http, url),
                }
                return results
        finally:
            await fake.close()

    try:
        results = asyncio.run(run())
    finally:
        store.dispose()
    assert results == {"rebound": 403, "rebound-https": 403, "own address": 101, "localhost": 101, "public url": 101,
                       "public url, other port": 403, "no origin (not a browser)": 101}


def test_a_bad_url_token_does_not_delete_a_valid_cookie(tmp_path: Path) -> None:
    """`/?token=bad` (a link anyone can send) is refused but leaves the researcher's valid cookie alone; a refused
    cookie itself is still cleared."""
    store = TokenStore(db_url(tmp_path))
    valid = store.issue("paula", "127.0.0.1:1", ttl=timedelta(minutes=5))

    async def run() -> tuple[int, str | None, int, int]:
        async with running_gateway(tmp_path, store) as (_, base):
            jar = aiohttp.CookieJar(unsafe=True)
            async with aiohttp.ClientSession(cookie_jar=jar) as http:
                async with http.get(f"{base}/?token={valid.token}") as page:
                    assert page.status == 200
                async with http.get(f"{base}/?token={'B' * 43}", allow_redirects=False) as refused:
                    bad_status = refused.status
                    cleared = refused.headers.get("Set-Cookie")
                async with http.get(f"{base}/") as page:
                    after = page.status
            async with aiohttp.ClientSession() as http, http.get(
                    f"{base}/", headers={"Cookie": f"{COOKIE}={'C' * 43}"}) as stale:
                stale_cleared = stale.status if stale.cookies[COOKIE].value == "" else 0
            return bad_status, cleared, after, stale_cleared

    try:
        bad_status, cleared, after, stale_cleared = asyncio.run(run())
    finally:
        store.dispose()
    assert bad_status == 403 and cleared is None
    assert after == 200  # still logged in
    assert stale_cleared == 403


def test_pending_websocket_handshakes_are_capped(tmp_path: Path) -> None:
    """As many WebSockets as the cap, each stopping after the proxy's RFB greeting (one token each: a second
    connection with the same token would replace the first): the next one gets 503 before any upgrade."""
    store = TokenStore(db_url(tmp_path))
    cap = session_module.MAX_PENDING_HANDSHAKES
    tokens = [store.issue(f"r{i}", "127.0.0.1:1", ttl=timedelta(minutes=5)).token for i in range(cap + 1)]
    fake = FakeVncServer()

    async def run() -> tuple[int, int]:
        store.ensure_target(f"127.0.0.1:{await fake.start()}", name="127.0.0.1:1")
        async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
            sockets = []
            for token in tokens[:cap]:
                ws = await http.ws_connect(f"{base}/websockify?token={token}", protocols=("binary",))
                greeting = await asyncio.wait_for(ws.receive(), 5)
                assert greeting.data == b"RFB 003.008\n"
                sockets.append(ws)
            try:
                await http.ws_connect(f"{base}/websockify?token={tokens[cap]}", protocols=("binary",))
                status = 101
            except aiohttp.WSServerHandshakeError as refused:
                status = refused.status
            for ws in sockets:
                await ws.close()
            deadline = time.monotonic() + 10
            while session_module.pending_handshakes() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await fake.close()
            return status, session_module.pending_handshakes()

    try:
        status, pending = asyncio.run(run())
    finally:
        store.dispose()
    assert status == 503
    assert pending == 0
    assert fake.connections == 0  # no half-open client made the gateway connect to the VNC server


@pytest.fixture(autouse=True)
def _no_leftover_slots():
    yield
    assert session_module.pending_handshakes() == 0
