"""The custodian service: the provisioning commands over HTTP (FastAPI, OpenAPI schema at /openapi.json).

There is no /docs or /redoc page: FastAPI's pages load Swagger UI and ReDoc from a CDN, which would run third-party
script in the custodian's browser next to their API key; the schema is enough for clients and tools.

Every endpoint but /healthz, the static player page and the checkers' review pages under /review (signed in as a
person, not by key: deploy/airlock/review.py) needs `Authorization: Bearer <key>` with a key from
`safeshare custodian key add`. Keys have a role: `custodian` may provision and revoke, `auditor` may only read
(recipients, audit events, recorded sessions). A missing, malformed, unknown or revoked key gets 401 and an
`auth-failed` audit event with the reason and the source address (the peer's, or the X-Forwarded-For of a
configured trusted proxy only: `serve(trusted_proxies=...)`; rate-limited per source, see audit/limits.py); a key
without the role 403 (recorded as `api-denied`, an attempt by a known holder). Every endpoint that serves a recorded
session's content records `session-viewed` with the key, its role, the session and the endpoint (once per key,
session and endpoint every few minutes, not once per byte range). The service also enforces expiry: every
`expiry_interval` seconds it revokes recipients whose policy expired, as the actor `system:expiry`, and (`serve`)
the airlock's intake freezes what enclaves submitted from every active recipient's workspace into SITE/airlock
(deploy/airlock/intake.py).

Provisioning takes seconds and talks to the Docker engine synchronously, so the endpoints are plain functions
(FastAPI runs them in its thread pool) and the site lock in Provisioner orders them against each other and the CLI.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from deploy.audit.cli import verify_site_session
from deploy.audit.limits import AuthFailureLog, ViewLog
from deploy.provision import Provisioner, ProvisionError
from deploy.records import ApiKey
from deploy.site.folder import Site
from proxy.audit.evidence import judge
from proxy.audit.player import prepare, prepare_ended
from proxy.audit.sessions import find_sessions
from proxy.sessiondir import read_meta
from proxy.tokens import parse_ttl

STATIC = Path(__file__).resolve().parent / "static"
SESSION_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,19}")
PLAYER_CSP = ("default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; "
              "img-src 'self' blob: data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

log = logging.getLogger("safeshare.custodian")
bearer = HTTPBearer(auto_error=False, description="an API key from `safeshare custodian key add`")


class ProvisionRequest(BaseModel):
    policy_yaml: str = Field(description="the recipient policy (YAML text, as the file `safeshare provision` reads)",
                             max_length=1_000_000)
    new_token: bool = Field(False, description="issue a new token even if one is active")
    ttl: str | None = Field(None, description="token lifetime, e.g. 8h or 14d (default: until the policy expires)")


class RevokeRequest(BaseModel):
    reason: str = Field("revoked by the custodian", max_length=500)


def bearer_token(header: str | None) -> tuple[str | None, str]:
    """The key of an `Authorization: Bearer <key>` header and "ok", or None and "missing" / "malformed"."""
    if header is None:
        return None, "missing"
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None, "malformed"
    return token, "ok"


def create_app(provisioner: Provisioner, *, expiry_interval: float | None = 60.0,
               auth_log: AuthFailureLog | None = None, view_log: ViewLog | None = None,
               intake_interval: float | None = None) -> FastAPI:
    """The service for one site. `auth_log` and `view_log` bound what unauthenticated requests and session views
    write to the audit log (tests pass their own, with a clock they control). With `intake_interval` the airlock's
    intake reads every active recipient's workspace that often (deploy/airlock/intake.py; `serve` turns it on)."""
    records = provisioner.records
    auth_log = auth_log or AuthFailureLog(records)
    view_log = view_log or ViewLog(records)

    def refuse(request: Request, reason: str) -> HTTPException:
        """Record a failed authentication (rate-limited per source) and the 401 to raise."""
        path = "".join(c if c.isprintable() else "?" for c in request.url.path[:200])  # no escapes in a terminal
        detail: dict[str, Any] = {"method": request.method, "path": path}
        if reason.startswith("revoked:"):
            reason, detail["key"] = "revoked", reason.partition(":")[2]
        elif reason == "malformed":
            scheme = (request.headers.get("authorization") or "").strip().partition(" ")[0]
            detail["scheme"] = scheme if SCHEME.fullmatch(scheme) else "?"
        auth_log.record(request.client.host if request.client else "unknown", reason, **detail)
        return HTTPException(401, "a valid API key is required (Authorization: Bearer <key>)",
                             headers={"WWW-Authenticate": "Bearer"})

    def holder(role: str) -> Callable[..., ApiKey]:
        def check(request: Request, _: HTTPAuthorizationCredentials | None = Depends(bearer)) -> ApiKey:
            # the header is parsed here rather than by HTTPBearer (kept for the OpenAPI schema), which answers
            # None alike for a missing and a malformed header
            token, reason = bearer_token(request.headers.get("authorization"))
            key = None
            if token is not None:
                key, reason = records.identify_key(token)
            if key is None:
                raise refuse(request, reason)
            auth_log.flush()  # a window that has ended gets its summary even when the flood has stopped
            if role in ("custodian", "auditor") and key.role != role:
                records.audit(f"api:{key.name}", "api-denied", "refused", None, needed=role, role=key.role)
                raise HTTPException(403, f"the key {key.name!r} has the role {key.role!r}; this needs {role!r}")
            return key
        return check

    custodian, reader, auditor = holder("custodian"), holder("any"), holder("auditor")
    sessions_root = provisioner.site.sessions
    player_cache = provisioner.site.player_cache

    def session_folder(session: str) -> Path:
        if not SESSION_ID.fullmatch(session):
            raise HTTPException(404, f"no session {session!r}")
        folder = sessions_root / session
        if not folder.is_dir():
            raise HTTPException(404, f"no session {session!r}")
        return folder

    def viewed(key: ApiKey, folder: Path, endpoint: str, recipient: str | None = None) -> None:
        """Record that `key` is about to be shown session content (before it is: if the event cannot be written,
        nothing is served)."""
        view_log.record(key.name, key.role, folder.name, endpoint,
                        recipient if recipient is not None else read_meta(folder).get("recipient"))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_expiry_loop(provisioner, expiry_interval, auth_log)) if expiry_interval else None
        intake = None
        if intake_interval:  # submissions from enclaves' workspaces into SITE/airlock, in a thread of its own
            from deploy.airlock.intake import site_intake

            intake = await asyncio.to_thread(site_intake, provisioner.site, records, intake_interval)
        try:
            yield
        finally:
            if intake is not None:
                await asyncio.to_thread(intake.stop)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            auth_log.flush(force=True)  # the dropped failures of the last window are not lost at shutdown

    app = FastAPI(title="safeshare custodian service", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None,
                  description="Provision and revoke per-recipient enclaves, list who has access, read the audit "
                              "log. Bearer API keys with the role custodian (changes) or auditor (reads).")

    @app.get("/healthz", summary="liveness (no key needed)")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "site": provisioner.site.site_id}

    @app.get("/recipients", summary="who has access to what, until when, with live sessions")
    def list_recipients(all: bool = Query(False, description="include revoked and expired recipients"),
                        key: ApiKey = Depends(reader)) -> list[dict[str, Any]]:
        return provisioner.recipients(include_ended=all)

    @app.get("/recipients/{name}", summary="one recipient")
    def get_recipient(name: str, key: ApiKey = Depends(reader)) -> dict[str, Any]:
        for row in provisioner.recipients(include_ended=True):
            if row["name"] == name:
                return row
        raise HTTPException(404, f"no recipient named {name!r}")

    @app.post("/recipients", summary="provision a recipient's enclave from a recipient policy (idempotent)",
              responses={400: {"description": "the policy cannot be used"},
                         409: {"description": "provisioning failed (engine, images, kiosk not ready)"}})
    def provision(request: ProvisionRequest, key: ApiKey = Depends(custodian)) -> dict[str, Any]:
        try:
            ttl = parse_ttl(request.ttl) if request.ttl else None
        except ValueError as exc:
            raise HTTPException(400, f"ttl: {exc}") from None
        with tempfile.TemporaryDirectory(prefix="safeshare-policy-") as folder:
            path = Path(folder) / "recipient-policy.yaml"
            path.write_text(request.policy_yaml)
            try:
                result = provisioner.provision(path, f"api:{key.name}", new_token=request.new_token, ttl=ttl)
            except ProvisionError as exc:
                raise HTTPException(400 if exc.bad_input else 409, str(exc)) from None
        return result.as_dict()

    @app.delete("/recipients/{name}", summary="revoke: end sessions, invalidate tokens, remove the enclave")
    def revoke(name: str, request: RevokeRequest | None = None,
               key: ApiKey = Depends(custodian)) -> dict[str, Any]:
        try:
            return provisioner.revoke(name, f"api:{key.name}", (request or RevokeRequest()).reason).as_dict()
        except ProvisionError as exc:
            raise HTTPException(404 if exc.bad_input else 409, str(exc)) from None

    @app.post("/expire", summary="revoke every recipient whose policy expired (also done every minute)")
    def expire(key: ApiKey = Depends(custodian)) -> list[dict[str, Any]]:
        return [result.as_dict() for result in provisioner.enforce_expiry(f"api:{key.name}")]

    @app.get("/audit-events", summary="the custodian audit log, oldest first")
    def audit_events(recipient: str | None = None, action: str | None = None,
                     limit: int = Query(1000, ge=1, le=100_000),
                     key: ApiKey = Depends(reader)) -> list[dict[str, Any]]:
        return [event.as_dict() for event in records.events(recipient=recipient, action=action, limit=limit)]

    # --- auditors -----------------------------------------------------------------------------------------------

    @app.get("/player", include_in_schema=False)
    def player_page() -> FileResponse:
        """The web player (static: it holds no data; everything it shows comes from the endpoints below, with the
        auditor's key)."""
        return FileResponse(STATIC / "player.html", media_type="text/html",
                            headers={"Cache-Control": "no-store", "Content-Security-Policy": PLAYER_CSP})

    @app.get("/static/player.js", include_in_schema=False)
    def player_script() -> FileResponse:
        return FileResponse(STATIC / "player.js", media_type="text/javascript", headers={"Cache-Control": "no-store"})

    @app.get("/audit/sessions", summary="recorded sessions with summaries (auditors)")
    def audit_sessions(recipient: str | None = None, release: str | None = None,
                       since: datetime | None = None, until: datetime | None = None, flagged: bool = False,
                       key: ApiKey = Depends(auditor)) -> list[dict[str, Any]]:
        if not sessions_root.is_dir():
            return []
        return [summary.as_dict() for summary in find_sessions(
            sessions_root, recipient=recipient, release=release, since=_aware(since), until=_aware(until),
            flagged=flagged)]

    @app.get("/audit/sessions/{session}/verify", summary="integrity of one session: chain, seal, recording hash")
    def audit_verify(session: str, key: ApiKey = Depends(auditor)) -> dict[str, Any]:
        folder = session_folder(session)
        viewed(key, folder, "verify")
        return verify_site_session(provisioner.site, folder).as_dict()

    @app.get("/audit/sessions/{session}/player", summary="the prepared player's index: frames, markers, key log")
    def audit_player(session: str, key: ApiKey = Depends(auditor)) -> dict[str, Any]:
        folder = session_folder(session)
        try:
            player = prepare(folder, player_cache)
        except (FileNotFoundError, ValueError, TypeError, KeyError) as exc:  # a recording or log it cannot read
            raise HTTPException(409, f"session {session}: cannot prepare the player: {type(exc).__name__}: {exc}") \
                from None
        viewed(key, folder, "player", player.index.get("recipient"))
        # verified only if the frames were decoded from the bytes the verified seal names (not a second read's)
        check = verify_site_session(provisioner.site, folder)
        shown = judge(folder, check, player.sha256, player.log_head)
        # a session a restarted gateway recovered is proven only up to its last signed checkpoint: not `verified`,
        # and `partial` says how many lines are proven and how many after them are not
        partial = {"verified_lines": check.verified_lines, "unverified_lines": check.unverified_lines,
                   "note": check.partial_note} if check.partial and not check.findings else None
        return {**player.index, "frames_url": f"/audit/sessions/{session}/frames?sha256={player.sha256}",
                "verified": shown.verified, "integrity": shown.as_dict(), "partial": partial}

    @app.get("/audit/sessions/{session}/frames", summary="the prepared frames (PNG images; HTTP Range supported)")
    def audit_frames(session: str, sha256: str | None = Query(None, description="the recording hash the player's "
                                                                                "index names (its frames_url)"),
                     key: ApiKey = Depends(auditor)) -> FileResponse:
        folder = session_folder(session)
        if sha256 is None or not SHA256.fullmatch(sha256):
            raise HTTPException(409, "name the prepared recording: use the frames_url of GET .../player")
        path = player_cache / folder.name / sha256 / "frames.bin"  # prepared from exactly these bytes, never rewritten
        if not path.is_file():
            raise HTTPException(409, "prepare the player first (GET .../player)")
        viewed(key, folder, "frames")
        return FileResponse(path, media_type="application/octet-stream", headers={"Cache-Control": "no-store"})

    # --- checkers: the airlock's review pages (/review, signed in as a person; deploy/airlock/review.py) ------------
    from deploy.airlock.review import mount_review

    mount_review(app, records, provisioner.site, auth_log)
    return app


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)


