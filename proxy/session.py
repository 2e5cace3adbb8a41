"""One inspected RFB session: terminate both handshakes, frame every message, filter, log and record.

The proxy sits between a client (plain TCP for `safeshare proxy`, a WebSocket behind the gateway) and the VNC server
of one enclave. It speaks RFB 3.8 with security type None towards the client (the gateway has authenticated the
token before) and None or VNC authentication towards the server, never passing a security type through
(`proxy.handshake`). Both streams are framed by `proxy.rfbframe`, so message boundaries do not depend on packet or
frame boundaries; `proxy.clientpump` filters and forwards the client's messages, `proxy.serverpump` the server's.

Fail closed: anything unexpected (unknown message type, disallowed or oversized message, truncated stream, an
exception anywhere) ends the session, and the reason is logged before the log is sealed.

Order of a session: the client's part of the handshake first (at most MAX_PENDING_HANDSHAKES clients of a process may
be at it; a half-open client holds no upstream connection), then the upstream's (authenticated), then every key and
button is released towards the server (`input_reset`; the VNC server keeps keys pressed when its client leaves, and
the filter must not start out believing nothing is held), then ServerInit to the client and the two pumps. When the
session ends, everything is released again. Idle and maximum session times are watched here.

API for front ends (stable):
- `await run_session(reader, writer, upstream, limits, sessions_dir, recipient=None, ...) -> Path`: one session over
  a client stream pair; returns the sealed session folder (its `meta.json` has `end_reason`).
- `ProxySession(client, upstream, limits, sessions_dir, *, peer, recipient, release, extra_meta, record, capture)`
  over any `ClientTransport` (the gateway's WebSocket adapter): `await session.run()` returns the end reason;
  `session.terminate(reason)` ends it from outside; `session.session_id` and `session.dir` name its folder. Front
  ends keep their own sessions (the gateway by token, to end them on revocation; `proxy.server` to end them on
  shutdown).
- `UpstreamTarget.parse("HOST:PORT" | "unix:PATH", password)` (`proxy.transport`) names the enclave's VNC server.
"""
from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.capture import CAPTURE_FILE, CaptureConfig, CaptureError, NetworkCapture
from proxy.clientpump import ClientPump
from proxy.eventlog import EventLog
from proxy.handshake import client_handshake, upstream_handshake
from proxy.limits import InputFilter, SessionLimits
from proxy.recording import Recorder, RecordingError
from proxy.recovery import seal_interrupted  # re-exported: the front ends recover sessions through this module
from proxy.rfb import ProtocolError
from proxy.rfbframe import ServerFramer
from proxy.serverpump import ServerPump
from proxy.sessiondir import EVENTS, SCREEN, write_meta
from proxy.transport import CHUNK, STREAM_LIMIT, ClientTransport, TcpClient, UpstreamTarget

HANDSHAKE_TIMEOUT = 15.0
CLIENT_HANDSHAKE_TIMEOUT = 10.0  # the client's part (version, security, ClientInit), before the upstream is opened
# Sessions of this process whose client has not completed its part of the handshake. Each holds no upstream
# connection yet (the proxy authenticates to the VNC server only after the client's part), but a flood of half-open
# clients must still be bounded: beyond this many the front ends refuse new connections.
MAX_PENDING_HANDSHAKES = 32
_pending_handshakes = 0


def pending_handshakes() -> int:
    """How many sessions of this process are waiting for their client's handshake."""
    return _pending_handshakes


