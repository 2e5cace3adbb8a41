"""The front door's outputs download (issue 27): a recipient fetches their released output packages outside the
enclave, authenticated by the same gateway token that opens their session.

    GET /outputs                             an HTML list of the token's recipient's released packages
    GET /outputs/<request_id>/package.zip    the signed package (outputs.airlock.package), as an attachment

The token is taken and checked exactly as the gateway's index page does (`?token=` or the HttpOnly cookie; a
`?token=` on /outputs is moved into the cookie by a redirect, so it leaves the address bar). A request is served
only to the recipient it belongs to, only while its state is `released` and before its `download_until`; anything
else is a 403 refusal page. A request id that does not exist is refused with the same page as another
recipient's, so the answer says nothing about other recipients' requests.

The package's bytes are read once, bounded, through the store (`outputs.airlock.store.AirlockStore.read_package`),
and their sha256 checked against the one the airlock recorded at release (the database, not the store, which this
process only reads): a package.zip a writer of SITE/airlock replaced is refused ("checksum mismatch"), never
served. Each download and each refusal of a named request is an airlock event (`downloaded` / `download-refused`,
outputs.airlock.records) written BEFORE the answer: if the event cannot be written, nothing is served (fail
closed). The actor is `recipient:<name>` with the token id in the detail.
"""
from __future__ import annotations

import asyncio
import hashlib
import html
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy.tokens import Grant, TokenRefused

if TYPE_CHECKING:
    from proxy.gateway import Gateway

log = logging.getLogger("safeshare.gateway.outputs")

OUTPUTS_PATH = "/outputs"
PACKAGE_NAME = "package.zip"  # the download URL's last part (an HTTP path; the store's file is store.PACKAGE_FILE)
DOOR_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'none'; "
            "frame-ancestors 'none'; base-uri 'none'")

NOT_YOURS = "not-yours"
NOT_RELEASED = "not-released"
DOWNLOAD_ENDED = "download-ended"
MISMATCH = "checksum-mismatch"
UNAVAILABLE = "unavailable"
DOOR_REFUSALS = {
    NOT_YOURS: ("No such package", "There is no output package with this name for you."),
    NOT_RELEASED: ("Not released", "This request has not been released (it is still being reviewed, or it was "
                                   "returned, rejected or withdrawn)."),
    DOWNLOAD_ENDED: ("Download period ended", "The time to download this package has ended. Ask the data custodian "
                                              "if you still need it."),
    MISMATCH: ("Package not available", "This package cannot be served: it is not the one the site released. The "
                                        "data custodian has been told."),
    UNAVAILABLE: ("Package not available", "The package cannot be read right now. Try again later or contact the "
                                           "data custodian."),
}


class DoorRefused(Exception):
    """A download the door refuses; `reason` is one of DOOR_REFUSALS (or a token refusal's reason)."""

    def __init__(self, reason: str, detail: str = "", status: int = 403) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class Released:
    """One row of the list page."""

    request_id: str
    release: str
    released_at: datetime | None
    download_until: datetime | None
    package_sha256: str | None


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)


