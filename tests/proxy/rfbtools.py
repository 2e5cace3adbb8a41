"""Test-side RFB peers: a client that decodes Raw/CopyRect/zlib framebuffers and a scripted fake VNC server that
records what reaches it. Both only talk to 127.0.0.1. They delimit messages with `proxy.rfbframe`, the one home of
RFB message lengths; what they make of the messages (pixels, the record of what reached the server) is their own,
and the fuzz tests keep an independent model of the framing (`test_fuzz.py`).
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import time
import zlib
from dataclasses import dataclass, field

from proxy.rfb import PixelFormat, ProtocolError
from proxy.rfbframe import NEED_DATA, Bell, ClientFramer, CutText, MessageEnd, Rectangle, ServerFramer, Framer

PF_32 = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
# The proxy releases every key and button when a session starts and ends: a run of key releases that begins with
# Shift_L, Shift_R, Control_L, Control_R (over a hundred in all) and ends with a PointerEvent without buttons.
# FakeVncServer sets such runs aside (in `resets`), so that tests compare what the client's input became.
RESET_MIN_KEYS = 32
RESET_START = [0xFFE1, 0xFFE2, 0xFFE3, 0xFFE4]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class RfbClient:
    """Minimal RFB 3.8 client, security None; keeps a 32-bit little-endian BGRX framebuffer."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter
        self.width = 0
        self.height = 0
        self.name = b""
        self.fb = bytearray()
        self.cut_texts: list[bytes] = []
        self.bells = 0
        self._zlib = zlib.decompressobj()
        self._framer: ServerFramer | None = None  # from the first message on (callers may do their own handshake)

    async def connect(self, port: int, encodings: tuple[int, ...] = (0,)) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        version = await self.reader.readexactly(12)
        assert version == b"RFB 003.008\n", version
        self.writer.write(b"RFB 003.008\n")
        (n,) = await self.reader.readexactly(1)
        types = await self.reader.readexactly(n)
        assert types == b"\x01", types
        self.writer.write(b"\x01")
        assert await self.reader.readexactly(4) == b"\0\0\0\0"
        self.writer.write(b"\x01")
        self.width, self.height = struct.unpack(">HH", await self.reader.readexactly(4))
        await self.reader.readexactly(16)
        (length,) = struct.unpack(">I", await self.reader.readexactly(4))
        self.name = await self.reader.readexactly(length)
        self.fb = bytearray(self.width * self.height * 4)
        self.writer.write(b"\x00\x00\x00\x00" + PF_32)
        await self.set_encodings(encodings)

    async def set_encodings(self, encodings: tuple[int, ...]) -> None:
        self.writer.write(struct.pack(f">BxH{len(encodings)}i", 2, len(encodings), *encodings))
        await self.writer.drain()

    async def request(self, incremental: bool = False) -> None:
        self.writer.write(struct.pack(">BBHHHH", 3, int(incremental), 0, 0, self.width, self.height))
        await self.writer.drain()

    async def key(self, keysym: int, down: bool) -> None:
        self.writer.write(struct.pack(">BBxxI", 4, int(down), keysym))
        await self.writer.drain()

    async def pointer(self, mask: int, x: int, y: int) -> None:
        self.writer.write(struct.pack(">BBHH", 5, mask, x, y))
        await self.writer.drain()

    async def cut_text(self, text: bytes) -> None:
        self.writer.write(struct.pack(">B3xI", 6, len(text)) + text)
        await self.writer.drain()

    async def read_message(self) -> int:
        """Read one server message, apply it; returns its type."""
        if self._framer is None:  # the client always asks for PF_32
            self._framer = ServerFramer(PixelFormat.parse(PF_32), self.width, self.height)
        while True:
            event = await next_event(self._framer, self.reader)
            if isinstance(event, Rectangle):
                self._rectangle(event)
            elif isinstance(event, Bell):
                self.bells += 1
            elif isinstance(event, CutText):
                self.cut_texts.append(event.text)
            elif isinstance(event, MessageEnd):
                return event.type

    def _rectangle(self, rect: Rectangle) -> None:
        x, y, w, h, enc = rect.x, rect.y, rect.width, rect.height, rect.encoding
        if enc == 0:
            self._blit(x, y, w, h, rect.data)
        elif enc == 1:
            assert rect.source is not None
            sx, sy = rect.source
            rows = [bytes(self.fb[((sy + r) * self.width + sx) * 4:((sy + r) * self.width + sx + w) * 4])
                    for r in range(h)]
            self._blit(x, y, w, h, b"".join(rows))
        elif enc == 6:
            self._blit(x, y, w, h, self._zlib.decompress(rect.data))
        elif enc == -223:
            self.width, self.height = w, h
            self.fb = bytearray(w * h * 4)
        elif enc not in (-239, -224):  # cursor: skipped; LastRect: the framer ends the update
            raise AssertionError(f"test client cannot decode encoding {enc}")

    def _blit(self, x: int, y: int, w: int, h: int, data: bytes) -> None:
        for row in range(h):
            start = ((y + row) * self.width + x) * 4
            self.fb[start:start + w * 4] = data[row * w * 4:(row + 1) * w * 4]

    async def read_update(self, timeout: float = 10.0) -> None:
        """Read messages until one framebuffer update has been applied."""
        async with asyncio.timeout(timeout):
            while await self.read_message() != 0:
                pass

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        i = (y * self.width + x) * 4
        b, g, r = self.fb[i], self.fb[i + 1], self.fb[i + 2]
        return r, g, b

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


