"""Custodian provisioning: one enclave (an app and a kiosk container on their own networks) per recipient, behind
the site's one gateway, through the Docker API.

    provision(policy)  the recipient's networks, app (the sealed release mounted read-only) and kiosk, the gateway
                       joined to the recipient's VNC network, and a session token bound to that kiosk. Running it
                       again with the same policy changes nothing (same containers, same token); a changed policy
                       or release replaces the enclave and the token.
    revoke(name)       tokens invalidated (the gateway ends live sessions within a second), containers, networks
                       and the VNC secret removed; session recordings and the policy copy stay.
    enforce_expiry()   revoke every recipient whose policy expired (the custodian service runs it every minute;
                       `safeshare revoke --expired` runs it once, e.g. from cron).
    site_down()        remove the site's gateway container and front network (`safeshare site down`), e.g. once
                       the last recipient is revoked; refused while enclaves remain unless forced.

The release is verified against the site's trust store (SITE/trust.json) before anything starts, and that file is
mounted read-only into the app container (/trust.json, passed as --trust), so the app checks the seal's signature
itself: a bundle changed in the releases folder after provisioning is refused when the app (re)starts.

Networks, per recipient `rid` (a /27 each from the site's enclave pool, so that a host is not limited by Docker's
~30 default pools):

    ss-e-<rid>  internal: app + kiosk. The kiosk's browser reaches the app as `app`.
    ss-v-<rid>  internal: kiosk + gateway. The kiosk's VNC server listens on its address here only; the gateway
                listens on the front network only, so the kiosk can open nothing on the gateway.
    ssf-<site>  the front bridge: the gateway alone, published on 127.0.0.1:<port>. Not ss-*: the host rule
                (iptables INPUT -i ss-+ DROP) keeps enclave bridges from reaching the host, not the front.

Every action, refused or failed ones too, is an audit event in the site database.
"""
from __future__ import annotations

import fcntl
import getpass
import hashlib
import ipaddress
import json
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from deploy.images.hardening import HARDENING
from deploy.readiness import wait_for_http_ok
from deploy.records import ACTIVE, EXPIRED, REVOKED, Records
from deploy.site import Site, give_to_gateway, write_atomic
from enclave.kiosk.ready import find_ready
from engine.bundle import BundleError, resolve_release
from proxy.db import utcnow
from policies.recipient import PolicyError, RecipientPolicy, load_recipient_policy
from proxy.tokens import SessionBook, TokenStore, issue_for_policy

LABEL = "org.safeshare"
APP_PORT = 8050
VNC_PORT = 5900
GATEWAY_PORT = 6080
APP_TRUST = "/trust.json"  # where the site's trust store is mounted (read-only) in app containers
KIOSK_V_HOST = 20  # the kiosk's host number on its VNC network (the gateway gets one of the lower ones)
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


def _spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


