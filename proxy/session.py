"""One inspected RFB session: terminate both handshakes, frame every message, filter, log and record.

The proxy sits between a client (plain TCP for `safeshare proxy`, a WebSocket behind the gateway) and the VNC server
of one enclave. It speaks RFB 3.8 with security type None towards the client (the gateway has authenticated the
token before) and None or VNC authentication towards the server, never passing a security type through. Both streams
are parsed as byte streams with `readexactly`, so message boundaries do not depend on packet or frame boundaries.

Fail closed: anything unexpected (unknown message type, disallowed or oversized message, truncated stream, an
exception anywhere) ends the session, and the reason is logged before the log is sealed.

Order of a session: the client's part of the handshake first (at most MAX_PENDING_HANDSHAKES clients of a process may
be at it; a half-open client holds no upstream connection), then the upstream's (authenticated), then every key and
button is released towards the server (`input_reset`; the VNC server keeps keys pressed when its client leaves, and
the filter must not start out believing nothing is held), then ServerInit to the client and the two pumps. When the
session ends, everything is released again. Key events pass the keysym allowlist (`proxy.keysyms`), the shortcut
filter and the rate limit; pointer presses with a blocked modifier held are dropped. A cut text is logged as soon as
its header is in (`cut_text_dropped`, announced length), its payload read and discarded afterwards
(`cut_text_discarded`, length and SHA-256).

API for front ends (stable):
- `await run_session(reader, writer, upstream, limits, sessions_dir, recipient=None, ...) -> Path`: one session over
  a client stream pair; returns the sealed session folder (its `meta.json` has `end_reason`).
- `ProxySession(client, upstream, limits, sessions_dir, *, peer, recipient, release, extra_meta, record, capture)`
  over any `ClientTransport` (the gateway's WebSocket adapter): `await session.run()` returns the end reason;
  `session.terminate(reason)` ends it from outside; `session.session_id` and `session.dir` name its folder.
- `terminate_recipient(recipient, reason)` ends every live session of a recipient in this process (revocation);
  `live_sessions(recipient=None)` lists them.
- `UpstreamTarget.parse("HOST:PORT" | "unix:PATH", password)` names the enclave's VNC server.

One pixel-format rule goes beyond RFC 6143: once the client has requested updates, a SetPixelFormat that changes the
pixel size ends the session, because updates already in flight use the old size and nothing in the protocol says
where the server switched; losing the framing would lose the cut-text filter. noVNC sets the format once, before
its first request; a viewer that lowers its colour depth later (TigerVNC's AutoSelect on a slow link) ends its
session. Changes that keep the pixel size (shifts, byte order) are allowed at any time.
"""
from __future__ import annotations

import asyncio
import hashlib
import secrets
import struct
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from proxy import rfb
from proxy.capture import CAPTURE_FILE, CaptureConfig, CaptureError, NetworkCapture
from proxy.eventlog import EventLog
from proxy.keysyms import RELEASE_KEYSYMS
from proxy.limits import BLOCKED, COALESCED, DROPPED, FORWARD, REFUSED, InputFilter, SessionLimits
from proxy.recording import Recorder, RecordingError
from proxy.rfb import PixelFormat, ProtocolError
from proxy.sessiondir import EVENTS, SCREEN, read_meta, write_meta
from safeshare.endpoints import parse_host_port

HANDSHAKE_TIMEOUT = 15.0
CLIENT_HANDSHAKE_TIMEOUT = 10.0  # the client's part (version, security, ClientInit), before the upstream is opened
# Sessions of this process whose client has not completed its part of the handshake. Each holds no upstream
# connection yet (the proxy authenticates to the VNC server only after the client's part), but a flood of half-open
# clients must still be bounded: beyond this many the front ends refuse new connections.
MAX_PENDING_HANDSHAKES = 32
RESET_DRAIN_TIMEOUT = 2.0
_pending_handshakes = 0
_RELEASE_SET = frozenset(RELEASE_KEYSYMS)