class OutputsDoor:
    """The /outputs routes of one gateway, over the site's airlock store (read) and the airlock tables (events)."""

    def __init__(self, gateway: Gateway, airlock_dir: Path) -> None:
        from outputs.airlock.records import AirlockRecords
        from outputs.airlock.store import AirlockStore

        self.store = AirlockStore.at(airlock_dir, "--airlock")  # a ValueError (StoreError) for another folder
        self.gateway = gateway
        self.records = AirlockRecords(gateway.store.engine)  # the site database the tokens live in

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(OUTPUTS_PATH, self._list)
        # no HEAD: it would be audited as a download that sent nothing
        app.router.add_get(f"{OUTPUTS_PATH}/{{request_id}}/{PACKAGE_NAME}", self._download, allow_head=False)

    # --- tokens, as the index page takes them ------------------------------------------------------------------

    async def _grant(self, request: web.Request) -> tuple[Grant | None, str, str | None]:
        """(grant, source, refusal reason): the token of the request checked as `Gateway._index` checks it."""
        token, source = self.gateway._token_of(request)
        try:
            return await self.gateway._verify(token), source, None
        except TokenRefused as refused:
            return None, source, refused.reason

    def _remember(self, request: web.Request, token: str, grant: Grant) -> web.Response:
        """`?token=` accepted: store it in the same cookie as the index page and redirect to the bare path."""
        from proxy.gateway import COOKIE

        response = web.Response(status=303, headers={"Location": request.path})
        max_age = max(1, int((grant.expires_at - datetime.now(grant.expires_at.tzinfo)).total_seconds()))
        secure = request.secure if self.gateway.secure_cookies is None else self.gateway.secure_cookies
        response.set_cookie(COOKIE, token, path="/", httponly=True, samesite="Strict", secure=secure,
                            max_age=max_age)
        return response

    # --- the list ----------------------------------------------------------------------------------------------

    def released_of(self, recipient: str) -> list[Released]:
        from outputs.airlock.workflow import RELEASED

        now = datetime.now(timezone.utc)
        rows = []
        for record in self.records.requests(recipient=recipient, states=[RELEASED]):
            until = _aware(record.download_until)
            if until is not None and until <= now:
                continue
            rows.append(Released(record.request_id, record.release, _aware(record.released_at), until,
                                 record.package_sha256))
        return rows

    async def _list(self, request: web.Request) -> web.StreamResponse:
        from proxy.gateway import refusal_page

        grant, source, reason = await self._grant(request)
        if grant is None:
            log.info("outputs list refused: token %s (%s)", reason, source)
            return refusal_page(reason or "unknown", clear_cookie=source == "cookie")
        if source == "url":
            return self._remember(request, self.gateway._token_of(request)[0] or "", grant)
        try:
            rows = await asyncio.to_thread(self.released_of, grant.recipient)
        except Exception as exc:  # the database: the gateway's own health shows it too
            log.error("outputs list for %s failed: %s", grant.recipient, exc)
            return self._refusal(UNAVAILABLE, 503)
        return web.Response(text=list_page(grant.recipient, rows), content_type="text/html",
                            headers={"Content-Security-Policy": DOOR_CSP})

    # --- the download ------------------------------------------------------------------------------------------

    def _event(self, grant: Grant | None, ok: bool, request_id: str, recipient: str | None, **detail: Any) -> None:
        actor = f"recipient:{grant.recipient}" if grant is not None else "token:refused"
        self.records.event(actor, "downloaded" if ok else "download-refused", "ok" if ok else "refused",
                           recipient, request_id,
                           **({"token_id": grant.token_id, "requester": grant.recipient} if grant else {}), **detail)

    def package_for(self, grant: Grant | None, token_reason: str | None, request_id: str) -> bytes:
        """The package bytes for `grant`, or DoorRefused; either way the airlock event is written first (for a
        request id that names no request, nothing is written: no row to tie it to, and no flood of rows)."""
        from outputs.airlock.store import StoreError, valid_request_id
        from outputs.airlock.workflow import RELEASED

        record = self.records.get(request_id) if valid_request_id(request_id) else None
        if record is None:
            raise DoorRefused(token_reason or NOT_YOURS)
        owner = record.recipient
        if grant is None:
            self._event(None, False, request_id, owner, reason=f"token {token_reason}")
            raise DoorRefused(token_reason or "unknown")
        if grant.recipient != owner:
            self._event(grant, False, request_id, owner, reason="another recipient's request")
            raise DoorRefused(NOT_YOURS)
        if record.state != RELEASED:
            self._event(grant, False, request_id, owner, reason=f"state is {record.state}, not released")
            raise DoorRefused(NOT_RELEASED)
        until = _aware(record.download_until)
        if until is None or until <= datetime.now(timezone.utc):
            self._event(grant, False, request_id, owner,
                        reason=f"download period ended {until.isoformat() if until else '(none set)'}")
            raise DoorRefused(DOWNLOAD_ENDED)
        try:
            data = self.store.read_package(request_id)
        except (OSError, StoreError) as exc:
            self._event(grant, False, request_id, owner, reason=f"package not readable: {exc}")
            raise DoorRefused(UNAVAILABLE, str(exc), status=503) from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != record.package_sha256:
            self._event(grant, False, request_id, owner, reason="checksum mismatch", package_sha256=digest,
                        recorded_sha256=record.package_sha256)
            raise DoorRefused(MISMATCH, f"sha256 {digest} is not the released {record.package_sha256}")
        self._event(grant, True, request_id, owner, package_sha256=digest, bytes=len(data))
        return data

    async def _download(self, request: web.Request) -> web.StreamResponse:
        request_id = request.match_info["request_id"]
        grant, source, reason = await self._grant(request)
        if grant is not None and source == "url":
            return self._remember(request, self.gateway._token_of(request)[0] or "", grant)
        try:
            data = await asyncio.to_thread(self.package_for, grant, reason, request_id)
        except DoorRefused as refused:
            log.info("download of %s refused: %s (%s)", request_id[:80], refused.reason, refused.detail or source)
            return self._refusal(refused.reason, refused.status, clear_cookie=grant is None and source == "cookie")
        except Exception as exc:  # the event could not be written: nothing is served
            log.error("download of %s failed: %s", request_id[:80], exc)
            return self._refusal(UNAVAILABLE, 503)
        log.info("package %s downloaded by %s (token %d)", request_id, grant.recipient if grant else "?",
                 grant.token_id if grant else -1)
        return web.Response(body=data, content_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="{request_id}.zip"',
            "Content-Security-Policy": DOOR_CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})

    @staticmethod
    def _refusal(reason: str, status: int = 403, clear_cookie: bool = False) -> web.Response:
        from proxy.gateway import REFUSALS, refusal_page

        if reason in REFUSALS or reason not in DOOR_REFUSALS:
            return refusal_page(reason, status=status, clear_cookie=clear_cookie)
        title, text = DOOR_REFUSALS[reason]
        return web.Response(status=status, text=_page(title, f'<p id="reason" data-reason="{html.escape(reason)}">'
                                                            f'{html.escape(text)}</p>'),
                            content_type="text/html", headers={"Content-Security-Policy": DOOR_CSP})