@dataclass
class FakeVncServer:
    """Scripted RFB 3.8 server (security None) that records every client message it receives, parsed."""

    width: int = 64
    height: int = 48
    script: bytes = b""  # raw server messages sent right after ServerInit
    close_after_script: bool = False
    messages: list[tuple[float, int, bytes]] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    connections: int = 0
    echo_bell_on_key: bool = False
    pixel_format: bytes = PF_32  # as announced in ServerInit
    handled: int = 0  # connections whose handler has finished
    resets: list[list[int]] = field(default_factory=list)  # the proxy's input resets: the keysyms each released

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            writer.write(b"RFB 003.008\n")
            await reader.readexactly(12)
            writer.write(b"\x01\x01")
            await reader.readexactly(1)
            writer.write(b"\0\0\0\0")
            await reader.readexactly(1)
            name = b"fake"
            writer.write(struct.pack(">HH", self.width, self.height) + self.pixel_format + struct.pack(">I", len(name))
                         + name)
            if self.script:
                writer.write(self.script)
            await writer.drain()
            if self.close_after_script:
                return
            framer = ClientFramer()
            run: list[tuple[float, int, bytes]] = []  # this connection's trailing key releases
            while True:
                try:
                    event = await next_event(framer, reader)
                except ProtocolError:  # not a message the proxy may forward: on record by its type, then the end
                    self.messages.append((time.monotonic(), framer.in_message or 0, b""))
                    return
                if isinstance(event, MessageEnd):
                    continue
                raw = event.raw + (event.text if isinstance(event, CutText) else b"")  # type: ignore[union-attr]
                t, body = raw[0], raw[1:]
                self.raw += raw
                record = (time.monotonic(), t, body)
                self.messages.append(record)
                if t == 4 and body[0] == 0:
                    run.append(record)
                elif t == 5 and body[0] == 0 and self._reset_start(run) is not None:
                    self._set_aside_reset(run[self._reset_start(run):], record)  # type: ignore[misc]
                    run = []
                else:
                    run = []
                if t == 4 and self.echo_bell_on_key:
                    writer.write(b"\x02")
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.handled += 1

    @staticmethod
    def _reset_start(run: list[tuple[float, int, bytes]]) -> int | None:
        syms = [struct.unpack(">B2xI", body)[1] for _, _, body in run]
        for start in range(len(syms) - RESET_MIN_KEYS, -1, -1):
            if syms[start:start + len(RESET_START)] == RESET_START:
                return start
        return None

    def _set_aside_reset(self, run: list[tuple[float, int, bytes]], pointer: tuple[float, int, bytes]) -> None:
        drop = {id(record) for record in run} | {id(pointer)}
        self.messages = [record for record in self.messages if id(record) not in drop]
        self.raw = bytearray(b"".join(bytes([t]) + body for _, t, body in self.messages if t in (0, 2, 3, 4, 5, 6)))
        self.resets.append([struct.unpack(">B2xI", body)[1] for _, _, body in run])

    def keys(self) -> list[tuple[float, bool, int]]:
        out = []
        for stamp, t, body in self.messages:
            if t == 4:
                down, keysym = struct.unpack(">B2xI", body)
                out.append((stamp, bool(down), keysym))
        return out

    def of_type(self, msg_type: int) -> list[bytes]:
        return [body for _, t, body in self.messages if t == msg_type]


async def next_event(framer: Framer, reader: asyncio.StreamReader) -> object:
    """The framer's next event, reading exactly the bytes it still needs (never beyond the message), so that a test
    can go on reading the stream itself where it left off."""
    while (event := framer.next_event()) is NEED_DATA:
        framer.feed(await reader.readexactly(framer.wanted))
    return event


def xvfb_start(width: int = 320, height: int = 240) -> tuple[subprocess.Popen, str]:
    """Start Xvfb on a free display chosen by the server itself (-displayfd)."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp",
         "-noreset"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    data = b""
    deadline = time.monotonic() + 10
    with os.fdopen(read_fd, "rb") as pipe:
        while not data.endswith(b"\n") and time.monotonic() < deadline:
            chunk = pipe.read(1)
            if not chunk:
                break
            data += chunk
    if not data.strip():
        stop_process(proc)
        raise RuntimeError("Xvfb did not report a display")
    return proc, ":" + data.decode().strip()


def x11vnc_start(display: str, port: int, extra: list[str], password_file: str | None = None) -> subprocess.Popen:
    cmd = ["x11vnc", "-display", display, "-rfbport", str(port), "-localhost", "-shared", "-forever", "-quiet",
           "-nocursor", "-nocursorshape", "-nocursorpos", "-noxrecord", "-noxdamage", "-wait", "5", "-defer", "5"]
    cmd += ["-rfbauth", password_file] if password_file else ["-nopw"]
    proc = subprocess.Popen(cmd + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "DISPLAY": display})
    wait_port(port, 15, proc)
    return proc


def xvnc_start(port: int, params: list[str], width: int = 320, height: int = 240) -> tuple[subprocess.Popen, str]:
    """TigerVNC's Xvnc: an X server with a built-in VNC server; it really exchanges the X selection, so it is the
    server the clipboard tests use (both as a leaking positive control and with the safe parameters)."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvnc", "-displayfd", str(write_fd), "-geometry", f"{width}x{height}", "-depth", "24", "-rfbport", str(port),
         "-localhost", "-SecurityTypes", "None", "-nolisten", "tcp", *params],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.readline()
    if not data.strip():
        stop_process(proc)
        raise RuntimeError("Xvnc did not report a display")
    wait_port(port, 15, proc)
    return proc, ":" + data.decode().strip()
