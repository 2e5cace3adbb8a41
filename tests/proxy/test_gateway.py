"""Gateway and session tokens: the token store on a real SQLite file, the WebSocket bridge against a scripted VNC
server and a real x11vnc on Xvfb, revocation of live sessions, and noVNC in headless Chromium over the DevTools
protocol. Everything listens on 127.0.0.1 with ports chosen by the kernel."""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import pytest

from proxy.eventlog import verify_log
from proxy.gateway import COOKIE, Gateway, openapi_document
from proxy.tokens import EXPIRED, REVOKED, UNKNOWN, TokenRefused, TokenStore, parse_expiry, parse_ttl
from safeshare.cli import main as safeshare_main
from tests.cdp import chromium, wait_for, wait_for_js
from tests.pg import postgres_url  # noqa: F401 (a fixture)
from tests.proxy.rfbtools import (PF_32, FakeVncServer, RfbClient, free_port, stop_process, x11vnc_start,
                                  xvfb_start)

HAVE_X = all(shutil.which(tool) for tool in ("Xvfb", "x11vnc", "xsetroot"))
HAVE_CHROMIUM = shutil.which("chromium") is not None and Path("/usr/share/novnc/core/rfb.js").is_file()
needs_x = pytest.mark.skipif(not HAVE_X, reason="Xvfb, x11vnc and xsetroot are installed by scripts/setup.sh")
needs_chromium = pytest.mark.skipif(not (HAVE_X and HAVE_CHROMIUM),
                                    reason="chromium and novnc are installed by scripts/setup.sh")


def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tokens.db'}"


def events(session_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]


# --- token store ---------------------------------------------------------------------------------------------------

def test_issue_stores_only_the_hash(tmp_path: Path) -> None:
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("alice", "127.0.0.1:5900", password_file="/etc/enclave/alice.pass", ttl=timedelta(hours=1))
    other = store.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    assert len(issued.token) >= 43 and issued.token != other.token  # 32 random bytes, url-safe base64
    store.dispose()
    with sqlite3.connect(tmp_path / "tokens.db") as db:
        rows = db.execute("SELECT token_hash, recipient, target_id FROM gateway_tokens ORDER BY id").fetchall()
        targets = db.execute("SELECT name, upstream, password_file FROM gateway_targets").fetchall()
    assert rows[0] == (hashlib.sha256(issued.token.encode()).hexdigest(), "alice", 1)
    assert targets == [("127.0.0.1:5900", "127.0.0.1:5900", None)]  # the second issue updated the target
    for path in tmp_path.iterdir():  # neither the database nor its WAL holds the token text
        assert issued.token.encode() not in path.read_bytes()


def test_verify_unknown_malformed_and_valid(tmp_path: Path) -> None:
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("bob", "unix:/run/enclave/bob.sock", target_name="bob-enclave", release="adult-k5",
                         ttl=timedelta(minutes=5))
    grant = store.verify(issued.token)
    assert (grant.recipient, grant.target_name, grant.upstream, grant.release) == (
        "bob", "bob-enclave", "unix:/run/enclave/bob.sock", "adult-k5")
    assert grant.expires_at == issued.expires_at
    for bad in (None, "", "x" * 43, issued.token[:-1], issued.token + "A", "a b", "é" * 43, "A" * 5000):
        with pytest.raises(TokenRefused) as refused:
            store.verify(bad)
        assert refused.value.reason == UNKNOWN


def test_expiry(tmp_path: Path) -> None:
    now = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
    clock = {"now": now}
    store = TokenStore(db_url(tmp_path), clock=lambda: clock["now"])
    issued = store.issue("carol", "127.0.0.1:5900", ttl=timedelta(hours=2))
    assert issued.expires_at == now + timedelta(hours=2)
    clock["now"] = now + timedelta(hours=2) - timedelta(seconds=1)
    store.verify(issued.token)
    assert store.check([issued.token_id]) == {issued.token_id: None}
    clock["now"] = now + timedelta(hours=2)
    with pytest.raises(TokenRefused) as refused:
        store.verify(issued.token)
    assert refused.value.reason == EXPIRED
    assert store.check([issued.token_id]) == {issued.token_id: EXPIRED}
    assert [info.status for info in store.list_tokens()] == [EXPIRED]
    with pytest.raises(ValueError):
        store.issue("carol", "127.0.0.1:5900", expires_at=now)  # not in the future
    with pytest.raises(ValueError):
        store.issue("carol", "127.0.0.1:5900", expires_at=datetime(2031, 1, 1))  # naive


