"""Hypothesis fuzzing of the proxy in both directions: random, malformed and truncated messages from the client and
from the server, and random handshakes. Whatever arrives, the proxy must not crash (no "internal error"), must never
forward cut text, must forward exactly what an independent model of its filtering says, and must always end the
session cleanly with a sealed, verifying log.

The model here is written from RFC 6143 and the rfbproto document, not from the proxy's code: message sizes, the
encoding allowlist, Tight's compact lengths and pixel sizes are spelled out again on purpose.
"""
from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.eventlog import verify_log
from proxy.limits import SessionLimits
from proxy.recording import read_recording
from proxy.server import RfbProxyServer
from proxy.session import UpstreamTarget
from tests.proxy.rfbtools import FakeVncServer

MARK = b"\xf0CUT-TEXT-MARK\xf1"  # in every cut text; random bytes would not contain it
FUZZ = settings(max_examples=300, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
# Limits so high that every key and pointer event passes: the forwarded stream is then a pure function of the input.
OPEN_LIMITS = SessionLimits.model_validate({
    "keys": {"rate": 1e9, "burst": 10**9}, "pointer": {"motion_rate": 1e9, "click_rate": 1e9, "click_burst": 10**9},
    "blocked_shortcuts": [], "blocked_clicks": [], "idle_seconds": 60, "max_session_seconds": 60,
})
ALLOWLIST = {0, 1, 2, 6, 7, 16, -239, -223, -224, -308} | set(range(-32, -22)) | set(range(-256, -246))
# Keysyms forwarded (spelled out from the X11 keysym tables, as documented in proxy/keysyms.py): characters, editing,
# navigation, keypad, F1-F12 and modifiers; nothing from 0xfe00-0xfeff but AltGr and ISO_Left_Tab, no vendor keysyms.
KEY_NAMES_FORWARDED = (
    {0xFF08, 0xFF09, 0xFF0D, 0xFF1B, 0xFFFF, 0xFF63, 0xFE20, 0xFE03, 0xFF7F, 0xFF80, 0xFF89, 0xFF8D, 0xFFBD}
    | set(range(0xFF50, 0xFF58)) | set(range(0xFF95, 0xFFA0)) | set(range(0xFFAA, 0xFFBA))
    | set(range(0xFFBE, 0xFFCA)) | set(range(0xFFE1, 0xFFE6)) | set(range(0xFFE7, 0xFFEF))
)


def keysym_forwarded(keysym: int) -> bool:
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0x20FF:
        return True
    if 0x01000100 <= keysym <= 0x0110FFFF:
        return not 0x0100D800 <= keysym <= 0x0100DFFF
    return keysym in KEY_NAMES_FORWARDED


@dataclass(frozen=True)
class PF:
    bpp: int
    depth: int
    big_endian: int
    true_colour: int
    maxes: tuple[int, int, int]
    shifts: tuple[int, int, int]

    def pack(self) -> bytes:
        return struct.pack(">BBBBHHHBBB3x", self.bpp, self.depth, self.big_endian, self.true_colour, *self.maxes,
                           *self.shifts)

    def valid(self) -> bool:
        return self.bpp in (8, 16, 32) and 1 <= self.depth <= self.bpp and (self.true_colour != 0 or self.bpp == 8)

    @property
    def tpixel(self) -> int:
        if self.true_colour and self.bpp == 32 and self.depth == 24 and self.maxes == (255, 255, 255):
            return 3
        return self.bpp // 8

    def normalised(self) -> bytes:
        return PF(self.bpp, self.depth, int(bool(self.big_endian)), int(bool(self.true_colour)), self.maxes,
                  self.shifts).pack()


SERVER_FORMATS = [
    PF(32, 24, 0, 1, (255, 255, 255), (16, 8, 0)),
    PF(32, 32, 1, 1, (255, 255, 255), (0, 8, 16)),
    PF(16, 16, 0, 1, (31, 63, 31), (11, 5, 0)),
    PF(8, 8, 0, 1, (7, 7, 3), (0, 3, 6)),
    PF(8, 8, 0, 0, (0, 0, 0), (0, 0, 0)),  # colour map
]


def events(session_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]


def check_session_ended_cleanly(session_dir: Path, reason: str) -> None:
    assert not reason.startswith("internal error"), reason
    result = verify_log(session_dir / "events.jsonl")
    assert result.ok and result.sealed, result
    meta = json.loads((session_dir / "meta.json").read_text())
    assert meta["end"] is not None and meta["log_head"] == result.head
    assert MARK not in (session_dir / "events.jsonl").read_bytes()


# --- client to proxy ------------------------------------------------------------------------------------------------

@dataclass
class ClientModel:
    """What the proxy forwards to the server for a client stream, and whether it stops at a message."""

    pf: PF = SERVER_FORMATS[0]
    requested: bool = False
    out: bytearray = field(default_factory=bytearray)

    def feed(self, msg: tuple) -> bool:
        """Apply one client message; False when the proxy must end the session at it."""
        kind = msg[0]
        if kind == "key":
            if keysym_forwarded(msg[2]):
                self.out += struct.pack(">BBxxI", 4, 1 if msg[1] else 0, msg[2])
        elif kind == "pointer":
            self.out += struct.pack(">BBHH", 5, msg[1], msg[2], msg[3])
        elif kind == "fbur":
            if msg[1] not in (0, 1):
                return False
            self.requested = True
            self.out += struct.pack(">BBHHHH", 3, *msg[1:])
        elif kind == "encodings":
            if len(msg[1]) > 64:
                return False
            kept: list[int] = []
            for enc in msg[1]:
                if enc in ALLOWLIST and enc not in kept:
                    kept.append(enc)
            self.out += struct.pack(f">BxH{len(kept)}i", 2, len(kept), *kept)
        elif kind == "pixel_format":
            pf: PF = msg[1]
            if not pf.valid():
                return False
            if self.requested and (pf.bpp, pf.tpixel) != (self.pf.bpp, self.pf.tpixel):
                return False
            self.pf = pf
            self.out += b"\x00\x00\x00\x00" + pf.normalised()
        elif kind == "cut":
            pass  # dropped
        elif kind == "bad_type":
            return False
        return True


def encode_client(msg: tuple) -> bytes:
    kind = msg[0]
    if kind == "key":
        return struct.pack(">BBxxI", 4, msg[3], msg[2])  # msg[3]: raw down byte (any non-zero is down)
    if kind == "pointer":
        return struct.pack(">BBHH", 5, msg[1], msg[2], msg[3])
    if kind == "fbur":
        return struct.pack(">BBHHHH", 3, *msg[1:])
    if kind == "encodings":
        return struct.pack(f">BxH{len(msg[1])}i", 2, len(msg[1]), *msg[1])
    if kind == "pixel_format":
        return b"\x00\xaa\xbb\xcc" + msg[1].pack()  # padding content is ignored
    if kind == "cut":
        text = msg[1]
        return struct.pack(">B3xi", 6, -len(text) if msg[2] else len(text)) + text
    if kind == "bad_type":
        return bytes([msg[1]]) + msg[2]
    raise AssertionError(kind)


u16 = st.integers(0, 0xFFFF)
pixel_formats = st.one_of(
    st.sampled_from(SERVER_FORMATS),
    st.builds(PF, st.sampled_from([8, 16, 24, 32, 0, 64]), st.integers(0, 40), st.integers(0, 255),
              st.integers(0, 255), st.tuples(u16, u16, u16), st.tuples(st.integers(0, 31), st.integers(0, 31),
                                                                       st.integers(0, 31))),
)
interesting_encodings = st.sampled_from(sorted(ALLOWLIST) + [-1063131698, 5, -313, -312, -316, -309, 0x574D5664,
                                                             -305, -307, 0xC0A1E5CE - (1 << 32), -258, 21])
encoding_lists = st.integers(0, 70).flatmap(lambda n: st.lists(
    st.one_of(interesting_encodings, st.integers(-2**31, 2**31 - 1)), min_size=n, max_size=n))
client_messages = st.one_of(
    # most messages valid, so that sequences run long enough to reach the interesting states
    st.builds(lambda down, keysym: ("key", down != 0, keysym, down), st.integers(0, 255), st.one_of(
        st.integers(0, 2**32 - 1), st.integers(0, 0x20FF), st.integers(0xFD00, 0xFFFF),
        st.integers(0x01000000, 0x0110FFFF), st.integers(0x1008FE00, 0x1008FFFF))),
    st.tuples(st.just("pointer"), st.integers(0, 255), u16, u16),
    st.tuples(st.just("fbur"), st.sampled_from([0, 1, 1, 0, 1, 0, 1, 2, 255]), u16, u16, u16, u16),
    st.tuples(st.just("encodings"), st.one_of(encoding_lists, st.sampled_from([63, 64, 65]).flatmap(
        lambda n: st.lists(interesting_encodings, min_size=n, max_size=n)))),
    st.tuples(st.just("pixel_format"), st.one_of(st.sampled_from(SERVER_FORMATS), pixel_formats)),
    st.tuples(st.just("cut"), st.binary(max_size=300).map(lambda b: MARK + b + MARK), st.booleans()),
    st.tuples(st.just("bad_type"), st.one_of(st.just(1), st.integers(7, 255)), st.binary(max_size=20)),
)


@st.composite
def client_streams(draw):
    messages = draw(st.lists(client_messages, max_size=25))
    data = b"".join(encode_client(m) for m in messages)
    tail = draw(st.sampled_from(["none", "truncate", "garbage"]))
    cut_at = None
    if tail == "truncate" and messages:
        last = encode_client(messages[-1])
        cut_at = len(data) - len(last) + draw(st.integers(1, len(last) - 1)) if len(last) > 1 else None
    garbage = draw(st.binary(min_size=1, max_size=40)) if tail == "garbage" else b""
    chunks = draw(st.lists(st.integers(1, 64), min_size=1, max_size=8))
    return messages, data, cut_at, garbage, chunks


async def _serve(tmp_path: Path, fake: FakeVncServer, body) -> tuple[Path, str]:
    ended: list[tuple[Path, str]] = []
    fake_port = await fake.start()
    server = RfbProxyServer(UpstreamTarget("127.0.0.1", fake_port), tmp_path, OPEN_LIMITS,
                            on_session_end=lambda s, reason: ended.append((s.dir, reason)))
    port = await server.start("127.0.0.1", 0)
    try:
        result = await body(port)
        async with asyncio.timeout(5):
            while not ended or fake.handled < fake.connections:
                await asyncio.sleep(0.002)
    finally:
        await server.close()
        await fake.close()
    return ended[0] + (result,)  # type: ignore[return-value]


async def _client_handshake(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await reader.readexactly(12) == b"RFB 003.008\n"
    writer.write(b"RFB 003.008\n")
    assert await reader.readexactly(2) == b"\x01\x01"
    writer.write(b"\x01")
    assert await reader.readexactly(4) == b"\0\0\0\0"
    writer.write(b"\x00")
    head = await reader.readexactly(24)
    name = await reader.readexactly(struct.unpack(">I", head[20:])[0])
    return reader, writer, head + name


async def _send_and_finish(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes,
                           chunks: list[int], half_close: bool = True) -> bytes:
    """Send in chunks of varying size (message boundaries must not matter), half-close (unless told not to: the
    session would end as soon as the proxy saw it), read until the proxy closes."""
    try:
        pos, i = 0, 0
        while pos < len(data):
            size = chunks[i % len(chunks)]
            writer.write(data[pos:pos + size])
            await writer.drain()
            pos += size
            i += 1
        if half_close:
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    received = b""
    try:
        async with asyncio.timeout(5):
            while chunk := await reader.read(65536):
                received += chunk
    except (ConnectionError, OSError):
        pass
    writer.close()
    return received


@FUZZ
@given(stream=client_streams())
def test_fuzz_client_to_proxy(tmp_path: Path, stream) -> None:
    messages, data, cut_at, garbage, chunks = stream
    model = ClientModel()
    stopped_at = None
    complete = messages if cut_at is None else messages[:-1]
    for index, msg in enumerate(complete):
        if not model.feed(msg):
            stopped_at = index
            break
    payload = (data if cut_at is None else data[:cut_at]) + garbage
    fake = FakeVncServer()

    async def body(port: int) -> bytes:
        reader, writer, _ = await _client_handshake(port)
        return await _send_and_finish(reader, writer, payload, chunks)

    session_dir, reason, _ = asyncio.run(_serve(tmp_path, fake, body))
    check_session_ended_cleanly(session_dir, reason)
    assert MARK not in fake.raw and not fake.of_type(6)
    assert all(t in (0, 2, 3, 4, 5) for _, t, _ in fake.messages)
    if stopped_at is not None:
        assert bytes(fake.raw) == bytes(model.out), (stopped_at, reason)
        assert reason.startswith("protocol error"), reason
    elif cut_at is None and not garbage:
        assert bytes(fake.raw) == bytes(model.out)
        assert reason == "client closed"
    else:  # a truncated last message or garbage after valid ones: everything valid before it passes, then the end
        assert bytes(fake.raw).startswith(bytes(model.out))
        assert reason.startswith("protocol error") or reason == "client closed", reason
        if cut_at is not None and not garbage:  # nothing of the truncated message reaches the server
            assert bytes(fake.raw) == bytes(model.out) and reason.startswith("protocol error"), reason
    dropped = [e for e in events(session_dir) if e["event"] == "cut_text_dropped"]
    assert len(dropped) >= sum(1 for m in complete[:stopped_at] if m[0] == "cut")


# --- server to proxy ------------------------------------------------------------------------------------------------

W, H = 64, 48


def compact(length: int) -> bytes:
    out = bytearray([length & 0x7F])
    if length > 0x7F:
        out[0] |= 0x80
        out.append((length >> 7) & 0x7F)
        if length > 0x3FFF:
            out[1] |= 0x80
            out.append(length >> 14)
    return bytes(out)


compact_lengths = st.one_of(st.integers(0, 300), st.sampled_from([127, 128, 129, 16383, 16384, 16385, 20000]))


@st.composite
def rectangles(draw, pf: PF, size: tuple[int, int]):
    """(bytes, valid, new framebuffer size or None, number of rectangles in the bytes)."""
    fw, fh = size
    bpp = pf.bpp // 8
    kind = draw(st.one_of(
        st.sampled_from(["raw", "copyrect", "rre", "zlib", "zrle", "tight", "tight", "tight", "cursor", "desktop",
                         "extdesktop"]),
        st.sampled_from(["outside", "bad_encoding", "refused_resize"]).filter(lambda _: draw(st.integers(0, 3)) == 0)))
    if kind == "tight" and draw(st.booleans()):  # sizes around Tight's 12-byte threshold
        w, h = draw(st.sampled_from([(11, 1), (1, 11), (12, 1), (4, 3), (3, 4), (2, 2), (8, 11), (9, 6), (16, 1),
                                     (8, 12), (1, 1), (0, 5)]))
    else:
        w, h = draw(st.integers(0, min(fw, 12))), draw(st.integers(0, min(fh, 12)))
    x, y = draw(st.integers(0, fw - w)), draw(st.integers(0, fh - h))
    head = lambda enc, x=x, y=y, w=w, h=h: struct.pack(">HHHHi", x, y, w, h, enc)  # noqa: E731
    blob = lambda n: draw(st.binary(min_size=n, max_size=n))  # noqa: E731
    if kind == "raw":
        return head(0) + blob(w * h * bpp), True, None, 1
    if kind == "copyrect":
        return head(1) + struct.pack(">HH", draw(u16), draw(u16)), True, None, 1
    if kind == "rre":
        n = draw(st.integers(0, 4))
        return head(2) + struct.pack(">I", n) + blob(bpp + n * (bpp + 8)), True, None, 1
    if kind in ("zlib", "zrle"):
        n = draw(st.integers(0, 200))
        return head(6 if kind == "zlib" else 16) + struct.pack(">I", n) + blob(n), True, None, 1
    if kind == "tight":
        tp = pf.tpixel
        sub = draw(st.sampled_from(["fill", "jpeg", "copy", "palette", "gradient"]))
        if sub == "fill":
            return head(7) + b"\x80" + blob(tp), True, None, 1
        if sub == "jpeg":
            n = draw(compact_lengths)
            return head(7) + b"\x90" + compact(n) + b"\xab" * n, True, None, 1
        ctl = draw(st.integers(0, 3)) << 4 | draw(st.integers(0, 15))
        if sub == "copy" and draw(st.booleans()):
            body, raw_size = bytes([ctl]), w * h * tp
        elif sub in ("copy", "gradient"):
            body, raw_size = bytes([ctl | 0x40, 0 if sub == "copy" else 2]), w * h * tp
        else:
            colours = draw(st.integers(1, 256))
            body = bytes([ctl | 0x40, 1, colours - 1]) + blob(colours * tp)
            raw_size = ((w + 7) // 8) * h if colours <= 2 else w * h
        if raw_size < 12:
            return head(7) + body + blob(raw_size), True, None, 1
        n = draw(compact_lengths)
        return head(7) + body + compact(n) + blob(n), True, None, 1
    if kind == "cursor":
        cw, ch = draw(st.integers(0, 8)), draw(st.integers(0, 8))
        return (struct.pack(">HHHHi", draw(u16), draw(u16), cw, ch, -239) + blob(cw * ch * bpp + (cw + 7) // 8 * ch),
                True, None, 1)
    if kind == "desktop":
        nw, nh = draw(st.integers(W, W + 16)), draw(st.integers(H, H + 16))
        return struct.pack(">HHHHi", 0, 0, nw, nh, -223), True, (nw, nh), 1
    if kind == "extdesktop":
        nw, nh = draw(st.integers(W, W + 16)), draw(st.integers(H, H + 16))
        status = draw(st.sampled_from([0, 0, 1, 3]))
        screens = draw(st.integers(0, 2))
        rect = struct.pack(">HHHHi", draw(st.integers(0, 2)), status, nw, nh, -308)
        return rect + bytes([screens, 0, 0, 0]) + blob(16 * screens), True, ((nw, nh) if status == 0 else None), 1
    if kind == "refused_resize":  # a refused ExtendedDesktopSize does not enlarge the framebuffer
        rect = struct.pack(">HHHHi", 1, draw(st.integers(1, 3)), fw + 8, fh + 8, -308) + bytes(4)
        return rect + struct.pack(">HHHHi", fw, 0, 4, 4, 0) + blob(16 * bpp), False, None, 2
    if kind == "outside":
        return struct.pack(">HHHHi", fw - 1, 0, 2, 1, 0) + blob(2 * bpp), False, None, 1
    return head(draw(st.sampled_from([5, 15, 21, -260, -313, 8]))) + blob(8), False, None, 1


@st.composite
def server_streams(draw):
    pf = draw(st.sampled_from(SERVER_FORMATS))
    size = (W, H)
    messages: list[tuple[bytes, str]] = []  # (bytes, "ok" | "cut" | "bad")
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["update", "update", "update", "update", "colours", "bell", "cut", "cut",
                                     "update", "bad_type"]))
        if kind == "update":
            rects, valid, last_rect, count = [], True, draw(st.integers(0, 5)) == 0, 0
            for _ in range(draw(st.integers(0, 4))):
                data, ok, new_size, n = draw(rectangles(pf, size))
                rects.append(data)
                count += n
                if not ok:
                    valid = False
                    break
                if new_size:
                    size = new_size
            if last_rect and valid:
                rects.append(struct.pack(">HHHHi", 0, 0, 0, 0, -224))
                count = 0xFFFF if draw(st.booleans()) else count + 1
            messages.append((struct.pack(">BxH", 0, count) + b"".join(rects), "ok" if valid else "bad"))
        elif kind == "colours":
            n = draw(st.integers(0, 5))
            messages.append((struct.pack(">BxHH", 1, draw(u16), n) + draw(st.binary(min_size=6 * n, max_size=6 * n)),
                             "ok"))
        elif kind == "bell":
            messages.append((b"\x02", "ok"))
        elif kind == "cut":
            text = MARK + draw(st.binary(max_size=300)) + MARK
            length = -len(text) if draw(st.booleans()) else len(text)
            messages.append((struct.pack(">B3xi", 3, length) + text, "cut"))
        else:
            messages.append((bytes([draw(st.integers(4, 255))]) + draw(st.binary(max_size=10)), "bad"))
        if messages[-1][1] == "bad":
            break
    truncate = bool(messages) and messages[-1][1] != "bad" and len(messages[-1][0]) > 1 and draw(st.booleans())
    if truncate:
        data, _ = messages[-1]
        messages[-1] = (data[:draw(st.integers(1, len(data) - 1))], "truncated")
    return pf, messages


@FUZZ
@given(stream=server_streams())
def test_fuzz_server_to_proxy(tmp_path: Path, stream) -> None:
    pf, messages = stream
    expected = b"".join(data for data, kind in messages if kind == "ok")
    fake = FakeVncServer(width=W, height=H, pixel_format=pf.pack(), close_after_script=True,
                         script=b"".join(data for data, _ in messages))

    async def body(port: int) -> bytes:
        reader, writer, _ = await _client_handshake(port)
        return await _send_and_finish(reader, writer, b"", [1], half_close=False)

    session_dir, reason, received = asyncio.run(_serve(tmp_path, fake, body))
    check_session_ended_cleanly(session_dir, reason)
    assert MARK not in received
    assert received == expected, reason
    last = messages[-1][1] if messages else "ok"
    if last in ("bad", "truncated"):
        assert reason.startswith("protocol error"), reason
    else:  # the server closed after a complete message
        assert reason in ("server closed", "client closed") or reason.startswith("connection error"), reason
    recording = list(read_recording(session_dir / "screen.rfbrec"))
    assert b"".join(payload for kind, _, payload in recording if kind == "S") == received
    assert recording[-1][0] == "X"
    cut = [e for e in events(session_dir) if e["event"] == "cut_text_dropped"]
    # logged as soon as the 8-byte header is in, also for a cut text whose payload never completes
    announced = [data for data, kind in messages
                 if kind == "cut" or (kind == "truncated" and data[0] == 3 and len(data) >= 8)]
    assert [e["length"] for e in cut] == [abs(struct.unpack(">3xi", data[1:8])[0]) for data in announced]
    discarded = [e for e in events(session_dir) if e["event"] == "cut_text_discarded"]
    assert len(discarded) == sum(1 for _, kind in messages if kind == "cut")


# --- handshakes -----------------------------------------------------------------------------------------------------

@FUZZ
@given(prefix=st.sampled_from([b"", b"RFB 003.008\n", b"RFB 003.003\n", b"RFB 003.007\n", b"RFB 003.008\n\x01"]),
       junk=st.binary(max_size=60))
def test_fuzz_client_handshake(tmp_path: Path, prefix: bytes, junk: bytes) -> None:
    fake = FakeVncServer()

    async def body(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return await _send_and_finish(reader, writer, prefix + junk, [7, 1, 30])

    session_dir, reason, _ = asyncio.run(_serve(tmp_path, fake, body))
    check_session_ended_cleanly(session_dir, reason)
    assert not fake.of_type(6) and MARK not in fake.raw


class RawServer:
    """Sends fixed bytes as soon as a connection arrives, reads whatever comes, closes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.connections = 0
        self.handled = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            writer.write(self.data)
            await writer.drain()
            writer.write_eof()
            async with asyncio.timeout(5):
                while await reader.read(4096):
                    pass
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self.handled += 1

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()


@FUZZ
@given(prefix=st.sampled_from([b"", b"RFB 003.008\n", b"RFB 003.003\n", b"RFB 003.008\n\x01\x01",
                               b"RFB 003.008\n\x01\x01\x00\x00\x00\x00", b"RFB 003.007\n\x02\x02\x01"]),
       junk=st.binary(max_size=80))
def test_fuzz_server_handshake(tmp_path: Path, prefix: bytes, junk: bytes) -> None:
    fake = RawServer(prefix + junk + MARK)

    async def body(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return await _send_and_finish(reader, writer, b"RFB 003.008\n\x01\x01", [64])

    session_dir, reason, received = asyncio.run(_serve(tmp_path, fake, body))  # type: ignore[arg-type]
    check_session_ended_cleanly(session_dir, reason)
    if not any(e["event"] == "upstream_ready" for e in events(session_dir)):
        # the client's own part of the handshake comes first; no ServerInit before the server's has completed
        assert received == b"RFB 003.008\n\x01\x01\0\0\0\0", received


# --- framing boundaries, spelled out ----------------------------------------------------------------------------------

def _tight_cases(pf: PF) -> list[bytes]:
    """Tight rectangles at every size boundary: raw data just under and at 12 bytes, 2- and 3-colour palettes, and
    compact lengths at the one-, two- and three-byte limits."""
    tp = pf.tpixel
    rects = []
    for w, h in [(11, 1), (12, 1), (1, 11), (4, 3), (3, 1), (2, 2), (8, 12), (16, 1)]:
        size = w * h * tp
        copy = b"\x00" + (b"\x01" * size if size < 12 else compact(5) + b"\x02" * 5)
        rects.append(struct.pack(">HHHHi", 0, 0, w, h, 7) + copy)
        for colours in (2, 3):
            bitmap = ((w + 7) // 8) * h if colours <= 2 else w * h
            data = b"\x03" * bitmap if bitmap < 12 else compact(3) + b"\x04" * 3
            rects.append(struct.pack(">HHHHi", 0, 0, w, h, 7) + bytes([0x40, 1, colours - 1]) + b"\x05" * (colours * tp)
                         + data)
    for n in (0, 127, 128, 16383, 16384, 20000):
        rects.append(struct.pack(">HHHHi", 0, 0, 16, 16, 7) + b"\x90" + compact(n) + b"\x06" * n)
    rects.append(struct.pack(">HHHHi", 0, 0, 16, 16, 7) + b"\x80" + b"\x07" * tp)
    return rects


def test_framing_boundaries_in_every_pixel_format(tmp_path: Path) -> None:
    for i, pf in enumerate(SERVER_FORMATS):
        bpp = pf.bpp // 8
        rects = _tight_cases(pf)
        rects += [struct.pack(">HHHHi", 0, 0, 4, 4, 2) + struct.pack(">I", n) + b"\x08" * (bpp + n * (bpp + 8))
                  for n in (0, 1, 3)]  # RRE
        rects += [struct.pack(">HHHHi", 0, 0, 4, 4, 16) + struct.pack(">I", 9) + b"\x09" * 9,  # ZRLE
                  struct.pack(">HHHHi", 0, 0, 4, 4, 6) + struct.pack(">I", 0),  # zlib, empty
                  struct.pack(">HHHHi", 3, 4, 9, 2, -239) + b"\x0a" * (9 * 2 * bpp + 2 * 2),  # cursor
                  struct.pack(">HHHHi", 0, 0, W, H, 0) + b"\x0b" * (W * H * bpp)]  # raw, whole screen
        script = b"".join(struct.pack(">BxH", 0, 1) + rect for rect in rects)
        script += struct.pack(">B3xI", 3, len(MARK)) + MARK + b"\x02"
        fake = FakeVncServer(width=W, height=H, pixel_format=pf.pack(), close_after_script=True, script=script)

        async def body(port: int) -> bytes:
            reader, writer, _ = await _client_handshake(port)
            return await _send_and_finish(reader, writer, b"", [1], half_close=False)

        session_dir, reason, received = asyncio.run(_serve(tmp_path / str(i), fake, body))
        assert received == script[:-len(MARK) - 8 - 1] + b"\x02", (pf, reason)
        assert reason == "server closed", reason
