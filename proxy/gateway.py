"""The gateway: noVNC page and WebSocket endpoint in front of the RFB proxy, with per-recipient session tokens.

    browser (noVNC) --WebSocket, subprotocol 'binary'--> gateway --> ProxySession --RFB--> enclave VNC server

* `GET /?token=T` checks the token, stores it in an HttpOnly, SameSite=Strict cookie and redirects to `/` (so the
  token leaves the address bar and history); `GET /` with a valid cookie serves the noVNC page. Without a usable token
  the answer is a plain refusal page with HTTP 403.
* `GET /websockify` (token in the cookie or `?token=`) checks the token *before* the upgrade: an unknown, expired or
  revoked token gets the 403 page and no WebSocket. A cross-origin upgrade is refused the same way: a browser's Origin
  must be one of the configured origins (`allowed_origins`, the site's public URL) or the gateway's own listening
  address; the Host header is never evidence. With a valid token
  the WebSocket's binary frames become a byte stream for `ProxySession`, which terminates RFB towards the browser
  (RFB 3.8, security None: the token was the authentication) and towards the enclave's VNC server, with every control
  of the proxy on.
* A watcher polls the token database every `poll_interval` seconds and ends live sessions whose token was revoked
  (also by revoking its recipient), deleted or expired. If the database cannot be read for `fail_closed_after`
  seconds, every session ends (fail closed).
* `/healthz` and `/openapi.json` are the only JSON endpoints; noVNC itself is served from `/novnc/` (Debian's
  `novnc` package by default).
* With an airlock store (`airlock=SITE/airlock`), `GET /outputs` lists the token's recipient's released output
  packages and `GET /outputs/<request_id>/package.zip` downloads one, with the same token (proxy/outputs_door.py).

Tokens never appear in the gateway's own logs: the access log records the path without the query string.

Bounds: a connection must send its whole request head within HEADER_TIMEOUT seconds; a refused `?token=` leaves a
valid cookie alone (only a refused cookie is cleared); at most `proxy.session.MAX_PENDING_HANDSHAKES` WebSockets of
this process may be waiting for their client's RFB handshake (more get 503), and none of them holds a connection to
the VNC server until its handshake is complete.
"""
from __future__ import annotations

import asyncio
import html
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.abc import AbstractAccessLogger

from policies.recipient import PolicyError
from proxy.front_door import SessionKeeper, resolve_grant, wait_for_replaced, watch_tokens
from proxy.limits import SessionLimits
from proxy.rfb import ProtocolError
from proxy.session import STREAM_LIMIT, ProxySession, UpstreamTarget
from proxy.tokens import EXPIRED, REVOKED, UNKNOWN, Grant, TokenRefused, TokenStore

log = logging.getLogger("safeshare.gateway")

DEFAULT_NOVNC_DIR = Path("/usr/share/novnc")
STATIC_DIR = Path(__file__).with_name("static")
PAGE_ASSETS = ("gateway.js", "gateway.css")
COOKIE = "safeshare_token"
WS_PATH = "/websockify"
MAX_WS_MESSAGE = 1 << 20  # client-to-server RFB messages are small; a larger frame ends the session
MISSING = "missing"
CROSS_ORIGIN = "cross-origin"
BUSY = "busy"
# A connection must have sent its whole request head within this many seconds of opening (and an idle keep-alive
# connection is closed after as long): slow-header sockets cannot pile up.
HEADER_TIMEOUT = 5.0
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'"
    ),
}

REFUSALS = {
    MISSING: ("No session link", "This page needs the session link you were given by the data custodian."),
    UNKNOWN: ("Session link not valid", "This session link is not valid. Check that you copied the whole link, or "
                                        "ask the data custodian for a new one."),
    EXPIRED: ("Session link expired", "This session link has expired. Ask the data custodian for a new one."),
    REVOKED: ("Access revoked", "Access with this session link has been revoked."),
    CROSS_ORIGIN: ("Refused", "The remote desktop can only be opened from this gateway's own page."),
    "unavailable": ("Enclave not available", "The enclave for this session is not available right now. Try again "
                                             "later or contact the data custodian."),
    BUSY: ("Busy", "The gateway has too many connections being opened right now. Try again in a moment."),
}


