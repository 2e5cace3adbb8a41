"""RFB message framing, sans I/O: bytes in, messages out, for both directions of a session.

The proxy can only drop what it can delimit, so it frames every message in both directions; the auditors' decoder
and the test peers delimit the same stream the same way. This module is the one place that knows how long an RFB
message is (RFC 6143 and the rfbproto document): Raw, CopyRect, RRE, zlib, Tight (compact lengths, palettes, the
12-byte threshold), ZRLE, the Cursor / DesktopSize / LastRect / ExtendedDesktopSize pseudo-encodings, colour maps,
bells and cut texts. It never decompresses: every length it needs is on the wire.

Use, as with h11: `framer.feed(data)`, then call `framer.next_event()` until it returns `NEED_DATA`; at the end of
the stream `framer.eof()` says whether the peer stopped inside a message. Every message ends with a `MessageEnd`.
Parsing is lazy: a message is parsed only when `next_event()` reaches it, so state the caller changes between
messages (the pixel format after a SetPixelFormat) applies from the next message on, as it does on the wire.

Two ways of delivering payloads, chosen by `chunk`:
- `chunk=None` (decoders, tests): a rectangle's payload arrives whole in `Rectangle.data`, a cut text's in `text`.
- `chunk=N` (the proxy): headers as soon as they are in, then the payload as `Data` pieces of at most N bytes, so
  memory stays flat whatever a peer announces, and a cut text is on record before its payload completes.

Anything the proxy does not accept (unknown message type or encoding, bad flags or pixel format, rectangles outside
the framebuffer, oversized lists) raises `ProtocolError`, and the framer stays failed: fail closed.
"""
from __future__ import annotations

import struct
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Union

from proxy import rfb
from proxy.rfb import PixelFormat, ProtocolError


class NeedData:
    """`next_event()`'s answer when the buffered bytes end inside a message: feed more."""

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


# --- events ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Data:
    """A piece of the payload of the rectangle or cut text announced last (only with `chunk`)."""

    data: bytes


@dataclass(frozen=True)
class MessageEnd:
    """The message of type `type` is complete: where the proxy drains, flushes its recording and forwards what it
    has gathered."""

    type: int


@dataclass(frozen=True)
class SetPixelFormat:
    raw: bytes
    pixel_format: PixelFormat


@dataclass(frozen=True)
class SetEncodings:
    raw: bytes
    encodings: tuple[int, ...]


@dataclass(frozen=True)
class FramebufferUpdateRequest:
    raw: bytes
    incremental: bool
    x: int
    y: int
    width: int
    height: int


@dataclass(frozen=True)
class KeyEvent:
    raw: bytes
    down: bool  # any non-zero down-flag byte is a press
    keysym: int


@dataclass(frozen=True)
class PointerEvent:
    raw: bytes
    mask: int
    x: int
    y: int


@dataclass(frozen=True)
class CutText:
    """ClientCutText (from the client) or ServerCutText (from the server): the 8-byte header, and with `chunk=None`
    the text. A negative length is the extended-clipboard form; its payload is `size` bytes all the same."""

    raw: bytes
    length: int
    text: bytes = b""

    @property
    def size(self) -> int:
        return abs(self.length)

    @property
    def extended(self) -> bool:
        return self.length < 0


@dataclass(frozen=True)
class FramebufferUpdate:
    """The 4-byte header; its rectangles follow, then a MessageEnd. `pixel_format` is the one the update is framed
    (and must be decoded) with: the format in force when its first byte was parsed."""

    raw: bytes
    count: int
    pixel_format: PixelFormat


@dataclass(frozen=True)
class TightHead:
    """What precedes a Tight rectangle's data. `inline` holds the fill colour, or basic-compression data shorter than
    12 bytes, which Tight sends uncompressed and without a length; `size` is the uncompressed data size."""

    control: int
    filter_id: int = 0
    colours: int = 0
    palette: bytes = b""
    inline: bytes = b""
    size: int = 0

    @property
    def method(self) -> int:
        return self.control >> 4


