"""Proxy controls against a scripted fake VNC server: rate limits, shortcut blocking, SetEncodings rewrite, message
allowlist, cut text in both directions, idle/max time, the hash-chained log and the recording."""
from __future__ import annotations

import asyncio
import json
import struct
import time
from pathlib import Path

from proxy import rfb
from proxy.eventlog import verify_log
from proxy.limits import KeyLimits, PointerLimits, SessionLimits
from proxy.recording import read_recording
from proxy.server import RfbProxyServer
from proxy.session import UpstreamTarget
from tests.proxy.rfbtools import FakeVncServer, RfbClient


def events(session_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]


async def proxied_session(sessions: Path, upstream_port: int, limits: SessionLimits, body) -> tuple[Path, str]:
    """Start the proxy in front of a VNC server on 127.0.0.1:`upstream_port`, run `body(client_port)`, wait for
    the session to end; returns its folder and end reason."""
    ended: list[tuple[Path, str]] = []
    server = RfbProxyServer(UpstreamTarget("127.0.0.1", upstream_port), sessions, limits,
                            on_session_end=lambda s, reason: ended.append((s.dir, reason)))
    port = await server.start("127.0.0.1", 0)
    try:
        await body(port)
        async with asyncio.timeout(5):
            while not ended:
                await asyncio.sleep(0.01)
    finally:
        await server.close()
    return ended[0]


async def _with_proxy(tmp_path: Path, fake: FakeVncServer, limits: SessionLimits, body) -> tuple[Path, str]:
    """The proxy in front of the fake server (see proxied_session)."""
    fake_port = await fake.start()
    try:
        return await proxied_session(tmp_path / "sessions", fake_port, limits, body)
    finally:
        await fake.close()


def test_key_flood_is_rate_limited_and_releases_pass(tmp_path: Path) -> None:
    limits = SessionLimits(keys=KeyLimits(rate=10, burst=30))
    fake = FakeVncServer()
    timing: dict[str, float] = {}

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        start = time.monotonic()
        for i in range(1000):
            await client.key(0x61, True)
            await client.key(0x61, False)
            # spread the 1000 presses over one second
            target = start + (i + 1) / 1000
            if (delay := target - time.monotonic()) > 0:
                await asyncio.sleep(delay)
        timing["elapsed"] = time.monotonic() - start
        await asyncio.sleep(0.3)
        await client.close()

    session_dir, _ = asyncio.run(_with_proxy(tmp_path, fake, limits, body))
    keys = fake.keys()
    downs = [k for k in keys if k[1]]
    ups = [k for k in keys if not k[1]]
    assert len(ups) == 1000
    expected = 30 + 10 * timing["elapsed"]
    assert 30 <= len(downs) <= expected + 2, (len(downs), expected)
    # after the burst, presses arrive at no more than the configured rate
    after_burst = downs[30:]
    if len(after_burst) >= 2:
        span = after_burst[-1][0] - after_burst[0][0]
        assert (len(after_burst) - 1) / max(span, 1e-6) <= 10 * 1.3
    log = events(session_dir)
    dropped = [e for e in log if e["event"] == "key_dropped"]
    assert len(dropped) == 1000 - len(downs)
    assert all(e["keysym"] == 0x61 and e["name"] == "a" for e in dropped)
    assert verify_log(session_dir / "events.jsonl").ok


def test_blocked_shortcuts_never_reach_server(tmp_path: Path) -> None:
    fake = FakeVncServer()
    ctrl, shift, alt = 0xFFE3, 0xFFE1, 0xFFE9

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        for sym, down in [(ctrl, True), (0x6E, True), (0x6E, False), (ctrl, False),  # Ctrl+N
                          (ctrl, True), (shift, True), (0x49, True), (0x49, False), (shift, False), (ctrl, False),
                          (alt, True), (0xFFC1, True), (0xFFC1, False), (alt, False),  # Alt+F4
                          (0xFFC9, True), (0xFFC9, False),  # F12
                          (0x6E, True), (0x6E, False)]:  # plain n passes
            await client.key(sym, down)
        await asyncio.sleep(0.2)
        await client.close()

    session_dir, _ = asyncio.run(_with_proxy(tmp_path, fake, SessionLimits(), body))
    downs = [sym for _, down, sym in fake.keys() if down]
    assert downs == [ctrl, ctrl, shift, alt, 0x6E]
    blocked = [e["shortcut"] for e in events(session_dir) if e["event"] == "key_blocked"]
    assert blocked == ["Ctrl+N", "Ctrl+Shift+I", "Alt+F4", "F12"]
    # every release reached the server, so nothing sticks
    assert sum(1 for _, down, _ in fake.keys() if not down) == 9


