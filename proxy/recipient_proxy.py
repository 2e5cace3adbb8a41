"""The inspecting proxy of one recipient, for sites whose front door is websockify rather than the built-in gateway.

    browser (noVNC) --WebSocket--> websockify --(token plugin: safeshare.websockify)--> this proxy --RFB--> enclave VNC

websockify terminates the WebSocket after its token plugin has verified the token and named this proxy as the
target; this proxy then runs the same `ProxySession` as the gateway (every control, the recording, the signed and
chained seal, the sessions table: `proxy.front_door`), over the plain stream websockify opens.

The proxy cannot see which token websockify checked, so it serves the recipient's access rather than one token:

* a connection is accepted only while the recipient holds a usable token (also when something reaches the socket
  without websockify), and runs under the most recently used one (the plugin marks the token it accepts as used):
  its upstream and limits, its row in the sessions table;
* a live session is filed under every token of the recipient that was usable when it started, and ends within the
  poll interval when any of them is revoked or expires: a revocation always ends the sessions the revoked token may
  have opened (fail closed), at the price of also ending a session opened with another token of the same recipient;
* a new connection replaces the recipient's live session (the gateway replaces per token), after that session has
  released its keys towards the VNC server.

It listens on a Unix socket (mode `socket_mode`, group `socket_group`: the file permissions decide who may connect,
i.e. websockify's user) or a loopback port, and publishes the address for the plugin (`proxy.listen_address`). A
loopback port has no file permissions and any local user can connect to it, while the proxy cannot check a token
(websockify does not pass it on): so on a port it admits only connections whose socket belongs to one of
`peer_uids` (default: its own user, as the socket's default mode 600), which the kernel's socket table tells
(`proxy.peer_uid`), and refuses every other (issue 24, item 7: a plain RFB client on the port got a session).
"""
from __future__ import annotations

import asyncio
import grp
import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from proxy.db import Target, Token
from proxy.front_door import SessionKeeper, resolve_grant, wait_for_replaced, watch_tokens
from proxy.limits import SessionLimits
from proxy.listen_address import ListenAddress, publish, withdraw
from proxy.peer_uid import endpoint, tables_readable, tcp_peer_uid
from proxy.session import STREAM_LIMIT, ProxySession, TcpClient
from proxy.tokens import Grant, TokenStore

log = logging.getLogger("safeshare.proxy_for")

CLOSE_WAIT = 5.0


def usable_grants(store: TokenStore, recipient: str) -> list[Grant]:
    """The recipient's tokens that are neither revoked nor expired, as grants, the most recently used first."""
    columns = (Token.id.label("token_id"), Token.recipient, Target.name.label("target_name"), Target.upstream,
               Target.password_file, Token.release, Token.policy_file, Token.expires_at, Token.limits)
    stmt = (select(*columns).join(Target, Token.target_id == Target.id)
            .where(Token.recipient == recipient, Token.revoked_at.is_(None), Token.expires_at > store.clock())
            .order_by(Token.last_used_at.desc().nulls_last(), Token.id.desc()))
    with Session(store.engine) as db:
        return [Grant(**row._mapping) for row in db.execute(stmt)]


@dataclass(eq=False)
class Connection:
    """One live session and the tokens it is filed under (revoking any of them ends it)."""

    session: ProxySession
    grant: Grant
    token_ids: frozenset[int]
    started: float = field(default_factory=time.monotonic)

    def end(self, reason: str) -> None:
        self.session.terminate(reason)


def _peer(writer: asyncio.StreamWriter) -> str:
    """Who connected: for a Unix socket the process and user at the other end (websockify), else HOST:PORT."""
    peername = writer.get_extra_info("peername")
    if isinstance(peername, tuple):
        return f"{peername[0]}:{peername[1]}"
    sock = writer.get_extra_info("socket")
    try:
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except (OSError, AttributeError):
        return "unix"
    return f"unix pid={pid} uid={uid}"


