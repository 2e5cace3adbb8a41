"""The bare RFB proxy: a TCP listener that runs one `ProxySession` per connection.

Used by operators and tests (`safeshare proxy`) and as the reference for the gateway, which runs the same session
over a WebSocket. Every connection gets all controls; there is no switch to turn one off.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from proxy.capture import CaptureConfig
from proxy.limits import SessionLimits
from proxy.session import ProxySession
from proxy.transport import STREAM_LIMIT, TcpClient, UpstreamTarget

log = logging.getLogger("safeshare.proxy")


class RfbProxyServer:
    """Owns the listening socket and the live sessions, so that shutdown ends every session cleanly."""

    def __init__(
        self,
        upstream: UpstreamTarget,
        sessions_dir: Path,
        limits: SessionLimits,
        *,
        recipient: str | None = None,
        release: str | None = None,
        on_session: Callable[[ProxySession], None] | None = None,
        on_session_end: Callable[[ProxySession, str], None] | None = None,
        record: bool = True,
        capture: CaptureConfig | None = None,
    ) -> None:
        self.upstream = upstream
        self.sessions_dir = Path(sessions_dir)
        self.limits = limits
        self.recipient = recipient
        self.release = release
        self.on_session = on_session
        self.on_session_end = on_session_end
        self.record = record
        self.capture = capture
        self.sessions: set[ProxySession] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        self._server = await asyncio.start_server(self._handle, host, port, limit=STREAM_LIMIT)
        return self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        session = ProxySession(TcpClient(reader, writer), self.upstream, self.limits, self.sessions_dir, peer=peer,
                               recipient=self.recipient, release=self.release, record=self.record,
                               capture=self.capture)
        if not session.claim_handshake_slot():
            # A flood of half-open connections: refused before a session folder exists, so it writes nothing.
            log.warning("connection from %s refused: too many pending handshakes", peer)
            await session.client.close()
            return
        self.sessions.add(session)
        if self.on_session is not None:
            self.on_session(session)
        try:
            reason = await session.run()
        finally:
            self.sessions.discard(session)
        if self.on_session_end is not None:
            self.on_session_end(session, reason)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions):
            session.terminate("proxy shutting down")
        while self.sessions:
            await asyncio.sleep(0.01)
        if self._server is not None:
            await self._server.wait_closed()

    async def serve_forever(self) -> None:
        assert self._server is not None
        try:
            await self._server.serve_forever()
        finally:
            await self.close()
