"""proxy.rfbframe, the one home of RFB message lengths: against sessions the proxy recorded (every encoding a real VNC
server produces, and the pseudo-encodings, colour maps and bells from a scripted one), fed whole, a byte at a time
and in random pieces, in both directions, and against malformed input, which must fail closed."""
from __future__ import annotations

import asyncio
import json
import random
import struct
from pathlib import Path

import pytest

from proxy.limits import SessionLimits
from proxy.recording import read_recording
from proxy.rfb import PixelFormat, ProtocolError
from proxy.rfbframe import (
    NEED_DATA, Bell, ClientFramer, CutText, Data, FramebufferUpdate, FramebufferUpdateRequest, Framer, KeyEvent,
    MessageEnd, PointerEvent, Rectangle, ServerFramer, SetColourMapEntries, SetEncodings, SetPixelFormat,
)
from tests.proxy.rfbtools import PF_32, FakeVncServer, RfbClient
from tests.proxy.test_controls import _with_proxy
from tests.proxy.test_replay import needs_x, record, x_screen  # noqa: F401 (x_screen: a fixture)

PF = PixelFormat.parse(PF_32)
W, H = 64, 48


# --- helpers ---------------------------------------------------------------------------------------------------------

def pieces(data: bytes, how: str, seed: int = 0) -> list[bytes]:
    """`data` whole, a byte at a time, or cut at random points."""
    if how == "whole":
        return [data]
    if how == "bytes":
        return [data[i:i + 1] for i in range(len(data))]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 200)))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def run(framer: Framer, chunks: list[bytes], formats: list[tuple[int, PixelFormat]] = (),
        complete: bool = True) -> list[object]:
    """Feed `chunks` one by one, taking every event as it completes; `formats`: (stream offset, pixel format) to set
    at the message boundary there, as the proxy does when a SetPixelFormat goes through (and the player replays)."""
    formats = list(formats)
    events = []
    for chunk in chunks:
        framer.feed(chunk)
        while True:
            while isinstance(framer, ServerFramer) and framer.in_message is None and formats \
                    and formats[0][0] <= framer.offset:
                framer.pixel_format = formats.pop(0)[1]
            event = framer.next_event()
            if event is NEED_DATA:
                break
            events.append(event)
    if complete:
        framer.eof()
    return events


def wire(events: list[object]) -> bytes:
    """The bytes the events stand for, as the proxy forwards them."""
    out = bytearray()
    for event in events:
        if isinstance(event, Data):
            out += event.data
        elif not isinstance(event, MessageEnd):
            out += event.raw  # type: ignore[attr-defined]
            out += getattr(event, "data", b"") + getattr(event, "text", b"")
    return bytes(out)


def without_payload(events: list[object]) -> list[object]:
    """Whole-mode events with their payloads taken out: what chunked framing announces before the Data pieces."""
    out = []
    for event in events:
        if isinstance(event, Rectangle):
            event = Rectangle(**{**event.__dict__, "data": b""})
        elif isinstance(event, CutText):
            event = CutText(event.raw, event.length)
        out.append(event)
    return out


def recorded_stream(folder: Path) -> tuple[dict, bytes, list[tuple[int, PixelFormat]]]:
    """A session's recording: its init record, the server-to-client bytes, the pixel-format changes by offset."""
    records = list(read_recording(folder / "screen.rfbrec"))
    init = json.loads(records[0][2])
    data, formats = bytearray(), []
    for kind, _, payload in records[1:]:
        if kind == "S":
            data += payload
        elif kind == "P":
            formats.append((len(data), PixelFormat(**json.loads(payload))))
    return init, bytes(data), formats