@dataclass(frozen=True)
class Rectangle:
    """One rectangle of an update. `raw` is its header with every byte up to the payload (lengths, Tight control,
    palette, CopyRect source, ExtendedDesktopSize screens, inline Tight data). `data_size` is the payload that
    follows (None for encodings without one): in `data` with `chunk=None`, else as `Data` pieces."""

    x: int
    y: int
    width: int
    height: int
    encoding: int
    raw: bytes
    data_size: int | None = None
    source: tuple[int, int] | None = None  # CopyRect
    subrects: int = 0  # RRE
    tight: TightHead | None = None
    data: bytes = b""


@dataclass(frozen=True)
class SetColourMapEntries:
    raw: bytes  # header and entries
    first: int
    count: int

    @property
    def entries(self) -> bytes:
        return self.raw[6:]


@dataclass(frozen=True)
class Bell:
    raw: bytes


ClientEvent = Union[SetPixelFormat, SetEncodings, FramebufferUpdateRequest, KeyEvent, PointerEvent, CutText, Data,
                    MessageEnd]
ServerEvent = Union[FramebufferUpdate, Rectangle, SetColourMapEntries, Bell, CutText, Data, MessageEnd]
_Step = Union[int, object]  # what a parser generator yields: bytes it needs, or an event
_Parser = Generator[_Step, bytes, None]


# --- the framers -------------------------------------------------------------------------------------------------

class Framer:
    """The buffer and the driver; subclasses write their grammar as a generator that yields how many bytes it needs
    (and receives them) or an event, so that it reads like the blocking parser it replaces."""

    side = ""

    def __init__(self, chunk: int | None) -> None:
        if chunk is not None and chunk < 1:
            raise ValueError("chunk must be positive")
        self.chunk = chunk
        self.offset = 0  # bytes consumed so far: the stream position of the next unparsed byte
        self._buf = bytearray()
        self._pos = 0
        self._current: int | None = None  # type of the message being parsed
        self._step: int | None = None  # bytes the parser waits for; None: resume it
        self._error: ProtocolError | None = None
        self._parser: _Parser = self._messages()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos * 2 >= len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    @property
    def wanted(self) -> int:
        """How many more bytes the parser needs before it can go on (at least 1): lets a stream reader read exactly
        up to the next event and not beyond it."""
        return max(1, (self._step or 1) - self.buffered)

    @property
    def in_message(self) -> int | None:
        """The type of the message being parsed, None at a message boundary."""
        return self._current

    def next_event(self) -> object:
        """The next event, or NEED_DATA. Raises ProtocolError on input the proxy does not accept, then and ever
        after."""
        if self._error is not None:
            raise self._error
        try:
            while True:
                if self._step is None:
                    step = next(self._parser)
                elif self.buffered < self._step:
                    return NEED_DATA
                else:
                    end = self._pos + self._step
                    with memoryview(self._buf) as view:  # one copy, not a bytearray slice and then bytes
                        data = bytes(view[self._pos:end])
                    self._pos = end
                    self.offset += len(data)
                    step = self._parser.send(data)
                if isinstance(step, int):
                    self._step = step
                    continue
                self._step = None
                return step
        except ProtocolError as exc:
            self._error = exc
            raise

    def events(self) -> Generator[object, None, None]:
        """Every event the buffered bytes complete."""
        while (event := self.next_event()) is not NEED_DATA:
            yield event

    def eof(self) -> None:
        """The peer closed: fine at a message boundary, a ProtocolError inside a message."""
        if self._current is not None:
            self._error = ProtocolError(f"{self.side} message {self._current} truncated")
            raise self._error

    def _messages(self) -> _Parser:
        while True:
            (msg_type,) = yield 1
            self._current = msg_type
            yield from self._message(msg_type)
            self._current = None
            yield MessageEnd(msg_type)

    def _message(self, msg_type: int) -> _Parser:
        raise NotImplementedError

    def _payload(self, size: int) -> _Parser:
        """Stream `size` payload bytes as Data pieces (with `chunk`)."""
        assert self.chunk is not None
        while size:
            piece = yield min(self.chunk, size)
            size -= len(piece)
            yield Data(piece)

    def _cut_text(self, msg_type: int) -> _Parser:
        head = yield 7
        (length,) = struct.unpack(">3xi", head)
        event = CutText(bytes([msg_type]) + head, length)
        if self.chunk is None:
            text = yield abs(length)
            yield replace(event, text=text)
        else:
            yield event
            yield from self._payload(abs(length))


