"""The checkers' side of the airlock: server-rendered review pages in the custodian service (issue 27).

    /review/login, /review/logout   sign in as a person (deploy/custodian/people.py), sign out
    /review                         the queue: every request with its state, round, outputs and how many are decided
    /review/requests/<id>           one request: per output the table re-rendered from its stored data.csv with the
                                    cells its checks flag highlighted, the checks and reasons, the analysis and
                                    cohort, the release, the researcher's texts and justifications, the hashes, the
                                    votes the checker may see, and a vote form
    /review/static/review.css       the only stylesheet

Every rule (who may vote, what a vote decides, who sees which votes, when a request is approved, how it is released)
is the airlock library's (`outputs.airlock.workflow.Airlock`); these pages only ask it and show its answers. When a
vote leaves a request approved, the release (re-hash, package, sign with the site's `outputs` key) is asked of the
library at once, as the checker whose vote decided it.

Browser security: every response under /review carries a strict Content-Security-Policy (no script at all, styles
and images from the service only, forms posting to it only, no framing) and no-store; the pages run no script. The
session cookie is HttpOnly, SameSite=Strict, Path=/review and Secure when the service is reached over https (as the
service sees it: behind a TLS proxy, name the proxy with `custodian serve --trusted-proxy`); every POST carries the
session's CSRF token (the sign-in form a token bound to a short-lived cookie of its own), compared in constant time;
a POST whose Sec-Fetch-Site or Origin says it came from elsewhere is refused as well. Form bodies are bounded.
Failed sign-ins are throttled (people.SignInThrottle) and audited through the service's rate-limited `auth-failed`
writer; sign-ins and sign-outs are audit events (`review-sign-in`, `review-sign-out`).
"""
from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import jinja2
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from deploy.audit.limits import AuthFailureLog
from deploy.custodian.people import People, SignInThrottle, WebSession, csrf_matches
from deploy.records import Records
from deploy.airlock.review_render import analysis_lines, output_table, read_meta
from outputs.airlock.store import DATA_FILE, META_FILE

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STYLESHEET = HERE / "static" / "review.css"
PREFIX = "/review"
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
SESSION_COOKIE = "safeshare_review"
LOGIN_COOKIE = "safeshare_review_login"
LOGIN_COOKIE_SECONDS = 900
MAX_FORM_BYTES = 32 * 1024
MAX_TEXT_PREVIEW = 64 * 1024
STATE_ORDER = {"submitted": 0, "approved": 1, "returned": 2, "released": 3, "rejected": 4, "withdrawn": 5}
NOTICES = {  # the only messages a redirect can ask a page to show (no text travels in the URL)
    "voted": ("Your vote is recorded.", "ok"),
    "released": ("Every output is decided: the approved outputs were packaged and signed.", "ok"),
    "decided": ("Every output is decided.", "ok"),
    "release-refused": ("The request is approved but its release was refused (checksum mismatch: a stored file is "
                        "not the one hashed at submission); the refusal is in the airlock's audit log.", "error"),
    "release-failed": ("The request is approved but its release failed (see the service's log); release it "
                       "again below once the cause is fixed.", "error"),
    "expired": ("Your session has ended; sign in again.", "warn"),
    "signed-out": ("Signed out.", "ok"),
}
ROLE = "checker"

log = logging.getLogger("safeshare.custodian.review")


class Refusal(Exception):
    """An answer other than a page: an HTTP status with a message, rendered as the error page."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class ReviewContext:
    """What the pages need from the service: the site's records, people, the airlock and how to sign a release."""

    records: Records
    people: People
    airlock: Any  # outputs.airlock.workflow.Airlock
    signing_key: Callable[[], Any]  # the site's `outputs` signing key (made on first use)
    auth_log: AuthFailureLog
    throttle: SignInThrottle


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False)