def check_server_stream(init: dict, data: bytes, formats: list[tuple[int, PixelFormat]]) -> list[object]:
    """Every way of feeding the stream gives the same messages, which are exactly the stream's bytes."""
    pf, width, height = PixelFormat(**init["pixel_format"]), init["width"], init["height"]
    whole = run(ServerFramer(pf, width, height), [data], formats)
    assert wire(whole) == data
    assert sum(isinstance(e, MessageEnd) for e in whole) >= 1
    for how, seed in [("bytes", 0), ("random", 1), ("random", 2), ("random", 3)]:
        chunks = pieces(data if how != "bytes" else data[:200_000], how, seed)
        got = run(ServerFramer(pf, width, height), chunks, formats, complete=how != "bytes")
        if how == "bytes":  # a prefix only (time): its messages are those of the whole stream, up to the cut
            assert got == whole[:len(got)] and wire(got) == data[:len(wire(got))]
        else:
            assert got == whole, how
    for chunk in (1, 1000, 256 * 1024):
        streamed = run(ServerFramer(pf, width, height, chunk=chunk), pieces(data, "random", chunk), formats)
        assert wire(streamed) == data
        assert all(len(e.data) <= chunk for e in streamed if isinstance(e, Data))
        assert [e for e in streamed if not isinstance(e, Data)] == without_payload(whole)
    return whole


# --- recorded sessions -----------------------------------------------------------------------------------------------

@needs_x
@pytest.mark.parametrize("encodings, expected", [
    ((0,), {0}), ((6, 0), {6}), ((2, 0), {2}), ((16, 0), {16}), ((7, 0), {7}), ((7, -32 + 8, 0), {7}),
    ((1, 16, 0), {16}),
], ids=["raw", "zlib", "rre", "zrle", "tight", "tight-jpeg", "copyrect-zrle"])
def test_recorded_sessions_of_every_encoding(tmp_path, x_screen, encodings, expected) -> None:  # noqa: F811
    _, port = x_screen
    init, data, formats = recorded_stream(record(tmp_path, port, encodings))
    events = check_server_stream(init, data, formats)
    used = {e.encoding for e in events if isinstance(e, Rectangle)}
    assert expected <= used, used
    if encodings[:2] == (7, -32 + 8):
        assert any(e.tight is not None and e.tight.method == 0x9 for e in events if isinstance(e, Rectangle))


def test_recorded_session_with_pseudo_encodings_colour_maps_and_bells(tmp_path: Path) -> None:
    """What a real server rarely sends, scripted and recorded through the proxy: DesktopSize, ExtendedDesktopSize
    (accepted and refused), Cursor, LastRect, Tight fill and palettes, colour maps, bells, and a cut text (which the
    proxy drops, so the recording does not have it)."""
    bpp = 4
    rect = lambda x, y, w, h, enc: struct.pack(">HHHHi", x, y, w, h, enc)  # noqa: E731
    script = b"".join([
        struct.pack(">BxH", 0, 3) + rect(0, 0, 2, 2, 0) + b"\x11" * (4 * bpp)
        + rect(1, 1, 4, 4, -239) + b"\x22" * (16 * bpp + 4) + rect(0, 0, W + 8, H + 8, -223),
        struct.pack(">BxH", 0, 2) + rect(0, 1, W + 20, H + 20, -308) + bytes([1, 0, 0, 0]) + b"\x33" * 16
        + rect(0, 0, W + 8, H + 8, 0) + b"\x44" * ((W + 8) * (H + 8) * bpp),
        struct.pack(">BxH", 0, 0xFFFF) + rect(0, 0, W + 16, H + 16, -308) + bytes([1, 0, 0, 0]) + b"\x55" * 16
        + rect(0, 0, 16, 16, 7) + b"\x80" + b"\x66" * 3
        + rect(0, 0, 8, 1, 7) + bytes([0x40, 1, 1]) + b"\x77" * 6 + b"\x01"  # 2 colours: 1 byte of bits, inline
        + rect(0, 0, 16, 16, 7) + bytes([0x40, 1, 2]) + b"\x78" * 9 + bytes([0x81, 0x01]) + b"\x79" * 129
        + rect(0, 0, 0, 0, -224),
        struct.pack(">BxHH", 1, 0, 2) + b"\x88" * 12,
        b"\x02",
        struct.pack(">B3xI", 3, 5) + b"clip!",
        b"\x02",
    ])
    fake = FakeVncServer(width=W, height=H, script=script)

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        await asyncio.sleep(0.3)
        await client.close()

    folder, reason = asyncio.run(_with_proxy(tmp_path, fake, SessionLimits(), body))
    assert reason == "client closed", reason
    init, data, formats = recorded_stream(folder)
    assert data == script.replace(struct.pack(">B3xI", 3, 5) + b"clip!", b"")
    events = check_server_stream(init, data, formats)
    assert [type(e).__name__ for e in events if not isinstance(e, (Rectangle, Data))] == [
        "FramebufferUpdate", "MessageEnd", "FramebufferUpdate", "MessageEnd", "FramebufferUpdate", "MessageEnd",
        "SetColourMapEntries", "MessageEnd", "Bell", "MessageEnd", "Bell", "MessageEnd"]
    rects = [e for e in events if isinstance(e, Rectangle)]
    assert [r.encoding for r in rects] == [0, -239, -223, -308, 0, -308, 7, 7, 7, -224]
    fill, two, three = rects[6].tight, rects[7].tight, rects[8].tight
    assert fill is not None and fill.method == 0x8 and fill.inline == b"\x66" * 3
    assert two is not None and (two.colours, two.size, two.inline) == (2, 1, b"\x01")
    assert three is not None and (three.colours, three.size, rects[8].data_size) == (3, 256, 129)