def test_revocation_by_id_token_and_recipient(tmp_path: Path) -> None:
    store = TokenStore(db_url(tmp_path))
    a1 = store.issue("alice", "127.0.0.1:5900")
    a2 = store.issue("alice", "127.0.0.1:5901")
    b1 = store.issue("bob", "127.0.0.1:5902")
    b2 = store.issue("bob", "127.0.0.1:5902")
    assert store.revoke(token_id=b1.token_id, reason="left the project") == 1
    assert store.revoke(token=b2.token) == 1
    assert store.revoke(token=b2.token) == 0  # already revoked
    assert store.revoke(recipient="alice") == 2
    assert store.revoke(recipient="nobody") == 0
    for issued in (a1, a2, b1, b2):
        with pytest.raises(TokenRefused) as refused:
            store.verify(issued.token)
        assert refused.value.reason == REVOKED
    assert store.verify(store.issue("alice", "127.0.0.1:5900").token).recipient == "alice"  # a new token works
    assert store.check([b1.token_id, 999]) == {b1.token_id: REVOKED, 999: REVOKED}  # a deleted row is revoked too
    infos = {info.token_id: info for info in store.list_tokens("bob")}
    assert infos[b1.token_id].revoke_reason == "left the project" and infos[b1.token_id].status == REVOKED
    assert len(store.list_tokens(active_only=True)) == 1
    with pytest.raises(ValueError):
        store.revoke(token_id=1, recipient="alice")


def test_durations() -> None:
    assert parse_ttl("90s") == timedelta(seconds=90) and parse_ttl("8h") == timedelta(hours=8)
    assert parse_ttl("1.5d") == timedelta(hours=36) and parse_ttl("30") == timedelta(seconds=30)
    for bad in ("", "0h", "8 hours", "-1h"):
        with pytest.raises(ValueError):
            parse_ttl(bad)
    assert parse_expiry("2030-06-30") == datetime(2030, 7, 1, tzinfo=timezone.utc)
    assert parse_expiry("2030-06-30T10:00:00") == datetime(2030, 6, 30, 10, tzinfo=timezone.utc)


def test_token_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", db_url(tmp_path)]
    password = tmp_path / "vnc.pass"
    password.write_text("secret\n")
    assert safeshare_main(["token", "issue", "--recipient", "dora", "--upstream", "127.0.0.1:5999", "--password-file",
                           str(password), "--ttl", "2h", "--url", "http://127.0.0.1:6080/", "--json", *db]) == 0
    issued = json.loads(capsys.readouterr().out)
    assert issued["url"] == f"http://127.0.0.1:6080/?token={issued['token']}"
    assert safeshare_main(["token", "verify", issued["token"], *db]) == 0
    assert json.loads(capsys.readouterr().out)["recipient"] == "dora"
    assert safeshare_main(["token", "list", *db]) == 0
    listing = capsys.readouterr().out
    assert "dora" in listing and "active" in listing and issued["token"] not in listing
    policy = tmp_path / "recipient.yaml"
    policy.write_text("recipient: demo-researcher\nrelease: adult-k5\nexpires: 2027-06-30\n"
                      "limits:\n  keys:\n    rate: 5\n    burst: 10\n")
    assert safeshare_main(["token", "issue", "--policy", str(policy), "--upstream", "127.0.0.1:5998", "--expires",
                           "2099-01-01", "--json", *db]) == 0
    by_policy = json.loads(capsys.readouterr().out)
    assert by_policy["recipient"] == "demo-researcher"
    assert by_policy["expires_at"] <= "2027-07-01T00:00:00+00:00"  # capped by the policy's own expiry
    assert safeshare_main(["token", "revoke", "--recipient", "dora", *db]) == 0
    assert "revoked 1 token" in capsys.readouterr().out
    assert safeshare_main(["token", "revoke", "--recipient", "dora", *db]) == 1  # nothing left to revoke
    capsys.readouterr()
    assert safeshare_main(["token", "verify", issued["token"], *db]) == 1
    assert json.loads(capsys.readouterr().out) == {"valid": False, "reason": "revoked"}
    assert safeshare_main(["token", "list", "--json", "--active", *db]) == 0
    assert [row["recipient"] for row in json.loads(capsys.readouterr().out)] == ["demo-researcher"]
    # bad input: exit code 2
    assert safeshare_main(["token", "issue", "--recipient", "x", "--upstream", "nohostport", *db]) == 2
    assert safeshare_main(["token", "issue", "--recipient", "x", "--upstream", "127.0.0.1:1", "--password-file",
                           str(tmp_path / "missing"), *db]) == 2
    assert safeshare_main(["token", "issue", "--recipient", "x", "--upstream", "127.0.0.1:1", "--ttl", "soon",
                           *db]) == 2
    assert safeshare_main(["token", "issue", "--recipient", "someone-else", "--policy", str(policy), "--upstream",
                           "127.0.0.1:1", *db]) == 2