def _origin_aliases(url: str) -> set[str]:
    """The Origin values a browser sends for pages under `url` (scheme://host[:port], the default port left out as
    browsers do); for a loopback host, under each of its usual names. Empty for something that is not a URL."""
    parts = urlsplit(url.strip().rstrip("/").lower())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return set()
    try:
        port = parts.port
    except ValueError:
        return set()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    suffix = "" if port is None or port == {"http": 80, "https": 443}[parts.scheme] else f":{port}"
    hosts = LOOPBACK_HOSTS if host in LOOPBACK_HOSTS else (host,)
    return {f"{parts.scheme}://{name}{suffix}" for name in hosts}


def refusal_page(reason: str, status: int = 403, clear_cookie: bool = True) -> web.Response:
    title, text = REFUSALS.get(reason, ("Refused", "The session cannot be opened."))
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · safeshare</title>
<style>body{{font-family:sans-serif;max-width:40em;margin:4em auto;color:#222}}h1{{font-size:1.4em}}</style>
</head><body><h1>{html.escape(title)}</h1><p id="reason" data-reason="{html.escape(reason)}">{html.escape(text)}</p>
</body></html>
"""
    response = web.Response(status=status, text=body, content_type="text/html")
    if clear_cookie:  # a token that will not work again; not for cross-origin or outage answers
        response.del_cookie(COOKIE, path="/")
    return response


def openapi_document() -> dict[str, Any]:
    from proxy.outputs_door import openapi_paths as outputs_paths

    html_response = {"content": {"text/html": {"schema": {"type": "string"}}}}
    token_params = [
        {"name": "token", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "Session token (alternatively the safeshare_token cookie)."},
        {"name": COOKIE, "in": "cookie", "required": False, "schema": {"type": "string"}},
    ]
    return {
        "openapi": "3.1.0",
        "info": {"title": "safeshare gateway", "version": "1",
                 "description": "noVNC front door of the safeshare RFB proxy. Every session needs a per-recipient "
                                "token; unknown, expired and revoked tokens get HTTP 403 and no WebSocket."},
        "paths": {
            "/": {"get": {
                "summary": "noVNC page (with ?token= it sets the cookie and redirects here)",
                "parameters": token_params,
                "responses": {"200": {"description": "noVNC page", **html_response},
                              "303": {"description": "token accepted, stored in an HttpOnly cookie"},
                              "403": {"description": "missing, unknown, expired or revoked token", **html_response}},
            }},
            WS_PATH: {"get": {
                "summary": "WebSocket (subprotocol 'binary') carrying RFB 3.8 to the inspecting proxy",
                "parameters": token_params,
                "responses": {"101": {"description": "switching to WebSocket"},
                              "403": {"description": "missing, unknown, expired or revoked token, or a cross-origin "
                                                     "request", **html_response},
                              "426": {"description": "not a WebSocket upgrade request"},
                              "503": {"description": "the token's enclave target is not usable, or too many "
                                                     "connections are waiting for their handshake", **html_response}},
            }},
            "/healthz": {"get": {
                "summary": "liveness and database reachability",
                "responses": {
                    "200": {"description": "healthy", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Health"}}}},
                    "503": {"description": "token database unreachable", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Health"}}}},
                },
            }},
            "/openapi.json": {"get": {
                "summary": "this document",
                "responses": {"200": {"description": "OpenAPI document",
                                      "content": {"application/json": {"schema": {"type": "object"}}}}},
            }},
            **outputs_paths(),  # with --airlock: the released output packages (proxy/outputs_door.py)
        },
        "components": {"schemas": {"Health": {
            "type": "object", "required": ["status", "sessions", "database"],
            "properties": {"status": {"type": "string", "enum": ["ok", "degraded"]},
                           "sessions": {"type": "integer", "minimum": 0, "description": "live sessions"},
                           "database": {"type": "boolean", "description": "token database reachable"}},
        }}},
    }


class _AccessLogger(AbstractAccessLogger):
    """Method, path (never the query: it may hold a token), status."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info("%s %s %s %s %.3fs", request.remote, request.method, request.path, response.status, time)


class _FlowControl:
    """Stands in for a transport so that the StreamReader pauses the WebSocket reader when its buffer is full."""

    def __init__(self) -> None:
        self.resumed = asyncio.Event()
        self.resumed.set()

    def pause_reading(self) -> None:
        self.resumed.clear()

    def resume_reading(self) -> None:
        self.resumed.set()


class WebSocketClient:
    """`proxy.session.ClientTransport` over an aiohttp WebSocket: binary frames in and out as one byte stream.

    Incoming frames are fed to a StreamReader whatever their boundaries (one RFB message may span frames, a frame may
    carry several), so the session parses exactly as it does on TCP. A text frame is not RFB: the stream fails with a
    ProtocolError, which the session logs before it closes (fail closed).
    """

    def __init__(self, ws: web.WebSocketResponse, limit: int = STREAM_LIMIT) -> None:
        self.ws = ws
        self.reader = asyncio.StreamReader(limit=limit)
        self._flow = _FlowControl()
        self.reader.set_transport(self._flow)  # type: ignore[arg-type]
        self._pending: list[bytes] = []
        self._lock = asyncio.Lock()
        self.close_code: int = WSCloseCode.OK
        self.close_message: bytes = b""
        self.frames_in = 0
        self.bytes_in = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self._pending.append(bytes(data))  # the session reuses its buffer after write()

    async def drain(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            data = b"".join(self._pending)
            self._pending.clear()
            if self.ws.closed:
                raise ConnectionResetError("WebSocket closed")
            await self.ws.send_bytes(data)

    async def pump_in(self) -> None:
        """Feed incoming binary frames to `reader` until the WebSocket closes."""
        try:
            while True:
                await self._flow.resumed.wait()
                msg = await self.ws.receive()
                if msg.type == WSMsgType.BINARY:
                    self.frames_in += 1
                    self.bytes_in += len(msg.data)
                    self.reader.feed_data(msg.data)
                elif msg.type == WSMsgType.TEXT:
                    self.reader.set_exception(ProtocolError("text frame on the RFB WebSocket"))
                    return
                elif msg.type == WSMsgType.ERROR:
                    self.reader.set_exception(ProtocolError(f"WebSocket error: {self.ws.exception()}"))
                    return
                else:  # CLOSE, CLOSING, CLOSED
                    return
        finally:
            if self.reader.exception() is None:
                self.reader.feed_eof()

    async def close(self) -> None:
        try:
            await self.drain()
        except Exception:
            pass
        if not self.ws.closed:
            try:
                await asyncio.wait_for(self.ws.close(code=self.close_code, message=self.close_message), 2)
            except (asyncio.TimeoutError, OSError, RuntimeError):
                pass


@dataclass(eq=False)
class LiveSession:
    grant: Grant
    session: ProxySession
    client: WebSocketClient
    started: float = field(default_factory=time.monotonic)

    def end(self, reason: str, code: int = WSCloseCode.POLICY_VIOLATION) -> None:
        self.client.close_code = code
        self.client.close_message = reason.encode()[:120]
        self.session.terminate(reason)


class Gateway:
    """`await gateway.start(host, port)` returns the bound port; `await gateway.close()` ends every session."""

    def __init__(
        self,
        store: TokenStore,
        sessions_dir: Path,
        *,
        novnc_dir: Path | None = DEFAULT_NOVNC_DIR,
        default_limits: SessionLimits | None = None,
        poll_interval: float = 0.5,
        fail_closed_after: float = 5.0,
        record: bool = True,
        allowed_origins: tuple[str, ...] = (),
        secure_cookies: bool | None = None,
        on_session: Callable[[LiveSession], None] | None = None,
        on_session_end: Callable[[LiveSession, str], None] | None = None,
        name: str = "gateway",
        signing_key: Any = None,
        anchor_interval: float = 5.0,
        airlock: Path | None = None,
    ) -> None:
        self.store = store
        self.name = name
        # Seals, anchors and the sessions table, as every front door keeps them (proxy.front_door).
        self.keeper = SessionKeeper(store, name, signing_key, anchor_interval)
        self.sealer, self.anchors, self.book = self.keeper.sealer, self.keeper.anchors, self.keeper.book
        self._anchorer: asyncio.Task[None] | None = None
        self.sessions_dir = Path(sessions_dir)
        self.novnc_dir = Path(novnc_dir) if novnc_dir is not None else None
        self.default_limits = default_limits or SessionLimits()
        self.poll_interval = poll_interval
        self.fail_closed_after = fail_closed_after
        self.record = record
        # Browser origins allowed to open the WebSocket: the configured ones (the site's public URL) and, once
        # started, the gateway's own listening address when it is a specific one. Never derived from the request.
        self.allowed_origins = {alias for origin in allowed_origins for alias in _origin_aliases(origin)}
        self.secure_cookies = secure_cookies  # None: Secure when the request came over TLS
        self.on_session = on_session
        self.on_session_end = on_session_end
        self.live: dict[int, set[LiveSession]] = {}
        self.polls = 0
        self._runner: web.AppRunner | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._page = (STATIC_DIR / "index.html").read_text()
        self.airlock = Path(airlock) if airlock is not None else None  # SITE/airlock: /outputs (proxy/outputs_door)

    # --- application -----------------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get(WS_PATH, self._websocket)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/openapi.json", self._openapi)
        if self.airlock is not None:  # /outputs: released output packages (proxy/outputs_door.py)
            from proxy.outputs_door import OutputsDoor

            OutputsDoor(self, self.airlock).add_routes(app)
        for name in PAGE_ASSETS:
            app.router.add_get(f"/static/{name}", self._asset)
        if self.novnc_dir is not None and (self.novnc_dir / "core" / "rfb.js").is_file():
            app.router.add_static("/novnc/", self.novnc_dir, follow_symlinks=False)
        else:
            log.warning("noVNC not found at %s: only the WebSocket endpoint is usable", self.novnc_dir)
        app.on_response_prepare.append(self._security_headers)
        return app

    @staticmethod
    async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
        if response.status == 101:
            return
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)

    async def start(self, host: str, port: int) -> int:
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        await self.keeper.recover()
        self._runner = web.AppRunner(self.app(), access_log_class=_AccessLogger, handle_signals=False,
                                     keepalive_timeout=HEADER_TIMEOUT)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = int(self._runner.addresses[0][1])
        if host and host not in ("0.0.0.0", "::", "*"):
            self.allowed_origins |= _origin_aliases(f"http://{'[' + host + ']' if ':' in host else host}:{bound}")
        elif not self.allowed_origins:
            log.warning("listening on every address without --allowed-origin: browsers' WebSockets will be refused "
                        "(give the public URL researchers open)")
        self._watcher = asyncio.create_task(self._watch(), name="gateway-token-watch")
        self._anchorer = asyncio.create_task(
            self.keeper.anchor_loop(lambda: [live.session for live in self._all_live()]), name="gateway-anchors")
        return int(self._runner.addresses[0][1])

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        if self._anchorer is not None:
            self._anchorer.cancel()
            await asyncio.gather(self._anchorer, return_exceptions=True)
            self._anchorer = None
        for live in self._all_live():
            live.end("gateway shutting down", WSCloseCode.GOING_AWAY)
        deadline = time.monotonic() + 5
        while self.live and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _all_live(self) -> list[LiveSession]:
        return [live for group in self.live.values() for live in group]

    @property
    def session_count(self) -> int:
        return sum(len(group) for group in self.live.values())

    # --- tokens ----------------------------------------------------------------------------------------------------

    @staticmethod
    def _token_of(request: web.Request) -> tuple[str | None, str]:
        if "token" in request.query:
            return request.query["token"], "url"
        if COOKIE in request.cookies:
            return request.cookies[COOKIE], "cookie"
        return None, "none"

    async def _verify(self, token: str | None) -> Grant:
        if not token:
            raise TokenRefused(MISSING)
        return await asyncio.to_thread(self.store.verify, token)

    def _same_origin(self, request: web.Request) -> bool:
        """A browser's WebSocket must come from a page of this gateway: its Origin must be one of the configured
        origins. The Host header is not evidence (a DNS-rebound page sends a Host equal to its own Origin)."""
        origin = request.headers.get("Origin")
        if origin is None:
            return True  # not a browser: nothing ambient (cookies) to abuse
        return origin.rstrip("/").lower() in self.allowed_origins

    # --- handlers --------------------------------------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.StreamResponse:
        token, source = self._token_of(request)
        try:
            grant = await self._verify(token)
        except TokenRefused as refused:
            log.info("page refused: token %s (%s)", refused.reason, source)
            # Only a refused cookie is cleared: a bad ?token= (a link anyone can send) must not log the user out.
            return refusal_page(refused.reason, clear_cookie=source == "cookie")
        if source == "url":
            assert token is not None
            response = web.Response(status=303, headers={"Location": request.path})
            max_age = max(1, int((grant.expires_at - datetime.now(grant.expires_at.tzinfo)).total_seconds()))
            response.set_cookie(COOKIE, token, path="/", httponly=True, samesite="Strict",
                                secure=request.secure if self.secure_cookies is None else self.secure_cookies,
                                max_age=max_age)
            return response
        return web.Response(text=self._page, content_type="text/html")

    async def _asset(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / request.path.rsplit("/", 1)[1])

    async def _healthz(self, request: web.Request) -> web.Response:
        try:
            await asyncio.to_thread(self.store.ping)
            database = True
        except Exception:
            database = False
        body = {"status": "ok" if database else "degraded", "sessions": self.session_count, "database": database}
        return web.json_response(body, status=200 if database else 503)

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document())

    def _resolve(self, grant: Grant) -> tuple[UpstreamTarget, SessionLimits, str | None]:
        return resolve_grant(grant, self.default_limits)

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if not self._same_origin(request):
            log.warning("WebSocket refused: cross-origin request from %s", request.headers.get("Origin"))
            return refusal_page(CROSS_ORIGIN, clear_cookie=False)
        token, source = self._token_of(request)
        try:
            grant = await self._verify(token)
        except TokenRefused as refused:
            log.info("WebSocket refused: token %s (%s)", refused.reason, source)
            return refusal_page(refused.reason, clear_cookie=source == "cookie")
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return web.Response(status=426, text="WebSocket upgrade expected\n", headers={"Upgrade": "websocket"})
        try:
            upstream, limits, release = await asyncio.to_thread(self._resolve, grant)
        except TokenRefused as refused:
            return refusal_page(refused.reason)
        except (OSError, ValueError, PolicyError) as exc:
            log.error("token %d (%s): target %s not usable: %s", grant.token_id, grant.recipient, grant.target_name,
                      exc)
            return refusal_page("unavailable", status=503, clear_cookie=False)

        ws = web.WebSocketResponse(protocols=("binary",), max_msg_size=MAX_WS_MESSAGE, heartbeat=30.0)
        client = WebSocketClient(ws)
        session = ProxySession(
            client, upstream, limits, self.sessions_dir, peer=str(request.remote or ""), recipient=grant.recipient,
            release=release, record=self.record, sealer=self.sealer,
            extra_meta={"via": "gateway", "token_id": grant.token_id, "target": grant.target_name,
                        "token_expires": grant.expires_at.isoformat()},
        )
        if not session.claim_handshake_slot():
            log.warning("WebSocket refused: too many pending handshakes")
            return refusal_page(BUSY, status=503, clear_cookie=False)
        try:
            await ws.prepare(request)
        except BaseException:
            session.release_handshake_slot()
            raise
        live = LiveSession(grant, session, client)
        replaced = list(self.live.get(grant.token_id, ()))
        for older in replaced:
            older.end("replaced by a new connection with the same token")
        self.live[grant.token_id] = {live}  # the replaced sessions are ending: no longer live
        if self.on_session is not None:
            self.on_session(live)
        if replaced:  # let them release their keys towards the server before this session releases and starts
            try:
                await wait_for_replaced((older.session for older in replaced), session.session_id)
            except BaseException:  # the request was cancelled: this session never runs
                session.release_handshake_slot()
                if self.live.get(grant.token_id) == {live}:
                    del self.live[grant.token_id]
                raise
        log.info("session %s: recipient %s, token %d, target %s", session.session_id, grant.recipient,
                 grant.token_id, grant.target_name)
        pump = asyncio.create_task(client.pump_in(), name=f"ws-in-{session.session_id}")
        reason = "closed"
        try:
            await self.keeper.opened(session, grant, release)
            reason = await session.run()
        finally:
            session.release_handshake_slot()  # if it never ran
            # Out of the live set before any await: the session is over the moment its proxy stops, and a
            # replacement must not be counted next to the session it replaced.
            group = self.live.get(grant.token_id)
            if group is not None:
                group.discard(live)
                if not group:
                    del self.live[grant.token_id]
            await self.keeper.closed(session, reason)
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
            await client.close()
        log.info("session %s ended: %s", session.session_id, reason)
        if self.on_session_end is not None:
            self.on_session_end(live, reason)
        return ws

    # --- revocation ------------------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        """End sessions whose token stopped being valid; end all if the database stays unreadable."""
        def polled() -> None:
            self.polls += 1

        await watch_tokens(self.store, self.live, self.poll_interval, self.fail_closed_after, polled)