async def _expiry_loop(provisioner: Provisioner, interval: float, auth_log: AuthFailureLog) -> None:
    """Expiry and the players of newly ended sessions every `interval` seconds, session retention every hour, and
    the summary of failed authentications once their window has ended."""
    from deploy.audit.retention import apply_retention
    from proxy.db import utcnow

    last_retention = -1e18
    loop = asyncio.get_running_loop()
    while True:
        try:
            results = await asyncio.to_thread(provisioner.enforce_expiry)
            for result in results:
                log.warning("recipient %s expired: access revoked", result.recipient)
        except Exception as exc:  # keep checking: a failed round is retried at the next
            log.error("expiry check failed: %s", exc)
        try:  # players of newly ended sessions, a few per round, so that a first look does not wait
            prepared = await asyncio.to_thread(prepare_ended, provisioner.site.sessions, provisioner.site.player_cache,
                                               5)
            if prepared:
                log.info("prepared the player of %d ended session(s)", len(prepared))
        except Exception as exc:
            log.error("player preparation failed: %s", exc)
        try:
            await asyncio.to_thread(auth_log.flush)
        except Exception as exc:
            log.error("writing the summary of failed authentications failed: %s", exc)
        if loop.time() - last_retention >= 3600:
            last_retention = loop.time()
            try:
                deleted = await asyncio.to_thread(apply_retention, provisioner.site, provisioner.records, utcnow())
                for item in deleted:
                    log.warning("session %s deleted: past its %d-day retention", item["session"],
                                item["retention_days"])
            except Exception as exc:
                log.error("retention run failed: %s", exc)
        await asyncio.sleep(interval)


