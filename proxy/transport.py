"""The two ends of a proxied session: the client's byte stream (TCP or the gateway's WebSocket) and the enclave's VNC
server, named as `HOST:PORT` or `unix:PATH`.

The session needs no more from either than a stream of bytes each way, so that every front end parses the same way.
"""
from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from proxy.rfbframe import NEED_DATA, Framer
from safeshare.endpoints import parse_host_port

STREAM_LIMIT = 1 << 20
CHUNK = 256 * 1024  # reading and payload unit: keeps memory flat whatever a peer announces
# A VNC server on a host that dies (power, kernel, a Swarm node lost) sends no FIN or RST: without these the session
# would hang on a frozen screen until the researcher leaves. Keepalive probes after 5 s of silence, 1 s apart, 3 lost
# ones end the connection (about 8 s); unacknowledged data for 8 s does too. A live VNC server acknowledges at
# kernel level, so a slow kiosk is never cut off by them.
UPSTREAM_KEEPALIVE = (5, 1, 3)  # TCP_KEEPIDLE, TCP_KEEPINTVL (seconds), TCP_KEEPCNT
UPSTREAM_USER_TIMEOUT_MS = 8000


class ClientTransport(Protocol):
    """What the session needs from the client side: a byte stream in, writes out."""

    reader: asyncio.StreamReader

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    async def drain(self) -> None: ...

    async def close(self) -> None: ...


class TcpClient:
    """ClientTransport over an asyncio TCP stream pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self._writer = writer

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._writer.write(data)

    async def drain(self) -> None:
        await self._writer.drain()

    async def close(self) -> None:
        self._writer.close()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 2)
        except (OSError, asyncio.TimeoutError):
            pass


@dataclass(frozen=True)
class UpstreamTarget:
    """Where the enclave's VNC server listens: `host:port` or a Unix socket path, and its password if any."""

    host: str | None = None
    port: int | None = None
    unix_path: str | None = None
    password: bytes | None = None

    @classmethod
    def parse(cls, text: str, password: bytes | None = None) -> "UpstreamTarget":
        if text.startswith("unix:"):
            return cls(unix_path=text[5:], password=password)
        try:
            host, port = parse_host_port(text, default_host=None, allow_port_zero=False)
        except ValueError:
            raise ValueError(f"upstream must be HOST:PORT or unix:PATH, got {text!r}") from None
        return cls(host=host, port=port, password=password)

    def describe(self) -> str:
        return f"unix:{self.unix_path}" if self.unix_path else f"{self.host}:{self.port}"

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix_path:
            return await asyncio.open_unix_connection(self.unix_path, limit=STREAM_LIMIT)
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=STREAM_LIMIT)
        detect_lost_peer(writer.get_extra_info("socket"))
        return reader, writer


def detect_lost_peer(sock: socket.socket | None) -> None:
    """Let the kernel end a TCP connection whose peer vanished (UPSTREAM_KEEPALIVE, UPSTREAM_USER_TIMEOUT_MS); the
    session then ends as for any connection error, and is sealed."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    idle, interval, count = UPSTREAM_KEEPALIVE
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, UPSTREAM_USER_TIMEOUT_MS)


async def framed(reader: asyncio.StreamReader, framer: Framer) -> AsyncIterator[object]:
    """The framer's events for a byte stream, as its bytes arrive. Ends when the peer closes at a message boundary;
    a stream that ends inside a message raises ProtocolError (truncated)."""
    while True:
        data = await reader.read(CHUNK)
        if not data:
            framer.eof()
            return
        framer.feed(data)
        while (event := framer.next_event()) is not NEED_DATA:
            yield event