def test_pointer_clicks_limited_motion_coalesced(tmp_path: Path) -> None:
    limits = SessionLimits(pointer=PointerLimits(motion_rate=20, click_rate=1, click_burst=3))
    fake = FakeVncServer(width=800, height=600)

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        for i in range(10):  # 10 clicks at once: 3 pass
            await client.pointer(1, 10, 10)
            await client.pointer(0, 10, 10)
        for x in range(200):  # fast motion: coalesced, final position still arrives
            await client.pointer(0, x, 5)
        await asyncio.sleep(0.4)
        await client.close()

    session_dir, _ = asyncio.run(_with_proxy(tmp_path, fake, limits, body))
    pointer = [struct.unpack(">BHH", body) for body in fake.of_type(5)]
    presses = sum(1 for prev, cur in zip([(0, 0, 0)] + pointer, pointer) if cur[0] & 1 and not prev[0] & 1)
    assert presses == 3
    assert pointer[-1] == (0, 199, 5)
    assert len(pointer) < 100
    log = events(session_dir)
    assert sum(1 for e in log if e["event"] == "click_dropped") == 7


def test_set_encodings_rewritten_to_allowlist(tmp_path: Path) -> None:
    fake = FakeVncServer()
    requested = (rfb.ENC_EXTENDED_CLIPBOARD, 16, 7, -258, -313, -312, 0x574D5664, -309, -316, 5, 1, 0, -223,
                 -239, -308, -224, -32, -256, 16)

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port, encodings=requested)
        await asyncio.sleep(0.2)
        await client.close()

    asyncio.run(_with_proxy(tmp_path, fake, SessionLimits(), body))
    (body,) = fake.of_type(2)
    (count,) = struct.unpack(">xH", body[:3])
    forwarded = list(struct.unpack(f">{count}i", body[3:]))
    assert forwarded == [16, 7, 1, 0, -223, -239, -308, -224, -32, -256]


def test_too_many_encodings_and_unknown_messages_close_session(tmp_path: Path) -> None:
    for attack in (struct.pack(">BxH", 2, 65) + b"\0" * 260, b"\xff\x00\x00\x01" + b"\0" * 8, b"\x96\0\0\0",
                   b"\x04\x01"):
        fake = FakeVncServer()

        async def body(port: int) -> None:
            client = RfbClient()
            await client.connect(port)
            client.writer.write(attack)
            await client.writer.drain()
            if attack == b"\x04\x01":
                client.writer.write_eof()  # truncated KeyEvent
            async with asyncio.timeout(3):
                assert await client.reader.read() == b""  # the proxy closed the connection
            await client.close()

        session_dir, reason = asyncio.run(_with_proxy(tmp_path / str(attack[0]), fake, SessionLimits(), body))
        assert "protocol error" in reason, reason
        log = events(session_dir)
        assert any(e["event"] == "protocol_error" for e in log)
        assert log[-1]["event"] == "seal"
        assert verify_log(session_dir / "events.jsonl").ok


def test_cut_text_dropped_both_ways(tmp_path: Path) -> None:
    secret = b"SECRET-CLIPBOARD-" * 100
    server_cut = struct.pack(">B3xI", 3, len(secret)) + secret
    update = struct.pack(">BxH", 0, 1) + struct.pack(">HHHHi", 0, 0, 2, 1, 0) + b"\x10\x20\x30\x00" * 2
    fake = FakeVncServer(script=server_cut + b"\x02" + update)
    got: dict[str, object] = {}

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        await client.cut_text(secret)
        await client.read_update()
        got["cut"] = list(client.cut_texts)
        got["bells"] = client.bells
        got["pixel"] = client.pixel(1, 0)
        await client.key(0x61, True)
        await asyncio.sleep(0.2)
        await client.close()

    session_dir, _ = asyncio.run(_with_proxy(tmp_path, fake, SessionLimits(), body))
    assert got == {"cut": [], "bells": 1, "pixel": (0x30, 0x20, 0x10)}
    assert secret[:16] not in bytes(fake.raw)
    assert not fake.of_type(6)
    cut = [e for e in events(session_dir) if e["event"] == "cut_text_dropped"]
    assert {e["direction"] for e in cut} == {"client_to_server", "server_to_client"}
    assert all(e["length"] == len(secret) for e in cut)  # logged when the header arrived
    discarded = [e for e in events(session_dir) if e["event"] == "cut_text_discarded"]
    assert {e["direction"] for e in discarded} == {"client_to_server", "server_to_client"}
    assert all(e["length"] == len(secret) and len(e["sha256"]) == 64 for e in discarded)
    assert "SECRET" not in (session_dir / "events.jsonl").read_text()
    # the recording holds what the client got: init, then the bell and the update
    records = list(read_recording(session_dir / "screen.rfbrec"))
    assert records[0][0] == "I" and json.loads(records[0][2])["width"] == fake.width
    stream = b"".join(payload for kind, _, payload in records if kind == "S")
    assert stream == b"\x02" + update
    assert records[-1][0] == "X"