def _page(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · safeshare</title>
<style>body{{font-family:sans-serif;max-width:52em;margin:4em auto;color:#222}}h1{{font-size:1.4em}}
table{{border-collapse:collapse}}td,th{{padding:.3em .8em;border-bottom:1px solid #ccc;text-align:left}}
code{{font-size:.85em}}</style>
</head><body><h1>{html.escape(title)}</h1>
{body}
</body></html>
"""


def _when(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if value is not None else "-"


def list_page(recipient: str, rows: list[Released]) -> str:
    """The recipient's released packages, each with its release, times and sha256 (to check the file against)."""
    if not rows:
        body = '<p id="none">No released output packages are waiting for you.</p>'
    else:
        items = "\n".join(
            f'<tr data-request="{html.escape(r.request_id)}"><td><a href="{OUTPUTS_PATH}/{html.escape(r.request_id)}/'
            f'{PACKAGE_NAME}" download>{html.escape(r.request_id)}.zip</a></td><td>{html.escape(r.release)}</td>'
            f'<td>{_when(r.released_at)}</td><td>{_when(r.download_until)}</td>'
            f'<td><code>{html.escape(r.package_sha256 or "")}</code></td></tr>' for r in rows)
        body = ("<table><thead><tr><th>package</th><th>release</th><th>released</th><th>download until</th>"
                f"<th>sha256</th></tr></thead><tbody>\n{items}\n</tbody></table>\n"
                "<p>Check a package with <code>safeshare verify-output PACKAGE --trust trust.json</code> "
                "(the site's trust store).</p>")
    return _page(f"Released outputs of {recipient}", body)


def openapi_paths() -> dict[str, Any]:
    """The door's part of the gateway's OpenAPI document."""
    from proxy.gateway import COOKIE

    html_response = {"content": {"text/html": {"schema": {"type": "string"}}}}
    token_params = [
        {"name": "token", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "Session token (alternatively the safeshare_token cookie); moved into the cookie by a 303."},
        {"name": COOKIE, "in": "cookie", "required": False, "schema": {"type": "string"}},
    ]
    return {
        OUTPUTS_PATH: {"get": {
            "summary": "the token's recipient's released output packages (HTML list)",
            "parameters": token_params,
            "responses": {"200": {"description": "the list", **html_response},
                          "303": {"description": "token accepted, stored in an HttpOnly cookie"},
                          "403": {"description": "missing, unknown, expired or revoked token", **html_response}},
        }},
        f"{OUTPUTS_PATH}/{{request_id}}/{PACKAGE_NAME}": {"get": {
            "summary": "download a released, signed output package (each download and refusal is audited)",
            "parameters": [{"name": "request_id", "in": "path", "required": True, "schema": {"type": "string"}},
                           *token_params],
            "responses": {
                "200": {"description": "the package (check it with `safeshare verify-output`)",
                        "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}}},
                "303": {"description": "token accepted, stored in an HttpOnly cookie"},
                "403": {"description": "missing, unknown, expired or revoked token; another recipient's or no such "
                                       "request; not released; download period ended; package not the one "
                                       "released (checksum mismatch)", **html_response},
                "503": {"description": "the package or the database cannot be read", **html_response}},
        }},
    }


__all__ = ["DoorRefused", "OutputsDoor", "list_page", "openapi_paths"]