def test_token_store_on_postgresql(postgres_url: str) -> None:
    """The same store on PostgreSQL: time zones survive, hashes are unique, revocation and expiry are seen."""
    now = datetime.now(timezone.utc)
    clock = {"now": now}
    store = TokenStore(postgres_url, clock=lambda: clock["now"])
    try:
        assert store.engine.dialect.name == "postgresql"
        a = store.issue("olga", "127.0.0.1:5900", ttl=timedelta(hours=1))
        b = store.issue("olga", "127.0.0.1:5901", ttl=timedelta(minutes=1))
        grant = store.verify(a.token)
        assert grant.expires_at == a.expires_at and grant.expires_at.tzinfo is not None
        assert store.check([a.token_id, b.token_id]) == {a.token_id: None, b.token_id: None}
        clock["now"] = now + timedelta(minutes=2)
        assert store.check([a.token_id, b.token_id]) == {a.token_id: None, b.token_id: EXPIRED}
        assert store.revoke(recipient="olga") == 2
        with pytest.raises(TokenRefused) as refused:
            store.verify(a.token)
        assert refused.value.reason == REVOKED
        assert [info.status for info in store.list_tokens("olga")] == [REVOKED, REVOKED]
        store.ping()
    finally:
        store.dispose()


# --- gateway helpers -----------------------------------------------------------------------------------------------

@asynccontextmanager
async def running_gateway(tmp_path: Path, store: TokenStore, **kwargs) -> AsyncIterator[tuple[Gateway, str]]:
    ended: list[tuple[Path, str]] = []
    kwargs.setdefault("on_session_end", lambda live, reason: ended.append((live.session.dir, reason)))
    gateway = Gateway(store, tmp_path / "sessions", **kwargs)
    gateway.ended = ended  # type: ignore[attr-defined]
    port = await gateway.start("127.0.0.1", 0)
    try:
        yield gateway, f"http://127.0.0.1:{port}"
    finally:
        await gateway.close()


class WsStream:
    """Stream-like wrapper around a client WebSocket for RfbClient: each write() becomes frames in order; `split`
    cuts the bytes into frames, `coalesce` sends everything queued so far as a single frame."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, split: Callable[[bytes], list[bytes]] | None = None,
                 coalesce: bool = False) -> None:
        self.ws = ws
        self.reader = asyncio.StreamReader(limit=1 << 22)
        self.split = split or (lambda data: [data])
        self.coalesce = coalesce
        self.frames_sent = 0
        self.close_code: int | None = None
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._send())]

    async def _receive(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    self.reader.feed_data(msg.data)
        finally:
            self.close_code = self.ws.close_code
            self.reader.feed_eof()

    async def _send(self) -> None:
        while True:
            items = [await self._queue.get()]
            while self.coalesce and not self._queue.empty():
                items.append(self._queue.get_nowait())
            for piece in self.split(b"".join(items)):
                await self.ws.send_bytes(piece)
                self.frames_sent += 1
            for _ in items:
                self._queue.task_done()

    def write(self, data: bytes) -> None:
        self._queue.put_nowait(bytes(data))

    async def drain(self) -> None:
        await self._queue.join()

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        await self.ws.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def ws_rfb_connect(http: aiohttp.ClientSession, url: str, encodings: tuple[int, ...] = (0,),
                         **stream_kwargs) -> tuple[RfbClient, WsStream]:
    """RfbClient's RFB 3.8 handshake (security None, as the gateway offers after the token), over the WebSocket."""
    ws = await http.ws_connect(url, protocols=("binary",))
    assert ws.protocol == "binary"
    stream = WsStream(ws, **stream_kwargs)
    client = RfbClient()
    client.reader, client.writer = stream.reader, stream  # type: ignore[assignment]
    async with asyncio.timeout(10):
        assert await client.reader.readexactly(12) == b"RFB 003.008\n"
        client.writer.write(b"RFB 003.008\n")
        (count,) = await client.reader.readexactly(1)
        assert await client.reader.readexactly(count) == b"\x01"  # None only: the token was the authentication
        client.writer.write(b"\x01")
        assert await client.reader.readexactly(4) == b"\0\0\0\0"
        client.writer.write(b"\x01")
        client.width, client.height = struct.unpack(">HH", await client.reader.readexactly(4))
        await client.reader.readexactly(16)
        (length,) = struct.unpack(">I", await client.reader.readexactly(4))
        client.name = await client.reader.readexactly(length)
    client.fb = bytearray(client.width * client.height * 4)
    client.writer.write(b"\x00\x00\x00\x00" + PF_32)
    await client.set_encodings(encodings)
    return client, stream


def raw_update(x: int, y: int, w: int, h: int, bgrx: bytes) -> bytes:
    return struct.pack(">BxHHHHHi", 0, 1, x, y, w, h, 0) + bgrx * (w * h)


