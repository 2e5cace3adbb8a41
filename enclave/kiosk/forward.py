"""The one door out of the kiosk's network namespace: a TCP relay to the analytics app.

The listening socket lives inside the namespace (made by `NetworkNamespace.listen`), the outgoing connection is made
from the kiosk process in the host namespace, and the target is fixed at start: whatever the page asks for, bytes
only ever go to the app's host and port. The relay does not parse HTTP; the app is what decides what to answer.
"""
from __future__ import annotations

import asyncio
import logging
import socket

log = logging.getLogger("safeshare.kiosk")

BUFFER = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(BUFFER):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            pass


class PortForward:
    """Relay every connection accepted on `listener` to `target_host:target_port`."""

    def __init__(self, listeners: list[socket.socket], target_host: str, target_port: int) -> None:
        self.listeners = listeners
        self.target = (target_host, target_port)
        self.connections = 0
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        for sock in self.listeners:
            self._servers.append(await asyncio.start_server(self._handle, sock=sock))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.connections += 1
        try:
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 10)
            except (OSError, asyncio.TimeoutError) as exc:
                log.warning("app at %s:%s unreachable for the kiosk: %s", *self.target, exc)
                return
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
