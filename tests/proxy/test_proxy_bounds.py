"""Bounds of the RFB proxy (issue 12, items 6 and 13, proxy side): a cut text that announces 2 GiB and stalls is on
record as soon as its header arrives; half-open clients hold no connection to the VNC server (the proxy authenticates
upstream only after the client's handshake), and their number is capped. Against a real x11vnc on Xvfb where the
VNC server's side matters; a scripted server only for what a real one would never send."""
from __future__ import annotations

import asyncio
import json
import shutil
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from proxy import session as session_module
from proxy.eventlog import verify_log
from proxy.limits import SessionLimits
from proxy.server import RfbProxyServer
from proxy.session import MAX_PENDING_HANDSHAKES, ProxySession, UpstreamTarget
from proxy.vncserver import SAFE_X11VNC_FLAGS
from tests.cdp import wait_for
from tests.proxy.rfbtools import FakeVncServer, RfbClient, free_port, stop_process, x11vnc_start, xvfb_start

needs_x = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("Xvfb", "x11vnc")),
                             reason="Xvfb and x11vnc are installed by scripts/setup.sh")
STALLED_LENGTH = 2**31 - 1


@pytest.fixture(scope="module")
def vnc():
    xvfb, display = xvfb_start()
    port = free_port()
    proc = x11vnc_start(display, port, list(SAFE_X11VNC_FLAGS))
    try:
        yield port
    finally:
        stop_process(proc)
        stop_process(xvfb)


@asynccontextmanager
async def proxy(tmp_path: Path, upstream_port: int) -> AsyncIterator[tuple[int, RfbProxyServer, list[ProxySession],
                                                                           list[tuple[Path, str]]]]:
    started: list[ProxySession] = []
    ended: list[tuple[Path, str]] = []
    server = RfbProxyServer(UpstreamTarget("127.0.0.1", upstream_port), tmp_path / "sessions", SessionLimits(),
                            on_session=started.append,
                            on_session_end=lambda s, reason: ended.append((s.dir, reason)))
    port = await server.start("127.0.0.1", 0)
    try:
        yield port, server, started, ended
    finally:
        await server.close()


def events(session_dir: Path) -> list[dict]:
    path = session_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def upstream_connections(port: int) -> int:
    """Established TCP connections to 127.0.0.1:`port` (the VNC server) from this machine, from /proc/net/tcp."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


# --- item 6: cut text that never finishes ----------------------------------------------------------------------------

@needs_x
def test_client_cut_text_that_stalls_is_logged_when_its_header_arrives(tmp_path: Path, vnc: int) -> None:
    """ClientCutText announcing 2^31-1 bytes, then a few bytes and nothing more: the attempt is in the log while the
    client is still stalling (it would otherwise only end on the idle timeout, with nothing logged)."""
    async def run() -> tuple[list[dict], Path, str]:
        async with proxy(tmp_path, vnc) as (port, _, started, ended):
            client = RfbClient()
            await client.connect(port)
            client.writer.write(struct.pack(">B3xI", 6, STALLED_LENGTH) + b"secret")
            await client.writer.drain()
            session_dir = started[0].dir
            await wait_for(lambda: any(e["event"] == "cut_text_dropped" for e in events(session_dir)), 5)
            logged = events(session_dir)
            await client.close()
            await wait_for(lambda: ended)
            return logged, *ended[0]

    logged, session_dir, reason = asyncio.run(run())
    (attempt,) = [e for e in logged if e["event"] == "cut_text_dropped"]
    assert attempt["direction"] == "client_to_server" and attempt["length"] == STALLED_LENGTH
    assert reason.startswith("protocol error") and "truncated" in reason
    assert verify_log(session_dir / "events.jsonl").ok
    assert "secret" not in (session_dir / "events.jsonl").read_text()


def test_server_cut_text_that_stalls_is_logged_when_its_header_arrives(tmp_path: Path) -> None:
    """The same from the server's side (a real VNC server does not stall on purpose: a scripted one does)."""
    fake = FakeVncServer(script=struct.pack(">B3xi", 3, -STALLED_LENGTH) + b"sec")

    async def run() -> tuple[list[dict], Path, str]:
        fake_port = await fake.start()
        try:
            async with proxy(tmp_path, fake_port) as (port, _, started, ended):
                client = RfbClient()
                await client.connect(port)
                session_dir = started[0].dir
                await wait_for(lambda: any(e["event"] == "cut_text_dropped" for e in events(session_dir)), 5)
                logged = events(session_dir)
                await client.close()
                await wait_for(lambda: ended)
                return logged, *ended[0]
        finally:
            await fake.close()

    logged, session_dir, reason = asyncio.run(run())
    (attempt,) = [e for e in logged if e["event"] == "cut_text_dropped"]
    assert attempt == {**attempt, "direction": "server_to_client", "length": STALLED_LENGTH, "extended": True}
    assert verify_log(session_dir / "events.jsonl").ok


# --- item 13: half-open clients -----------------------------------------------------------------------------------

async def half_open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that reads the proxy's ProtocolVersion and then says nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(reader.readexactly(12), 5) == b"RFB 003.008\n"
    return reader, writer


@needs_x
def test_half_open_clients_hold_no_upstream_connection(tmp_path: Path, vnc: int) -> None:
    """Twenty clients that stop after the proxy's greeting: none of them has made the proxy connect (let alone
    authenticate) to the VNC server; a client that completes its handshake gets one."""
    async def run() -> tuple[int, int, int]:
        async with proxy(tmp_path, vnc) as (port, _, started, ended):
            before = upstream_connections(vnc)
            stalled = [await half_open(port) for _ in range(20)]
            during = upstream_connections(vnc) - before
            client = RfbClient()
            await client.connect(port)
            await client.request()
            await client.read_update()
            with_client = upstream_connections(vnc) - before
            await client.close()
            for _, writer in stalled:
                writer.close()
            await wait_for(lambda: len(ended) == 21, 10)
            return during, with_client, len(started)

    during, with_client, sessions = asyncio.run(run())
    assert during == 0
    assert with_client == 1 and sessions == 21


@needs_x
def test_pending_handshakes_are_capped(tmp_path: Path, vnc: int) -> None:
    """MAX_PENDING_HANDSHAKES half-open clients: the next connection is closed at once (no greeting, no session
    folder); once they are gone, a client is served again."""
    async def run() -> tuple[bytes, int, int, tuple[int, int], int]:
        async with proxy(tmp_path, vnc) as (port, server, started, ended):
            stalled = [await half_open(port) for _ in range(MAX_PENDING_HANDSHAKES)]
            assert session_module.pending_handshakes() == MAX_PENDING_HANDSHAKES
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            refused = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            folders = len(list((tmp_path / "sessions").iterdir()))
            for _, stalled_writer in stalled:
                stalled_writer.close()
            await wait_for(lambda: len(ended) == MAX_PENDING_HANDSHAKES, 10)
            client = RfbClient()
            await client.connect(port)
            size = (client.width, client.height)
            await client.close()
            await wait_for(lambda: len(ended) == MAX_PENDING_HANDSHAKES + 1, 10)
            return refused, folders, len(started), size, session_module.pending_handshakes()

    refused, folders, sessions, size, pending = asyncio.run(run())
    assert refused == b""
    assert folders == MAX_PENDING_HANDSHAKES and sessions == MAX_PENDING_HANDSHAKES + 1
    assert size == (320, 240)
    assert pending == 0