# --- gateway against a scripted VNC server -------------------------------------------------------------------------

def test_websocket_bridge_is_a_byte_stream(tmp_path: Path) -> None:
    """Valid token: RFB handshake and a framebuffer update through the WebSocket; client messages split over frames
    and packed several to a frame all arrive intact; the session log verifies."""
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("erin", "127.0.0.1:1", ttl=timedelta(minutes=5))
    fake = FakeVncServer(width=64, height=48, script=raw_update(2, 3, 4, 5, b"\x10\x20\x30\x00"))

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")  # point the token's target at the fake
        try:
            async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
                one_byte = lambda data: [data[i:i + 1] for i in range(len(data))]  # noqa: E731
                client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}",
                                                      split=one_byte)
                assert (client.width, client.height, client.name) == (64, 48, b"fake")
                await client.read_update()
                assert client.pixel(3, 4) == (0x30, 0x20, 0x10) and client.pixel(0, 0) == (0, 0, 0)
                assert gateway.session_count == 1
                stream.split = lambda data: [data[:1], data[1:4], data[4:]]  # a key event over three frames
                await client.key(0x61, True)
                stream.coalesce, stream.split = True, lambda data: [data]  # then several messages in one frame
                sent = stream.frames_sent
                for keysym in (0x62, 0x63):
                    client.writer.write(struct.pack(">BBxxI", 4, 1, keysym) + struct.pack(">BBxxI", 4, 0, keysym))
                client.writer.write(struct.pack(">BBHH", 5, 0, 7, 9))
                await client.writer.drain()
                assert stream.frames_sent == sent + 1
                await wait_for(lambda: len(fake.keys()) == 5 and fake.of_type(5))
                await client.close()
                await wait_for(lambda: gateway.ended)
        finally:
            await fake.close()

    asyncio.run(run())
    assert [(down, keysym) for _, down, keysym in fake.keys()] == [
        (True, 0x61), (True, 0x62), (False, 0x62), (True, 0x63), (False, 0x63)]
    assert fake.of_type(5)[-1] == struct.pack(">BHH", 0, 7, 9)
    session_dir = next((tmp_path / "sessions").iterdir())
    meta = json.loads((session_dir / "meta.json").read_text())
    assert meta["recipient"] == "erin" and meta["via"] == "gateway" and meta["token_id"] == issued.token_id
    assert meta["end_reason"] == "client closed"
    assert verify_log(session_dir / "events.jsonl").ok
    assert store.list_tokens()[0].last_used_at is not None


def test_refused_tokens_get_403_and_no_websocket(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    clock = {"now": now}
    store = TokenStore(db_url(tmp_path), clock=lambda: clock["now"])
    fake = FakeVncServer()
    valid = store.issue("frank", "127.0.0.1:1", ttl=timedelta(hours=1))
    expired = store.issue("frank", "127.0.0.1:1", ttl=timedelta(seconds=1))
    revoked = store.issue("frank", "127.0.0.1:1", ttl=timedelta(hours=1))
    store.revoke(token_id=revoked.token_id)
    clock["now"] = now + timedelta(seconds=2)
    cases = {"unknown": "A" * 43, "expired": expired.token, "revoked": revoked.token, "missing": None}
    headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "binary"}

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
                for reason, token in cases.items():
                    query = f"?token={token}" if token else ""
                    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                        await http.ws_connect(f"{base}/websockify{query}", protocols=("binary",))
                    assert refused.value.status == 403, reason
                    async with http.get(f"{base}/websockify{query}", headers=headers) as response:
                        assert response.status == 403 and "Upgrade" not in response.headers
                        assert f'data-reason="{reason}"' in await response.text()
                    async with http.get(f"{base}/{query}", allow_redirects=False) as page:
                        assert page.status == 403 and page.content_type == "text/html"
                        text = await page.text()
                        assert f'data-reason="{reason}"' in text and "RFB" not in text
                    # a stale cookie is refused the same way (and cleared)
                    if token:
                        async with http.get(f"{base}/", headers={"Cookie": f"{COOKIE}={token}"}) as page:
                            assert page.status == 403
                            assert page.cookies[COOKIE].value == ""
                assert fake.connections == 0 and gateway.session_count == 0
                # the valid token: ?token= sets an HttpOnly cookie and redirects to the bare page
                async with http.get(f"{base}/?token={valid.token}", allow_redirects=False) as response:
                    assert response.status == 303 and response.headers["Location"] == "/"
                    cookie = response.cookies[COOKIE]
                    assert cookie.value == valid.token and cookie["httponly"] and cookie["samesite"] == "Strict"
                jar_http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
                async with jar_http:
                    async with jar_http.get(f"{base}/?token={valid.token}") as page:
                        assert page.status == 200 and "static/gateway.js" in await page.text()
                        assert str(page.url) == f"{base}/"
                        assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
                    client, _ = await ws_rfb_connect(jar_http, f"{base}/websockify")  # token from the cookie
                    await client.close()
                    # a WebSocket opened from another site's page is refused even with the cookie
                    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                        await jar_http.ws_connect(f"{base}/websockify", origin="http://evil.example")
                    assert refused.value.status == 403
                    async with jar_http.get(f"{base}/") as page:  # and it did not log the user out
                        assert page.status == 200
                await wait_for(lambda: gateway.ended)
                async with http.get(f"{base}/websockify?token={valid.token}") as response:
                    assert response.status == 426  # a valid token but no upgrade
        finally:
            await fake.close()

    asyncio.run(run())
    assert fake.connections == 1