class RecipientProxy:
    """`await proxy.start(listen)` returns the bound address; `await proxy.close()` ends every session."""

    def __init__(
        self,
        store: TokenStore,
        recipient: str,
        sessions_dir: Path,
        *,
        name: str,
        signing_key: Any = None,
        default_limits: SessionLimits | None = None,
        poll_interval: float = 0.5,
        fail_closed_after: float = 5.0,
        anchor_interval: float = 5.0,
        record: bool = True,
        listing: Path | None = None,
        socket_mode: int = 0o600,
        socket_group: str | None = None,
        peer_uids: Iterable[int] | None = None,
        on_session: Callable[[Connection], None] | None = None,
        on_session_end: Callable[[Connection, str], None] | None = None,
    ) -> None:
        self.store = store
        self.recipient = recipient
        self.sessions_dir = Path(sessions_dir)
        self.keeper = SessionKeeper(store, name, signing_key, anchor_interval)
        self.default_limits = default_limits or SessionLimits()
        self.poll_interval = poll_interval
        self.fail_closed_after = fail_closed_after
        self.record = record
        self.listing = listing
        self.socket_mode = socket_mode
        self.socket_group = socket_group
        self.peer_uids = frozenset(peer_uids) if peer_uids is not None else frozenset({os.getuid()})
        self.on_session = on_session
        self.on_session_end = on_session_end
        self.address: ListenAddress | None = None
        self.connections: set[Connection] = set()
        self.live: dict[int, set[Connection]] = {}  # token id -> the sessions filed under it (for watch_tokens)
        self.refused = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # --- listening -------------------------------------------------------------------------------------------------

    async def start(self, listen: str | ListenAddress) -> ListenAddress:
        address = listen if isinstance(listen, ListenAddress) else ListenAddress.parse(listen)
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        await self.keeper.recover()
        if address.unix_path is not None:
            self._server = await self._listen_unix(address.unix_path)
        else:
            if not tables_readable():
                raise OSError("this system does not tell who connects to a TCP port (no /proc/net/tcp), so the "
                              "proxy cannot admit only websockify's user there: listen on a Unix socket")
            self._server = await asyncio.start_server(self._handle, address.host, address.port, limit=STREAM_LIMIT)
            address = ListenAddress(host=address.host, port=self._server.sockets[0].getsockname()[1])
        self.address = address
        self._tasks = [
            asyncio.create_task(watch_tokens(self.store, self.live, self.poll_interval, self.fail_closed_after),
                                name="proxy-for-token-watch"),
            asyncio.create_task(self.keeper.anchor_loop(lambda: [c.session for c in self.connections]),
                                name="proxy-for-anchors"),
        ]
        if self.listing is not None:
            publish(self.listing, self.recipient, address)
        return address

    async def _listen_unix(self, path: Path) -> asyncio.base_events.Server:
        """Bind with a umask that leaves the socket no wider than `socket_mode` from its first moment, then set
        its group and mode. A leftover socket nobody answers on is replaced; anything else at the path is an
        error (another proxy, or a file that is not ours to delete)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_socket():
            try:
                _, writer = await asyncio.open_unix_connection(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)
            else:
                writer.close()
                raise OSError(f"another process listens on {path}")
        elif path.exists():
            raise OSError(f"{path} exists and is not a socket")
        old_umask = os.umask(0o777 & ~self.socket_mode)
        try:
            server = await asyncio.start_unix_server(self._handle, path=str(path), limit=STREAM_LIMIT)
        finally:
            os.umask(old_umask)
        if self.socket_group is not None:
            os.chown(path, -1, grp.getgrnam(self.socket_group).gr_gid)
        os.chmod(path, self.socket_mode)
        return server

    async def close(self) -> None:
        if self.listing is not None and self.address is not None:
            withdraw(self.listing, self.address)
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for connection in list(self.connections):
            connection.end("proxy shutting down")
        deadline = time.monotonic() + CLOSE_WAIT
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.address is not None and self.address.unix_path is not None:
            self.address.unix_path.unlink(missing_ok=True)

    # --- one connection --------------------------------------------------------------------------------------------

    async def _admitted(self, writer: asyncio.StreamWriter) -> tuple[bool, str]:
        """On a TCP port, whether the connecting socket belongs to one of `peer_uids` (and its uid, for the log and
        meta.json); a Unix socket's file mode has already decided."""
        if self.address is None or self.address.unix_path is not None:
            return True, ""
        try:
            ours, theirs = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
            uid = await asyncio.to_thread(tcp_peer_uid, endpoint(*ours[:2]), endpoint(*theirs[:2]))
        except (OSError, TypeError, ValueError):
            uid = None
        return uid is not None and uid in self.peer_uids, f" uid={uid if uid is not None else 'unknown'}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = TcpClient(reader, writer)
        peer = _peer(writer)
        admitted, who = await self._admitted(writer)
        peer += who
        if not admitted:  # fail closed: no session, nothing written, no database read
            self.refused += 1
            log.warning("connection from %s refused: on a TCP port only the users %s may connect (websockify's)",
                        peer, ", ".join(str(uid) for uid in sorted(self.peer_uids)))
            await client.close()
            return
        try:
            grants = await asyncio.to_thread(usable_grants, self.store, self.recipient)
            if not grants:
                raise PermissionError(f"{self.recipient} holds no usable token")
            grant = grants[0]
            upstream, limits, release = await asyncio.to_thread(resolve_grant, grant, self.default_limits)
        except Exception as exc:  # fail closed: no session, and nothing written to the sessions folder
            self.refused += 1
            log.warning("connection from %s refused: %s", peer, exc)
            await client.close()
            return
        session = ProxySession(
            client, upstream, limits, self.sessions_dir, peer=peer, recipient=self.recipient, release=release,
            record=self.record, sealer=self.keeper.sealer,
            extra_meta={"via": "websockify", "listen": str(self.address), "token_id": grant.token_id,
                        "tokens": sorted(g.token_id for g in grants), "target": grant.target_name,
                        "token_expires": grant.expires_at.isoformat()},
        )
        if not session.claim_handshake_slot():
            self.refused += 1
            log.warning("connection from %s refused: too many pending handshakes", peer)
            await client.close()
            return
        connection = Connection(session, grant, frozenset(g.token_id for g in grants))
        replaced = list(self.connections)
        for older in replaced:
            older.end("replaced by a new connection of the same recipient")
        self._file(connection)
        reason = "closed"
        try:
            if replaced:  # let them release their keys towards the server before this session starts
                await wait_for_replaced((older.session for older in replaced), session.session_id)
            if self.on_session is not None:
                self.on_session(connection)
            log.info("session %s: recipient %s, token %d, target %s, from %s", session.session_id, self.recipient,
                     grant.token_id, grant.target_name, peer)
            await self.keeper.opened(session, grant, release)
            reason = await session.run()
        finally:
            session.release_handshake_slot()  # if it never ran
            self._unfile(connection)
            await self.keeper.closed(session, reason)
            if not session.dir.exists():  # cancelled before the session began: only the connection to close
                await client.close()
        log.info("session %s ended: %s", session.session_id, reason)
        if self.on_session_end is not None:
            self.on_session_end(connection, reason)

    def _file(self, connection: Connection) -> None:
        self.connections.add(connection)
        for token_id in connection.token_ids:
            self.live.setdefault(token_id, set()).add(connection)

    def _unfile(self, connection: Connection) -> None:
        self.connections.discard(connection)
        for token_id in connection.token_ids:
            group = self.live.get(token_id)
            if group is not None:
                group.discard(connection)
                if not group:
                    del self.live[token_id]
