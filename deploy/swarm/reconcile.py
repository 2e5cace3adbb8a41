"""Enclaves spread over the nodes of a Docker Swarm: `safeshare provision --orchestrator swarm`.

The same plan as on one engine (deploy/plan.py) is applied by a second reconciler: the recipient's app and kiosk
become two services with one task each, constrained to one node (`node.id==...`), on the recipient's two overlay
networks (internal, encrypted: deploy/swarm/crypto.py decides whether encryption really works, and provisioning
fails closed when it does not, unless the custodian opted out, which is audited). The release is shipped to that
node and verified there (deploy/swarm/ship.py); the trust store is a Swarm config and the kiosk's VNC password a
Swarm secret (deploy/swarm/specs.py translates the plan's mounts).

The gateway stays one container on the control host (the engine this process talks to, a Swarm manager), created by
the single-engine reconciler exactly as before, and joins each recipient's VNC overlay network (they are
attachable). Why not a gateway service: a Swarm service can neither be given its front address (so it would listen
on every interface, and every kiosk could open its port) nor be published on 127.0.0.1 (Swarm publishes on all
addresses of the node). Everything the gateway does (tokens, sessions, seals, revocation within its 0.5 s poll) is
therefore unchanged, and revocation ends live sessions on any node within a second.

Placement: a pinned node (the custodian's `--node`, by id or hostname), else the node the enclave already runs on
while that node is up, else the ready, active node with the most memory left after its running enclaves
(ENCLAVE_BYTES each, measured by benchmarks/provision_bench.py).
"""
from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.plan import (APP_FLOOR, APP_TRUST, LABEL, SPEC_LABEL, EnclaveNames, EnclavePlan, EnclaveSubnets,
                         GatewayPlan, NetworkSpec)
from deploy.reconcile import RID, ROLE, Applied, DockerReconciler, ReconcileError, Removed, engine_errors
from deploy.swarm.crypto import EncryptionCheck, control_host_check, refusal
from deploy.swarm.ship import ShipError, ship, wipe
from deploy.swarm.specs import NODE_LABEL, SWARM_SPEC_LABEL, NodeFiles, SpecError, service_draft

ENCLAVE_BYTES = 301 << 20  # an idle enclave (kiosk 216 MB + app 85 MB), benchmarks/provision_bench.py
ORCHESTRATOR_FILE = "orchestrator.json"  # SITE/orchestrator.json: which reconciler the site's enclaves are under
VOLUME_LABEL = f"{LABEL}.release-volume"
ENCRYPTED_LABEL = f"{LABEL}.encrypted"


def _mount_source(plan: EnclavePlan, target: str) -> Path:
    """Where on the control host the plan's app mount at `target` comes from."""
    return Path(next(m.source for m in plan.app.mounts if m.target == target))


def orchestrator_of(site_root: Path) -> str:
    """`swarm` once a site provisioned through Swarm (revoke and recipients then need no flag), else `docker`."""
    try:
        return json.loads((site_root / ORCHESTRATOR_FILE).read_text()).get("orchestrator", "docker")
    except (OSError, ValueError):
        return "docker"


def remember_orchestrator(site_root: Path, orchestrator: str) -> None:
    site_root.mkdir(parents=True, exist_ok=True)
    (site_root / ORCHESTRATOR_FILE).write_text(json.dumps({"orchestrator": orchestrator}) + "\n")


@dataclass(frozen=True)
class Node:
    id: str
    hostname: str
    ready: bool
    memory: int
    enclaves: int

    @property
    def free(self) -> int:
        return self.memory - self.enclaves * ENCLAVE_BYTES

    @property
    def label(self) -> str:
        return f"{self.hostname}/{self.id[:12]}"