class Provisioner:
    """Provision, revoke and list the enclaves of one site. `client` is a `docker.DockerClient`; created on first
    use so that listing and key management work without an engine."""

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
    def images(self) -> dict[str, str]:
        if self._images is None:
            from deploy.images.build import image_refs

            self._images = image_refs()
        return self._images

    def _labels(self, role: str, recipient: str | None = None, rid: str | None = None, **extra: str) -> dict[str, str]:
        labels = {f"{LABEL}.site": self.site.site_id, f"{LABEL}.role": role}
        if recipient is not None:
            labels[f"{LABEL}.recipient"] = recipient
        if rid is not None:
            labels[f"{LABEL}.rid"] = rid
        labels.update({f"{LABEL}.{key}": value for key, value in extra.items()})
        return labels

    def _find(self, kind: str, role: str | None = None, rid: str | None = None) -> list[Any]:
        filters = [f"{LABEL}.site={self.site.site_id}"]
        if role:
            filters.append(f"{LABEL}.role={role}")
        if rid:
            filters.append(f"{LABEL}.rid={rid}")
        if kind == "container":
            return self.client.containers.list(all=True, filters={"label": filters})
        return self.client.networks.list(filters={"label": filters})

    def _names(self, rid: str) -> dict[str, str]:
        site = self.site.site_id
        return {"enclave_net": f"ss-e-{rid}", "vnc_net": f"ss-v-{rid}", "front_net": f"ssf-{site}",
                "app": f"ss-{site}-{rid}-app", "kiosk": f"ss-{site}-{rid}-kiosk", "gateway": f"ss-{site}-gateway"}

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
                result = self._provision(policy, policy_path, actor, new_token, ttl, started)
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

    def _provision(self, policy: RecipientPolicy, policy_path: Path, actor: str, new_token: bool,
                   ttl: timedelta | None, started: float) -> ProvisionResult:
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
        release = f"{bundle.parent.name}/{bundle.name}"
        self.site.prepare()
        self.site.db_files_to_gateway()  # before the gateway opens it: a root-owned file would be read-only there
        rid = self.site.recipient_id(name)
        names = self._names(rid)
        notes: list[str] = []

        policy_bytes = policy_path.read_bytes()
        policy_sha = hashlib.sha256(policy_bytes).hexdigest()
        policy_file = self.site.policy_file(rid)
        write_atomic(policy_file, policy_bytes, 0o644)
        password_file = self._ensure_secret(rid)

        self._ensure_front(names["front_net"])
        enclave_net, vnc_net = self._ensure_enclave_networks(name, rid, names)
        gateway = self._ensure_gateway(names, notes)
        kiosk_ip = str(ipaddress.IPv4Network(vnc_net.attrs["IPAM"]["Config"][0]["Subnet"])[KIOSK_V_HOST])
        app_spec = {"image": self.images["app"], "bundle": str(bundle), "net": names["enclave_net"],
                    "trust": str(self.site.trust_file)}
        kiosk_spec = {"image": self.images["kiosk"], "size": policy.screen_text, "ip": kiosk_ip,
                      "password": str(password_file), "nets": [names["enclave_net"], names["vnc_net"]]}
        existing = {c.labels.get(f"{LABEL}.role"): c for c in self._find("container", rid=rid)}
        unchanged = all(
            role in existing and existing[role].labels.get(f"{LABEL}.spec") == _spec_hash(spec)
            and existing[role].status == "running"
            for role, spec in (("app", app_spec), ("kiosk", kiosk_spec)))
        created = not existing
        if not unchanged:
            for container in existing.values():
                container.remove(force=True)
            try:
                self._run_app(name, rid, names, bundle, app_spec)
                kiosk = self._run_kiosk(name, rid, names, password_file, kiosk_ip, kiosk_spec)
                self._connect(vnc_net, gateway)
                self._wait_ready(kiosk)
            except Exception:
                self._remove_enclave(rid, names)
                raise
        else:
            self._connect(vnc_net, gateway)
        containers = {c.labels[f"{LABEL}.role"]: c.id for c in self._find("container", rid=rid)}

        previous = self.records.recipient(name)
        same_grant = (previous is not None and previous.status == ACTIVE and previous.release == release
                      and previous.policy_sha256 == policy_sha)
        active = [t for t in self.store.list_tokens(name, active_only=True) if t.target_name == self._target(rid)]
        url = None
        if active and same_grant and not new_token:
            token_id, expires_at = active[-1].token_id, active[-1].expires_at
        else:
            if active:
                self.store.revoke(recipient=name, reason="replaced by a new provisioning")
                notes.append(f"{len(active)} older token(s) revoked: the researcher needs the new URL")
            requested = now + ttl if ttl else (policy_end or now + DEFAULT_TTL)
            issued = issue_for_policy(self.store, policy, policy_file, f"{names['kiosk']}:{VNC_PORT}",
                                      expires_at=requested, password_file=str(password_file),
                                      target_name=self._target(rid), release=release, now=now)
            expires_at = issued.expires_at
            token_id, url = issued.token_id, f"{self.site.settings.url}?token={issued.token}"
        self.site.db_files_to_gateway()
        self.records.save_recipient(name, rid=rid, release_ref=policy.release, release=release,
                                    policy_sha256=policy_sha, policy_file=str(policy_file), expires_at=policy_end)
        status = "unchanged" if unchanged and url is None else "created" if created else "replaced"
        return ProvisionResult(name, rid, release, status, url, token_id, expires_at, containers,
                               [names["enclave_net"], names["vnc_net"]], time.monotonic() - started, notes)

    def _target(self, rid: str) -> str:
        return f"{self.site.site_id}-{rid}"

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

    def _ensure_network(self, name: str, *, internal: bool, subnet: str, labels: dict[str, str]) -> Any:
        import docker

        found = self.client.networks.list(names=[name])
        found = [net for net in found if net.name == name]
        if found:
            net = found[0]
            net.reload()
            if net.attrs.get("Internal") != internal:
                raise ProvisionError(f"network {name} exists but is {'not ' if internal else ''}internal; remove it")
            return net
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        try:
            return self.client.networks.create(
                name, driver="bridge", internal=internal, ipam=ipam, labels=labels, check_duplicate=True,
                options={"com.docker.network.bridge.name": name})
        except docker.errors.APIError as exc:
            raise ProvisionError(f"network {name} ({subnet}) could not be created: {exc.explanation}") from None

    def _ensure_front(self, name: str) -> Any:
        return self._ensure_network(name, internal=False, subnet=self.site.settings.front_subnet or "",
                                    labels=self._labels("front-net"))

    def _ensure_enclave_networks(self, recipient: str, rid: str, names: dict[str, str]) -> tuple[Any, Any]:
        existing = {net.name: net for net in self._find("network", rid=rid)}
        if names["enclave_net"] in existing and names["vnc_net"] in existing:
            nets = existing[names["enclave_net"]], existing[names["vnc_net"]]
            for net in nets:
                net.reload()
            return nets
        used: set[ipaddress.IPv4Network] = set()
        for net in self.client.networks.list():
            for config in (net.attrs.get("IPAM") or {}).get("Config") or []:
                try:
                    used.add(ipaddress.IPv4Network(config.get("Subnet", ""), strict=False))
                except ValueError:
                    continue
        free = (subnet for subnet in self.site.settings.enclave_subnets()
                if not any(subnet.overlaps(other) for other in used))
        nets = []
        for key, role in (("enclave_net", "enclave-net"), ("vnc_net", "vnc-net")):
            if names[key] in existing:
                net = existing[names[key]]
                net.reload()
            else:
                subnet = next(free, None)
                if subnet is None:
                    raise ProvisionError(f"the enclave pool {self.site.settings.enclave_pool} is full; set a larger "
                                         f"'enclave_pool' in {self.site.root / 'site.json'}")
                net = self._ensure_network(names[key], internal=True, subnet=str(subnet),
                                           labels=self._labels(role, recipient, rid))
                net.reload()
            nets.append(net)
        return nets[0], nets[1]

    def _gateway_spec(self) -> dict[str, Any]:
        settings = self.site.settings
        return {"image": self.images["gateway"], "ip": settings.gateway_ip, "host": settings.gateway_host,
                "port": settings.gateway_port, "url": settings.url, "root": str(self.site.root),
                "db": self.site.db_url, "signing_key": str(self.site.gateway_signing_key)}

    def _ensure_gateway(self, names: dict[str, str], notes: list[str]) -> Any:
        spec = self._gateway_spec()
        found = self._find("container", role="gateway")
        if found:
            gateway = found[0]
            if gateway.labels.get(f"{LABEL}.spec") == _spec_hash(spec):
                if gateway.status != "running":
                    gateway.start()
                    notes.append("the gateway was not running: started")
                    self._wait_gateway()
                return gateway
            notes.append("the gateway's image or settings changed: recreated (live sessions were ended)")
            gateway.remove(force=True)
        site, settings = self.site, self.site.settings
        db_args = ["--db", site.db_url]  # SQLite in the bind-mounted db/, or PostgreSQL over the front network
        command = ["--listen", f"{settings.gateway_ip}:{GATEWAY_PORT}", "--sessions", str(site.sessions), *db_args,
                   "--name", f"{site.site_id}-gateway",
                   # signs every seal; SITE/secrets is mounted read-only, and a missing key stops the gateway
                   "--signing-key", str(site.gateway_signing_key)]
        # The origin researchers' browsers open the gateway under: it never trusts the request's Host header.
        command += ["--allowed-origin", settings.url.rstrip("/")]
        if settings.url.startswith("https://"):
            command += ["--secure-cookies"]
        volumes = {str(site.db_dir): {"bind": str(site.db_dir), "mode": "rw"},
                   str(site.sessions): {"bind": str(site.sessions), "mode": "rw"},
                   str(site.secrets): {"bind": str(site.secrets), "mode": "ro"},
                   str(site.policies): {"bind": str(site.policies), "mode": "ro"}}
        gateway = self.client.containers.create(
            self.images["gateway"], command, name=names["gateway"], detach=True,
            labels=self._labels("gateway", spec=_spec_hash(spec)),
            environment={"SAFESHARE_HEALTH_URL": f"http://{settings.gateway_ip}:{GATEWAY_PORT}/healthz"},
            ports={f"{GATEWAY_PORT}/tcp": (settings.gateway_host, settings.gateway_port)},
            volumes=volumes, restart_policy={"Name": "unless-stopped"}, network=names["front_net"],
            networking_config={names["front_net"]: self.client.api.create_endpoint_config(
                ipv4_address=settings.gateway_ip)},
            **HARDENING["gateway"])
        for net in self._find("network", role="vnc-net"):
            net.connect(gateway)
        gateway.start()
        self._wait_gateway()
        gateway.reload()
        return gateway

    def _wait_gateway(self) -> None:
        url = f"http://{self.site.settings.gateway_host}:{self.site.settings.gateway_port}/healthz"
        if not wait_for_http_ok(url, 30):
            raise ProvisionError(f"the gateway did not answer at {url} within 30 s")

    def _run_app(self, recipient: str, rid: str, names: dict[str, str], bundle: Path, spec: dict) -> Any:
        return self.client.containers.run(
            self.images["app"], ["--bundle", "/release", "--trust", APP_TRUST, "--state", "/state", "--host",
                                 "0.0.0.0", "--port", str(APP_PORT)],
            name=names["app"], detach=True, labels=self._labels("app", recipient, rid, spec=_spec_hash(spec)),
            volumes={str(bundle): {"bind": "/release", "mode": "ro"},
                     str(self.site.trust_file): {"bind": APP_TRUST, "mode": "ro"}},
            restart_policy={"Name": "unless-stopped"},
            network=names["enclave_net"],
            networking_config={names["enclave_net"]: self.client.api.create_endpoint_config(aliases=["app"])},
            **HARDENING["app"])

    def _run_kiosk(self, recipient: str, rid: str, names: dict[str, str], password_file: Path, kiosk_ip: str,
                   spec: dict) -> Any:
        command = ["--url", f"http://app:{APP_PORT}/", "--state", "/state", "--network", "proxy", "--vnc-port",
                   str(VNC_PORT), "--vnc-listen", kiosk_ip, "--vnc-password-file", "/secrets/vnc-password",
                   "--app-title", "safeshare", "--app-wait", "60", "--size", spec["size"]]
        kiosk = self.client.containers.create(
            self.images["kiosk"], command, name=names["kiosk"], detach=True,
            labels=self._labels("kiosk", recipient, rid, spec=_spec_hash(spec)),
            volumes={str(password_file.parent): {"bind": "/secrets", "mode": "ro"}},
            restart_policy={"Name": "unless-stopped"}, network=names["enclave_net"],
            **HARDENING["kiosk"])
        self.client.networks.get(names["vnc_net"]).connect(kiosk, aliases=[names["kiosk"]], ipv4_address=kiosk_ip)
        kiosk.start()
        return kiosk

    def _connect(self, net: Any, container: Any) -> None:
        container.reload()
        if net.name not in container.attrs["NetworkSettings"]["Networks"]:
            net.connect(container)

    def _wait_ready(self, kiosk: Any) -> None:
        """The kiosk prints a `ready` event once the app answered, Xvfb, the VNC server and Chromium run."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            logs = kiosk.logs(stdout=True, stderr=False).decode(errors="replace")
            if find_ready(logs) is not None:
                return
            kiosk.reload()
            if kiosk.status in ("exited", "dead"):
                tail = kiosk.logs(stdout=True, stderr=True, tail=20).decode(errors="replace")
                raise ProvisionError(f"the kiosk {kiosk.name} exited before it was ready:\n{tail}")
            time.sleep(0.2)
        tail = kiosk.logs(stdout=True, stderr=True, tail=20).decode(errors="replace")
        raise ProvisionError(f"the kiosk {kiosk.name} was not ready within {self.ready_timeout:.0f} s:\n{tail}")

    # --- revoke ----------------------------------------------------------------------------------------------------

    def revoke(self, name: str, actor: str, reason: str = "revoked by the custodian",
               status: str = REVOKED) -> RevokeResult:
        started = time.monotonic()
        with self._locked():
            known = self.records.recipient(name)
            rid = known.rid if known is not None else self.site.recipient_id(name)
            if known is None and not self._find("container", rid=rid) and not self.store.list_tokens(
                    name, active_only=True):
                self.records.audit(actor, "revoke", "refused", name, error="no such recipient")
                raise ProvisionError(f"no recipient named {name!r} at site {self.site.root}", bad_input=True)
            live = [s.session_id for s in self.book.list(name, live_only=True)]
            count = self.store.revoke(recipient=name, reason=reason)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and self.book.list(name, live_only=True):
                time.sleep(0.05)
            containers, networks = self._remove_enclave(rid, self._names(rid))
            shutil.rmtree(self.site.secrets / rid, ignore_errors=True)
            if known is not None:
                self.records.end_recipient(name, status, reason)
        result = RevokeResult(name, status, count, live, containers, networks, time.monotonic() - started)
        self.records.audit(actor, "revoke" if status == REVOKED else "expire", "ok", name, reason=reason,
                           **{k: v for k, v in result.as_dict().items() if k not in ("recipient",)})
        return result

    def _remove_enclave(self, rid: str, names: dict[str, str]) -> tuple[list[str], list[str]]:
        import docker

        containers = []
        for container in self._find("container", rid=rid):
            container.remove(force=True)
            containers.append(container.name)
        networks = []
        for net in self._find("network", rid=rid):
            net.reload()
            for attached in list(net.attrs.get("Containers") or {}):
                try:
                    net.disconnect(attached, force=True)
                except docker.errors.APIError:
                    pass
            net.remove()
            networks.append(net.name)
        return containers, networks

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
            found = self._find("container", role="gateway")
        except ProvisionError as exc:
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
        import docker

        started = time.monotonic()
        with self._locked():
            enclaves = sorted({c.labels.get(f"{LABEL}.recipient", "?") for c in self._find("container")
                               if c.labels.get(f"{LABEL}.rid")})
            if enclaves and not force:
                self.records.audit(actor, "site-down", "refused", None, error="enclaves remain", recipients=enclaves)
                raise ProvisionError(f"enclaves of {', '.join(enclaves)} still run at site {self.site.root}: revoke "
                                     f"them first, or --force to remove the gateway anyway")
            containers = []
            for container in self._find("container", role="gateway"):
                container.remove(force=True)
                containers.append(container.name)
            networks = []
            for net in self._find("network", role="front-net"):
                net.reload()
                for attached in list(net.attrs.get("Containers") or {}):
                    try:
                        net.disconnect(attached, force=True)
                    except docker.errors.APIError:  # already gone
                        pass
                net.remove()
                networks.append(net.name)
        result = {"site": self.site.site_id, "containers_removed": containers, "networks_removed": networks,
                  "seconds": round(time.monotonic() - started, 2)}
        self.records.audit(actor, "site-down", "ok" if containers or networks else "unchanged", None,
                           **{k: v for k, v in result.items() if k != "site"})
        return result

    # --- listing ---------------------------------------------------------------------------------------------------

    def recipients(self, include_ended: bool = False, with_containers: bool = True) -> list[dict[str, Any]]:
        """Who has access to what, until when, with live sessions (and the containers' state when an engine
        answers)."""
        states: dict[str, dict[str, str]] = {}
        if with_containers:
            try:
                for container in self._find("container"):
                    rid = container.labels.get(f"{LABEL}.rid")
                    if rid:
                        states.setdefault(rid, {})[container.labels.get(f"{LABEL}.role", "?")] = container.status
            except ProvisionError:
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
