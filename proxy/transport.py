"""The two ends of a proxied session: the client's byte stream (TCP or the gateway's WebSocket) and the enclave's VNC
server, named as `HOST:PORT` or `unix:PATH`.

The session needs no more from either than a stream of bytes each way, so that every front end parses the same way.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from proxy.rfbframe import NEED_DATA, Framer
from safeshare.endpoints import parse_host_port

STREAM_LIMIT = 1 << 20
CHUNK = 256 * 1024  # reading and payload unit: keeps memory flat whatever a peer announces


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
        return await asyncio.open_connection(self.host, self.port, limit=STREAM_LIMIT)


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
