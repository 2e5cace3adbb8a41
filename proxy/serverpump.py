"""Server to client: every server message framed (`proxy.rfbframe`), forwarded byte for byte and recorded.

Updates are gathered into one write of up to CHUNK bytes (headers, small rectangles); a payload that would not fit
goes out piece by piece, so memory stays flat whatever the rectangle size. The recording gets exactly these writes,
with the pixel format announced before the first update that uses a new one, and is flushed after every message.
Server cut text is dropped.
"""
from __future__ import annotations

import asyncio

from proxy.cuttext import CutTextDrop
from proxy.eventlog import EventLog
from proxy.recording import Recorder
from proxy.rfb import PixelFormat
from proxy.rfbframe import (
    Bell, CutText, Data, FramebufferUpdate, MessageEnd, Rectangle, ServerFramer, SetColourMapEntries,
)
from proxy.transport import CHUNK, ClientTransport, framed


class ServerPump:
    """`await pump.run()` until the server closes (returns the end reason) or breaks the protocol (raises)."""

    def __init__(self, reader: asyncio.StreamReader, framer: ServerFramer, client: ClientTransport, log: EventLog,
                 counters: dict[str, int], recorder: Recorder | None, recorded: PixelFormat) -> None:
        assert framer.chunk == CHUNK
        self.reader = reader
        self.framer = framer
        self.client = client
        self.counters = counters
        self.recorder = recorder
        self._recorded = recorded  # the pixel format the recording has last announced
        self._cut_text = CutTextDrop(log, "server_to_client", counters)
        self._out = bytearray()  # what goes to the client in one write
        self._streaming = False  # the current rectangle's payload goes out piece by piece
        self._remaining = 0  # of the current rectangle's payload

    async def run(self) -> str:
        async for event in framed(self.reader, self.framer):
            await self._message(event)
        return "server closed"

    async def _send(self, data: bytes | bytearray | memoryview) -> None:
        self.client.write(data)
        if self.recorder is not None:
            self.recorder.server(data)
        self.counters["server_bytes"] += len(data)
        await self.client.drain()
        if self.recorder is not None and self.recorder.backlog > self.recorder.max_backlog:
            await self.recorder.wait_ready()

    async def _flush_out(self) -> None:
        if self._out:
            await self._send(self._out)
            self._out.clear()

    async def _rectangle_done(self) -> None:
        """After each rectangle, what it and those before it gathered goes out once it reaches CHUNK."""
        self._streaming = False
        if len(self._out) >= CHUNK:
            await self._flush_out()

    async def _message(self, event: object) -> None:
        out = self._out
        if isinstance(event, FramebufferUpdate):
            if self.recorder is not None and event.pixel_format != self._recorded:
                self.recorder.pixel_format(event.pixel_format.as_dict())
                self._recorded = event.pixel_format
            self.counters["updates"] += 1
            out += event.raw
        elif isinstance(event, Rectangle):
            out += event.raw
            self._remaining = event.data_size or 0
            if event.data_size is not None and event.data_size + len(out) > CHUNK:
                await self._flush_out()
                self._streaming = True
            if not self._remaining:
                await self._rectangle_done()
        elif isinstance(event, Data):
            if self._cut_text.active:
                self._cut_text.piece(event.data)
                return
            if self._streaming:
                await self._send(event.data)
            else:
                out += event.data
            self._remaining -= len(event.data)
            if not self._remaining:
                await self._rectangle_done()
        elif isinstance(event, CutText):
            self._cut_text.start(event)
        elif isinstance(event, (SetColourMapEntries, Bell)):
            await self._send(event.raw)
        elif isinstance(event, MessageEnd):
            if self._cut_text.active:
                self._cut_text.end()
            await self._flush_out()
            if self.recorder is not None:
                self.recorder.flush()
