"""Decode a recorded server-to-client RFB stream into framebuffer images, for the player and the video export.

The recording holds exactly what the researcher's noVNC received after the proxy's filtering, so decoding it with
the same rules noVNC uses gives the screen the researcher saw. Messages are delimited by the proxy's own framer
(`proxy.rfbframe`), so the decoder reads the stream exactly as the proxy forwarded it; what it adds is pixels. The
proxy only lets through encodings it can frame (Raw, CopyRect, RRE, Zlib, Tight, ZRLE and the Cursor / DesktopSize /
LastRect / ExtendedDesktopSize pseudo-encodings); those are the ones decoded here. Zlib-based encodings keep their
compression state for the whole connection, which is why decoding always runs forward from the start: the player's
keyframes are made by one such pass (see `player.py`).

Pixels are converted with numpy a rectangle at a time; only run-length and subrectangle lists, whose items are
rectangles themselves, are walked in Python.
"""
from __future__ import annotations

import io
import zlib
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from proxy.recording import read_recording
from proxy.rfb import (
    ENC_COPYRECT, ENC_CURSOR, ENC_DESKTOP_SIZE, ENC_EXT_DESKTOP_SIZE, ENC_LAST_RECT, ENC_RAW, ENC_RRE, ENC_TIGHT,
    ENC_ZLIB, ENC_ZRLE, PixelFormat, ProtocolError,
)
from proxy.rfbframe import (
    NEED_DATA, Bell, CutText, FramebufferUpdate, MessageEnd, Rectangle, ServerFramer, SetColourMapEntries,
)


class DecodeError(ValueError):
    """The stream holds something this decoder cannot follow (the recording is damaged or not ours)."""


class _NeedMore(Exception):
    """ZRLE tile data ends early: decoding stops there, as at a session cut off mid-update."""


def cpixel_layout(pf: PixelFormat) -> tuple[int, str | None]:
    """ZRLE's CPIXEL size and, when 3 bytes, which end of the 4-byte pixel they are ('low' or 'high')."""
    if pf.true_colour and pf.bits_per_pixel == 32 and pf.depth <= 24:
        top = max((m << s) for m, s in ((pf.red_max, pf.red_shift), (pf.green_max, pf.green_shift),
                                         (pf.blue_max, pf.blue_shift)))
        if top < (1 << 24):
            return 3, "low"
        if min(pf.red_shift, pf.green_shift, pf.blue_shift) >= 8:
            return 3, "high"
    return pf.bytes_per_pixel, None