def new_session_id() -> str:
    """Sortable by start time, unguessable enough to not collide across proxies."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(4)


class ProxySession:
    """Run with `await session.run()`; `terminate(reason)` ends it from outside (revocation, shutdown)."""

    def __init__(
        self,
        client: ClientTransport,
        upstream: UpstreamTarget,
        limits: SessionLimits,
        sessions_dir: Path,
        *,
        peer: str = "",
        recipient: str | None = None,
        release: str | None = None,
        extra_meta: dict[str, Any] | None = None,
        record: bool = True,
        capture: CaptureConfig | None = None,
        sealer: Any = None,
    ) -> None:
        self.client = client
        self.sealer = sealer  # proxy.anchors.Sealer: signs and chains the seal (the gateway's); None: unsigned
        self.upstream = upstream
        self.limits = limits
        self.session_id = new_session_id()
        self.dir = Path(sessions_dir) / self.session_id
        self.peer = peer
        self.recipient = recipient
        self.release = release
        self.extra_meta = dict(extra_meta or {})
        self.record = record
        self.capture_config = capture
        self.capture: NetworkCapture | None = None
        self._capture_summary: dict[str, Any] | None = None
        self.filter = InputFilter(limits)
        self.end_reason: str | None = None
        self.log: EventLog | None = None
        self.recorder: Recorder | None = None
        self._stop = asyncio.Event()
        self._up_reader: asyncio.StreamReader | None = None
        self._up_writer: asyncio.StreamWriter | None = None
        self._start_wall = time.time()
        self._start = time.monotonic()
        self._client_pump: ClientPump | None = None  # once the upstream is authenticated
        self._server_pump: ServerPump | None = None  # once the client has its ServerInit
        self.counters = {"keys_forwarded": 0, "keys_dropped": 0, "keys_blocked": 0, "keys_refused": 0,
                         "pointer_forwarded": 0, "pointer_coalesced": 0, "clicks_dropped": 0, "clicks_blocked": 0,
                         "cut_text_dropped": 0, "server_bytes": 0, "updates": 0}
        self._slot = False  # holds one of the MAX_PENDING_HANDSHAKES slots
        self._closed = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def claim_handshake_slot(self) -> bool:
        """Take one of the process's MAX_PENDING_HANDSHAKES slots, held until the client completes its part of the
        handshake or the session ends. False when all are taken: the front end refuses the connection (before any
        session folder exists, so a flood of half-open clients writes nothing). Synchronous, so that the check and the
        claim cannot interleave with another connection's."""
        global _pending_handshakes
        if self._slot:
            return True
        if _pending_handshakes >= MAX_PENDING_HANDSHAKES:
            return False
        _pending_handshakes += 1
        self._slot = True
        return True

    def release_handshake_slot(self) -> None:
        global _pending_handshakes
        if self._slot:
            self._slot = False
            _pending_handshakes -= 1

    async def wait_closed(self) -> None:
        """Until `run` has returned (the log sealed, every key released towards the server)."""
        await self._closed.wait()

    def terminate(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason
        self._stop.set()

    def _meta(self) -> dict[str, Any]:
        return {
            "session": self.session_id, "recipient": self.recipient, "release": self.release,
            "peer": self.peer, "upstream": self.upstream.describe(),
            "start": datetime.fromtimestamp(self._start_wall, timezone.utc).isoformat(),
            "end": None, "limits": self.limits.model_dump(), "recording": SCREEN if self.record else None,
            "capture": self._capture_summary or (self.capture_config.as_dict() if self.capture_config else None),
            **self.extra_meta,
        }

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=False)
        write_meta(self.dir, self._meta())
        self.log = EventLog(self.dir / EVENTS)
        if self.sealer is not None and getattr(self.sealer, "keys", None) is not None:
            # signed checkpoints while the session runs: what a gateway recovering this log after a crash can vouch for
            self.log.sign_checkpoints(self.sealer.key, self.session_id, extra=self._checkpoint_fields)
        if self.record:
            self.recorder = Recorder(self.dir / SCREEN, start=self._start)

    async def run(self) -> str:
        """Serve the session until either side closes, a limit ends it, or `terminate` is called.

        A session that cannot claim a pending-handshake slot (see `claim_handshake_slot`) ends at once with the
        reason "refused: too many pending handshakes" and leaves no folder."""
        if not self.claim_handshake_slot():
            self._set_reason("refused: too many pending handshakes")
            self._closed.set()
            await self.client.close()
            return self.end_reason or "refused"
        try:
            return await self._run()
        finally:
            self.release_handshake_slot()
            self._closed.set()

    async def _run(self) -> str:
        self._prepare()
        assert self.log is not None
        # `meta`: meta.json as written now, in the chain (and under the first checkpoint), so that a recovered seal
        # can vouch for the session's start, limits and front door from the log rather than from the folder
        self.log.write("connect", peer=self.peer, upstream=self.upstream.describe(), recipient=self.recipient,
                       release=self.release, meta=self._meta())
        tasks: list[asyncio.Task[Any]] = []
        try:
            if self.capture_config is not None:
                self.capture = NetworkCapture(self.capture_config, self.dir / CAPTURE_FILE)
                await self.capture.start()
                self.log.write("capture_started", **self.capture_config.as_dict())
            stop = asyncio.create_task(self._stop.wait(), name="stop")
            handshake = asyncio.create_task(asyncio.wait_for(self._handshakes(), HANDSHAKE_TIMEOUT),
                                            name="handshake")
            tasks = [stop, handshake]
            await self._first_done(tasks)
            if stop.done():
                return self.end_reason or "terminated"
            assert self._client_pump is not None and self._server_pump is not None
            tasks = [
                stop,
                asyncio.create_task(self._client_pump.run(), name="client_pump"),
                asyncio.create_task(self._server_pump.run(), name="server_pump"),
                asyncio.create_task(self._watchdog(), name="watchdog"),
            ]
            if self.capture is not None:
                tasks.append(asyncio.create_task(self._capture_watch(), name="capture_watch"))
            await self._first_done(tasks)
        except RecordingError as exc:
            self._set_reason(f"recording failed: {exc}")
            self.log.write("error", reason=self.end_reason)
        except CaptureError as exc:
            self._set_reason(f"network capture failed: {exc}")
            self.log.write("error", reason=self.end_reason)
        except ProtocolError as exc:
            self._set_reason(f"protocol error: {exc}")
            self.log.write("protocol_error", reason=str(exc))
        except asyncio.IncompleteReadError:  # only the handshakes read without translating a short read
            self._set_reason("connection closed during the handshake")
            self.log.write("protocol_error", reason="connection closed during the handshake")
        except asyncio.TimeoutError as exc:
            if exc.errno is not None:  # the kernel's ETIMEDOUT (a peer that vanished) is a TimeoutError too
                self._set_reason(f"connection error: {exc.__class__.__name__}: {exc}")
            else:
                self._set_reason("handshake timeout")
                self.log.write("protocol_error", reason="handshake timeout")
        except (ConnectionError, OSError) as exc:
            self._set_reason(f"connection error: {exc.__class__.__name__}: {exc}")
        except asyncio.CancelledError:
            self._set_reason("cancelled")
            raise
        except Exception as exc:  # fail closed on anything we did not foresee
            self._set_reason(f"internal error: {exc.__class__.__name__}: {exc}")
            self.log.write("error", reason=self.end_reason)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                try:
                    await task
                except BaseException:
                    pass
            await self._close_all()
        return self.end_reason or "closed"

    async def _first_done(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Wait for the first task to finish and re-raise its exception, if any; a task that ends the session
        normally (a peer closed at a message boundary, a time limit) returns the reason."""
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
            if not task.cancelled() and isinstance(task.result(), str):
                self._set_reason(task.result())
                return

    def _set_reason(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason

    def _checkpoint_fields(self) -> dict[str, Any]:
        """What a checkpoint says about the recording: the size and SHA-256 of its start on disk."""
        return {"recording": self.recorder.flushed()} if self.recorder is not None else {}

    def _recording_seal(self) -> dict[str, Any]:
        """What the seal line says about the screen recording: its file's SHA-256 and size."""
        if self.recorder is None or self.recorder.sha256 is None:
            return {}
        return {"recording": {"file": SCREEN, "sha256": self.recorder.sha256,
                              "bytes": self.recorder.file_bytes}}

    async def _close_all(self) -> None:
        if self._client_pump is not None:
            self._client_pump.cancel_motion_timer()
            await self._client_pump.reset_input("end")
        if self._up_writer is not None:
            self._up_writer.close()
            try:
                await asyncio.wait_for(self._up_writer.wait_closed(), 2)
            except (OSError, asyncio.TimeoutError):
                pass
        try:
            await self.client.close()
        except Exception:
            pass
        reason = self.end_reason or "closed"
        if self.recorder is not None:
            try:
                await asyncio.to_thread(self.recorder.close, reason)  # writes the backlog; other sessions go on
            except RecordingError as exc:  # the log still gets its seal, and says so
                if self.log is not None and not self.log.closed:
                    self.log.write("error", reason=f"recording failed: {exc}")
        if self.capture is not None:
            try:
                self._capture_summary = await self.capture.stop()
            except Exception as exc:  # the seal must still be written
                self._capture_summary = {**self.capture.config.as_dict(), "error": str(exc)}
            if self.log is not None and not self.log.closed:
                self.log.write("capture_stopped", **self._capture_summary)
        meta = self._meta()
        meta["end"] = datetime.now(timezone.utc).isoformat()
        meta["end_reason"] = reason
        meta["counters"] = dict(self.counters)
        meta.update(self._recording_seal())
        if self.log is not None and not self.log.closed:
            self.log.write("disconnect", reason=reason, duration=round(time.monotonic() - self._start, 3),
                           **self.counters)
            # `meta`: meta.json's fields but log_head (the seal's own hash), signed with the seal, so that an edited
            # start, end, reason, front door, counters or limits is found and `audit sessions` reads the sealed ones
            fields: dict[str, Any] = {"session": self.session_id, **self._recording_seal(), "meta": meta}
            if self.sealer is not None:
                fields.update(self.sealer.fields())
            head = self.log.close(self.sealer.key() if self.sealer is not None else None, **fields)
            if self.sealer is not None:
                self.sealer.sealed(self.session_id, head)
        else:
            head = None
        write_meta(self.dir, {**meta, "log_head": head})

    # --- handshakes ------------------------------------------------------------------------------------------------

    async def _handshakes(self) -> None:
        """The client's part first: the upstream connection is opened and authenticated only for a client that has
        completed it, so half-open clients hold no VNC connection. Then every key and button is released towards
        the server before the client gets ServerInit (and with it the chance to send input)."""
        assert self.log is not None
        version = await asyncio.wait_for(client_handshake(self.client), CLIENT_HANDSHAKE_TIMEOUT)
        self.release_handshake_slot()
        self._up_reader, self._up_writer = await self.upstream.open()
        init = await upstream_handshake(self.upstream, self._up_reader, self._up_writer)
        self.log.write("upstream_ready", protocol="%d.%d" % init.version, security=init.security, width=init.width,
                       height=init.height, name=init.name.decode("utf-8", "replace"))
        server = ServerFramer(init.pixel_format, init.width, init.height, chunk=CHUNK)
        self._client_pump = ClientPump(self.client.reader, self._up_writer, self.log, self.filter, self.counters,
                                       server, self.recorder, self._stop, self.terminate, self._start)
        await self._client_pump.reset_input("start")
        self.client.write(init.pack())  # ServerInit towards the client, with the upstream's size, format and name
        await self.client.drain()
        if self.recorder is not None:
            self.recorder.init(init.width, init.height, init.pixel_format.as_dict(),
                               init.name.decode("utf-8", "replace"), "3.8")
        self._server_pump = ServerPump(self._up_reader, server, self.client, self.log, self.counters, self.recorder,
                                       init.pixel_format)
        self.log.write("client_ready", protocol="%d.%d" % version)

    # --- limits ----------------------------------------------------------------------------------------------------

    async def _capture_watch(self) -> str:
        assert self.capture is not None
        await self.capture.wait_stopped()
        return "network capture stopped"

    async def _watchdog(self) -> str:
        """Idle and maximum session time, checked a few times a second."""
        assert self.log is not None and self._client_pump is not None
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            if self.log.checkpoint_due(now):
                self.log.checkpoint()
            if now - self._start >= self.limits.max_session_seconds:
                self.log.write("limit_hit", limit="max_session_seconds", value=self.limits.max_session_seconds)
                return "maximum session time reached"
            if now - self._client_pump.last_input >= self.limits.idle_seconds:
                self.log.write("limit_hit", limit="idle_seconds", value=self.limits.idle_seconds)
                return "idle timeout"


async def run_session(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream: UpstreamTarget,
    limits: SessionLimits,
    sessions_dir: Path,
    recipient: str | None = None,
    *,
    release: str | None = None,
    peer: str | None = None,
    extra_meta: dict[str, Any] | None = None,
    record: bool = True,
    capture: CaptureConfig | None = None,
    on_start: Any = None,
) -> Path:
    """Run one proxied session over a client stream pair (RFB 3.8, security None towards the client) and return its
    folder once it has ended and been sealed; `meta.json` there holds `end_reason`.

    `on_start(session)` is called with the `ProxySession` before the handshakes, e.g. to keep it for `terminate`.
    Front ends with a transport other than a stream pair build a `ProxySession` over their own `ClientTransport`.
    """
    if peer is None:
        peername = client_writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername or "")
    session = ProxySession(TcpClient(client_reader, client_writer), upstream, limits, sessions_dir, peer=peer,
                           recipient=recipient, release=release, extra_meta=extra_meta, record=record,
                           capture=capture)
    if on_start is not None:
        on_start(session)
    await session.run()
    return session.dir


__all__ = ["MAX_PENDING_HANDSHAKES", "STREAM_LIMIT", "ClientTransport", "ProxySession", "TcpClient",
           "UpstreamTarget", "pending_handshakes", "run_session", "seal_interrupted"]
