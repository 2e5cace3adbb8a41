"""The session API other front ends use (run_session, on_start, terminate), pixel-format changes mid-session, and the
optional network capture with tcpdump."""
from __future__ import annotations

import asyncio
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from proxy.capture import CaptureConfig
from proxy.eventlog import verify_log
from proxy.limits import SessionLimits
from proxy.server import RfbProxyServer
from proxy.session import ProxySession, UpstreamTarget, run_session
from tests.proxy.rfbtools import FakeVncServer, RfbClient


def events(session_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]


def _live(sessions_dir: Path, recipient: str | None = None) -> list[Path]:
    """Sessions that have started and not ended, as their folders say (meta.json's `end` is set when one ends)."""
    live = []
    for folder in sorted(sessions_dir.iterdir()):
        meta = json.loads((folder / "meta.json").read_text())
        if meta["end"] is None and (recipient is None or meta["recipient"] == recipient):
            live.append(folder)
    return live


def test_run_session_and_terminate_recipient(tmp_path: Path) -> None:
    """A front end that keeps the sessions `run_session` hands to `on_start` can end those of one recipient (as the
    gateway does on revocation): they end with the reason, within the second, and the others go on."""
    async def scenario() -> tuple[list[Path], list[int]]:
        fake = FakeVncServer()
        upstream = UpstreamTarget("127.0.0.1", await fake.start())
        results: list[Path] = []
        kept: list[ProxySession] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            recipient = "alice" if len(kept) < 2 else "bob"
            results.append(await run_session(reader, writer, upstream, SessionLimits(), tmp_path, recipient,
                                             release="r1", extra_meta={"via": "test"}, on_start=kept.append))

        listener = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        clients = []
        for _ in range(3):
            client = RfbClient()
            await client.connect(port)
            clients.append(client)
            await asyncio.sleep(0.05)
        counts = [len(_live(tmp_path, "alice")), len(_live(tmp_path, "bob"))]
        alices = [session for session in kept if session.recipient == "alice"]
        for session in alices:
            session.terminate("recipient revoked")
        counts.append(len(alices))
        async with asyncio.timeout(2):
            for client in clients[:2]:
                assert await client.reader.read() == b""  # alice's sessions end within the second
            while len(results) < 2:
                await asyncio.sleep(0.01)
        counts.append(len(_live(tmp_path, "alice")))
        await clients[2].key(0x61, True)  # bob's session is untouched
        await clients[2].close()
        async with asyncio.timeout(2):
            while len(results) < 3:
                await asyncio.sleep(0.01)
        for client in clients[:2]:
            await client.close()
        listener.close()
        await listener.wait_closed()
        await fake.close()
        return results, counts

    results, counts = asyncio.run(scenario())
    assert counts == [2, 1, 2, 0]
    metas = [json.loads((folder / "meta.json").read_text()) for folder in results]
    assert [m["recipient"] for m in metas] == ["alice", "alice", "bob"]
    assert [m["end_reason"] for m in metas] == ["recipient revoked", "recipient revoked", "client closed"]
    assert all(m["release"] == "r1" and m["via"] == "test" for m in metas)
    for folder in results:
        assert verify_log(folder / "events.jsonl").ok
    assert _live(tmp_path) == []


def _set_pixel_format(bpp: int, depth: int, shifts: tuple[int, int, int]) -> bytes:
    maxes = (255, 255, 255) if bpp == 32 else (31, 63, 31) if bpp == 16 else (7, 7, 3)
    return b"\x00\x00\x00\x00" + struct.pack(">BBBBHHHBBB3x", bpp, depth, 0, 1, *maxes, *shifts)


async def _proxied(tmp_path: Path, fake: FakeVncServer, body, limits: SessionLimits | None = None,
                   capture=None) -> tuple[Path, str]:
    """`capture`: a function of the fake server's port returning the CaptureConfig, or None."""
    fake_port = await fake.start()
    ended: list[tuple[Path, str]] = []
    server = RfbProxyServer(UpstreamTarget("127.0.0.1", fake_port), tmp_path / "sessions", limits or SessionLimits(),
                            on_session_end=lambda s, reason: ended.append((s.dir, reason)),
                            capture=capture(fake_port) if capture else None)
    port = await server.start("127.0.0.1", 0)
    try:
        await body(port)
        async with asyncio.timeout(5):
            while not ended:
                await asyncio.sleep(0.01)
    finally:
        await server.close()
        await fake.close()
    return ended[0]