def test_revoking_the_recipient_ends_live_sessions_within_a_second(tmp_path: Path) -> None:
    """`safeshare token revoke --recipient` in another connection to the database ends both live sessions of the
    recipient and leaves another recipient's session running; a row deleted by plain SQL ends its session too."""
    store = TokenStore(db_url(tmp_path))
    fake = FakeVncServer()
    g1 = store.issue("gina", "127.0.0.1:1")
    g2 = store.issue("gina", "127.0.0.1:1")
    h1 = store.issue("hugo", "127.0.0.1:1")
    timings: dict[str, float] = {}

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
                clients = {}
                for name, issued in (("g1", g1), ("g2", g2), ("h1", h1)):
                    clients[name] = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}")
                assert gateway.session_count == 3
                start = time.monotonic()
                code = await asyncio.to_thread(safeshare_main, ["token", "revoke", "--recipient", "gina", "--db",
                                                                db_url(tmp_path)])
                assert code == 0
                revoked_at = time.monotonic()
                for name in ("g1", "g2"):
                    client, stream = clients[name]
                    async with asyncio.timeout(2):
                        with pytest.raises(asyncio.IncompleteReadError):
                            while True:
                                await client.read_message()
                    timings[name] = time.monotonic() - revoked_at
                    await wait_for(lambda: stream.close_code is not None, 1)
                    assert stream.close_code == 1008  # policy violation
                timings["cli"] = revoked_at - start
                await wait_for(lambda: gateway.session_count == 1, 2)
                # hugo's session is untouched: his input still reaches the server
                client, stream = clients["h1"]
                await client.key(0x68, True)
                await wait_for(lambda: (True, 0x68) in [(down, keysym) for _, down, keysym in fake.keys()], 2)
                # delete hugo's token with plain SQL: a deleted token is a revoked one
                deleted_at = time.monotonic()
                with sqlite3.connect(tmp_path / "tokens.db") as db:
                    db.execute("DELETE FROM gateway_tokens WHERE id = ?", (h1.token_id,))
                await wait_for(lambda: stream.close_code is not None, 2)
                timings["sql"] = time.monotonic() - deleted_at
                await wait_for(lambda: len(gateway.ended) == 3)
        finally:
            await fake.close()

    asyncio.run(run())
    assert timings["g1"] < 1.0 and timings["g2"] < 1.0 and timings["sql"] < 1.0, timings
    reasons = {}
    for session_dir in (tmp_path / "sessions").iterdir():
        meta = json.loads((session_dir / "meta.json").read_text())
        reasons.setdefault(meta["recipient"], []).append(meta["end_reason"])
        log_events = events(session_dir)
        assert [e["event"] for e in log_events[-2:]] == ["disconnect", "seal"]
        assert log_events[-2]["reason"] == "token revoked"
        assert verify_log(session_dir / "events.jsonl").ok
    assert reasons == {"gina": ["token revoked", "token revoked"], "hugo": ["token revoked"]}