def pending_handshakes() -> int:
    """How many sessions of this process are waiting for their client's handshake."""
    return _pending_handshakes
CHUNK = 256 * 1024  # forwarding unit for large rectangles; keeps memory flat whatever the rectangle size
STREAM_LIMIT = 1 << 20


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


def new_session_id() -> str:
    """Sortable by start time, unguessable enough to not collide across proxies."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(4)


def seal_interrupted(folder: Path, reason: str, sealer: Any = None,
                     anchor: tuple[str | None, int | None] = (None, None)) -> str | None:
    """Seal the log of a session whose proxy was killed (the gateway's container or process died): a `disconnect`
    with the reason, then a seal marked `recovered` that records the recording's hash and size as found, signed
    and chained by `sealer` (proxy.anchors.Sealer) when given. Returns the seal hash, or None when the log is
    missing, damaged, sealed already, or does not extend `anchor` (head, lines: what the gateway anchored while the
    session ran; a log cut or rewritten below it must not be signed). Then it stays as found: an auditor's finding,
    not something to repair."""
    from proxy.anchors import extends
    from proxy.eventlog import EventLog, file_digest, verify_log

    try:
        if not extends(verify_log(folder / EVENTS, require_seal=False).hashes, *anchor):
            return None
        log = EventLog.resume(folder / EVENTS)
    except (OSError, ValueError):
        return None
    fields: dict[str, Any] = {"session": folder.name}
    screen = folder / SCREEN
    if screen.is_file():
        digest, size = file_digest(screen)
        fields["recording"] = {"file": screen.name, "sha256": digest, "bytes": size, "complete": False}
    log.write("disconnect", reason=reason, recovered=True)
    if sealer is not None:
        fields.update(sealer.fields())
    head = log.close(sealer.key() if sealer is not None else None, recovered=True, **fields)
    if sealer is not None:
        sealer.sealed(folder.name, head)
    meta = read_meta(folder) or {"session": folder.name}
    meta.update(end=datetime.now(timezone.utc).isoformat(), end_reason=reason, log_head=head, recovered=True,
                **fields)
    write_meta(folder, meta)
    return head


class _SessionEnd(Exception):
    """Internal: a pump finished normally (peer closed at a message boundary)."""


# Live sessions of this process by recipient (None for sessions without one), so that revoking a recipient can end
# its sessions whichever front end (TCP listener, gateway) started them. Only touched from the event loop.
_LIVE: dict[str | None, set["ProxySession"]] = {}


def live_sessions(recipient: str | None = None) -> list["ProxySession"]:
    """The sessions running in this process, all of them or those of one recipient."""
    if recipient is None:
        return [session for group in _LIVE.values() for session in group]
    return list(_LIVE.get(recipient, ()))


def terminate_recipient(recipient: str, reason: str = "recipient revoked") -> int:
    """End every live session of `recipient` (each logs the reason and seals); returns how many were told to end.
    The sessions close asynchronously, within a few event-loop iterations."""
    sessions = live_sessions(recipient)
    for session in sessions:
        session.terminate(reason)
    return len(sessions)


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
        self._last_input = self._start
        self._pixel_format: PixelFormat | None = None
        self._recorded_pixel_format: PixelFormat | None = None
        self._fb_width = 0
        self._fb_height = 0
        self._pointer_xy = (0, 0)
        self._updates_requested = False
        self._motion_timer: asyncio.TimerHandle | None = None
        self.counters = {"keys_forwarded": 0, "keys_dropped": 0, "keys_blocked": 0, "keys_refused": 0,
                         "pointer_forwarded": 0, "pointer_coalesced": 0, "clicks_dropped": 0, "clicks_blocked": 0,
                         "cut_text_dropped": 0, "server_bytes": 0, "updates": 0}
        self._slot = False  # holds one of the MAX_PENDING_HANDSHAKES slots
        self._upstream_ready = False
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
        self.log.write("connect", peer=self.peer, upstream=self.upstream.describe(), recipient=self.recipient,
                       release=self.release)
        tasks: list[asyncio.Task[Any]] = []
        group = _LIVE.setdefault(self.recipient, set())
        group.add(self)
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
            tasks = [
                stop,
                asyncio.create_task(self._client_pump(), name="client_pump"),
                asyncio.create_task(self._server_pump(), name="server_pump"),
                asyncio.create_task(self._watchdog(), name="watchdog"),
            ]
            if self.capture is not None:
                tasks.append(asyncio.create_task(self._capture_watch(), name="capture_watch"))
            await self._first_done(tasks)
        except _SessionEnd as end:
            self._set_reason(str(end))
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
        except asyncio.TimeoutError:
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
            try:
                await self._close_all()
            finally:
                group.discard(self)
                if not group and _LIVE.get(self.recipient) is group:
                    del _LIVE[self.recipient]
        return self.end_reason or "closed"

    @staticmethod
    async def _first_done(tasks: list[asyncio.Task[Any]]) -> None:
        """Wait for the first task to finish and re-raise its exception, if any."""
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    def _set_reason(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason

    def _recording_seal(self) -> dict[str, Any]:
        """What the seal line says about the screen recording: its file's SHA-256 and size."""
        if self.recorder is None or self.recorder.sha256 is None:
            return {}
        return {"recording": {"file": SCREEN, "sha256": self.recorder.sha256,
                              "bytes": self.recorder.file_bytes}}

    async def _close_all(self) -> None:
        if self._motion_timer is not None:
            self._motion_timer.cancel()
        await self._reset_input("end")
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
        if self.log is not None and not self.log.closed:
            self.log.write("disconnect", reason=reason, duration=round(time.monotonic() - self._start, 3),
                           **self.counters)
            fields: dict[str, Any] = {"session": self.session_id, **self._recording_seal()}
            if self.sealer is not None:
                fields.update(self.sealer.fields())
            head = self.log.close(self.sealer.key() if self.sealer is not None else None, **fields)
            if self.sealer is not None:
                self.sealer.sealed(self.session_id, head)
        else:
            head = None
        meta = self._meta()
        meta["end"] = datetime.now(timezone.utc).isoformat()
        meta["end_reason"] = reason
        meta["log_head"] = head
        meta["counters"] = self.counters
        meta.update(self._recording_seal())
        write_meta(self.dir, meta)

    # --- handshakes ------------------------------------------------------------------------------------------------

    async def _handshakes(self) -> None:
        """The client's part first: the upstream connection is opened and authenticated only for a client that has
        completed it, so half-open clients hold no VNC connection. Then every key and button is released towards
        the server before the client gets ServerInit (and with it the chance to send input)."""
        version = await asyncio.wait_for(self._client_security(), CLIENT_HANDSHAKE_TIMEOUT)
        self.release_handshake_slot()
        width, height, server_pf, name = await self._upstream_handshake()
        self._upstream_ready = True
        await self._reset_input("start")
        await self._client_init(version, width, height, server_pf, name)

    async def _reset_input(self, when: str) -> None:
        """Release every key and button towards the server: the standard keys (`proxy.keysyms.RELEASE_KEYSYMS`),
        then any other key this session let through pressed, then the buttons (a PointerEvent with mask 0, at the
        researcher's last position; at the start, where nothing is known, at 0,0). The VNC server keeps keys
        pressed in X when its client leaves, so without this a modifier held when one session ended (or its proxy
        was killed) would still be held in the next, unseen by that session's shortcut filter. Best effort at the
        end: a server that has gone needs no releasing."""
        if not self._upstream_ready or self._up_writer is None or self._up_writer.is_closing():
            return
        assert self.log is not None
        extra = [keysym for keysym in self.filter.pressed_keys if keysym not in _RELEASE_SET]
        held_buttons = self.filter.server_mask
        x, y = self._pointer_xy if when == "end" else (0, 0)
        data = b"".join(struct.pack(">BBxxI", rfb.C_KEY_EVENT, 0, keysym) for keysym in (*RELEASE_KEYSYMS, *extra))
        data += struct.pack(">BBHH", rfb.C_POINTER_EVENT, 0, x, y)
        try:
            self._up_writer.write(data)
            await asyncio.wait_for(self._up_writer.drain(), RESET_DRAIN_TIMEOUT)
        except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
            if when == "start":
                raise ConnectionResetError(f"releasing the keys failed: {exc}") from exc
            return
        if not self.log.closed:
            self.log.write("input_reset", when=when, keys=len(RELEASE_KEYSYMS) + len(extra), extra=extra,
                           buttons=held_buttons, x=x, y=y)

    async def _upstream_handshake(self) -> tuple[int, int, PixelFormat, bytes]:
        assert self.log is not None
        reader, writer = await self.upstream.open()
        self._up_reader, self._up_writer = reader, writer
        version = rfb.parse_protocol_version(await reader.readexactly(12))
        version = min(version, (3, 8))
        writer.write(b"RFB 003.%03d\n" % version[1])
        if version == (3, 3):
            (sec,) = struct.unpack(">I", await reader.readexactly(4))
            if sec == rfb.SEC_INVALID:
                raise ProtocolError("upstream refused: " + (await self._read_reason(reader)))
            offered = [sec]
        else:
            (count,) = await reader.readexactly(1)
            if count == 0:
                raise ProtocolError("upstream refused: " + (await self._read_reason(reader)))
            offered = list(await reader.readexactly(count))
        if self.upstream.password is not None and rfb.SEC_VNC_AUTH in offered:
            chosen = rfb.SEC_VNC_AUTH
        elif self.upstream.password is None and rfb.SEC_NONE in offered:
            chosen = rfb.SEC_NONE
        else:
            raise ProtocolError(f"upstream offers security types {offered}, none usable "
                                f"({'with' if self.upstream.password is not None else 'without'} a password)")
        if version != (3, 3):
            writer.write(bytes([chosen]))
        if chosen == rfb.SEC_VNC_AUTH:
            assert self.upstream.password is not None
            challenge = await reader.readexactly(16)
            writer.write(rfb.vnc_auth_response(self.upstream.password, challenge))
        if chosen == rfb.SEC_VNC_AUTH or version == (3, 8):
            (result,) = struct.unpack(">I", await reader.readexactly(4))
            if result != 0:
                reason = await self._read_reason(reader) if version == (3, 8) else ""
                raise ProtocolError(f"upstream authentication failed {reason}".strip())
        writer.write(b"\x01")  # ClientInit: shared, so an operator's viewer is not kicked out
        await writer.drain()
        width, height = struct.unpack(">HH", await reader.readexactly(4))
        pixel_format = PixelFormat.parse(await reader.readexactly(16))
        (name_length,) = struct.unpack(">I", await reader.readexactly(4))
        if name_length > rfb.MAX_NAME_LENGTH:
            raise ProtocolError("desktop name too long")
        name = await reader.readexactly(name_length)
        self.log.write("upstream_ready", protocol="%d.%d" % version, security=chosen, width=width, height=height,
                       name=name.decode("utf-8", "replace"))
        return width, height, pixel_format, name

    @staticmethod
    async def _read_reason(reader: asyncio.StreamReader) -> str:
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        return (await reader.readexactly(min(length, 4096))).decode("utf-8", "replace")

    async def _client_security(self) -> tuple[int, int]:
        """ProtocolVersion, security (None: the front end authenticated the client), SecurityResult, ClientInit."""
        reader = self.client.reader
        self.client.write(b"RFB 003.008\n")
        await self.client.drain()
        version = rfb.parse_protocol_version(await reader.readexactly(12))
        if version == (3, 3):
            self.client.write(struct.pack(">I", rfb.SEC_NONE))
        else:
            self.client.write(bytes([1, rfb.SEC_NONE]))
            await self.client.drain()
            (chosen,) = await reader.readexactly(1)
            if chosen != rfb.SEC_NONE:
                raise ProtocolError(f"client chose security type {chosen}")
            if version == (3, 8):
                self.client.write(struct.pack(">I", 0))
        await self.client.drain()
        await reader.readexactly(1)  # ClientInit shared flag: the upstream connection is ours, so it is moot
        return version

    async def _client_init(self, version: tuple[int, int], width: int, height: int, pixel_format: PixelFormat,
                           name: bytes) -> None:
        """ServerInit towards the client, with the upstream's size, pixel format and name."""
        assert self.log is not None
        self._pixel_format = pixel_format
        self._fb_width, self._fb_height = width, height
        self.client.write(struct.pack(">HH", width, height) + pixel_format.pack()
                          + struct.pack(">I", len(name)) + name)
        await self.client.drain()
        if self.recorder is not None:
            self.recorder.init(width, height, pixel_format.as_dict(), name.decode("utf-8", "replace"), "3.8")
            self._recorded_pixel_format = pixel_format
        self.log.write("client_ready", protocol="%d.%d" % version)

    # --- client to server ------------------------------------------------------------------------------------------

    def _up_write(self, data: bytes) -> None:
        assert self._up_writer is not None
        self._up_writer.write(data)

    async def _client_pump(self) -> None:
        assert self.log is not None and self._up_writer is not None
        reader = self.client.reader
        log = self.log
        while True:
            try:
                first = await reader.readexactly(1)
            except asyncio.IncompleteReadError:
                raise _SessionEnd("client closed") from None
            msg_type = first[0]
            try:
                await self._client_message(msg_type, reader, log)
            except asyncio.IncompleteReadError:
                raise ProtocolError(f"client message {msg_type} truncated") from None
            await self._up_writer.drain()

    async def _client_message(self, msg_type: int, reader: asyncio.StreamReader, log: EventLog) -> None:
        if msg_type == rfb.C_KEY_EVENT:
            down, keysym = struct.unpack(">B2xI", await reader.readexactly(7))
            self._last_input = time.monotonic()
            verdict, shortcut = self.filter.key(bool(down), keysym)
            name = rfb.keysym_name(keysym)
            if verdict == FORWARD:
                self._up_write(struct.pack(">BBxxI", rfb.C_KEY_EVENT, 1 if down else 0, keysym))
                self.counters["keys_forwarded"] += 1
                log.write("key", down=bool(down), keysym=keysym, name=name)
            elif verdict == REFUSED:  # outside the keysym allowlist (proxy.keysyms), pressed or released
                self.counters["keys_refused"] += 1
                log.write("key_blocked", down=bool(down), keysym=keysym, name=name, shortcut=None,
                          refused=shortcut)
            elif verdict == BLOCKED:
                self.counters["keys_blocked"] += 1
                log.write("key_blocked", down=True, keysym=keysym, name=name, shortcut=shortcut)
            else:
                self.counters["keys_dropped"] += 1
                log.write("key_dropped", down=True, keysym=keysym, name=name, limit="keys")
        elif msg_type == rfb.C_POINTER_EVENT:
            mask, x, y = struct.unpack(">BHH", await reader.readexactly(5))
            self._last_input = time.monotonic()
            self._pointer_xy = (x, y)
            verdict = self.filter.pointer(mask)
            if verdict.blocked_buttons:
                self.counters["clicks_blocked"] += 1
                log.write("click_dropped", buttons=verdict.blocked_buttons, x=x, y=y, shortcut=verdict.blocked_by,
                          modifiers=sorted(self.filter.held_modifiers))
            if verdict.dropped_buttons:
                self.counters["clicks_dropped"] += 1
                log.write("click_dropped", buttons=verdict.dropped_buttons, x=x, y=y, limit="clicks")
            if verdict.action == FORWARD:
                self._cancel_motion_timer()
                self._up_write(struct.pack(">BBHH", rfb.C_POINTER_EVENT, verdict.mask, x, y))
                self.counters["pointer_forwarded"] += 1
                log.write("pointer", mask=verdict.mask, x=x, y=y, coalesced=verdict.coalesced)
            else:
                self.counters["pointer_coalesced"] += 1
                self._schedule_motion_flush()
        elif msg_type == rfb.C_FB_UPDATE_REQUEST:
            body = await reader.readexactly(9)
            if body[0] not in (0, 1):
                raise ProtocolError("bad incremental flag")
            self._updates_requested = True
            self._up_write(bytes([rfb.C_FB_UPDATE_REQUEST]) + body)
        elif msg_type == rfb.C_SET_ENCODINGS:
            (count,) = struct.unpack(">xH", await reader.readexactly(3))
            if count > rfb.MAX_ENCODINGS:
                raise ProtocolError(f"SetEncodings with {count} encodings (max {rfb.MAX_ENCODINGS})")
            requested = list(struct.unpack(f">{count}i", await reader.readexactly(4 * count)))
            kept = rfb.filter_encodings(requested)
            self._up_write(struct.pack(f">BxH{len(kept)}i", rfb.C_SET_ENCODINGS, len(kept), *kept))
            log.write("set_encodings", requested=requested, forwarded=kept)
            if self.recorder is not None:
                self.recorder.encodings(kept)
        elif msg_type == rfb.C_SET_PIXEL_FORMAT:
            body = await reader.readexactly(19)
            pixel_format = PixelFormat.parse(body[3:])
            assert self._pixel_format is not None
            if self._updates_requested and pixel_format.framing != self._pixel_format.framing:
                # Updates in flight would still use the old pixel size, and the proxy cannot tell where the server
                # switched: it would lose the framing of the server stream (and with it the cut-text filter).
                raise ProtocolError("SetPixelFormat changing the pixel size after updates were requested")
            self._pixel_format = pixel_format
            self._up_write(bytes([rfb.C_SET_PIXEL_FORMAT]) + b"\0\0\0" + pixel_format.pack())
            log.write("set_pixel_format", **pixel_format.as_dict())
        elif msg_type == rfb.C_CLIENT_CUT_TEXT:
            (length,) = struct.unpack(">3xi", await reader.readexactly(7))
            await self._drop_cut_text(reader, "client_to_server", length)
        else:
            raise ProtocolError(f"client message type {msg_type} not allowed")

    def _cancel_motion_timer(self) -> None:
        if self._motion_timer is not None:
            self._motion_timer.cancel()
            self._motion_timer = None

    def _schedule_motion_flush(self) -> None:
        if self._motion_timer is None:
            delay = self.filter.motion.wait_time()
            self._motion_timer = asyncio.get_running_loop().call_later(delay, self._flush_motion)

    def _flush_motion(self) -> None:
        """Forward the latest coalesced pointer position so the pointer ends where the user left it."""
        self._motion_timer = None
        if self._stop.is_set() or self._up_writer is None or self._up_writer.is_closing():
            return
        coalesced = self.filter.take_pending_motion()
        if coalesced is None:
            self._schedule_motion_flush()
            return
        x, y = self._pointer_xy
        mask = self.filter.server_mask
        try:
            self._up_write(struct.pack(">BBHH", rfb.C_POINTER_EVENT, mask, x, y))
            self.counters["pointer_forwarded"] += 1
            assert self.log is not None
            self.log.write("pointer", mask=mask, x=x, y=y, coalesced=coalesced)
        except Exception as exc:  # fail closed from a timer callback too
            self.terminate(f"internal error: {exc.__class__.__name__}: {exc}")

    async def _drop_cut_text(self, reader: asyncio.StreamReader, direction: str, length: int) -> None:
        """Log the attempt as soon as the header is in (`cut_text_dropped` with the announced length), then read and
        discard the payload and log its hash (`cut_text_discarded`). A peer that announces 2 GiB and stalls is on
        record although its payload never completes."""
        assert self.log is not None
        self.counters["cut_text_dropped"] += 1
        self.log.write("cut_text_dropped", direction=direction, length=abs(length), extended=length < 0)
        size, digest = await self._discard(reader, abs(length))
        self.log.write("cut_text_discarded", direction=direction, length=size, sha256=digest)

    @staticmethod
    async def _discard(reader: asyncio.StreamReader, size: int) -> tuple[int, str]:
        """Read and throw away `size` bytes in chunks, hashing them; never holds more than one chunk."""
        digest = hashlib.sha256()
        remaining = size
        while remaining:
            chunk = await reader.readexactly(min(CHUNK, remaining))
            digest.update(chunk)
            remaining -= len(chunk)
        return size, digest.hexdigest()

    # --- server to client ------------------------------------------------------------------------------------------

    async def _server_pump(self) -> None:
        assert self._up_reader is not None
        reader = self._up_reader
        while True:
            try:
                first = await reader.readexactly(1)
            except asyncio.IncompleteReadError:
                raise _SessionEnd("server closed") from None
            try:
                await self._server_message(first[0], reader)
            except asyncio.IncompleteReadError:
                raise ProtocolError(f"server message {first[0]} truncated") from None

    async def _send(self, data: bytes | bytearray | memoryview) -> None:
        self.client.write(data)
        if self.recorder is not None:
            self.recorder.server(data)
        self.counters["server_bytes"] += len(data)
        await self.client.drain()
        if self.recorder is not None and self.recorder.backlog > self.recorder.max_backlog:
            await self.recorder.wait_ready()

    async def _server_message(self, msg_type: int, reader: asyncio.StreamReader) -> None:
        if msg_type == rfb.S_FB_UPDATE:
            await self._framebuffer_update(reader)
        elif msg_type == rfb.S_SET_COLOUR_MAP:
            head = await reader.readexactly(5)
            _, count = struct.unpack(">HH", head[1:])
            body = await reader.readexactly(6 * count)
            await self._send(bytes([msg_type]) + head + body)
        elif msg_type == rfb.S_BELL:
            await self._send(bytes([msg_type]))
        elif msg_type == rfb.S_SERVER_CUT_TEXT:
            (length,) = struct.unpack(">3xi", await reader.readexactly(7))
            await self._drop_cut_text(reader, "server_to_client", length)
        else:
            raise ProtocolError(f"server message type {msg_type} not allowed")
        if self.recorder is not None:
            self.recorder.flush()

    async def _copy(self, reader: asyncio.StreamReader, size: int, out: bytearray) -> None:
        """Forward `size` bytes: small ones through the message buffer, large ones chunk by chunk."""
        if size + len(out) <= CHUNK:
            out += await reader.readexactly(size)
            return
        if out:
            await self._send(out)
            out.clear()
        remaining = size
        while remaining:
            chunk = await reader.readexactly(min(CHUNK, remaining))
            remaining -= len(chunk)
            await self._send(chunk)

    async def _framebuffer_update(self, reader: asyncio.StreamReader) -> None:
        pixel_format = self._pixel_format
        assert pixel_format is not None
        if self.recorder is not None and pixel_format != self._recorded_pixel_format:
            self.recorder.pixel_format(pixel_format.as_dict())
            self._recorded_pixel_format = pixel_format
        bpp = pixel_format.bytes_per_pixel
        head = await reader.readexactly(3)
        (count,) = struct.unpack(">xH", head)
        out = bytearray(b"\x00" + head)
        self.counters["updates"] += 1
        for _ in range(count):
            rect = await reader.readexactly(12)
            out += rect
            x, y, w, h, enc = struct.unpack(">HHHHi", rect)
            if enc == rfb.ENC_LAST_RECT:
                break
            if enc >= 0 and (x + w > self._fb_width or y + h > self._fb_height):
                raise ProtocolError(f"rectangle {w}x{h}+{x}+{y} outside {self._fb_width}x{self._fb_height}")
            if enc == rfb.ENC_RAW:
                await self._copy(reader, w * h * bpp, out)
            elif enc == rfb.ENC_COPYRECT:
                out += await reader.readexactly(4)
            elif enc in (rfb.ENC_ZLIB, rfb.ENC_ZRLE):
                raw_len = await reader.readexactly(4)
                out += raw_len
                await self._copy(reader, struct.unpack(">I", raw_len)[0], out)
            elif enc == rfb.ENC_RRE:
                raw_count = await reader.readexactly(4)
                out += raw_count
                await self._copy(reader, bpp + struct.unpack(">I", raw_count)[0] * (bpp + 8), out)
            elif enc == rfb.ENC_TIGHT:
                await self._tight(reader, w, h, pixel_format, out)
            elif enc == rfb.ENC_CURSOR:
                if w > rfb.MAX_CURSOR_SIDE or h > rfb.MAX_CURSOR_SIDE:
                    raise ProtocolError(f"cursor {w}x{h} too large")
                await self._copy(reader, w * h * bpp + ((w + 7) // 8) * h, out)
            elif enc == rfb.ENC_DESKTOP_SIZE:
                self._fb_width, self._fb_height = w, h
            elif enc == rfb.ENC_EXT_DESKTOP_SIZE:
                raw = await reader.readexactly(4)
                out += raw
                out += await reader.readexactly(16 * raw[0])
                if y == 0:  # status 0: the size did change
                    self._fb_width, self._fb_height = w, h
            else:
                raise ProtocolError(f"server used encoding {enc}, which is not allowed")
            if len(out) >= CHUNK:
                await self._send(out)
                out.clear()
        if out:
            await self._send(out)

    async def _tight(self, reader: asyncio.StreamReader, w: int, h: int, pixel_format: PixelFormat,
                     out: bytearray) -> None:
        (comp_ctl,) = await reader.readexactly(1)
        out.append(comp_ctl)
        kind = comp_ctl >> 4
        tpixel = pixel_format.tight_pixel_size
        if kind == 0x8:  # fill
            out += await reader.readexactly(tpixel)
            return
        if kind == 0x9:  # JPEG
            await self._copy(reader, await self._compact_length(reader, out), out)
            return
        if kind > 0x7:
            raise ProtocolError(f"Tight compression control {comp_ctl:#x} not allowed")
        filter_id = 0
        colours = 0
        if comp_ctl & 0x40:
            (filter_id,) = await reader.readexactly(1)
            out.append(filter_id)
            if filter_id == 1:
                (n,) = await reader.readexactly(1)
                out.append(n)
                colours = n + 1
                out += await reader.readexactly(colours * tpixel)
            elif filter_id not in (0, 2):
                raise ProtocolError(f"Tight filter {filter_id} not allowed")
        size = rfb.tight_data_size(filter_id, w, h, tpixel, colours)
        if size < 12:
            out += await reader.readexactly(size)
        else:
            await self._copy(reader, await self._compact_length(reader, out), out)

    @staticmethod
    async def _compact_length(reader: asyncio.StreamReader, out: bytearray) -> int:
        (b0,) = await reader.readexactly(1)
        out.append(b0)
        length = b0 & 0x7F
        if b0 & 0x80:
            (b1,) = await reader.readexactly(1)
            out.append(b1)
            length |= (b1 & 0x7F) << 7
            if b1 & 0x80:
                (b2,) = await reader.readexactly(1)
                out.append(b2)
                length |= b2 << 14
        return length

    # --- limits ----------------------------------------------------------------------------------------------------

    async def _capture_watch(self) -> None:
        assert self.capture is not None
        await self.capture.wait_stopped()
        raise _SessionEnd("network capture stopped")

    async def _watchdog(self) -> None:
        """Idle and maximum session time, checked a few times a second."""
        assert self.log is not None
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            if now - self._start >= self.limits.max_session_seconds:
                self.log.write("limit_hit", limit="max_session_seconds", value=self.limits.max_session_seconds)
                raise _SessionEnd("maximum session time reached")
            if now - self._last_input >= self.limits.idle_seconds:
                self.log.write("limit_hit", limit="idle_seconds", value=self.limits.idle_seconds)
                raise _SessionEnd("idle timeout")


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
