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

import asyncio
import hashlib
import io
import json
import queue
import struct
import threading
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


class RecordingError(Exception):
    """The recording could not be written (disk full, I/O error): the session must end, as it would be unrecorded."""


_FLUSH = object()
_STOP = object()


class Recorder:
    """Appends records from the event loop; a writer thread does the file I/O, so that writing hundreds of megabytes a
    second of screen data overlaps with the proxy's network I/O instead of stalling it.

    Records keep their order and carry the time at which the proxy forwarded them. `backlog` counts bytes handed over
    but not yet written; the session waits on `wait_ready()` when it exceeds `max_backlog`, so a slow disk slows the
    session down rather than letting memory grow. A failed write is raised as `RecordingError` at the next call.
    """

    def __init__(self, path: Path, start: float | None = None, max_backlog: int = 32 << 20) -> None:
        # large payloads (bigger than the buffer) go to the file without being copied into the buffer first
        self._file: BinaryIO = open(path, "xb", buffering=64 << 10)
        self._start = time.monotonic() if start is None else start
        self._file.write(MAGIC)
        # SHA-256 and size of the whole file, kept by the writer thread: the session seals them into its event log,
        # so an auditor can tell an altered or truncated recording from the one the proxy wrote.
        self._digest = hashlib.sha256(MAGIC)
        self.file_bytes = len(MAGIC)
        self.sha256: str | None = None  # set by close()
        # (bytes, SHA-256 state) of the file as last handed to the operating system (at each flush, by the writer
        # thread): what a signed checkpoint of the event log vouches for while the session runs (`flushed`)
        self._flushed: tuple[int, Any] = (0, hashlib.sha256())
        self.bytes_recorded = 0
        self.closed = False
        self.max_backlog = max_backlog
        self._backlog = 0
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._room: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._write_loop, name=f"recorder {path.parent.name}", daemon=True)
        self._thread.start()

    # --- writer thread ---------------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    break
                if item is _FLUSH:
                    self._file.flush()
                    self._flushed = (self.file_bytes, self._digest.copy())  # one assignment: read whole
                    continue
                header, payload = item
                self._file.write(header)
                self._file.write(payload)
                self._digest.update(header)
                self._digest.update(payload)
                self.file_bytes += len(header) + len(payload)
                with self._lock:
                    self._backlog -= len(payload)
                    drained = self._backlog <= self.max_backlog // 2
                if drained:
                    self._wake()
            self._file.flush()
        except BaseException as exc:  # noqa: BLE001 - reported to the session, which ends
            self._error = exc
            self._wake()
        finally:
            try:
                self._file.close()
            except OSError as exc:
                self._error = self._error or exc

    def _wake(self) -> None:
        room, loop = self._room, self._loop
        if room is not None and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(room.set)
            except RuntimeError:
                pass

    # --- event loop side -------------------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise RecordingError(f"{self._error.__class__.__name__}: {self._error}")

    def _record(self, kind: int, payload: bytes | bytearray | memoryview) -> None:
        self._check()
        if self.closed:
            raise RecordingError("recording closed")
        data = payload if isinstance(payload, bytes) else bytes(payload)  # callers may reuse their buffers
        header = HEADER.pack(kind, time.monotonic() - self._start, len(data))
        with self._lock:
            self._backlog += len(data)
        self._queue.put((header, data))

    @property
    def backlog(self) -> int:
        return self._backlog

    async def wait_ready(self) -> None:
        """Return once the writer has caught up below the backlog limit (at once if it has)."""
        while True:
            self._check()
            if self._backlog <= self.max_backlog:
                return
            if self._room is None:
                self._room, self._loop = asyncio.Event(), asyncio.get_running_loop()
            self._room.clear()
            if self._backlog <= self.max_backlog or self._error is not None:
                continue
            await self._room.wait()

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
        """Hand what was recorded so far to the operating system (at the end of every server message)."""
        if not self.closed:
            self._check()
            self._queue.put(_FLUSH)

    def flushed(self) -> dict[str, Any]:
        """Size and SHA-256 of the start of the file that has reached the operating system (it survives the proxy
        being killed), for the event log's signed checkpoints."""
        size, digest = self._flushed
        return {"bytes": size, "sha256": digest.hexdigest()}

    def close(self, reason: str) -> None:
        """Write the end record and wait for the writer (blocking: called once, when the session ends)."""
        if self.closed:
            return
        if self._error is None:
            self._json(KIND_END, {"reason": reason})
        self.closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self.sha256 = self._digest.hexdigest()
        self._check()


def read_recording(path: Path | bytes, tolerate_cut_end: bool = False) -> Iterator[tuple[str, float, bytes]]:
    """Yield (kind letter, seconds, payload); raises ValueError on a damaged file. `tolerate_cut_end` stops quietly
    at a last record cut short, as a recording ends when its writer was killed. `path` may also be the recording's
    bytes, read once by a caller that hashes exactly what it decodes (the player: proxy/audit/player.py)."""
    with (io.BytesIO(path) if isinstance(path, bytes) else open(path, "rb")) as handle:
        magic = handle.read(len(MAGIC))
        if magic != MAGIC:
            if tolerate_cut_end and MAGIC.startswith(magic):
                return  # killed before its first bytes reached the disk
            raise ValueError("not a safeshare recording")
        while True:
            header = handle.read(HEADER.size)
            if not header:
                return
            if len(header) != HEADER.size:
                if tolerate_cut_end:
                    return
                raise ValueError("truncated record header")
            kind, seconds, length = HEADER.unpack(header)
            payload = handle.read(length)
            if len(payload) != length:
                if tolerate_cut_end:
                    return
                raise ValueError("truncated record")
            yield chr(kind), seconds, payload