class ServiceView:
    """A service as the single-engine code reads a container: name, labels, status, id."""

    def __init__(self, service: Any, node: str) -> None:
        self.service = service
        self.id = service.id
        self.name = service.name
        self.labels = service.attrs["Spec"].get("Labels") or {}
        states = [t["Status"]["State"] for t in service.tasks(filters={"desired-state": "running"})]
        self.status = "running" if "running" in states else (states[0] if states else "absent")
        self.node = node

    def remove(self, force: bool = True) -> None:
        self.service.remove()


class SwarmReconciler(DockerReconciler):
    """One site's enclaves as services on a Swarm whose manager `client` talks to; the gateway as before."""

    def __init__(self, client: Any, site_id: str, *, ready_timeout: float = 90.0, gateway_timeout: float = 30.0,
                 pins: Mapping[str, str] | None = None, allow_unencrypted: bool = False,
                 cursor_file: Path | None = None) -> None:
        super().__init__(client, site_id, ready_timeout=ready_timeout, gateway_timeout=gateway_timeout)
        self.cursor_file = cursor_file
        self.pins = dict(pins or {})  # recipient -> node id or hostname
        self.allow_unencrypted = allow_unencrypted
        self.notes: list[str] = []
        self._encryption: EncryptionCheck | None = None

    # --- the swarm -------------------------------------------------------------------------------------------------

    @property
    def control_node(self) -> str:
        info = self.client.info().get("Swarm") or {}
        if not info.get("ControlAvailable"):
            raise ReconcileError("this Docker engine is not a Swarm manager: run `docker swarm init` here and "
                                 "`docker swarm join` on the enclave hosts first")
        return info["NodeID"]

    def nodes(self) -> list[Node]:
        """Every node with its memory and how many enclaves (kiosk services) are placed on it."""
        counts: dict[str, int] = {}
        for service in self._services(role="kiosk"):
            node = (service.attrs["Spec"].get("Labels") or {}).get(NODE_LABEL)
            counts[node] = counts.get(node, 0) + 1
        found = []
        with engine_errors():
            listed = self.client.nodes.list()
        for node in listed:
            attrs = node.attrs
            ready = attrs["Status"]["State"] == "ready" and attrs["Spec"].get("Availability") == "active"
            found.append(Node(node.id, attrs["Description"]["Hostname"], ready,
                              int(attrs["Description"]["Resources"].get("MemoryBytes", 0)), counts.get(node.id, 0)))
        return found

    def choose_node(self, recipient: str, current: str | None) -> Node:
        nodes = self.nodes()
        pin = self.pins.get(recipient)
        if pin is not None:
            matches = [n for n in nodes if pin in (n.id, n.hostname)]
            if len(matches) != 1:
                raise ReconcileError(f"node {pin!r} is not one node of this swarm "
                                     f"({', '.join(n.label for n in nodes)})")
            if not matches[0].ready:
                raise ReconcileError(f"node {matches[0].label} is not ready")
            return matches[0]
        ready = [n for n in nodes if n.ready]
        for node in ready:
            if node.id == current:
                return node
        if not ready:
            raise ReconcileError("no node of the swarm is ready")
        return max(ready, key=lambda n: (n.free, n.id))

    def lost_node(self, rid: str) -> str | None:
        """The node (hostname/id) of `rid`'s enclave if it is placed on a node that is not ready, else None."""
        placed = {(s.attrs["Spec"].get("Labels") or {}).get(NODE_LABEL) for s in self._services(rid=rid)} - {None}
        nodes = {n.id: n for n in self.nodes()}
        for node_id in placed:
            node = nodes.get(node_id)
            if node is None or not node.ready:
                return node.label if node else node_id
        return None

    def allocate(self, names: EnclaveNames, pool: Sequence[ipaddress.IPv4Network]) -> EnclaveSubnets:
        """Next fit instead of first fit: the search starts after the last subnet handed out (`cursor_file`).
        A node removes its copy of a deleted overlay network some time after the manager did, and refuses a new
        network with the same subnet meanwhile ("Pool overlaps"): a subnet is reused only once the pool wrapped."""
        pool = list(pool)
        start = 0
        if self.cursor_file is not None:
            try:
                start = int(json.loads(self.cursor_file.read_text())["next"]) % max(len(pool), 1)
            except (OSError, ValueError, KeyError, TypeError):
                start = 0
        subnets = super().allocate(names, pool[start:] + pool[:start])
        if self.cursor_file is not None:
            chosen = [ipaddress.IPv4Network(subnets.enclave), ipaddress.IPv4Network(subnets.vnc)]
            taken = [pool.index(net) for net in chosen if net in pool]
            if taken:
                self.cursor_file.write_text(json.dumps({"next": (max(taken) + 1) % len(pool)}) + "\n")
        return subnets

    def encryption(self) -> dict[str, str]:
        """The overlay driver options: encrypted when this host's kernel can, else a refusal unless opted out."""
        if self._encryption is None:
            self._encryption = control_host_check()
        if self._encryption.ok:
            return {"encrypted": ""}
        if not self.allow_unencrypted:
            raise ReconcileError(refusal(self._encryption.reason))
        note = f"overlay networks NOT encrypted (--allow-unencrypted-overlay): {self._encryption.reason}"
        if note not in self.notes:
            self.notes.append(note)
        return {}

    def _services(self, role: str | None = None, rid: str | None = None) -> list[Any]:
        filters = [f"{LABEL}.site={self.site_id}"] + ([f"{ROLE}={role}"] if role else []) + \
            ([f"{RID}={rid}"] if rid else [])
        with engine_errors():
            return self.client.services.list(filters={"label": filters})

    def ensure_gateway(self, plan: GatewayPlan) -> list[str]:
        """The gateway container as on one engine. Returns this reconciler's own notes list, so that what `apply`
        notes later (encryption opt-out, a move between nodes) reaches the custodian's result too."""
        self.notes.extend(super().ensure_gateway(plan))
        return self.notes

    # --- what the single-engine code asks ----------------------------------------------------------------------------

    def find(self, kind: str, role: str | None = None, rid: str | None = None) -> list[Any]:
        """Containers are the gateway's (and anything left from a single-engine run); enclaves are services."""
        found = super().find(kind, role, rid)
        if kind == "container" and role != "gateway":
            found += [ServiceView(s, (s.attrs["Spec"].get("Labels") or {}).get(NODE_LABEL, "?"))
                      for s in self._services(role, rid) if (s.attrs["Spec"].get("Labels") or {}).get(ROLE)
                      in ("app", "kiosk")]
        return found

    def container_states(self) -> dict[str, dict[str, str]]:
        """rid -> role -> state, plus `node`: the node (hostname/id) the enclave is placed on."""
        names = {n.id: n for n in self.nodes()}
        states = super().container_states()
        for service in self._services():
            labels = service.attrs["Spec"].get("Labels") or {}
            if labels.get(ROLE) not in ("app", "kiosk"):
                continue
            view = ServiceView(service, labels.get(NODE_LABEL, "?"))
            entry = states.setdefault(labels[RID], {})
            entry[labels[ROLE]] = view.status
            node = names.get(view.node)
            entry["node"] = node.label + ("" if node.ready else " (down)") if node else view.node
        return states

    # --- networks --------------------------------------------------------------------------------------------------

    def _ensure_network(self, spec: NetworkSpec) -> tuple[Any, bool]:
        if spec.role not in ("enclave-net", "vnc-net"):
            return super()._ensure_network(spec)  # the gateway's front bridge, on the control host
        import docker

        options = self.encryption()
        found = [net for net in self.client.networks.list(names=[spec.name]) if net.name == spec.name]
        if found:
            attrs = found[0].attrs
            if attrs.get("Driver") != "overlay" or attrs.get("Internal") is not True:
                raise ReconcileError(f"network {spec.name} exists but is not an internal overlay network (a "
                                     f"single-engine enclave of the same recipient?): revoke it first")
            if ("encrypted" in (attrs.get("Options") or {})) != ("encrypted" in options):
                raise ReconcileError(f"network {spec.name} exists with another encryption setting; revoke first")
            return found[0], False
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=spec.subnet)])
        try:
            net = self.client.networks.create(spec.name, driver="overlay", internal=True, attachable=True,
                                              ipam=ipam, options=options or None, check_duplicate=True,
                                              labels={**dict(spec.labels),
                                                      ENCRYPTED_LABEL: str("encrypted" in options).lower()})
        except docker.errors.APIError as exc:
            raise ReconcileError(f"network {spec.name} ({spec.subnet}) could not be created: "
                                 f"{exc.explanation}") from None
        return net, True

    # --- enclaves --------------------------------------------------------------------------------------------------

    def apply(self, plan: EnclavePlan, bundle: Path | None = None) -> Applied:
        """Ship the release to the chosen node, then the app and kiosk services there; unchanged when both run
        there with the planned specs."""
        bundle = bundle or _mount_source(plan, "/release")
        with engine_errors():
            control = self.control_node
            existing = {(s.attrs["Spec"].get("Labels") or {}).get(ROLE): s for s in self._services(rid=plan.rid)}
            existing = {role: s for role, s in existing.items() if role in ("app", "kiosk")}
            current = next(((s.attrs["Spec"].get("Labels") or {}).get(NODE_LABEL) for s in existing.values()), None)
            node = self.choose_node(plan.recipient, plan.placement or current)
            if node.id != current and current is not None:
                self.notes.append(f"moved from node {current[:12]} to {node.label}")
            self._ensure_networks(plan.networks)
            files = self._node_files(plan, bundle, node.id, existing)
            drafts = self._drafts(plan, node.id, files) if files.release_volume else {}
            if drafts and existing.keys() == drafts.keys() and all(
                    (existing[r].attrs["Spec"].get("Labels") or {}).get(SWARM_SPEC_LABEL) == d.swarm_hash
                    and ServiceView(existing[r], node.id).status == "running" for r, d in drafts.items()):
                self._attach_gateway(plan.gateway_attachment)
                return Applied("unchanged", {role: s.id for role, s in existing.items()})
            self._remove_services(list(existing.values()))
            try:
                if files.release_volume is None:
                    files = self._ship(plan, bundle, node.id, control)
                drafts = self._drafts(plan, node.id, files)
                started = {}
                for spec in plan.containers:  # the kiosk resolves `app` once, at its start: the app runs first
                    started[spec.role] = self.client.services.create(**drafts[spec.role].kwargs)
                    if spec.role == "app":
                        self._wait_running(started["app"])
                self._wait_ready(started["kiosk"])
                self._attach_gateway(plan.gateway_attachment)
            except BaseException:
                self.remove_enclave(plan.rid)
                raise
        return Applied("replaced" if existing else "created", {role: s.id for role, s in started.items()})

    def _node_files(self, plan: EnclavePlan, bundle: Path, node_id: str, existing: Mapping[str, Any]) -> NodeFiles:
        """The trust config and VNC secret (created when missing); the release volume only when the running app
        already uses this bundle's volume on this node (else None: it must be shipped)."""
        from deploy.swarm.ship import release_volume

        volume = release_volume(plan.rid, bundle)
        app = existing.get("app")
        labels = (app.attrs["Spec"].get("Labels") or {}) if app is not None else {}
        shipped = labels.get(VOLUME_LABEL) == volume and labels.get(NODE_LABEL) == node_id
        trust = self._object("configs", f"ss-{self.site_id}-trust", _mount_source(plan, APP_TRUST))
        secret = self._object("secrets", f"ss-{self.site_id}-{plan.rid}-vnc", Path(plan.password_file),
                              rid=plan.rid)
        floor = _mount_source(plan, APP_FLOOR) if any(m.target == APP_FLOOR for m in plan.app.mounts) else None
        floor_config = self._object("configs", f"ss-{self.site_id}-outputs", floor) if floor is not None else None
        return NodeFiles(volume if shipped else None, trust, secret, floor_config)

    def _object(self, kind: str, prefix: str, path: Path, rid: str | None = None) -> tuple[str, str]:
        """A Swarm config or secret with `path`'s content, named by its hash (they cannot be changed in place)."""
        import hashlib

        data = path.read_bytes()
        name = f"{prefix}-{hashlib.sha256(data).hexdigest()[:12]}"
        collection = getattr(self.client, kind)
        found = [item for item in collection.list(filters={"name": name}) if item.name == name]
        if found:
            return found[0].id, name
        labels = {f"{LABEL}.site": self.site_id, **({RID: rid} if rid else {})}
        return collection.create(name=name, data=data, labels=labels).id, name

    def _drafts(self, plan: EnclavePlan, node_id: str, files: NodeFiles) -> dict[str, Any]:
        try:
            return {spec.role: service_draft(
                spec, image_id=self._image_id(spec.image), entrypoint=self._entrypoint(spec.image),
                node_id=node_id, files=files,
                listen_subnet=plan.vnc_net.subnet if spec.role == "kiosk" else None,
                extra_labels={VOLUME_LABEL: files.release_volume or ""} if spec.role == "app" else None)
                for spec in plan.containers}
        except SpecError as exc:
            raise ReconcileError(str(exc)) from None

    def _image_id(self, image: str) -> str:
        """What services name their image by (see specs.service_draft): its id on the manager."""
        with engine_errors():
            return self.client.images.get(image).id

    def _entrypoint(self, image: str) -> list[str]:
        return list(self.client.images.get(image).attrs["Config"].get("Entrypoint") or [])

    def _ship(self, plan: EnclavePlan, bundle: Path, node_id: str, control: str) -> NodeFiles:
        files = self._node_files(plan, bundle, node_id, {})
        options = self.encryption()
        try:
            volume = ship(self.client, site_id=self.site_id, rid=plan.rid, bundle=bundle,
                          images={"app": self._image_id(plan.app.image),
                                  "gateway": self._image_id(self._gateway_image(plan))}, node_id=node_id,
                          control_node_id=control, trust_config=files.trust_config or ("", ""),
                          network_options=options, probe_encryption="encrypted" in options)
        except ShipError as exc:
            raise ReconcileError(f"the release could not be put on node {node_id[:12]}: {exc}") from None
        return NodeFiles(volume, files.trust_config, files.vnc_secret, files.floor_config)

    def _gateway_image(self, plan: EnclavePlan) -> str:
        found = self.find("container", role="gateway")
        return found[0].image.id if found else plan.app.image

    def _wait_running(self, service: Any) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            states = [(t["Status"]["State"], t["Status"].get("Err", "")) for t in service.tasks()]
            if any(state == "running" for state, _ in states):
                return
            failed = [err or state for state, err in states if state in ("failed", "rejected")]
            if failed:
                raise ReconcileError(f"{service.name} failed to start: {failed[0]}\n{self._service_tail(service)}")
            time.sleep(0.1)
        raise ReconcileError(f"{service.name} did not start within {self.ready_timeout:.0f} s")

    def _wait_ready(self, kiosk: Any) -> None:
        """As on one engine: the kiosk's `ready` event, read from the service's log (the manager fetches it from
        the node); a task that failed before is an error at once."""
        from enclave.kiosk.ready import find_ready

        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            text = b"".join(kiosk.logs(stdout=True, stderr=False)).decode(errors="replace")
            if find_ready(text) is not None:
                return
            failed = [t["Status"].get("Err") or t["Status"]["State"] for t in kiosk.tasks()
                      if t["Status"]["State"] in ("failed", "rejected")]
            if failed:
                raise ReconcileError(f"the kiosk {kiosk.name} failed before it was ready: {failed[0]}\n"
                                     f"{self._service_tail(kiosk)}")
            time.sleep(0.3)
        raise ReconcileError(f"the kiosk {kiosk.name} was not ready within {self.ready_timeout:.0f} s:\n"
                             f"{self._service_tail(kiosk)}")

    @staticmethod
    def _service_tail(service: Any) -> str:
        try:
            return b"".join(service.logs(stdout=True, stderr=True, tail=20)).decode(errors="replace")
        except Exception as exc:  # noqa: BLE001 - only for the message
            return f"(no logs: {exc})"

    def _remove_services(self, services: list[Any], timeout: float = 20.0) -> None:
        """Kiosk first, then app (the reverse of the start order), and wait until their tasks are gone from the
        nodes that are up: the manager forgets a task once its node reported the container stopped. A lost node's
        tasks cannot go; they hold nothing the manager needs."""
        order = {"kiosk": 0, "app": 1}
        for service in sorted(services, key=lambda s: order.get((s.attrs["Spec"].get("Labels") or {}).get(ROLE), 2)):
            service.remove()
        ids = {service.id for service in services}
        if not ids:
            return
        with engine_errors():
            up = {node.id for node in self.nodes() if node.ready}
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if not [t for t in self.client.api.tasks() if t.get("ServiceID") in ids and t.get("NodeID") in up]:
                    return
                time.sleep(0.1)

    def remove_enclave(self, rid: str) -> Removed:
        """Gateway off the VNC network, kiosk and app services, the release volume wiped on its node (when up),
        the VNC secret, the networks."""
        import docker

        with engine_errors():
            networks = [n for n in self.find("network", rid=rid)]
            for gateway in super().find("container", role="gateway"):
                for net in networks:
                    if (net.attrs.get("Labels") or {}).get(ROLE) == "vnc-net":
                        try:
                            net.disconnect(gateway, force=True)
                        except docker.errors.APIError:
                            pass
            services = [s for s in self._services(rid=rid)]
            app = next((s for s in services if (s.attrs["Spec"].get("Labels") or {}).get(ROLE) == "app"), None)
            removed = [s.name for s in services]
            self._remove_services(services)
            self._wipe(rid, app)
            for secret in self.client.secrets.list(filters={"label": f"{RID}={rid}"}):
                secret.remove()
            removed += [c.name for c in super().find("container", rid=rid)]
            for container in super().find("container", rid=rid):
                container.remove(force=True)
            return Removed(removed, self._remove_overlay_networks(networks))

    def _wipe(self, rid: str, app: Any) -> None:
        if app is None:
            return
        labels = app.attrs["Spec"].get("Labels") or {}
        volume, node = labels.get(VOLUME_LABEL), labels.get(NODE_LABEL)
        if not volume or node not in {n.id for n in self.nodes() if n.ready}:
            return
        try:
            wipe(self.client, site_id=self.site_id, rid=rid, volume=volume,
                 image=app.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"].split("@")[0], node_id=node)
        except ShipError as exc:
            self.notes.append(f"the release volume {volume} on node {node[:12]} was not emptied: {exc}")

    def _remove_overlay_networks(self, networks: list[Any]) -> list[str]:
        from deploy.swarm.ship import _remove_network

        removed = []
        for net in networks:
            _remove_network(net)
            removed.append(net.name)
        return removed

    def enclave_recipients(self) -> list[str]:
        names = {(s.attrs["Spec"].get("Labels") or {}).get(f"{LABEL}.recipient", "?")
                 for s in self._services() if (s.attrs["Spec"].get("Labels") or {}).get(RID)}
        return sorted(names | set(super().enclave_recipients()))


__all__ = ["ENCLAVE_BYTES", "Node", "SwarmReconciler", "orchestrator_of", "remember_orchestrator", "SPEC_LABEL"]