class ClientFramer(Framer):
    """Client-to-server messages: the six the proxy accepts; any other type ends the session."""

    side = "client"

    def __init__(self, chunk: int | None = None) -> None:
        super().__init__(chunk)

    def _message(self, msg_type: int) -> _Parser:
        head = bytes([msg_type])
        if msg_type == rfb.C_KEY_EVENT:
            body = yield 7
            down, keysym = struct.unpack(">B2xI", body)
            yield KeyEvent(head + body, down != 0, keysym)
        elif msg_type == rfb.C_POINTER_EVENT:
            body = yield 5
            mask, x, y = struct.unpack(">BHH", body)
            yield PointerEvent(head + body, mask, x, y)
        elif msg_type == rfb.C_FB_UPDATE_REQUEST:
            body = yield 9
            if body[0] not in (0, 1):
                raise ProtocolError("bad incremental flag")
            x, y, w, h = struct.unpack(">xHHHH", body)
            yield FramebufferUpdateRequest(head + body, body[0] == 1, x, y, w, h)
        elif msg_type == rfb.C_SET_ENCODINGS:
            body = yield 3
            (count,) = struct.unpack(">xH", body)
            if count > rfb.MAX_ENCODINGS:
                raise ProtocolError(f"SetEncodings with {count} encodings (max {rfb.MAX_ENCODINGS})")
            listed = yield 4 * count
            yield SetEncodings(head + body + listed, struct.unpack(f">{count}i", listed))
        elif msg_type == rfb.C_SET_PIXEL_FORMAT:
            body = yield 19
            yield SetPixelFormat(head + body, PixelFormat.parse(body[3:]))
        elif msg_type == rfb.C_CLIENT_CUT_TEXT:
            yield from self._cut_text(msg_type)
        else:
            raise ProtocolError(f"client message type {msg_type} not allowed")