def test_session_book_tracks_live_sessions_across_gateway_restarts(tmp_path: Path) -> None:
    """The database shows a session live while it runs and ended (with its reason) after; a gateway that died with
    sessions open closes their rows at its next start (and only its own rows), so `live` stays true to fact."""
    from proxy.tokens import SessionBook

    store = TokenStore(db_url(tmp_path))
    book = SessionBook(store)
    fake = FakeVncServer()
    issued = store.issue("ines", "127.0.0.1:1", release="adult/abc")
    seen: dict[str, list] = {}

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(tmp_path, store, name="gw-a") as (gateway, base), \
                    aiohttp.ClientSession() as http:
                client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}")
                await wait_for(lambda: len(book.list(live_only=True)) == 1, 2)
                seen["live"] = book.list(live_only=True)
                await stream.wait_closed()
                await wait_for(lambda: not book.list(live_only=True), 2)
        finally:
            await fake.close()

    asyncio.run(run())
    (live,) = seen["live"]
    assert (live.recipient, live.gateway, live.token_id, live.release) == ("ines", "gw-a", issued.token_id,
                                                                          "adult/abc")
    assert Path(live.folder).parent == tmp_path / "sessions" and live.ended_at is None
    (ended,) = book.list("ines")
    assert ended.ended_at is not None and ended.end_reason and ended.session_id == live.session_id

    # a crashed gateway's open rows: only gw-a's are closed when gw-a starts again
    grant = store.verify(issued.token)
    book.started("s-crashed", "gw-a", grant, str(tmp_path / "sessions" / "s-crashed"), None)
    book.started("s-other", "gw-b", grant, str(tmp_path / "sessions" / "s-other"), None)

    async def restart() -> None:
        async with running_gateway(tmp_path, store, name="gw-a"):
            pass

    asyncio.run(restart())
    state = {info.session_id: info for info in book.list()}
    assert state["s-crashed"].ended_at is not None and state["s-crashed"].end_reason.startswith("interrupted")
    assert state["s-other"].live
    store.dispose()


def test_expiry_and_database_loss_end_live_sessions(tmp_path: Path) -> None:
    store = TokenStore(db_url(tmp_path))
    fake = FakeVncServer()
    short = store.issue("ivan", "127.0.0.1:1", ttl=timedelta(seconds=1.5))
    other = store.issue("judy", "127.0.0.1:1")

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(tmp_path, store, fail_closed_after=0.5) as (gateway, base), \
                    aiohttp.ClientSession() as http:
                _, ivan = await ws_rfb_connect(http, f"{base}/websockify?token={short.token}")
                _, judy = await ws_rfb_connect(http, f"{base}/websockify?token={other.token}")
                await wait_for(lambda: ivan.close_code is not None, 3)
                assert judy.close_code is None
                broken = asyncio.Event()

                def unreadable(ids):
                    broken.set()
                    raise RuntimeError("database gone")

                store.check = unreadable  # type: ignore[method-assign]
                await broken.wait()
                started = time.monotonic()
                await wait_for(lambda: judy.close_code is not None, 3)
                assert time.monotonic() - started < 1.5
                await wait_for(lambda: len(gateway.ended) == 2)
        finally:
            await fake.close()

    asyncio.run(run())
    reasons = sorted(json.loads((d / "meta.json").read_text())["end_reason"] for d in (tmp_path / "sessions").iterdir())
    assert reasons == ["token database unavailable", "token expired"]


def test_text_frames_and_one_session_per_token(tmp_path: Path) -> None:
    """A text frame is not RFB: the session ends with a logged protocol error. A second connection with the same
    token replaces the first."""
    store = TokenStore(db_url(tmp_path))
    fake = FakeVncServer()
    issued = store.issue("kim", "127.0.0.1:1")

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
                _, first = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}")
                _, second = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}")
                await wait_for(lambda: first.close_code is not None, 2)
                assert second.close_code is None and gateway.session_count == 1
                await second.ws.send_str("\x04\x01\x00\x00\x00\x00\x00\x61")
                await wait_for(lambda: second.close_code is not None, 2)
                await wait_for(lambda: len(gateway.ended) == 2)
        finally:
            await fake.close()

    asyncio.run(run())
    assert fake.keys() == []
    by_reason = {}
    for session_dir in (tmp_path / "sessions").iterdir():
        meta = json.loads((session_dir / "meta.json").read_text())
        by_reason[meta["end_reason"]] = session_dir
    assert set(by_reason) == {"replaced by a new connection with the same token",
                              "protocol error: text frame on the RFB WebSocket"}
    assert any(e["event"] == "protocol_error" for e in events(by_reason["protocol error: text frame on the RFB "
                                                                          "WebSocket"]))


def test_unusable_target_healthz_openapi_and_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = TokenStore(db_url(tmp_path))
    no_password = store.issue("lee", "127.0.0.1:1", password_file=str(tmp_path / "missing.pass"), target_name="t")

    async def run() -> None:
        async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{base}/websockify?token={no_password.token}")
            assert refused.value.status == 503
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200
                assert await response.json() == {"status": "ok", "sessions": 0, "database": True}
            async with http.get(f"{base}/openapi.json") as response:
                document = await response.json()
            assert document == json.loads(json.dumps(openapi_document()))
            assert document["openapi"].startswith("3.") and {"/", "/websockify", "/healthz"} <= set(document["paths"])
            if Path("/usr/share/novnc/core/rfb.js").is_file():
                async with http.get(f"{base}/novnc/core/rfb.js") as response:
                    assert response.status == 200 and "javascript" in response.content_type
            for path in ("/static/../db.py", "/static/__init__.py", "/static/index.html", "/novnc/../etc/passwd"):
                async with http.get(f"{base}{path}") as response:
                    assert response.status in (403, 404), path
            async with http.get(f"{base}/static/gateway.js") as response:
                assert response.status == 200 and "javascript" in response.content_type

    with caplog.at_level(logging.INFO):
        asyncio.run(run())
    assert no_password.token not in caplog.text
    assert any("/websockify" in record.getMessage() for record in caplog.records)