# --- the client's direction ------------------------------------------------------------------------------------------

CLIENT_STREAM = b"".join([
    b"\x00\xaa\xbb\xcc" + PF_32,
    struct.pack(">BxH3i", 2, 3, 0, 7, -239),
    struct.pack(">BxH", 2, 0),
    struct.pack(">BBHHHH", 3, 0, 0, 0, W, H),
    struct.pack(">BBxxI", 4, 7, 0x61),  # any non-zero down flag is a press
    struct.pack(">BBxxI", 4, 0, 0x61),
    struct.pack(">BBHH", 5, 1, 10, 20),
    struct.pack(">B3xi", 6, 3) + b"abc",
    struct.pack(">B3xi", 6, -4) + b"ext!",  # the extended-clipboard form: its payload is abs(length) bytes
    struct.pack(">B3xi", 6, 0),
    struct.pack(">BBHHHH", 3, 1, 1, 2, 3, 4),
])


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
def test_client_messages_in_any_pieces(how: str) -> None:
    events = run(ClientFramer(), pieces(CLIENT_STREAM, how, 5))
    assert wire(events) == CLIENT_STREAM
    messages = [e for e in events if not isinstance(e, MessageEnd)]
    assert [type(e) for e in messages] == [SetPixelFormat, SetEncodings, SetEncodings, FramebufferUpdateRequest,
                                           KeyEvent, KeyEvent, PointerEvent, CutText, CutText, CutText,
                                           FramebufferUpdateRequest]
    assert [e.type for e in events if isinstance(e, MessageEnd)] == [0, 2, 2, 3, 4, 4, 5, 6, 6, 6, 3]
    assert messages[0].pixel_format == PF and messages[1].encodings == (0, 7, -239) and messages[2].encodings == ()
    assert (messages[4].down, messages[4].keysym, messages[5].down) == (True, 0x61, False)
    assert (messages[6].mask, messages[6].x, messages[6].y) == (1, 10, 20)
    assert [(m.text, m.size, m.extended) for m in messages[7:10]] == [(b"abc", 3, False), (b"ext!", 4, True),
                                                                      (b"", 0, False)]
    assert messages[10].incremental and (messages[10].x, messages[10].height) == (1, 4)
    streamed = run(ClientFramer(chunk=2), pieces(CLIENT_STREAM, how, 6))
    assert wire(streamed) == CLIENT_STREAM
    assert [e.data for e in streamed if isinstance(e, Data)] == [b"ab", b"c", b"ex", b"t!"]