class ServerFramer(Framer):
    """Server-to-client messages. Keeps what sizing the server stream depends on: the pixel format (which the
    caller sets when the client's SetPixelFormat goes through) and the framebuffer size (from ServerInit, then from
    DesktopSize and accepted ExtendedDesktopSize rectangles), against which rectangles are bounds-checked."""

    side = "server"

    def __init__(self, pixel_format: PixelFormat, width: int, height: int, chunk: int | None = None) -> None:
        super().__init__(chunk)
        self.pixel_format = pixel_format
        self.width = width
        self.height = height

    def _message(self, msg_type: int) -> _Parser:
        head = bytes([msg_type])
        if msg_type == rfb.S_FB_UPDATE:
            pixel_format = self.pixel_format
            body = yield 3
            (count,) = struct.unpack(">xH", body)
            yield FramebufferUpdate(head + body, count, pixel_format)
            for _ in range(count):
                last = yield from self._rectangle(pixel_format)
                if last:
                    break
        elif msg_type == rfb.S_SET_COLOUR_MAP:
            body = yield 5
            first, count = struct.unpack(">xHH", body)
            entries = yield 6 * count
            yield SetColourMapEntries(head + body + entries, first, count)
        elif msg_type == rfb.S_BELL:
            yield Bell(head)
        elif msg_type == rfb.S_SERVER_CUT_TEXT:
            yield from self._cut_text(msg_type)
        else:
            raise ProtocolError(f"server message type {msg_type} not allowed")

    def _rectangle(self, pf: PixelFormat) -> Generator[_Step, bytes, bool]:
        """One rectangle; returns True for LastRect, which ends the update whatever its count said."""
        raw = yield 12
        x, y, w, h, enc = struct.unpack(">HHHHi", raw)
        rect = Rectangle(x, y, w, h, enc, raw)
        if enc == rfb.ENC_LAST_RECT:
            yield rect
            return True
        if enc >= 0 and (x + w > self.width or y + h > self.height):
            raise ProtocolError(f"rectangle {w}x{h}+{x}+{y} outside {self.width}x{self.height}")
        bpp = pf.bytes_per_pixel
        if enc == rfb.ENC_RAW:
            rect = replace(rect, data_size=w * h * bpp)
        elif enc == rfb.ENC_COPYRECT:
            source = yield 4
            rect = replace(rect, raw=raw + source, source=struct.unpack(">HH", source))
        elif enc in (rfb.ENC_ZLIB, rfb.ENC_ZRLE):
            length = yield 4
            rect = replace(rect, raw=raw + length, data_size=struct.unpack(">I", length)[0])
        elif enc == rfb.ENC_RRE:
            count = yield 4
            (subrects,) = struct.unpack(">I", count)
            rect = replace(rect, raw=raw + count, data_size=bpp + subrects * (bpp + 8), subrects=subrects)
        elif enc == rfb.ENC_TIGHT:
            rect = yield from self._tight(rect, pf)
        elif enc == rfb.ENC_CURSOR:
            if w > rfb.MAX_CURSOR_SIDE or h > rfb.MAX_CURSOR_SIDE:
                raise ProtocolError(f"cursor {w}x{h} too large")
            rect = replace(rect, data_size=w * h * bpp + ((w + 7) // 8) * h)
        elif enc == rfb.ENC_DESKTOP_SIZE:
            self.width, self.height = w, h
        elif enc == rfb.ENC_EXT_DESKTOP_SIZE:
            count = yield 4
            screens = yield 16 * count[0]
            rect = replace(rect, raw=raw + count + screens)
            if y == 0:  # status 0: the size did change
                self.width, self.height = w, h
        else:
            raise ProtocolError(f"server used encoding {enc}, which is not allowed")
        if self.chunk is None:
            if rect.data_size:
                rect = replace(rect, data=(yield rect.data_size))
            yield rect
        else:
            yield rect
            yield from self._payload(rect.data_size or 0)
        return False

    def _tight(self, rect: Rectangle, pf: PixelFormat) -> Generator[_Step, bytes, Rectangle]:
        """Tight's header: control byte, then a fill colour, a JPEG length, or filter, palette and either the data
        itself (under 12 bytes) or its compact length."""
        control = yield 1
        raw = rect.raw + control
        kind = control[0] >> 4
        tpixel = pf.tight_pixel_size
        if kind == 0x8:  # fill
            colour = yield tpixel
            return replace(rect, raw=raw + colour, tight=TightHead(control[0], inline=colour))
        if kind == 0x9:  # JPEG
            length, size = yield from _compact_length()
            return replace(rect, raw=raw + length, data_size=size, tight=TightHead(control[0]))
        if kind > 0x7:
            raise ProtocolError(f"Tight compression control {control[0]:#x} not allowed")
        filter_id = colours = 0
        palette = b""
        if control[0] & 0x40:
            (filter_id,) = flag = yield 1
            raw += flag
            if filter_id == 1:
                count = yield 1
                colours = count[0] + 1
                palette = yield colours * tpixel
                raw += count + palette
            elif filter_id not in (0, 2):
                raise ProtocolError(f"Tight filter {filter_id} not allowed")
        size = _tight_data_size(filter_id, rect.width, rect.height, tpixel, colours)
        head = TightHead(control[0], filter_id, colours, palette, size=size)
        if size < 12:
            inline = yield size
            return replace(rect, raw=raw + inline, tight=replace(head, inline=inline))
        length, compressed = yield from _compact_length()
        return replace(rect, raw=raw + length, data_size=compressed, tight=head)


def _compact_length() -> Generator[_Step, bytes, tuple[bytes, int]]:
    """Tight's 1-3 byte length: 7 bits a byte, the high bit saying another follows; the third byte counts 8 bits."""
    raw = yield 1
    length = raw[0] & 0x7F
    if raw[0] & 0x80:
        b1 = yield 1
        raw += b1
        length |= (b1[0] & 0x7F) << 7
        if b1[0] & 0x80:
            b2 = yield 1
            raw += b2
            length |= b2[0] << 14
    return raw, length


def _tight_data_size(filter_id: int, width: int, height: int, tpixel: int, colours: int) -> int:
    """Uncompressed size of a Tight basic-compression rectangle: a bit a pixel for two colours or fewer, a byte
    for larger palettes, whole TPIXELs for the copy and gradient filters."""
    if filter_id == 1:
        if colours <= 2:
            return ((width + 7) // 8) * height
        return width * height
    return width * height * tpixel


__all__ = ["NEED_DATA", "Bell", "ClientFramer", "CutText", "Data", "Framer", "FramebufferUpdate",
           "FramebufferUpdateRequest", "KeyEvent", "MessageEnd", "NeedData", "PointerEvent", "Rectangle",
           "ServerFramer", "SetColourMapEntries", "SetEncodings", "SetPixelFormat", "TightHead"]