def test_safeshare_gateway_command(tmp_path: Path) -> None:
    """`safeshare gateway` as operators run it: prints where it listens, serves a token issued by `safeshare token
    issue`, prints each session, and on SIGTERM ends the session cleanly (sealed log) and exits 0."""
    url = db_url(tmp_path)
    fake = FakeVncServer()

    async def run() -> tuple[str, int]:
        fake_port = await fake.start()
        issue = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "safeshare.cli", "token", "issue", "--recipient", "pia", "--upstream",
            f"127.0.0.1:{fake_port}", "--db", url, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = await issue.communicate()
        assert issue.returncode == 0
        token = out.decode().split()[0]
        gateway = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "safeshare.cli", "gateway", "--listen", "127.0.0.1:0", "--sessions",
            str(tmp_path / "sessions"), "--db", url, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            async with asyncio.timeout(20):
                line = (await gateway.stdout.readline()).decode()
                assert line.startswith("listening on http://127.0.0.1:"), line
                base = line.split()[-1].rstrip("/")
                async with aiohttp.ClientSession() as http:
                    async with http.get(f"{base}/healthz") as response:
                        assert (await response.json())["database"] is True
                    client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={token}")
                    started = (await gateway.stdout.readline()).decode()
                    assert started.startswith("session ") and "recipient=pia" in started
                    gateway.send_signal(signal.SIGTERM)
                    await wait_for(lambda: stream.close_code is not None, 5)
                    assert stream.close_code == 1001  # going away
                    ended = (await gateway.stdout.readline()).decode()
                    await stream.wait_closed()
                rest = await gateway.stdout.read()
                code = await gateway.wait()
        finally:
            if gateway.returncode is None:
                gateway.kill()
                await gateway.wait()
            await fake.close()
        return ended + rest.decode(), code

    output, code = asyncio.run(run())
    assert code == 0 and "ended: gateway shutting down" in output
    session_dir = next((tmp_path / "sessions").iterdir())
    assert verify_log(session_dir / "events.jsonl").ok


# --- against a real x11vnc on Xvfb ---------------------------------------------------------------------------------

WIDTH, HEIGHT = 320, 240
COLOUR = (0xE0, 0x60, 0x20)


@pytest.fixture(scope="module")
def x11vnc_port(tmp_path_factory: pytest.TempPathFactory):
    if not HAVE_X:
        pytest.skip("Xvfb and x11vnc are installed by scripts/setup.sh")
    xvfb, display = xvfb_start(WIDTH, HEIGHT)
    vnc = None
    try:
        subprocess.run(["xsetroot", "-solid", "#%02x%02x%02x" % COLOUR], env={**os.environ, "DISPLAY": display},
                       check=True, timeout=10)
        port = free_port()
        vnc = x11vnc_start(display, port, ["-nosel", "-noprimary", "-noclipboard", "-nosetclipboard"])
        yield port
    finally:
        if vnc is not None:
            stop_process(vnc)
        stop_process(xvfb)


@needs_x
def test_real_vnc_framebuffer_through_gateway(tmp_path: Path, x11vnc_port: int) -> None:
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("mia", f"127.0.0.1:{x11vnc_port}", target_name="mia-enclave")

    async def run() -> tuple[int, int, tuple[int, int, int], tuple[int, int, int]]:
        async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http:
            client, _ = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}", encodings=(0, 6))
            await client.request()
            await client.read_update()
            result = (client.width, client.height, client.pixel(5, 5), client.pixel(WIDTH - 1, HEIGHT - 1))
            await client.close()
            await wait_for(lambda: gateway.ended)
            return result

    width, height, corner, far = asyncio.run(run())
    assert (width, height) == (WIDTH, HEIGHT)
    assert corner == COLOUR and far == COLOUR
    session_dir = next((tmp_path / "sessions").iterdir())
    kinds = [e["event"] for e in events(session_dir)]
    assert kinds[:4] == ["connect", "upstream_ready", "input_reset", "client_ready"] and "disconnect" in kinds
    meta = json.loads((session_dir / "meta.json").read_text())
    assert meta["target"] == "mia-enclave" and meta["counters"]["updates"] >= 1
    assert verify_log(session_dir / "events.jsonl").ok


# --- noVNC in headless Chromium over the DevTools protocol ---------------------------------------------------------

