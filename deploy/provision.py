"""Custodian provisioning: one enclave (an app and a kiosk container on their own networks) per recipient, behind
the site's one gateway, through the Docker API.

    provision(policy)  the recipient's networks, app (a verified copy of the sealed release, SITE/enclaves/<rid>/
                       release/<dataset>/<id>, mounted read-only: deploy/release_copy.py) and kiosk, the gateway
                       joined to the recipient's VNC network, and a session token bound to that kiosk. Running it
                       again with the same policy changes nothing (same containers, same token); a changed policy
                       or release replaces the enclave and the token.
    revoke(name)       tokens invalidated (the gateway ends live sessions within a second), containers, networks,
                       the VNC secret and the release copy removed; session recordings, the policy copy and the
                       app's workspace (SITE/enclaves/<rid>/workspace: outputs, airlock drafts) stay, and so do
                       the recipient's airlock requests (SITE/airlock), though no intake reads a revoked workspace.
    enforce_expiry()   revoke every recipient whose policy expired (the custodian service runs it every minute;
                       `safeshare revoke --expired` runs it once, e.g. from cron).
    site_down()        remove the site's gateway container and front network (`safeshare site down`), e.g. once
                       the last recipient is revoked; refused while enclaves remain unless forced.

The release is verified against the site's trust store (SITE/trust.json) before anything starts, and that file is
mounted read-only into the app container (/trust.json, passed as --trust), so the app checks the seal's signature
itself. The app mounts the custodian's copy of the bundle, verified after it was copied, so nothing a writer of the
releases folder changes or adds there after provisioning reaches a running (or restarted) enclave; provisioning
again copies the release anew when its seal changed.

Networks, per recipient `rid` (a /27 each from the site's enclave pool, so that a host is not limited by Docker's
~30 default pools):

    ss-e-<rid>  internal: app + kiosk. The kiosk's browser reaches the app as `app`.
    ss-v-<rid>  internal: kiosk + gateway. The kiosk's VNC server listens on its address here only; the gateway
                listens on the front network only, so the kiosk can open nothing on the gateway.
    ssf-<site>  the front bridge: the gateway alone, published on 127.0.0.1:<port>. Not ss-*: the host rule
                (iptables INPUT -i ss-+ DROP) keeps enclave bridges from reaching the host, not the front.

What an enclave is (names, networks, container specs, command lines) is decided by deploy/plan.py without an
engine, and made so by deploy/reconcile.py; this module is the custodian's side around them: the policy and release
checks, the site's files and secrets, tokens, one action at a time per site, and the audit log. Every action,
refused or failed ones too, is an audit event in the site database.
"""
from __future__ import annotations

import fcntl
import getpass
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from deploy.plan import APP_UID, LABEL, PoolFull, enclave_names, plan_enclave, plan_gateway, release_ref
from deploy.reconcile import DockerReconciler, ReconcileError
from deploy.records import ACTIVE, EXPIRED, REVOKED, Records
from deploy.release_copy import RELEASE_DIR, copy_release
from deploy.release_copy import prune as prune_copies
from deploy.release_copy import remove_all as remove_release_copies
from deploy.site.folder import Site, give_to_gateway, write_atomic
from engine.bundle import BundleError, resolve_release
from proxy.db import utcnow
from policies.recipient import PolicyError, RecipientPolicy, load_recipient_policy
from proxy.tokens import SessionBook, TokenStore, issue_for_policy

__all__ = ["LABEL", "ProvisionError", "ProvisionResult", "Provisioner", "RevokeResult", "cli_actor"]

DEFAULT_TTL = timedelta(days=30)  # token lifetime when the policy sets no expiry
READY_TIMEOUT = 90.0


class ProvisionError(Exception):
    """Provisioning or revocation could not be done (exit 1; 2 for bad input when `bad_input`)."""

    def __init__(self, message: str, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"


@dataclass
class ProvisionResult:
    recipient: str
    rid: str
    release: str
    status: str  # created, replaced, unchanged
    url: str | None  # only when a token was issued now (tokens are shown once)
    token_id: int
    expires_at: datetime
    containers: dict[str, str]
    networks: list[str]
    seconds: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"recipient": self.recipient, "rid": self.rid, "release": self.release, "status": self.status,
                "url": self.url, "token_id": self.token_id, "expires_at": self.expires_at.isoformat(),
                "containers": self.containers, "networks": self.networks, "seconds": round(self.seconds, 2),
                "notes": self.notes}


