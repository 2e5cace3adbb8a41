"""The app's outer shell: security headers on every response, only GET and POST (and PATCH for the JSON API's edits of
a release request), same-origin POSTs and PATCHes, bounded bodies.

Written as a plain ASGI middleware rather than per-route code so that nothing escapes it: static assets, JSON, error
pages, 404s, the OpenAPI schema, and even an unhandled exception (answered here with a 500 that still carries the
headers, instead of by the server's default handler outside the middleware). The Content-Security-Policy forbids
every origin but the app's own and all inline script and style, so a page cannot load or send anything elsewhere.
A Content-Disposition header (which would turn a response into a download) is removed should any ever appear.

Bodies are bounded as they arrive, not only by their Content-Length: a chunked body has none, so the bytes are
counted as the app reads them and reading stops with 413 once they pass MAX_BODY (nothing of the body is kept or
echoed). A refused body is never read to its end: the 413 closes the connection (`Connection: close`), since the
server would otherwise read and discard the rest to keep the connection alive.
"""
from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS: dict[str, str] = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), usb=(), serial=(), bluetooth=(), "
                          "clipboard-read=(), clipboard-write=(), display-capture=(), fullscreen=(self)",
}
ALLOWED_METHODS = ("GET", "POST")
API_METHODS = ("GET", "POST", "PATCH")  # under /api/ only: PATCH /api/requests/{n} edits a draft request
MAX_BODY = 1 << 20
_LENGTH = re.compile(r"[0-9]{1,15}")  # ASCII digits only: str.isdigit() also accepts '²', which int() refuses
_CLOSE = [(b"connection", b"close")]
_DROPPED = {name.encode() for name in SECURITY_HEADERS} | {b"content-disposition", b"server"}

log = logging.getLogger("safeshare.app")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _same_origin(scope: Scope) -> bool:
    """Whether a POST comes from the app's own pages. Browsers say so in Sec-Fetch-Site; this is what counts when
    present, because under `Referrer-Policy: no-referrer` a form submission carries `Origin: null`. Otherwise the
    Origin header must name this host; a request with neither (a non-browser client) is let through."""
    site = _header(scope, b"sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    host = _header(scope, b"host")
    return host is not None and origin in (f"http://{host}", f"https://{host}")


class BodyTooLarge(HTTPException):
    """Raised from the middleware's `receive` when a body passes MAX_BODY: an HTTPException, so FastAPI's body
    parsing passes it on (it turns any other exception into 400) and the app's handler answers 413."""

    def __init__(self) -> None:
        super().__init__(413, f"request body too large (at most {MAX_BODY} bytes)")


class SecurityMiddleware:
    """Wraps the whole app (see the module docstring)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "websocket":  # the app has no websockets; refuse before the router sees one
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        allowed = API_METHODS if str(scope.get("path", "")).startswith("/api/") else ALLOWED_METHODS
        if method not in allowed:
            await self._plain(scope, send, 405, f"method not allowed: only {' and '.join(allowed)}",
                              [(b"allow", ", ".join(allowed).encode())])
            return
        if method != "GET":
            if not _same_origin(scope):
                await self._plain(scope, send, 403, "cross-origin request refused")
                return
            length = _header(scope, b"content-length")
            if length is not None and (not _LENGTH.fullmatch(length) or int(length) > MAX_BODY):
                await self._plain(scope, send, 413, "request body too large", _CLOSE)
                return
        started = False
        received = 0
        too_large = False

        async def bounded_receive() -> Message:
            nonlocal received, too_large
            if too_large:  # the app asks again after the refusal: it gets a disconnect, never more of the body
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY:
                    too_large = True
                    raise BodyTooLarge()
            return message

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _DROPPED]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                if too_large:
                    headers = [(k, v) for k, v in headers if k.lower() != b"connection"] + _CLOSE
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, bounded_receive, send_with_headers)
        except BodyTooLarge:
            if started:
                raise
            await self._plain(scope, send, 413, "request body too large", _CLOSE)
        except Exception:
            log.exception("error answering %s %s", method, scope.get("path"))
            if started:
                raise
            await self._plain(scope, send, 500, "internal error (logged)")

    @staticmethod
    async def _plain(scope: Scope, send: Callable[[Message], Awaitable[None]], status: int, text: str,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
        """A refusal as JSON for the API, else as a minimal page whose title the kiosk watchdog recognizes."""
        if str(scope.get("path", "")).startswith("/api/"):
            body = json.dumps({"detail": text}).encode()
            kind = b"application/json"
        else:
            body = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>safeshare · error</title>'
                    f'<link rel="stylesheet" href="/static/app.css"></head><body><main><h1>Error {status}</h1>'
                    f'<p>{html.escape(text)}</p><p><a class="button" href="/">Back to the overview</a></p></main>'
                    f'</body></html>\n').encode()
            kind = b"text/html; charset=utf-8"
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        headers += extra or []
        headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