def test_wanted_reads_exactly_up_to_the_next_event() -> None:
    """A stream reader that feeds exactly `wanted` bytes never reads beyond the message it needs."""
    framer = ClientFramer()
    fed = 0
    ends = []
    while True:
        event = framer.next_event()
        if event is NEED_DATA:
            if fed == len(CLIENT_STREAM):
                break
            wanted = framer.wanted
            framer.feed(CLIENT_STREAM[fed:fed + wanted])
            fed += wanted
        elif isinstance(event, MessageEnd):
            assert framer.buffered == 0  # nothing of the next message has been read
            ends.append(framer.offset)
    assert ends[:3] == [20, 36, 40] and ends[-1] == len(CLIENT_STREAM) and len(ends) == 11


def test_pixel_format_applies_from_the_next_update() -> None:
    """Parsing is lazy: a format set between two updates frames the second; an update already begun keeps its own."""
    pf16 = PixelFormat.parse(struct.pack(">BBBBHHHBBB3x", 16, 16, 0, 1, 31, 63, 31, 11, 5, 0))
    update = lambda n: struct.pack(">BxH", 0, 1) + struct.pack(">HHHHi", 0, 0, 2, 1, 0) + b"\x01" * (2 * n)  # noqa
    framer = ServerFramer(PF, W, H)
    framer.feed(update(4) + update(2))
    first = [framer.next_event(), framer.next_event(), framer.next_event()]
    assert first[2] == MessageEnd(0)
    assert first[0].pixel_format == PF and first[1].data_size == 8  # type: ignore[attr-defined]
    framer.pixel_format = pf16
    second = list(framer.events())
    assert second[0].pixel_format == pf16 and second[1].data_size == 4  # type: ignore[attr-defined]
    assert framer.buffered == 0


# --- malformed input: fail closed ------------------------------------------------------------------------------------

def _error(framer: Framer, data: bytes) -> str:
    framer.feed(data)
    with pytest.raises(ProtocolError) as caught:
        list(framer.events())
    with pytest.raises(ProtocolError):  # and stays failed
        framer.next_event()
    return str(caught.value)


def _update(*rects: bytes) -> bytes:
    return struct.pack(">BxH", 0, len(rects)) + b"".join(rects)


@pytest.mark.parametrize("data, message", [
    (b"\x07", "client message type 7 not allowed"),
    (b"\x01" + bytes(10), "client message type 1 not allowed"),
    (struct.pack(">BBHHHH", 3, 2, 0, 0, 1, 1), "bad incremental flag"),
    (struct.pack(">BxH", 2, 65) + bytes(4 * 65), "SetEncodings with 65 encodings (max 64)"),
    (b"\x00\x00\x00\x00" + struct.pack(">BBBBHHHBBB3x", 24, 24, 0, 1, 255, 255, 255, 16, 8, 0),
     "unsupported bits-per-pixel 24"),
])
def test_malformed_client_messages(data: bytes, message: str) -> None:
    assert _error(ClientFramer(), struct.pack(">BBxxI", 4, 1, 0x61) + data) == message