@dataclass
class RevokeResult:
    recipient: str
    status: str
    tokens_revoked: int
    sessions_ended: list[str]
    containers_removed: list[str]
    networks_removed: list[str]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"recipient": self.recipient, "status": self.status, "tokens_revoked": self.tokens_revoked,
                "sessions_ended": self.sessions_ended, "containers_removed": self.containers_removed,
                "networks_removed": self.networks_removed, "seconds": round(self.seconds, 2)}


@contextmanager
def _engine_errors() -> Iterator[None]:
    """An engine that could not be brought to the plan is a refusal (exit 1), audited like any other."""
    try:
        yield
    except ReconcileError as exc:
        raise ProvisionError(str(exc)) from None


def ensure_workspace(path: Path, uid: int = APP_UID) -> Path:
    """The app's workspace (SITE/enclaves/<rid>/workspace, its /state): a real folder (a symlink there is removed,
    never followed into a bind mount), 0700 and owned by the app container's uid so that it can write its outputs
    and airlock drafts (root only; otherwise the caller's). What the app wrote before is kept."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
    os.chmod(path, 0o700)
    return path


class Provisioner:
    """Provision, revoke and list the enclaves of one site: the custodian's checks, files, tokens and audit
    events around a plan (deploy/plan.py) that a reconciler (deploy/reconcile.py) applies. `client` is a
    `docker.DockerClient`; created on first use so that listing and key management work without an engine."""

    def __init__(self, site: Site, *, client: Any = None, images: dict[str, str] | None = None,
                 clock: Callable[[], datetime] = utcnow, ready_timeout: float = READY_TIMEOUT) -> None:
        self.site = site
        self._client = client
        self._images = images
        self.clock = clock
        self.ready_timeout = ready_timeout
        self.store = TokenStore(site.db_url, clock=clock)
        self.records = Records(self.store.engine, clock=clock)
        self.book = SessionBook(self.store)

    def close(self) -> None:
        self.store.dispose()
        if self._client is not None:
            self._client.close()

    # --- docker ----------------------------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            try:
                self._client = docker.from_env(timeout=120)
                self._client.ping()
            except docker.errors.DockerException as exc:
                self._client = None
                raise ProvisionError(f"no Docker engine answers ({exc}); start one with `bash scripts/dockerd.sh` "
                                     f"or `safeshare engine start`") from None
        return self._client

    @property
    def engine(self) -> DockerReconciler:
        return DockerReconciler(self.client, self.site.site_id, ready_timeout=self.ready_timeout)

    @property
    def images(self) -> dict[str, str]:
        if self._images is None:
            from deploy.images.build import image_refs

            self._images = image_refs()
        return self._images

    # --- locking ---------------------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One custodian action at a time per site (CLI, API and the expiry job may run together)."""
        self.site.root.mkdir(parents=True, exist_ok=True)
        with open(self.site.lock_file, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- provision -------------------------------------------------------------------------------------------------

    def provision(self, policy_path: str | Path, actor: str, *, new_token: bool = False,
                  ttl: timedelta | None = None) -> ProvisionResult:
        started = time.monotonic()
        policy_path = Path(policy_path)
        try:
            policy = load_recipient_policy(policy_path)
        except PolicyError as exc:
            self.records.audit(actor, "provision", "refused", None, policy=str(policy_path), error=str(exc))
            raise ProvisionError(str(exc), bad_input=True) from None
        name = policy.recipient
        try:
            with self._locked():
                result = self._provision(policy, policy_path, new_token, ttl, started)
        except ProvisionError as exc:
            self.records.audit(actor, "provision", "refused" if exc.bad_input else "error", name,
                               policy=str(policy_path), error=str(exc))
            raise
        self.records.audit(actor, "provision", "unchanged" if result.status == "unchanged" else "ok", name,
                           policy=str(policy_path), release=result.release, status=result.status,
                           token_id=result.token_id, token_issued=result.url is not None,
                           expires_at=result.expires_at.isoformat(), containers=result.containers,
                           seconds=round(result.seconds, 2))
        return result

    def _provision(self, policy: RecipientPolicy, policy_path: Path, new_token: bool, ttl: timedelta | None,
                   started: float) -> ProvisionResult:
        name, now = policy.recipient, self.clock()
        if not policy.release:
            raise ProvisionError(f"{policy_path}: field 'release' is required to provision (the sealed release "
                                 f"the recipient may see)", bad_input=True)
        policy_end = policy.access_ends
        if policy_end is not None and policy_end <= now:
            raise ProvisionError(f"{policy_path}: field 'expires' is {policy.expires}: access has already ended",
                                 bad_input=True)
        try:
            bundle = resolve_release(self.site.releases, policy.release, trust=self.site.trust_file)
        except BundleError as exc:
            raise ProvisionError(f"{policy_path}: field 'release': {exc}", bad_input=True) from None
        release = release_ref(bundle)
        self.site.prepare()
        self.site.db_files_to_gateway()  # before the gateway opens it: a root-owned file would be read-only there
        rid = self.site.recipient_id(name)
        names = enclave_names(self.site.site_id, rid)
        # what the enclave mounts: a verified copy the custodian owns, not the live bundle folder (release_copy)
        try:
            copy = copy_release(bundle, self.site.release_copy(rid, release), self.site.trust_file, release)
        except BundleError as exc:
            raise ProvisionError(f"{policy_path}: field 'release': {exc}", bad_input=True) from None

        # the site's output floor, which the app reads at start: a broken one is named here, not in an app log
        from engine.errors import InputError
        from outputs.floor import load_floor

        try:
            load_floor(self.site.root)
        except InputError as exc:
            raise ProvisionError(f"the site's output rules: {exc}", bad_input=True) from None
        ensure_workspace(self.site.workspace(rid))
        policy_bytes = policy_path.read_bytes()
        policy_sha = hashlib.sha256(policy_bytes).hexdigest()
        policy_file = self.site.policy_file(rid)
        write_atomic(policy_file, policy_bytes, 0o644)
        password_file = self._ensure_secret(rid)

        engine = self.engine
        with _engine_errors():
            try:
                subnets = engine.allocate(names, self.site.settings.enclave_subnets())
            except PoolFull:
                raise ProvisionError(f"the enclave pool {self.site.settings.enclave_pool} is full; set a larger "
                                     f"'enclave_pool' in {self.site.root / 'site.json'}") from None
            notes = engine.ensure_gateway(plan_gateway(self.site, self.images["gateway"]))
            plan = plan_enclave(self.site, policy, bundle, self.images, subnets)
            applied = engine.apply(plan)
        prune_copies(self.site.enclave_dir(rid), copy)   # the enclave runs this release now

        previous = self.records.recipient(name)
        same_grant = (previous is not None and previous.status == ACTIVE and previous.release == release
                      and previous.policy_sha256 == policy_sha)
        active = [t for t in self.store.list_tokens(name, active_only=True) if t.target_name == names.target]
        url = None
        if active and same_grant and not new_token:
            token_id, expires_at = active[-1].token_id, active[-1].expires_at
        else:
            if active:
                self.store.revoke(recipient=name, reason="replaced by a new provisioning")
                notes.append(f"{len(active)} older token(s) revoked: the researcher needs the new URL")
            requested = now + ttl if ttl else (policy_end or now + DEFAULT_TTL)
            issued = issue_for_policy(self.store, policy, policy_file, plan.upstream, expires_at=requested,
                                      password_file=str(password_file), target_name=names.target, release=release,
                                      now=now)
            expires_at = issued.expires_at
            token_id, url = issued.token_id, f"{self.site.settings.url}?token={issued.token}"
        self.site.db_files_to_gateway()
        self.records.save_recipient(name, rid=rid, release_ref=policy.release, release=release,
                                    policy_sha256=policy_sha, policy_file=str(policy_file), expires_at=policy_end)
        status = "unchanged" if applied.status == "unchanged" and url is None else \
            "created" if applied.status == "created" else "replaced"
        return ProvisionResult(name, rid, release, status, url, token_id, expires_at, applied.containers,
                               [net.name for net in plan.networks], time.monotonic() - started, notes)

    def _ensure_secret(self, rid: str) -> Path:
        """The kiosk's VNC password: made once per enclave, readable by the gateway's uid only (the kiosk's
        supervisor reads it as root)."""
        path = self.site.password_file(rid)
        if not path.is_file() or not path.read_text().strip():
            write_atomic(path, (secrets.token_urlsafe(24) + "\n").encode(), 0o400)
        for item in (path.parent, path):
            give_to_gateway(item)
        path.parent.chmod(0o700)
        return path

    # --- revoke ----------------------------------------------------------------------------------------------------

    def revoke(self, name: str, actor: str, reason: str = "revoked by the custodian",
               status: str = REVOKED) -> RevokeResult:
        started = time.monotonic()
        with self._locked(), _engine_errors():
            known = self.records.recipient(name)
            rid = known.rid if known is not None else self.site.recipient_id(name)
            engine = self.engine
            if known is None and not engine.find("container", rid=rid) and not self.store.list_tokens(
                    name, active_only=True):
                self.records.audit(actor, "revoke", "refused", name, error="no such recipient")
                raise ProvisionError(f"no recipient named {name!r} at site {self.site.root}", bad_input=True)
            live = [s.session_id for s in self.book.list(name, live_only=True)]
            count = self.store.revoke(recipient=name, reason=reason)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and self.book.list(name, live_only=True):
                time.sleep(0.05)
            removed = engine.remove_enclave(rid)
            shutil.rmtree(self.site.secrets / rid, ignore_errors=True)
            remove_release_copies(self.site.enclave_dir(rid) / RELEASE_DIR)  # the workspace stays (airlock)
            if known is not None:
                self.records.end_recipient(name, status, reason)
        result = RevokeResult(name, status, count, live, removed.containers, removed.networks,
                              time.monotonic() - started)
        self.records.audit(actor, "revoke" if status == REVOKED else "expire", "ok", name, reason=reason,
                           **{k: v for k, v in result.as_dict().items() if k not in ("recipient",)})
        return result

    def enforce_expiry(self, actor: str = "system:expiry") -> list[RevokeResult]:
        """Revoke every active recipient whose policy's `expires` day has ended."""
        now = self.clock()
        results = []
        for recipient in self.records.recipients(status=ACTIVE):
            if recipient.expires_at is not None and recipient.expires_at <= now:
                results.append(self.revoke(recipient.name, actor, f"expired on {recipient.expires_at.date()}",
                                           status=EXPIRED))
        return results

    # --- the site's gateway ----------------------------------------------------------------------------------------

    def gateway_state(self) -> dict[str, Any]:
        """The site's gateway: {'state': 'running' | 'stopped' | 'absent' | 'unknown', 'container', 'url'}; unknown
        when no engine answers."""
        try:
            found = self.engine.find("container", role="gateway")
        except (ProvisionError, ReconcileError) as exc:
            return {"state": "unknown", "container": None, "url": self.site.settings.url, "error": str(exc)}
        if not found:
            return {"state": "absent", "container": None, "url": self.site.settings.url}
        gateway = found[0]
        return {"state": "running" if gateway.status == "running" else "stopped", "container": gateway.name,
                "url": self.site.settings.url, "status": gateway.status}

    def site_down(self, actor: str, force: bool = False) -> dict[str, Any]:
        """Remove the site's gateway container and front network (idempotent: nothing there is nothing to do).
        Refused while recipient enclaves remain (their researchers would lose access without their tokens being
        revoked) unless `force`; provisioning again brings the gateway back."""
        started = time.monotonic()
        with self._locked(), _engine_errors():
            engine = self.engine
            enclaves = engine.enclave_recipients()
            if enclaves and not force:
                self.records.audit(actor, "site-down", "refused", None, error="enclaves remain", recipients=enclaves)
                raise ProvisionError(f"enclaves of {', '.join(enclaves)} still run at site {self.site.root}: revoke "
                                     f"them first, or --force to remove the gateway anyway")
            removed = engine.remove_gateway()
        result = {"site": self.site.site_id, "containers_removed": removed.containers,
                  "networks_removed": removed.networks, "seconds": round(time.monotonic() - started, 2)}
        self.records.audit(actor, "site-down", "ok" if removed.containers or removed.networks else "unchanged", None,
                           **{k: v for k, v in result.items() if k != "site"})
        return result

    # --- listing ---------------------------------------------------------------------------------------------------

    def recipients(self, include_ended: bool = False, with_containers: bool = True) -> list[dict[str, Any]]:
        """Who has access to what, until when, with live sessions (and the containers' state when an engine
        answers)."""
        states: dict[str, dict[str, str]] = {}
        if with_containers:
            try:
                states = self.engine.container_states()
            except (ProvisionError, ReconcileError):
                states = {}
        rows = []
        for recipient in self.records.recipients():
            if recipient.status != ACTIVE and not include_ended:
                continue
            tokens = self.store.list_tokens(recipient.name, active_only=True)
            sessions = self.book.list(recipient.name, live_only=True)
            rows.append({**recipient.as_dict(),
                         "tokens": [{"id": t.token_id, "expires_at": t.expires_at.isoformat(),
                                     "last_used_at": t.last_used_at.isoformat() if t.last_used_at else None}
                                    for t in tokens],
                         "live_sessions": [{"session_id": s.session_id, "started_at": s.started_at.isoformat(),
                                            "release": s.release} for s in sessions],
                         "containers": states.get(recipient.rid, {})})
        return rows