CANVAS_PIXEL = """(() => {
    const canvas = document.querySelector('#screen canvas');
    if (!canvas || canvas.width < 10) return null;
    return Array.from(canvas.getContext('2d').getImageData(5, 5, 1, 1).data.slice(0, 3));
})()"""

NAVIGATION_STATUS = "performance.getEntriesByType('navigation')[0].responseStatus"


@needs_chromium
def test_novnc_in_headless_chromium(tmp_path: Path, x11vnc_port: int) -> None:
    """noVNC loads from the gateway with a valid token, connects, draws the enclave's screen; revoking the token
    disconnects it within a second; a bad token gets the refusal page."""
    store = TokenStore(db_url(tmp_path))
    issued = store.issue("nina", f"127.0.0.1:{x11vnc_port}")
    seen: dict[str, object] = {}

    async def run() -> None:
        async with running_gateway(tmp_path, store) as (gateway, base), aiohttp.ClientSession() as http, \
                chromium(tmp_path, http) as cdp:
            await cdp.send("Page.enable")
            await cdp.navigate(f"{base}/?token={issued.token}")
            seen["url"] = await cdp.evaluate("location.href")
            seen["status"] = await cdp.evaluate(NAVIGATION_STATUS)
            seen["state"] = await wait_for_js(cdp, "window.safeshare && window.safeshare.state === 'connected' "
                                                   "&& window.safeshare.state")
            seen["pixel"] = await wait_for_js(cdp, f"(p => p && p.join() === '{','.join(map(str, COLOUR))}' && p)"
                                                   f"({CANVAS_PIXEL})")
            seen["cookie_visible"] = await cdp.evaluate("document.cookie")
            live = next(iter(next(iter(gateway.live.values()))))
            seen["updates"] = live.session.counters["updates"]
            revoked_at = time.monotonic()
            await asyncio.to_thread(store.revoke, token_id=issued.token_id)
            seen["after_revoke"] = await wait_for_js(cdp, "window.safeshare.state === 'disconnected' && "
                                                          "window.safeshare.state", timeout=3)
            seen["revoke_seconds"] = time.monotonic() - revoked_at
            # reloading now shows the refusal page (the cookie is revoked)
            await cdp.navigate(f"{base}/")
            seen["reload_reason"] = await cdp.evaluate("document.getElementById('reason')?.dataset.reason")
            await cdp.navigate(f"{base}/?token=not-a-real-token-at-all-0123456789")
            seen["bad_status"] = await cdp.evaluate(NAVIGATION_STATUS)
            seen["bad_reason"] = await cdp.evaluate("document.getElementById('reason')?.dataset.reason")
            seen["bad_has_rfb"] = await cdp.evaluate("typeof window.safeshare")
            await wait_for(lambda: gateway.ended)

    asyncio.run(run())
    assert seen["url"].endswith("/") and "token" not in seen["url"]  # the token left the address bar
    assert seen["status"] == 200 and seen["state"] == "connected"
    assert seen["pixel"] == list(COLOUR)
    assert seen["cookie_visible"] == ""  # HttpOnly
    assert seen["updates"] >= 1
    assert seen["after_revoke"] == "disconnected" and seen["revoke_seconds"] < 1.0, seen
    assert seen["reload_reason"] == REVOKED
    assert seen["bad_status"] == 403 and seen["bad_reason"] == UNKNOWN and seen["bad_has_rfb"] == "undefined"
    session_dir = next((tmp_path / "sessions").iterdir())
    kinds = [e["event"] for e in events(session_dir)]
    assert "client_ready" in kinds and "set_encodings" in kinds
    assert json.loads((session_dir / "meta.json").read_text())["end_reason"] == "token revoked"
    assert verify_log(session_dir / "events.jsonl").ok


def test_incoming_frames_are_flow_controlled() -> None:
    """The bridge stops reading the WebSocket while the session has not consumed what arrived (so a client flooding
    frames meets TCP backpressure instead of growing the gateway's memory), and resumes as the session reads."""
    from proxy.gateway import WebSocketClient

    class FakeWs:
        def __init__(self) -> None:
            self.receives = 0

        async def receive(self):
            self.receives += 1
            return type("Msg", (), {"type": aiohttp.WSMsgType.BINARY, "data": b"\x04" * 4096})()

    async def run() -> None:
        ws = FakeWs()
        client = WebSocketClient(ws, limit=16 * 1024)  # type: ignore[arg-type]
        pump = asyncio.create_task(client.pump_in())
        await asyncio.sleep(0.05)
        paused_at = ws.receives
        assert paused_at <= 10  # 2 x limit / 4096, then paused
        await asyncio.sleep(0.05)
        assert ws.receives == paused_at
        await client.reader.readexactly(40 * 1024)
        await wait_for(lambda: ws.receives > paused_at, 1)
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)

    asyncio.run(run())
