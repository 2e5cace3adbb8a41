"""What should exist for a recipient's enclave, decided without touching an engine.

Provisioning used to decide and act in the same functions, so the only way to see what it would build was to run
Docker. Here the decision is a pure function of (site settings and paths, recipient policy, sealed release, image
references, allocated subnets): frozen dataclasses naming every network, container, mount, address and label. A
reconciler (deploy/reconcile.py for one Docker engine; a Swarm one can read the same plan) makes the engine match.

The component command lines are built here too, once: `safeshare up` (deploy/local.py) runs the same app, kiosk and
gateway as local processes, and takes their argv from `app_argv`, `kiosk_argv` and `gateway_argv`.

Nothing here assumes one host beyond what the fields say: `placement` is the node an enclave must run on (None: the
engine's own), and `bridge` is the Linux bridge name a bridge driver should use (the host rule drops ss-* traffic to
the host), which an overlay driver ignores.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.images.hardening import HARDENING

if TYPE_CHECKING:  # only read: the plan needs neither a database nor pydantic at import time
    from deploy.site.folder import Site
    from policies.recipient import RecipientPolicy

LABEL = "org.safeshare"
SPEC_LABEL = f"{LABEL}.spec"  # the spec hash: equal means nothing to change, different means replace
APP_PORT = 8050
VNC_PORT = 5900
GATEWAY_PORT = 6080
APP_TRUST = "/trust.json"  # where the site's trust store is mounted (read-only) in app containers
APP_STATE = "/state"  # the app's workspace: SITE/enclaves/<rid>/workspace, read-write (the airlock's intake reads it)
APP_SITE = "/site"  # the app's --site in its container: only SITE/outputs.yaml is there (read-only), if the site has it
APP_FLOOR = f"{APP_SITE}/outputs.yaml"
APP_UID = 10001  # deploy/docker/app.Dockerfile's user: owns the workspace it writes
OUTPUTS_FLOOR_LABEL = f"{LABEL}.outputs-floor"  # sha256 of SITE/outputs.yaml as mounted: a changed floor, a new spec
APP_TITLE = "safeshare"  # every page of the analytics app has a title starting with this (the kiosk checks it)
APP_WAIT = 60  # seconds a containerised kiosk waits for its app, which starts at the same moment
KIOSK_V_HOST = 20  # the kiosk's host number on its VNC network (the gateway gets one of the lower ones)
KIOSK_SECRETS = "/secrets"  # the recipient's secrets folder inside the kiosk (read-only)

Pairs = tuple[tuple[str, str], ...]  # a label or environment mapping, kept hashable and ordered


def _pairs(mapping: Mapping[str, str]) -> Pairs:
    return tuple(sorted(mapping.items()))


# --- command lines, shared with `safeshare up` ---------------------------------------------------------------------

def _options(**values: str | int | None) -> tuple[str, ...]:
    """`--name value` for each given value, in the order given; None leaves the option out."""
    argv: list[str] = []
    for name, value in values.items():
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return tuple(argv)


def app_argv(*, bundle: str, trust: str, state: str, host: str, port: int, release: str | None = None,
             recipient: str | None = None, site: str | None = None) -> tuple[str, ...]:
    """`safeshare app` arguments: the sealed bundle, checked against the trust store before it is served, as the
    release `release` (DATASET/ID: a container's /release mount does not say which release it holds); `recipient`
    is who its outputs are recorded as made by, `site` the folder whose outputs.yaml is the floor of the output
    rules."""
    return _options(bundle=bundle, trust=trust, release=release, state=state, host=host, port=port,
                    recipient=recipient, site=site)


def kiosk_argv(*, url: str, state: str, network: str, size: str | None = None, policy: str | None = None,
               vnc_port: int | None = None, vnc_listen: str | None = None, vnc_password_file: str | None = None,
               app_wait: int | None = None, logs: str | None = None, recipient: str | None = None,
               watermark: str | None = None) -> tuple[str, ...]:
    """`safeshare kiosk` arguments: the one app URL the browser may open, and where its VNC server listens; the
    screen watermark from `policy`'s file or, for a container without it, `recipient` and `watermark` (JSON)."""
    return _options(url=url, state=state, network=network, vnc_port=vnc_port, vnc_listen=vnc_listen,
                    vnc_password_file=vnc_password_file, app_title=APP_TITLE, app_wait=app_wait, logs=logs,
                    recipient=recipient, watermark=watermark, size=size, policy=policy)


def gateway_argv(*, listen: str, sessions: str, db: str, signing_key: str, name: str | None = None,
                 allowed_origin: str | None = None, secure_cookies: bool = False, limits: str | None = None,
                 novnc: str | None = None, airlock: str | None = None) -> tuple[str, ...]:
    """`safeshare gateway` arguments. The allowed origin is what researchers' browsers open the gateway under: it
    never trusts the request's Host header. `airlock` (SITE/airlock) turns on the outputs download (/outputs)."""
    argv = _options(listen=listen, sessions=sessions, db=db, name=name, signing_key=signing_key,
                    allowed_origin=allowed_origin, limits=limits, novnc=novnc, airlock=airlock)
    return argv + (("--secure-cookies",) if secure_cookies else ())


def release_ref(bundle: Path) -> str:
    """How sessions and records name a release: `dataset/id` (RELEASES/<dataset>/<id>), so that `audit sessions
    --release DATASET` finds sessions of `safeshare up` and of provisioned enclaves alike."""
    return f"{bundle.parent.name}/{bundle.name}"


# --- the specs -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mount:
    source: str  # a path on the host that runs the container
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class Attachment:
    """A container on a network; the first of a container's attachments is the one it is created on."""

    network: str
    address: str | None = None  # None: the engine picks one
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublishedPort:
    container_port: int
    host_ip: str
    host_port: int


@dataclass(frozen=True)
class Hardening:
    """deploy/images/hardening.py's settings for one service, frozen so that they are part of the spec hash."""

    read_only: bool = False
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    tmpfs: Pairs = ()
    shm_size: str | None = None

    def without_tmpfs(self, path: str) -> Hardening:
        """The same settings with no tmpfs at `path` (where the plan bind-mounts a folder instead)."""
        return replace(self, tmpfs=tuple(pair for pair in self.tmpfs if pair[0] != path))

    @classmethod
    def of(cls, service: str) -> Hardening:
        spec = HARDENING[service]
        return cls(read_only=bool(spec.get("read_only")), cap_drop=tuple(spec.get("cap_drop", ())),
                   cap_add=tuple(spec.get("cap_add", ())), security_opt=tuple(spec.get("security_opt", ())),
                   tmpfs=_pairs(spec.get("tmpfs", {})), shm_size=spec.get("shm_size"))


@dataclass(frozen=True)
class Resources:
    """Limits and reservations (bytes); None leaves the engine's default, which is what a site gets today."""

    memory_limit: int | None = None
    memory_reservation: int | None = None


@dataclass(frozen=True)
class NetworkSpec:
    name: str
    role: str  # enclave-net, vnc-net, front-net
    internal: bool  # no route out
    subnet: str
    labels: Pairs
    bridge: str | None = None  # the Linux bridge a bridge driver names after it (ss-*: the host rule applies)


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    role: str  # app, kiosk, gateway
    image: str
    command: tuple[str, ...]  # after the image's entrypoint (`safeshare <service>`)
    labels: Pairs  # without the spec hash, which is computed from everything here
    networks: tuple[Attachment, ...]
    mounts: tuple[Mount, ...] = ()
    env: Pairs = ()
    ports: tuple[PublishedPort, ...] = ()
    hardening: Hardening = Hardening()
    resources: Resources = Resources()
    user: str | None = None  # None: the image's own user
    restart: str = "unless-stopped"

    @property
    def spec_hash(self) -> str:
        """Equal for equal specs across processes and versions of Python: the reconciler's "nothing changed"."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def engine_labels(self) -> dict[str, str]:
        """The labels to put on the container: the plan's and the spec hash."""
        return {**dict(self.labels), SPEC_LABEL: self.spec_hash}


@dataclass(frozen=True)
class EnclaveNames:
    """A recipient's names at a site (`enclave_names` makes them)."""

    site_id: str
    rid: str
    enclave_net: str
    vnc_net: str
    app: str
    kiosk: str
    target: str  # the name tokens of this enclave are bound to


def enclave_names(site_id: str, rid: str) -> EnclaveNames:
    """Linux bridge names allow 15 characters, hence `ss-e-` + the 10-digit rid for the networks."""
    prefix = f"ss-{site_id}-{rid}"
    return EnclaveNames(site_id, rid, enclave_net=f"ss-e-{rid}", vnc_net=f"ss-v-{rid}", app=f"{prefix}-app",
                        kiosk=f"{prefix}-kiosk", target=f"{site_id}-{rid}")


def front_net_name(site_id: str) -> str:
    """Not ss-*: the host rule keeps enclave bridges from reaching the host, not the gateway's front."""
    return f"ssf-{site_id}"


def gateway_name(site_id: str) -> str:
    return f"ss-{site_id}-gateway"


def labels(site_id: str, role: str, recipient: str | None = None, rid: str | None = None) -> Pairs:
    """The org.safeshare labels by which reconcilers find what a site owns (and `recipients` lists it)."""
    found = {f"{LABEL}.site": site_id, f"{LABEL}.role": role}
    if recipient is not None:
        found[f"{LABEL}.recipient"] = recipient
    if rid is not None:
        found[f"{LABEL}.rid"] = rid
    return _pairs(found)


# --- subnets -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EnclaveSubnets:
    enclave: str
    vnc: str


class PoolFull(Exception):
    """No /27 of the site's enclave pool is free."""


def allocate_subnets(names: EnclaveNames, pool: Sequence[ipaddress.IPv4Network],
                     used: Iterable[ipaddress.IPv4Network], existing: Mapping[str, str]) -> EnclaveSubnets:
    """The subnets of a recipient's two networks: an existing network keeps its own (`existing`: name -> subnet),
    a missing one gets the first /27 of `pool` that overlaps nothing in `used` (every network the engine has)."""
    taken = list(used)
    free = (subnet for subnet in pool if not any(subnet.overlaps(other) for other in taken))
    chosen = []
    for name in (names.enclave_net, names.vnc_net):
        if name in existing:
            chosen.append(existing[name])
            continue
        subnet = next(free, None)
        if subnet is None:
            raise PoolFull(name)
        chosen.append(str(subnet))
    return EnclaveSubnets(enclave=chosen[0], vnc=chosen[1])


# --- the plans -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GatewayPlan:
    """The site's one gateway, on its own front network, published on the host; shared by every enclave."""

    front_net: NetworkSpec
    gateway: ContainerSpec
    health_url: str


@dataclass(frozen=True)
class EnclavePlan:
    """One recipient's enclave. Apply in the order of `networks` then `containers`; the gateway joins last."""

    site_id: str
    recipient: str
    rid: str
    release: str  # dataset/id
    enclave_net: NetworkSpec
    vnc_net: NetworkSpec
    app: ContainerSpec
    kiosk: ContainerSpec
    gateway_attachment: Attachment  # how the site's gateway joins this enclave (its VNC network)
    upstream: str  # the kiosk's VNC endpoint as the gateway dials it
    password_file: str  # the kiosk's VNC password on the host (the gateway reads it at the same path)
    placement: str | None = None  # the node app and kiosk run on together; None: the engine's own host

    @property
    def networks(self) -> tuple[NetworkSpec, NetworkSpec]:
        return self.enclave_net, self.vnc_net

    @property
    def containers(self) -> tuple[ContainerSpec, ContainerSpec]:
        """In start order: the kiosk's browser waits for the app."""
        return self.app, self.kiosk


def plan_gateway(site: Site, image: str) -> GatewayPlan:
    settings = site.settings
    front = front_net_name(site.site_id)
    listen = f"{settings.gateway_ip}:{GATEWAY_PORT}"
    command = gateway_argv(listen=listen, sessions=str(site.sessions), db=site.db_url,
                           name=f"{site.site_id}-gateway", signing_key=str(site.gateway_signing_key),
                           allowed_origin=settings.url.rstrip("/"),
                           secure_cookies=settings.url.startswith("https://"), airlock=str(site.airlock))
    # db/ and sessions/ at the same paths as on the host, so paths stored in the database mean the same file; the
    # secrets (VNC passwords, the signing key), the policies as provisioned and the airlock store (released output
    # packages, served at /outputs) are read-only.
    mounts = (Mount(str(site.db_dir), str(site.db_dir), read_only=False),
              Mount(str(site.sessions), str(site.sessions), read_only=False),
              Mount(str(site.secrets), str(site.secrets)),
              Mount(str(site.policies), str(site.policies)),
              Mount(str(site.airlock), str(site.airlock)))
    gateway = ContainerSpec(
        name=gateway_name(site.site_id), role="gateway", image=image, command=command,
        labels=labels(site.site_id, "gateway"), networks=(Attachment(front, address=settings.gateway_ip),),
        mounts=mounts, env=_pairs({"SAFESHARE_HEALTH_URL": f"http://{listen}/healthz"}),
        ports=(PublishedPort(GATEWAY_PORT, settings.gateway_host, settings.gateway_port),),
        hardening=Hardening.of("gateway"))
    front_net = NetworkSpec(front, "front-net", internal=False, subnet=settings.front_subnet or "",
                            labels=labels(site.site_id, "front-net"), bridge=front)
    return GatewayPlan(front_net, gateway,
                       health_url=f"http://{settings.gateway_host}:{settings.gateway_port}/healthz")


def outputs_floor(site: Site) -> tuple[Path, str] | None:
    """SITE/outputs.yaml and its sha256 (16 hex digits) when the site has one, else None (the app then keeps ACRO's
    defaults). Validated by the app itself at start (outputs.floor): a broken floor stops the app, never loosens it."""
    path = site.outputs_floor
    if not path.is_file():
        return None
    return path, hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def plan_enclave(site: Site, policy: RecipientPolicy, bundle: Path, images: Mapping[str, str],
                 subnets: EnclaveSubnets, placement: str | None = None) -> EnclavePlan:
    """Everything a recipient's enclave is, from its policy and release (`bundle`: RELEASES/<dataset>/<id>, or its
    copy; the app mounts the copy provisioning makes, `Site.release_copy`); `images` maps app and kiosk to refs."""
    recipient, site_id = policy.recipient, site.site_id
    rid = site.recipient_id(recipient)
    names = enclave_names(site_id, rid)
    kiosk_ip = str(ipaddress.IPv4Network(subnets.vnc)[KIOSK_V_HOST])
    password_file = site.password_file(rid)

    def network(name: str, role: str, subnet: str) -> NetworkSpec:
        return NetworkSpec(name, role, internal=True, subnet=subnet, labels=labels(site_id, role, recipient, rid),
                           bridge=name)

    floor = outputs_floor(site)
    app = ContainerSpec(
        name=names.app, role="app", image=images["app"],
        command=app_argv(bundle="/release", trust=APP_TRUST, state=APP_STATE, host="0.0.0.0", port=APP_PORT,
                         release=release_ref(bundle), recipient=recipient,
                         site=APP_SITE if floor is not None else None),
        labels=_pairs({**dict(labels(site_id, "app", recipient, rid)),
                       **({OUTPUTS_FLOOR_LABEL: floor[1]} if floor is not None else {})}),
        networks=(Attachment(names.enclave_net, aliases=("app",)),),
        # the sealed release and the trust store its seal is checked against, both read-only. The release is the
        # custodian's verified copy (SITE/enclaves/<rid>/release/<dataset>/<id>, deploy/release_copy.py), never the
        # bundle in SITE/releases: a bind mount is live, so what a writer of that folder added after the
        # verification would appear in the running enclave. A changed release is another copy, hence a new spec.
        # The workspace (saved analyses, outputs, airlock drafts and outbox) is the one read-write mount: the
        # host-side intake (outputs.airlock.intake) reads submissions from it, with no network between the two.
        # The site's output floor is mounted as the only file of /site, and its hash is a label, so a changed
        # floor replaces the app (a bind-mounted file keeps the inode it was started with).
        mounts=(Mount(str(site.release_copy(rid, release_ref(bundle))), "/release"),
                Mount(str(site.trust_file), APP_TRUST),
                Mount(str(site.workspace(rid)), APP_STATE, read_only=False),
                *((Mount(str(floor[0]), APP_FLOOR),) if floor is not None else ())),
        hardening=Hardening.of("app").without_tmpfs(APP_STATE))
    kiosk = ContainerSpec(
        name=names.kiosk, role="kiosk", image=images["kiosk"],
        command=kiosk_argv(url=f"http://app:{APP_PORT}/", state="/state", network="proxy", vnc_port=VNC_PORT,
                           vnc_listen=kiosk_ip, vnc_password_file=f"{KIOSK_SECRETS}/{password_file.name}",
                           app_wait=APP_WAIT, recipient=recipient, watermark=policy.watermark.model_dump_json(),
                           size=policy.screen_text),
        labels=labels(site_id, "kiosk", recipient, rid),
        networks=(Attachment(names.enclave_net),
                  Attachment(names.vnc_net, address=kiosk_ip, aliases=(names.kiosk,))),
        mounts=(Mount(str(password_file.parent), KIOSK_SECRETS),),
        hardening=Hardening.of("kiosk"))
    return EnclavePlan(
        site_id=site_id, recipient=recipient, rid=rid, release=release_ref(bundle),
        enclave_net=network(names.enclave_net, "enclave-net", subnets.enclave),
        vnc_net=network(names.vnc_net, "vnc-net", subnets.vnc),
        app=app, kiosk=kiosk, gateway_attachment=Attachment(names.vnc_net),
        upstream=f"{names.kiosk}:{VNC_PORT}", password_file=str(password_file), placement=placement)