def test_pixel_format_may_change_only_without_changing_pixel_size(tmp_path: Path) -> None:
    """Before the first update request any format goes; afterwards only one the server stream frames identically."""
    for case, late, expect_error in [("early", None, False), ("shifts", (32, 24, (0, 8, 16)), False),
                                     ("16bpp", (16, 16, (11, 5, 0)), True)]:
        fake = FakeVncServer()

        async def body(port: int) -> None:
            client = RfbClient()
            await client.connect(port)  # sends a 32-bit SetPixelFormat before any request
            client.writer.write(_set_pixel_format(16, 16, (11, 5, 0)) if late is None else b"")
            await client.request()
            if late is not None:
                client.writer.write(_set_pixel_format(late[0], late[1], late[2]))
            await client.key(0x61, True)
            await asyncio.sleep(0.2)
            await client.close()

        session_dir, reason = asyncio.run(_proxied(tmp_path / case, fake, body))
        assert ("protocol error" in reason) == expect_error, (case, reason)
        assert (len(fake.keys()) == 0) == expect_error  # nothing after the refused message reaches the server
        assert verify_log(session_dir / "events.jsonl").ok


def _can_capture_loopback() -> bool:
    if shutil.which("tcpdump") is None:
        return False
    try:
        proc = subprocess.Popen(["tcpdump", "-i", "lo", "-w", "-", "tcp port 9"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
    except OSError:
        return False
    assert proc.stderr is not None
    line = proc.stderr.readline()
    proc.terminate()
    proc.wait(5)
    return b"listening on" in line


@pytest.mark.skipif(not _can_capture_loopback(), reason="tcpdump (scripts/setup.sh) and CAP_NET_RAW needed")
def test_network_capture_into_session_folder(tmp_path: Path) -> None:
    fake = FakeVncServer()
    marker = b"capture-marker-0123456789"

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        await client.key(0x61, True)
        await client.cut_text(marker)  # the proxy drops it, so it never travels to the server's port
        await asyncio.sleep(0.2)
        await client.close()

    # the proxy-to-server leg, as the enclave's network would show it
    session_dir, reason = asyncio.run(_proxied(tmp_path, fake, body,
                                               capture=lambda port: CaptureConfig("lo", f"tcp port {port}")))
    assert reason == "client closed"
    pcap = (session_dir / "network.pcap").read_bytes()
    assert pcap[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4")  # pcap magic
    assert b"RFB 003.008\n" in pcap  # the server's greeting to the proxy
    assert marker not in pcap
    meta = json.loads((session_dir / "meta.json").read_text())
    assert meta["capture"]["interface"] == "lo" and meta["capture"]["bytes"] == len(pcap)
    import hashlib

    assert meta["capture"]["sha256"] == hashlib.sha256(pcap).hexdigest() and meta["capture"]["packets"] > 5
    names = [e["event"] for e in events(session_dir)]
    assert names.index("capture_started") < names.index("upstream_ready") < names.index("capture_stopped")
    assert verify_log(session_dir / "events.jsonl").ok


def test_capture_that_cannot_start_refuses_the_session(tmp_path: Path) -> None:
    fake = FakeVncServer()

    async def body(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()

    missing = CaptureConfig("no-such-if0", tcpdump="tcpdump" if shutil.which("tcpdump") else "no-such-tcpdump")
    session_dir, reason = asyncio.run(_proxied(tmp_path, fake, body, capture=lambda _: missing))
    assert reason.startswith("network capture failed"), reason
    assert fake.connections == 0
    assert verify_log(session_dir / "events.jsonl").ok


def test_recording_failure_surfaces_as_recording_error(tmp_path: Path) -> None:
    """A recording that cannot be written (here: /dev/full, which fails every write with ENOSPC) must surface as
    RecordingError, on which the session ends ("recording failed") instead of going on unrecorded."""
    from proxy.recording import Recorder, RecordingError

    async def scenario() -> str:
        recorder = Recorder(tmp_path / "screen.rfbrec", max_backlog=1 << 20)
        recorder._file.close()
        recorder._file = open("/dev/full", "wb", buffering=0)  # the real device, so the real write error
        try:
            for _ in range(64):
                recorder.server(b"\x00" * 65536)
                recorder.flush()
                await recorder.wait_ready()
                await asyncio.sleep(0.01)
        except RecordingError as exc:
            return str(exc)
        return "no error"

    message = asyncio.run(scenario())
    assert "No space left" in message or "OSError" in message, message
