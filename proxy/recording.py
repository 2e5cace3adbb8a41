"""Screen recording of the filtered server-to-client stream (`sessions/<id>/screen.rfbrec`).

RFB's zlib, ZRLE and Tight streams keep compression state for the whole connection, so a recording cannot be decoded
from the middle. We therefore record exactly the bytes the client received after filtering, from the ServerInit on,
and plan replay from the start (a player seeks by decoding forward). Each record carries its time offset, so the
player can reproduce timing; pixel-format and encoding changes are recorded where they take effect.

File layout: the magic line `SAFESHARE-RFBREC 1\n`, then records of
    kind (1 byte) | seconds since session start (float64, big endian) | length (uint32) | payload
with kinds:
    I  init: JSON {width, height, pixel_format, name, protocol}        (first record)
    P  pixel format in force from the next server message: JSON
    E  encodings forwarded to the server: JSON list of int
    S  server-to-client bytes exactly as forwarded (message boundaries are not preserved; parse as a stream)
    X  end: JSON {reason}
"""
from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"SAFESHARE-RFBREC 1\n"
HEADER = struct.Struct(">BdI")
KIND_INIT = ord("I")
KIND_PIXEL_FORMAT = ord("P")
KIND_ENCODINGS = ord("E")
KIND_SERVER = ord("S")
KIND_END = ord("X")


class Recorder:
    """Appends records; buffered, flushed at the end of every server message by the proxy."""

    def __init__(self, path: Path, start: float | None = None) -> None:
        self._file: BinaryIO = open(path, "xb", buffering=1 << 20)
        self._start = time.monotonic() if start is None else start
        self._file.write(MAGIC)
        self.bytes_recorded = 0
        self.closed = False

    def _record(self, kind: int, payload: bytes | bytearray | memoryview) -> None:
        self._file.write(HEADER.pack(kind, time.monotonic() - self._start, len(payload)))
        self._file.write(payload)

    def _json(self, kind: int, value: Any) -> None:
        self._record(kind, json.dumps(value, separators=(",", ":")).encode())

    def init(self, width: int, height: int, pixel_format: dict[str, int], name: str, protocol: str) -> None:
        self._json(KIND_INIT, {"width": width, "height": height, "pixel_format": pixel_format, "name": name,
                               "protocol": protocol})

    def pixel_format(self, pixel_format: dict[str, int]) -> None:
        self._json(KIND_PIXEL_FORMAT, pixel_format)

    def encodings(self, encodings: list[int]) -> None:
        self._json(KIND_ENCODINGS, encodings)

    def server(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self._record(KIND_SERVER, data)
            self.bytes_recorded += len(data)

    def flush(self) -> None:
        if not self.closed:
            self._file.flush()

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self._json(KIND_END, {"reason": reason})
        self.closed = True
        self._file.close()


def read_recording(path: Path) -> Iterator[tuple[str, float, bytes]]:
    """Yield (kind letter, seconds, payload); raises ValueError on a damaged file."""
    with open(path, "rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            raise ValueError("not a safeshare recording")
        while True:
            header = handle.read(HEADER.size)
            if not header:
                return
            if len(header) != HEADER.size:
                raise ValueError("truncated record header")
            kind, seconds, length = HEADER.unpack(header)
            payload = handle.read(length)
            if len(payload) != length:
                raise ValueError("truncated record")
            yield chr(kind), seconds, payload