def _source(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _printable(text: str, limit: int = 64) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _cross_site(request: Request) -> bool:
    """Whether the browser says this POST came from another site (no header: not a browser, the tokens decide)."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin != f"{request.url.scheme}://{request.url.netloc}"


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body of at most MAX_FORM_BYTES (counted as it arrives, so a chunked body is bounded too)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refusal(413, f"the form is larger than {MAX_FORM_BYTES} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and kind != "application/x-www-form-urlencoded":  # an empty body is an empty form, whatever its type
        raise Refusal(415, "a form must be sent as application/x-www-form-urlencoded")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise Refusal(400, "the form is not UTF-8 urlencoded text") from None
    return dict(pairs)


class ReviewPages:
    """The routes of the review pages over one ReviewContext."""

    def __init__(self, ctx: ReviewContext) -> None:
        self.ctx = ctx
        self.env = _environment()
        self.router = APIRouter(prefix=PREFIX, include_in_schema=False)
        r = self.router
        r.add_api_route("/static/review.css", self.stylesheet, methods=["GET"])
        r.add_api_route("/login", self.login_page, methods=["GET"])
        r.add_api_route("/login", self.login, methods=["POST"])
        r.add_api_route("/logout", self.logout, methods=["POST"])
        r.add_api_route("", self.queue, methods=["GET"])
        r.add_api_route("/", self.queue, methods=["GET"])
        r.add_api_route("/requests/{request_id}", self.request_page, methods=["GET"])
        r.add_api_route("/requests/{request_id}/outputs/{output_id}/vote", self.vote, methods=["POST"])
        r.add_api_route("/requests/{request_id}/release", self.release_again, methods=["POST"])

    # --- helpers -------------------------------------------------------------------------------------------------

    def render(self, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
        values.setdefault("person", None)
        values.setdefault("csrf", "")
        values.setdefault("message", None)
        values.setdefault("message_kind", None)
        return HTMLResponse(self.env.get_template(template).render(**values), status_code=status_code)

    def error_page(self, status: int, detail: str, session: WebSession | None = None) -> HTMLResponse:
        return self.render("error.html", status, status=status, detail=detail,
                           person=session.person if session else None, csrf=session.csrf if session else "")

    def session_of(self, request: Request) -> tuple[WebSession | None, str]:
        return self.ctx.people.session(request.cookies.get(SESSION_COOKIE))

    def signed_in(self, request: Request) -> WebSession | Response:
        """The request's live session of a checker, or the redirect to the sign-in page (a person without the
        checker role gets 403)."""
        session, reason = self.session_of(request)
        if session is None:
            url = f"{PREFIX}/login" + ("?notice=expired" if reason in ("expired", "idle") else "")
            response = RedirectResponse(url, status_code=303)
            if reason != "missing":
                response.delete_cookie(SESSION_COOKIE, path=PREFIX)
            return response
        if session.person.role != ROLE:
            return self.error_page(403, f"{session.person.name} has the role {session.person.role!r}; the review "
                                        f"pages need {ROLE!r}", session)
        return session

    def refuse_post(self, request: Request, reason: str, person: str = "") -> None:
        """Audit (rate-limited per source, as the API's failed authentications) a refused POST."""
        self.ctx.auth_log.record(_source(request), reason, via="review", method=request.method,
                                 path=_printable(request.url.path, 200), **({"person": person} if person else {}))

    async def checked_post(self, request: Request) -> tuple[WebSession, dict[str, str]] | Response:
        """A POST of a signed-in checker whose CSRF token matches its session; else the answer to give."""
        session = self.signed_in(request)
        if isinstance(session, Response):
            return session
        try:
            form = await _form(request)
        except Refusal as exc:
            return self.error_page(exc.status, exc.detail, session)
        if _cross_site(request) or not csrf_matches(session.csrf, form.get("csrf")):
            await run_in_threadpool(self.refuse_post, request, "csrf", session.person.name)
            return self.error_page(403, "the form's CSRF token is missing or wrong: reload the page and try again",
                                   session)
        return session, form

    # --- pages ---------------------------------------------------------------------------------------------------

    def stylesheet(self) -> FileResponse:
        return FileResponse(STYLESHEET, media_type="text/css")

    def login_page(self, request: Request, notice: str | None = None) -> Response:
        session, _ = self.session_of(request)
        if session is not None:
            return RedirectResponse(PREFIX, status_code=303)
        return self.login_form(request, 200, notice=notice)

    def login_form(self, request: Request, status: int, *, name: str = "", notice: str | None = None,
                   message: str | None = None, kind: str = "error") -> HTMLResponse:
        token = secrets.token_urlsafe(32)
        text, text_kind = NOTICES.get(notice or "", (message, kind))
        response = self.render("login.html", status, login_csrf=token, name=name, message=text,
                               message_kind=text_kind)
        response.set_cookie(LOGIN_COOKIE, token, max_age=LOGIN_COOKIE_SECONDS, path=PREFIX, httponly=True,
                            samesite="strict", secure=_secure(request))
        return response

    async def login(self, request: Request) -> Response:
        try:
            form = await _form(request)
        except Refusal as exc:
            return self.error_page(exc.status, exc.detail)
        name = form.get("name", "").strip()[:64]
        password = form.get("password", "")
        source = _source(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if _cross_site(request) or not expected or not csrf_matches(expected, form.get("csrf")):
            await run_in_threadpool(self.refuse_post, request, "csrf", _printable(name))
            return self.login_form(request, 403, name=name,
                                   message="The sign-in form expired or came from elsewhere: try again.")
        if not self.ctx.throttle.allowed(source, name):
            await run_in_threadpool(self.refuse_post, request, "throttled", _printable(name))
            return self.login_form(request, 429, name=name,
                                   message="Too many failed sign-ins: wait a few minutes and try again.")
        person, reason = await run_in_threadpool(self.ctx.people.authenticate, name, password)
        if person is None or person.role != ROLE:
            self.ctx.throttle.failed(source, name)
            await run_in_threadpool(self.refuse_post, request, reason if person is None else "role",
                                    _printable(name))
            return self.login_form(request, 401, name=name, message="Wrong name or password.")
        self.ctx.throttle.succeeded(source, name)
        token, _ = await run_in_threadpool(self.ctx.people.start_session, person, source)
        await run_in_threadpool(self.ctx.records.audit, f"review:{person.name}", "review-sign-in", "ok", None,
                                source=source)
        response = RedirectResponse(PREFIX, status_code=303)
        response.set_cookie(SESSION_COOKIE, token, path=PREFIX, httponly=True, samesite="strict",
                            secure=_secure(request))
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    async def logout(self, request: Request) -> Response:
        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        await run_in_threadpool(self.ctx.people.end_session, request.cookies.get(SESSION_COOKIE))
        await run_in_threadpool(self.ctx.records.audit, f"review:{session.person.name}", "review-sign-out", "ok",
                                None, source=_source(request))
        response = RedirectResponse(f"{PREFIX}/login?notice=signed-out", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=PREFIX)
        return response

    def queue(self, request: Request) -> Response:
        session = self.signed_in(request)
        if isinstance(session, Response):
            return session
        rows = []
        for item in self.ctx.airlock.list():
            mine = sum(1 for v in self.ctx.airlock.records.votes(item["request_id"], round=item["round"])
                       if v.checker == session.person.name)
            rows.append({**item, "submitted_at": _short_time(item.get("created_at")),
                         "my_votes": mine})
        rows.sort(key=lambda r: (STATE_ORDER.get(r["state"], 9), r.get("created_at") or ""))
        return self.render("queue.html", person=session.person, csrf=session.csrf, requests=rows)

    def request_page(self, request: Request, request_id: str, notice: str | None = None) -> Response:
        session = self.signed_in(request)
        if isinstance(session, Response):
            return session
        text, kind = NOTICES.get(notice or "", (None, None))
        return self.show(session, request_id, 200, text, kind)

    def show(self, session: WebSession, request_id: str, status: int, message: str | None,
             kind: str | None) -> HTMLResponse:
        from outputs.airlock.store import StoreError, valid_request_id
        from outputs.airlock.workflow import AirlockError, same_person

        if not valid_request_id(request_id):
            return self.error_page(404, f"no request {request_id!r}", session)
        try:
            shown = self.ctx.airlock.show(request_id, session.person.name)
        except StoreError as exc:  # ChecksumMismatch of request.json
            return self.error_page(409, str(exc), session)
        except AirlockError as exc:
            return self.error_page(404, str(exc), session)
        frozen = shown["request"]
        viewer = session.person.name
        is_requester = same_person(viewer, shown["recipient"])
        release = frozen.get("release") if isinstance(frozen.get("release"), dict) else {}
        req = {**shown, "context": frozen.get("context", ""), "controls": frozen.get("controls", ""),
               "seal_sha256": release.get("seal_sha256"), "submitted_at": _short_time(frozen.get("submitted_at")),
               "released_at": _short_time(shown.get("released_at")),
               "download_until": _short_time(shown.get("download_until"))}
        outputs = [self.output_view(request_id, output, viewer) for output in shown["outputs"]]
        return self.render("request.html", status, person=session.person, csrf=session.csrf, req=req,
                           outputs=outputs, supporting=self.supporting_view(request_id, frozen),
                           is_requester=is_requester,
                           can_vote=shown["state"] == "submitted" and not is_requester,
                           can_release=shown["state"] == "approved" and not is_requester,
                           message=message, message_kind=kind)

    def stored(self, request_id: str, output_id: str, name: str, listed: dict[str, Any]) -> tuple[bytes | None, str]:
        """A stored file's bytes if they still match the hash taken at submission, else None and why."""
        from outputs.airlock.store import ChecksumMismatch, StoreError

        try:
            return self.ctx.airlock.store.read_frozen_output_file(request_id, output_id, name, listed), ""
        except ChecksumMismatch:
            return None, f"checksum mismatch: {name} is not the file hashed at submission; not shown"
        except (OSError, StoreError) as exc:
            return None, f"{name}: not readable: {exc}"

    def output_view(self, request_id: str, output: dict[str, Any], viewer: str) -> dict[str, Any]:
        oid = str(output["output_id"])
        files = output.get("files") if isinstance(output.get("files"), dict) else {}
        problems = []
        meta_bytes, problem = self.stored(request_id, oid, META_FILE, files) if META_FILE in files else (None, "")
        problems += [problem] if problem else []
        csv_bytes, problem = self.stored(request_id, oid, DATA_FILE, files) if DATA_FILE in files else (None, "")
        problems += [problem] if problem else []
        meta = read_meta(meta_bytes)
        table = output_table(csv_bytes, meta)
        if problems:
            table.error = "; ".join(problems)
        images = []
        for name in sorted(files):
            if name.lower().endswith(".png"):
                data, problem = self.stored(request_id, oid, name, files)
                if data is not None:
                    images.append({"name": name, "src": "data:image/png;base64," + base64.b64encode(data).decode()})
        checks = meta.get("checks") if isinstance(meta.get("checks"), list) else output.get("checks") or []
        check_rows = []
        for check in checks:
            if not isinstance(check, dict):
                continue
            cells = check.get("cells")
            if isinstance(cells, list):
                shown = ", ".join(" × ".join(map(str, c)) if isinstance(c, list) else str(c) for c in cells[:20])
                cell_text = shown + (f" … ({len(cells)} in all)" if len(cells) > 20 else "")
            else:
                cell_text = str(cells or "")
            check_rows.append({"rule": str(check.get("rule", "")), "status": str(check.get("status", "")),
                               "reason": str(check.get("reason", "")), "cells": cell_text})
        decision = output.get("decision")
        mine = [v for v in output.get("votes", []) if v.get("checker") == viewer]
        release = output.get("release") or meta.get("release")
        return {
            "output_id": oid, "name": output.get("name", ""), "kind": output.get("kind", ""),
            "status": output.get("status", ""), "justification": output.get("justification"),
            "decision": decision["state"] if decision else "pending",
            "hidden_note": None if decision else ("Other checkers' votes, and the decision, are shown once two "
                                                  "checkers have voted on this output."),
            "votes": [{**v, "at": _short_time(v.get("at"))} for v in output.get("votes", [])],
            "my_vote": mine[-1]["vote"] if mine else None,
            "table": table, "images": images, "checks": check_rows, "analysis": analysis_lines(meta),
            # meta.json leaves whole in the package: shown whole, as its bytes (keys the page does not draw above,
            # a key given twice, values past the analysis' clip), so nothing in it leaves unseen
            "meta_raw": meta_bytes.decode("utf-8", errors="replace") if meta_bytes is not None else None,
            "release": _release_text(release),
            "files": [{"name": n, "sha256": m.get("sha256"), "size": m.get("size")}
                      for n, m in sorted(files.items()) if isinstance(m, dict)],
        }

    def supporting_view(self, request_id: str, frozen: dict[str, Any]) -> list[dict[str, Any]]:
        from outputs.airlock.store import ChecksumMismatch, StoreError

        listed = frozen.get("supporting") if isinstance(frozen.get("supporting"), dict) else {}
        out = []
        for name, meta in sorted(listed.items()):
            entry = {"name": name, "sha256": meta.get("sha256"), "size": meta.get("size"), "text": None,
                     "image": None}
            try:
                data = self.ctx.airlock.store.read_frozen_supporting(request_id, name, listed)
            except ChecksumMismatch:
                entry["text"] = "(checksum mismatch: not the file hashed at submission; not shown)"
                out.append(entry)
                continue
            except (OSError, StoreError) as exc:
                entry["text"] = f"(not readable: {exc})"
                out.append(entry)
                continue
            if name.lower().endswith(".png"):
                entry["image"] = "data:image/png;base64," + base64.b64encode(data).decode()
            else:
                entry["text"] = data[:MAX_TEXT_PREVIEW].decode("utf-8", errors="replace")
            out.append(entry)
        return out

    async def vote(self, request: Request, request_id: str, output_id: str) -> Response:
        from outputs.airlock.store import valid_request_id

        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        session, form = checked
        if not valid_request_id(request_id):
            return self.error_page(404, f"no request {request_id!r}", session)
        shown_round = form.get("round", "")  # the round the page showed (its form carries it)
        if shown_round and not shown_round.isdigit():
            return self.error_page(400, "the form's round is not a number", session)
        return await run_in_threadpool(self.cast, session, request_id, output_id, form.get("vote", ""),
                                       form.get("comment", ""), int(shown_round) if shown_round else None)

    def cast(self, session: WebSession, request_id: str, output_id: str, vote: str, comment: str,
             shown_round: int | None = None) -> Response:
        """The vote through the library (for the round the page showed: a tab left open across a resubmission
        votes on nothing it did not show); the release through it too when the vote left the request approved."""
        from outputs.airlock.workflow import APPROVED, AirlockError, NotFound

        airlock, name = self.ctx.airlock, session.person.name
        try:
            airlock.vote(request_id, output_id, name, vote, comment, actor=f"checker:{name}", round_=shown_round)
        except NotFound as exc:
            return self.error_page(404, str(exc), session)
        except AirlockError as exc:
            return self.show(session, request_id, 403 if "requester" in str(exc) else 409, str(exc), "error")
        notice = "voted"
        state = airlock.get(request_id).state
        if state == APPROVED:
            notice = self.release(request_id, name)
        elif state != "submitted":
            notice = "decided"
        return RedirectResponse(f"{PREFIX}/requests/{request_id}?notice={notice}#output-{output_id}",
                                status_code=303)

    def release(self, request_id: str, name: str) -> str:
        """Ask the library to release an approved request as checker `name`; the notice to show. A refusal
        (checksum mismatch) is recorded by the library; the request stays approved, and the release can be asked
        again (the page's Release button, or `safeshare airlock release`)."""
        from outputs.airlock.store import StoreError
        from outputs.airlock.workflow import AirlockError

        try:
            self.ctx.airlock.release(request_id, self.ctx.signing_key(), f"checker:{name}")
        except (AirlockError, StoreError) as exc:
            log.warning("release of %s refused: %s", request_id, exc)
            return "release-refused"
        except Exception:  # the vote stands; the release did not happen
            log.exception("release of %s failed", request_id)
            return "release-failed"
        return "released"

    async def release_again(self, request: Request, request_id: str) -> Response:
        """POST /review/requests/<id>/release: release an approved request whose release was refused or failed."""
        from outputs.airlock.store import valid_request_id
        from outputs.airlock.workflow import APPROVED, AirlockError, same_person

        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        if not valid_request_id(request_id):
            return self.error_page(404, f"no request {request_id!r}", session)
        try:
            record = await run_in_threadpool(self.ctx.airlock.get, request_id)
        except AirlockError as exc:
            return self.error_page(404, str(exc), session)
        if same_person(session.person.name, record.recipient):
            return self.error_page(403, f"{session.person.name} requested {request_id}: a requester never releases "
                                        f"their own request", session)
        if record.state != APPROVED:
            return self.error_page(409, f"{request_id} is {record.state}; only an approved request is released",
                                   session)
        notice = await run_in_threadpool(self.release, request_id, session.person.name)
        return RedirectResponse(f"{PREFIX}/requests/{request_id}?notice={notice}", status_code=303)


def _short_time(value: Any) -> str:
    """An ISO time as 'YYYY-MM-DD HH:MM:SS UTC' (or '' when absent)."""
    if not value:
        return ""
    text = str(value)
    return text[:19].replace("T", " ") + " UTC" if len(text) >= 19 else text


def _release_text(release: Any) -> str:
    if isinstance(release, dict):
        parts = [f"{release.get('dataset', '')}/{release.get('id', '')}".strip("/") or str(release.get("ref", ""))]
        for key in ("seal_sha256", "data_sha256"):
            if release.get(key):
                parts.append(f"{key.replace('_', ' ')} {release[key]}")
        return " · ".join(p for p in parts if p)
    return str(release or "")


def security_headers(app: FastAPI) -> None:
    """Every response under /review (pages, redirects, errors, 404s) gets SECURITY_HEADERS."""

    @app.middleware("http")
    async def add_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        if request.url.path == PREFIX or request.url.path.startswith(PREFIX + "/"):
            for name, value in SECURITY_HEADERS.items():
                response.headers[name] = value
        return response


def outputs_signing_key(site: Any) -> Callable[[], Any]:
    """The site's `outputs` signing key (SITE/keys/outputs-signing.key, trusted in SITE/trust.json), made on first
    use."""
    def load() -> Any:
        from safeshare.signing import ensure_outputs_key

        return ensure_outputs_key(site.root)
    return load


def mount_review(app: FastAPI, records: Records, site: Any, auth_log: AuthFailureLog, *,
                 people: People | None = None, throttle: SignInThrottle | None = None,
                 signing_key: Callable[[], Any] | None = None, airlock: Any = None) -> ReviewPages:
    """Add the review pages to the custodian service `app` (one call in deploy.custodian.api.create_app)."""
    from outputs.airlock.records import AirlockRecords
    from outputs.airlock.store import AirlockStore
    from outputs.airlock.workflow import Airlock

    ctx = ReviewContext(
        records=records, people=people or People(records.engine),
        airlock=airlock or Airlock(AirlockStore(site.root), AirlockRecords(records.engine)),
        signing_key=signing_key or outputs_signing_key(site), auth_log=auth_log,
        throttle=throttle or SignInThrottle())
    pages = ReviewPages(ctx)
    app.include_router(pages.router)
    security_headers(app)
    return pages