@pytest.mark.parametrize("data, message", [
    (b"\x04", "server message type 4 not allowed"),
    (b"\xff", "server message type 255 not allowed"),
    (_update(struct.pack(">HHHHi", 0, 0, 1, 1, 5)), "server used encoding 5, which is not allowed"),
    (_update(struct.pack(">HHHHi", W - 1, 0, 2, 1, 0)), f"rectangle 2x1+{W - 1}+0 outside {W}x{H}"),
    (_update(struct.pack(">HHHHi", 0, 0, 513, 1, -239)), "cursor 513x1 too large"),
    (_update(struct.pack(">HHHHi", 0, 0, 4, 4, 7) + b"\xa0"), "Tight compression control 0xa0 not allowed"),
    (_update(struct.pack(">HHHHi", 0, 0, 4, 4, 7) + b"\x40\x03"), "Tight filter 3 not allowed"),
    # a refused resize (status 1) does not enlarge the framebuffer
    (_update(struct.pack(">HHHHi", 0, 1, W + 8, H, -308) + bytes(4), struct.pack(">HHHHi", W, 0, 4, 1, 0)),
     f"rectangle 4x1+{W}+0 outside {W}x{H}"),
])
def test_malformed_server_messages(data: bytes, message: str) -> None:
    assert _error(ServerFramer(PF, W, H), b"\x02" + data) == message


@pytest.mark.parametrize("side, data", [
    ("client", struct.pack(">BBxxI", 4, 1, 0x61)), ("client", struct.pack(">B3xi", 6, 10) + b"abcdefghij"),
    ("server", _update(struct.pack(">HHHHi", 0, 0, 4, 4, 0)) + bytes(64)),
    ("server", _update(struct.pack(">HHHHi", 0, 0, 16, 16, 7) + b"\x90\x81\x01") + bytes(129)),
])
def test_truncated_messages(side: str, data: bytes) -> None:
    """A stream that ends inside a message is a protocol error, at any cut; at a message boundary it is not."""
    for cut in range(1, len(data)):
        framer = ClientFramer() if side == "client" else ServerFramer(PF, W, H)
        framer.feed(data[:cut])
        list(framer.events())
        with pytest.raises(ProtocolError, match=f"{side} message {data[0]} truncated"):
            framer.eof()
    framer = ClientFramer() if side == "client" else ServerFramer(PF, W, H)
    assert run(framer, [data])[-1] == MessageEnd(data[0])


def test_oversize_payloads_stream_with_flat_memory() -> None:
    """A cut text announcing 2 GiB is announced as soon as its header is in, and its payload goes by in pieces: the
    framer never holds more than what was fed since the last piece."""
    framer = ClientFramer(chunk=64 * 1024)
    framer.feed(struct.pack(">B3xi", 6, 2**31 - 1))
    header = framer.next_event()
    assert isinstance(header, CutText) and header.size == 2**31 - 1 and framer.next_event() is NEED_DATA
    seen = 0
    for _ in range(64):
        framer.feed(bytes(100_000))
        seen += sum(len(e.data) for e in framer.events())  # type: ignore[attr-defined]
        assert framer.buffered < 64 * 1024
    assert seen == 64 * 100_000 - framer.buffered and framer.in_message == 6
    big = ServerFramer(PF, W, H, chunk=4096)
    big.feed(_update(struct.pack(">HHHHi", 0, 0, 4, 4, 16)) + struct.pack(">I", 2**32 - 1) + bytes(10_000))
    events = list(big.events())
    assert isinstance(events[0], FramebufferUpdate) and events[1].data_size == 2**32 - 1  # type: ignore[attr-defined]
    assert [len(e.data) for e in events[2:]] == [4096, 4096] and big.buffered == 10_000 - 8192  # type: ignore


def test_colour_map_and_bell_events() -> None:
    framer = ServerFramer(PF, W, H)
    framer.feed(struct.pack(">BxHH", 1, 3, 1) + b"\x01\x02\x03\x04\x05\x06" + b"\x02")
    events = list(framer.events())
    assert events == [SetColourMapEntries(struct.pack(">BxHH", 1, 3, 1) + b"\x01\x02\x03\x04\x05\x06", 3, 1),
                      MessageEnd(1), Bell(b"\x02"), MessageEnd(2)]
    assert events[0].entries == b"\x01\x02\x03\x04\x05\x06"  # type: ignore[attr-defined]