class Stream:
    """A cursor over a ZRLE rectangle's decompressed tile data."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise _NeedMore
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def u8(self) -> int:
        return self.take(1)[0]



class Framebuffer:
    """The screen as the client has it: an (height, width, 3) uint8 RGB array, updated message by message."""

    def __init__(self, width: int, height: int, pixel_format: dict[str, int]) -> None:
        self.image = np.zeros((height, width, 3), np.uint8)
        self.pf = PixelFormat(**pixel_format)
        self._tight = [zlib.decompressobj() for _ in range(4)]
        self._zrle = zlib.decompressobj()
        self._zlib = zlib.decompressobj()
        self.colour_map = np.zeros((256, 3), np.uint8)
        self.resized = False
        self._box: list[int] | None = None  # what the update being applied has changed so far

    @property
    def width(self) -> int:
        return self.image.shape[1]

    @property
    def height(self) -> int:
        return self.image.shape[0]

    # --- pixels ----------------------------------------------------------------------------------------------------

    def pixels(self, data: bytes, count: int) -> np.ndarray:
        """`count` PIXELs in the current format as (count, 3) RGB."""
        pf = self.pf
        if pf.bytes_per_pixel == 1:
            values = np.frombuffer(data, np.uint8, count).astype(np.uint32)
        else:
            dtype = (">" if pf.big_endian else "<") + ("u2" if pf.bytes_per_pixel == 2 else "u4")
            values = np.frombuffer(data, dtype, count).astype(np.uint32)
        if not pf.true_colour:
            return self.colour_map[values & 0xFF]
        out = np.empty((count, 3), np.uint8)
        for channel, (shift, top) in enumerate(((pf.red_shift, pf.red_max), (pf.green_shift, pf.green_max),
                                                (pf.blue_shift, pf.blue_max))):
            component = (values >> shift) & top
            out[:, channel] = component if top == 255 else (component * 255 + top // 2) // max(top, 1)
        return out

    def tpixels(self, data: bytes, count: int) -> np.ndarray:
        if self.pf.tight_pixel_size == 3:
            return np.frombuffer(data, np.uint8, count * 3).reshape(count, 3)
        return self.pixels(data, count)

    def cpixels(self, data: bytes, count: int) -> np.ndarray:
        size, end = cpixel_layout(self.pf)
        if size != 3:
            return self.pixels(data, count)
        three = np.frombuffer(data, np.uint8, count * 3).reshape(count, 3)
        four = np.zeros((count, 4), np.uint8)
        # the 3 bytes are the pixel's low (or high) bytes in the pixel format's byte order
        if (end == "low") != bool(self.pf.big_endian):
            four[:, :3] = three
        else:
            four[:, 1:] = three
        return self.pixels(four.tobytes(), count)

    # --- messages --------------------------------------------------------------------------------------------------

    def apply(self, event: object) -> tuple[str, tuple[int, int, int, int] | None] | None:
        """Apply one framer event; at the end of a message returns its kind and, for updates, the bounding box it
        changed."""
        if isinstance(event, FramebufferUpdate):
            self.pf = event.pixel_format
            self._box = None
        elif isinstance(event, Rectangle):
            self._rectangle(event)
        elif isinstance(event, SetColourMapEntries):
            entries = np.frombuffer(event.entries, ">u2").reshape(event.count, 3)
            self.colour_map[event.first:event.first + event.count] = (entries >> 8).astype(np.uint8)
        elif isinstance(event, MessageEnd):
            if event.type == 0:
                box = self._box
                return "update", (box[0], box[1], box[2] - box[0], box[3] - box[1]) if box else None
            return {1: "colour_map", 2: "bell", 3: "cut_text"}[event.type], None
        elif not isinstance(event, (Bell, CutText)):
            raise DecodeError(f"unexpected {event!r}")
        return None

    def _rectangle(self, rect: Rectangle) -> None:
        x, y, w, h, encoding = rect.x, rect.y, rect.width, rect.height, rect.encoding
        if encoding == ENC_LAST_RECT:
            return
        if encoding in (ENC_DESKTOP_SIZE, ENC_EXT_DESKTOP_SIZE):
            if w and h and (w, h) != (self.width, self.height):
                grown = np.zeros((h, w, 3), np.uint8)
                keep_h, keep_w = min(h, self.height), min(w, self.width)
                grown[:keep_h, :keep_w] = self.image[:keep_h, :keep_w]
                self.image = grown
                self.resized = True
            self._box = [0, 0, self.width, self.height]
            return
        if encoding == ENC_CURSOR:
            return
        if x + w > self.width or y + h > self.height:
            raise DecodeError(f"rectangle {w}x{h}+{x}+{y} outside the {self.width}x{self.height} screen")
        self._rect(rect)
        box = self._box
        if w and h:
            self._box = [x, y, x + w, y + h] if box is None else [min(box[0], x), min(box[1], y),
                                                                  max(box[2], x + w), max(box[3], y + h)]

    def _rect(self, rect: Rectangle) -> None:
        x, y, w, h, encoding = rect.x, rect.y, rect.width, rect.height, rect.encoding
        target = self.image[y:y + h, x:x + w]
        if encoding == ENC_RAW:
            target[:] = self.pixels(rect.data, w * h).reshape(h, w, 3)
        elif encoding == ENC_COPYRECT:
            assert rect.source is not None
            sx, sy = rect.source
            target[:] = self.image[sy:sy + h, sx:sx + w].copy()
        elif encoding == ENC_RRE:
            subrects = rect.subrects
            bpp = self.pf.bytes_per_pixel
            target[:] = self.pixels(rect.data[:bpp], 1)[0]
            if subrects:
                raw = np.frombuffer(rect.data, np.uint8, subrects * (bpp + 8), bpp).reshape(subrects, bpp + 8)
                colours = self.pixels(raw[:, :bpp].tobytes(), subrects)
                geometry = raw[:, bpp:].copy().view(">u2").reshape(subrects, 4)
                for (sx, sy, sw, sh), colour in zip(geometry.tolist(), colours):
                    target[sy:sy + sh, sx:sx + sw] = colour
        elif encoding == ENC_ZLIB:
            data = self._zlib.decompress(rect.data)
            target[:] = self.pixels(data, w * h).reshape(h, w, 3)
        elif encoding == ENC_TIGHT:
            self._tight_rect(rect, target)
        elif encoding == ENC_ZRLE:
            self._zrle_rect(Stream(self._zrle.decompress(rect.data)), target, w, h)
        else:
            raise DecodeError(f"encoding {encoding} was not allowed by the proxy and cannot be decoded")

    # --- Tight -----------------------------------------------------------------------------------------------------

    def _tight_rect(self, rect: Rectangle, target: np.ndarray) -> None:
        tight = rect.tight
        assert tight is not None
        w, h = rect.width, rect.height
        for stream_id in range(4):
            if tight.control & (1 << stream_id):
                self._tight[stream_id] = zlib.decompressobj()
        method = tight.method
        if method == 0x8:  # fill
            target[:] = self.tpixels(tight.inline, 1)[0]
            return
        if method == 0x9:  # JPEG
            from PIL import Image

            with Image.open(io.BytesIO(rect.data)) as picture:
                target[:] = np.asarray(picture.convert("RGB"))[:h, :w]
            return
        stream_id = method & 0x3
        data = self._tight_data(rect, stream_id)
        if tight.filter_id == 1:  # palette
            colours = tight.colours
            palette = self.tpixels(tight.palette, colours)
            if colours <= 2:
                bits = np.unpackbits(np.frombuffer(data, np.uint8).reshape(h, (w + 7) // 8), axis=1)[:, :w]
                target[:] = palette[bits]
            else:
                target[:] = palette[np.frombuffer(data, np.uint8, w * h).reshape(h, w)]
        elif tight.filter_id == 2:  # gradient: each pixel predicted from its left, upper and upper-left neighbours
            target[:] = undo_gradient(self.tpixels(data, w * h).reshape(h, w, 3))
        else:
            target[:] = self.tpixels(data, w * h).reshape(h, w, 3)

    def _tight_data(self, rect: Rectangle, stream_id: int) -> bytes:
        """The uncompressed data: as sent when under 12 bytes, else inflated from its stream."""
        tight = rect.tight
        assert tight is not None
        if tight.size < 12:
            return tight.inline
        data = self._tight[stream_id].decompress(rect.data)
        if len(data) < tight.size:
            raise DecodeError(f"Tight data: {len(data)} bytes where {tight.size} were expected")
        return data[:tight.size]

    # --- ZRLE ------------------------------------------------------------------------------------------------------

    def _zrle_rect(self, z: Stream, target: np.ndarray, w: int, h: int) -> None:
        cp = cpixel_layout(self.pf)[0]
        for ty in range(0, h, 64):
            for tx in range(0, w, 64):
                th, tw = min(64, h - ty), min(64, w - tx)
                tile = target[ty:ty + th, tx:tx + tw]
                sub = z.u8()
                if sub == 0:
                    tile[:] = self.cpixels(z.take(tw * th * cp), tw * th).reshape(th, tw, 3)
                elif sub == 1:
                    tile[:] = self.cpixels(z.take(cp), 1)[0]
                elif 2 <= sub <= 16:
                    palette = self.cpixels(z.take(sub * cp), sub)
                    bits = 1 if sub == 2 else 2 if sub <= 4 else 4
                    row_bytes = (tw * bits + 7) // 8
                    packed = np.frombuffer(z.take(row_bytes * th), np.uint8).reshape(th, row_bytes)
                    unpacked = np.unpackbits(packed, axis=1).reshape(th, row_bytes * 8 // bits, bits)
                    weights = (1 << np.arange(bits - 1, -1, -1)).astype(np.uint8)
                    indices = (unpacked * weights).sum(axis=2)[:, :tw]
                    tile[:] = palette[np.minimum(indices, sub - 1)]
                elif sub == 128 or sub >= 130:
                    palette = self.cpixels(z.take((sub - 128) * cp), sub - 128) if sub >= 130 else None
                    flat = np.empty((tw * th, 3), np.uint8)
                    filled = 0
                    while filled < tw * th:
                        if palette is None:
                            colour = self.cpixels(z.take(cp), 1)[0]
                            run = 1
                            while (byte := z.u8()) == 255:
                                run += 255
                            run += byte
                        else:
                            index = z.u8()
                            colour = palette[index & 0x7F]
                            run = 1
                            if index & 0x80:
                                while (byte := z.u8()) == 255:
                                    run += 255
                                run += byte
                        flat[filled:filled + run] = colour
                        filled += run
                    tile[:] = flat[:tw * th].reshape(th, tw, 3)
                else:
                    raise DecodeError(f"ZRLE subencoding {sub} is not defined")


def undo_gradient(residual: np.ndarray) -> np.ndarray:
    """Tight's gradient filter reversed: pixel = residual + clamp(left + above - above_left), per channel, mod 256.
    Each pixel needs its left, upper and upper-left neighbours, all on earlier anti-diagonals, so the pixels of
    one anti-diagonal are computed together: h + w - 1 vector steps instead of h * w scalar ones."""
    h, w, _ = residual.shape
    out = np.zeros((h + 1, w + 1, 3), np.int32)  # a zero row and column stand for the missing neighbours
    values = residual.astype(np.int32)
    for diagonal in range(h + w - 1):
        rows = np.arange(max(0, diagonal - w + 1), min(h - 1, diagonal) + 1)
        cols = diagonal - rows
        predicted = np.clip(out[rows + 1, cols] + out[rows, cols + 1] - out[rows, cols], 0, 255)
        out[rows + 1, cols + 1] = (predicted + values[rows, cols]) & 0xFF
    return out[1:, 1:].astype(np.uint8)


@dataclass
class Message:
    seconds: float  # session time at which the message's last byte was forwarded
    kind: str
    box: tuple[int, int, int, int] | None


class Replay:
    """One forward pass over a recording: `messages()` applies each server message to `framebuffer` and yields it.
    Pixel-format changes take effect at the message after the record that announced them, as in the proxy."""

    def __init__(self, path: str | Path, data: bytes | None = None) -> None:
        """`data`, when given, is the recording's content (read once by the caller, who hashed it: what is decoded
        is then exactly what was hashed, whatever the file holds meanwhile); `path` then only names it."""
        self.path = Path(path)
        # a killed writer's last record may be cut short
        records = list(read_recording(self.path if data is None else data, tolerate_cut_end=True))
        if not records or records[0][0] != "I":
            raise DecodeError(f"{self.path}: the recording does not start with its init record")
        import json

        init = json.loads(records[0][2])
        self.init = init
        self.framebuffer = Framebuffer(init["width"], init["height"], init["pixel_format"])
        self.end_seconds = records[-1][1]
        self.end_reason = json.loads(records[-1][2]).get("reason") if records[-1][0] == "X" else None
        chunks, ends, times = [], [], []
        formats: list[tuple[int, dict]] = []  # (stream offset from which it applies, pixel format)
        offset = 0
        for kind, seconds, payload in records[1:]:
            if kind == "S":
                chunks.append(payload)
                offset += len(payload)
                ends.append(offset)
                times.append(seconds)
            elif kind == "P":
                formats.append((offset, json.loads(payload)))
        self._chunks, self._size = chunks, offset
        self._ends, self._times, self._formats = ends, times, formats
        self._framer: ServerFramer | None = None

    def _time_at(self, position: int) -> float:
        index = bisect_left(self._ends, position)
        return self._times[min(index, len(self._times) - 1)] if self._times else 0.0

    def next_start(self) -> float | None:
        """Session time at which the next message began to arrive (None at the end): lets a caller that samples
        the screen know whether the screen it has now stays as it is for a while."""
        framer = self._framer
        if framer is None or framer.offset >= self._size:
            return None
        return self._time_at(framer.offset + 1)

    def messages(self) -> Iterator[Message]:
        fb = self.framebuffer
        framer = self._framer = ServerFramer(fb.pf, fb.width, fb.height)
        chunks = iter(self._chunks)
        formats = list(self._formats)
        while True:
            while framer.in_message is None and formats and formats[0][0] <= framer.offset:
                framer.pixel_format = PixelFormat(**formats.pop(0)[1])
            try:
                event = framer.next_event()
            except ProtocolError as exc:
                raise DecodeError(f"{exc} (at byte {framer.offset})") from None
            if event is NEED_DATA:
                chunk = next(chunks, None)
                if chunk is None:
                    return  # the stream ends inside a message (a session cut off mid-update): decoding stops there
                framer.feed(chunk)
                continue
            try:
                done = fb.apply(event)
            except _NeedMore:
                return
            if done is not None:
                yield Message(self._time_at(framer.offset), *done)