def test_idle_and_max_session_time(tmp_path: Path) -> None:
    async def idle_body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        async with asyncio.timeout(5):
            assert await client.reader.read() == b""
        await client.close()

    session_dir, reason = asyncio.run(_with_proxy(tmp_path / "idle", FakeVncServer(),
                                                  SessionLimits(idle_seconds=0.5), idle_body))
    assert reason == "idle timeout"
    assert any(e["event"] == "limit_hit" and e["limit"] == "idle_seconds" for e in events(session_dir))

    async def busy_body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        try:
            for _ in range(100):
                await client.pointer(0, 1, 1)
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass
        await client.close()

    session_dir, reason = asyncio.run(_with_proxy(tmp_path / "max", FakeVncServer(),
                                                  SessionLimits(idle_seconds=0.5, max_session_seconds=1.0),
                                                  busy_body))
    assert reason == "maximum session time reached"


def test_log_verifies_and_tampering_is_detected(tmp_path: Path) -> None:
    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        for sym in b"hello":
            await client.key(sym, True)
            await client.key(sym, False)
        await asyncio.sleep(0.1)
        await client.close()

    session_dir, _ = asyncio.run(_with_proxy(tmp_path, FakeVncServer(), SessionLimits(), body))
    path = session_dir / "events.jsonl"
    result = verify_log(path)
    assert result.ok and result.sealed
    meta = json.loads((session_dir / "meta.json").read_text())
    assert meta["log_head"] == result.head and meta["end"] is not None
    original = path.read_text().splitlines(keepends=True)
    key_line = next(i for i, line in enumerate(original) if '"event":"key"' in line)

    changed = list(original)
    changed[key_line] = changed[key_line].replace('"name":"h"', '"name":"j"')
    path.write_text("".join(changed))
    bad = verify_log(path)
    # the altered line itself (1-based key_line + 1), not the next one whose link broke
    assert not bad.ok and bad.bad_line == key_line + 1
    assert bad.error == f"altered: line {key_line + 2} chains to a different line than this one"

    path.write_text("".join(original[:key_line] + original[key_line + 1:]))
    assert not verify_log(path).ok

    path.write_text("".join(original[:-1]))  # seal removed
    unsealed = verify_log(path)
    assert not unsealed.ok and unsealed.error == "log is not sealed"
    assert verify_log(path, require_seal=False).ok

    from safeshare.cli import main

    path.write_text("".join(original))
    assert main(["verify-session", str(session_dir)]) == 0
    path.write_text("".join(changed))
    assert main(["verify-session", str(session_dir)]) == 1


def test_server_protocol_violations_close_session(tmp_path: Path) -> None:
    bad_scripts = [
        b"\x07",  # unknown server message
        struct.pack(">BxH", 0, 1) + struct.pack(">HHHHi", 0, 0, 1, 1, 5),  # Hextile: not allowed
        struct.pack(">BxH", 0, 1) + struct.pack(">HHHHi", 60, 0, 10, 1, 0) + b"\0" * 40,  # outside framebuffer
        struct.pack(">BxH", 0, 2) + struct.pack(">HHHHi", 0, 0, 1, 1, 0),  # truncated
    ]
    for i, script in enumerate(bad_scripts):
        fake = FakeVncServer(script=script, close_after_script=(i == 3))

        async def body(port: int) -> None:
            client = RfbClient()
            await client.connect(port)
            async with asyncio.timeout(5):
                while await client.reader.read(65536):
                    pass
            await client.close()

        session_dir, reason = asyncio.run(_with_proxy(tmp_path / str(i), fake, SessionLimits(), body))
        # a server that vanishes mid-message may surface as a reset first; either way the session ends
        assert reason.startswith("protocol error") or (i == 3 and reason.startswith("connection error")), reason
        assert verify_log(session_dir / "events.jsonl").ok