def parse_trusted_proxies(values: Sequence[str]) -> list[str]:
    """The addresses (IP or network, e.g. 10.0.0.5 or 10.0.0.0/24) of the reverse proxies whose X-Forwarded-For and
    X-Forwarded-Proto headers the service believes. Raises ValueError naming a value that is not one ("*" too:
    trusting every peer would let any client choose the source its failed authentications are recorded under)."""
    out = []
    for value in values:
        try:
            out.append(str(ipaddress.ip_network(value.strip(), strict=False)))
        except ValueError:
            raise ValueError(f"--trusted-proxy {value!r} is not an IP address or network") from None
    return out


def uvicorn_proxy_settings(trusted_proxies: Sequence[str]) -> dict[str, Any]:
    """uvicorn's proxy-header settings for the service. uvicorn's own default believes X-Forwarded-For from
    127.0.0.1 and ::1 (or $FORWARDED_ALLOW_IPS): behind no proxy, with the service on loopback, every client could
    then name the source address recorded for it. So the peer address is the source unless the site names its
    proxies; and then only theirs."""
    if not trusted_proxies:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": list(trusted_proxies)}


def serve(site: Site, host: str, port: int, *, expiry_interval: float = 60.0,
          trusted_proxies: Sequence[str] = (), intake_interval: float = 1.0) -> int:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    provisioner = Provisioner(site)
    try:
        uvicorn.run(create_app(provisioner, expiry_interval=expiry_interval, intake_interval=intake_interval),
                    host=host, port=port,
                    log_level="info", **uvicorn_proxy_settings(trusted_proxies))
    finally:
        provisioner.close()
    return 0
