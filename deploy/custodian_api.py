"""The custodian service: the provisioning commands over HTTP (FastAPI, OpenAPI at /docs and /openapi.json).

Every endpoint but /healthz needs `Authorization: Bearer <key>` with a key from `safeshare custodian key add`. Keys
have a role: `custodian` may provision and revoke, `auditor` may only read (recipients, audit events). A missing or
unknown key gets 401, a key without the role 403 (recorded as a refused audit event, since it is an attempt by a
known holder). The service also enforces expiry: every `expiry_interval` seconds it revokes recipients whose
policy expired, as the actor `system:expiry`.

Provisioning takes seconds and talks to the Docker engine synchronously, so the endpoints are plain functions
(FastAPI runs them in its thread pool) and the site lock in Provisioner orders them against each other and the CLI.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from deploy.provision import Provisioner, ProvisionError
from deploy.records import ApiKey
from deploy.site import Site
from proxy.tokens import parse_ttl

log = logging.getLogger("safeshare.custodian")
bearer = HTTPBearer(auto_error=False, description="an API key from `safeshare custodian key add`")


class ProvisionRequest(BaseModel):
    policy_yaml: str = Field(description="the recipient policy (YAML text, as the file `safeshare provision` reads)",
                             max_length=1_000_000)
    new_token: bool = Field(False, description="issue a new token even if one is active")
    ttl: str | None = Field(None, description="token lifetime, e.g. 8h or 14d (default: until the policy expires)")


class RevokeRequest(BaseModel):
    reason: str = Field("revoked by the custodian", max_length=500)


def create_app(provisioner: Provisioner, *, expiry_interval: float | None = 60.0) -> FastAPI:
    records = provisioner.records

    def holder(role: str) -> Callable[..., ApiKey]:
        def check(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> ApiKey:
            key = records.check_key(credentials.credentials if credentials else None)
            if key is None:
                raise HTTPException(401, "a valid API key is required (Authorization: Bearer <key>)",
                                    headers={"WWW-Authenticate": "Bearer"})
            if role == "custodian" and key.role != "custodian":
                records.audit(f"api:{key.name}", "api-denied", "refused", None, needed=role, role=key.role)
                raise HTTPException(403, f"the key {key.name!r} has the role {key.role!r}; this needs {role!r}")
            return key
        return check

    custodian, reader = holder("custodian"), holder("any")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_expiry_loop(provisioner, expiry_interval)) if expiry_interval else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    app = FastAPI(title="safeshare custodian service", version="1", lifespan=lifespan,
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

    return app


async def _expiry_loop(provisioner: Provisioner, interval: float) -> None:
    while True:
        try:
            results = await asyncio.to_thread(provisioner.enforce_expiry)
            for result in results:
                log.warning("recipient %s expired: access revoked", result.recipient)
        except Exception as exc:  # keep checking: a failed round is retried at the next
            log.error("expiry check failed: %s", exc)
        await asyncio.sleep(interval)


def serve(site: Site, host: str, port: int, *, expiry_interval: float = 60.0) -> int:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    provisioner = Provisioner(site)
    try:
        uvicorn.run(create_app(provisioner, expiry_interval=expiry_interval), host=host, port=port,
                    log_level="info")
    finally:
        provisioner.close()
    return 0
