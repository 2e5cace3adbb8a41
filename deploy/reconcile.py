"""Making one Docker engine hold what a plan (deploy/plan.py) says, and no more, through the Docker SDK.

What the engine has is found by the org.safeshare labels, never by names alone, so containers and networks that
another tool made on the same engine are never touched. Each container carries its spec's hash: the same hash and
running means there is nothing to do; another hash means the enclave is replaced as a whole.

The order is what keeps an enclave closed while it changes: networks, app, kiosk, the kiosk's ready event (parsed by
enclave.kiosk.ready only), and only then the gateway joins the kiosk's VNC network; removal goes the other way
(gateway out, kiosk, app, networks). A step that fails removes the enclave it was building, so an engine failure
leaves nothing half-provisioned behind (fail closed). Swarm, with services and overlay networks, would be a second
reconciler reading the same plans.
"""
from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from deploy.plan import (LABEL, SPEC_LABEL, Attachment, ContainerSpec, EnclaveNames, EnclavePlan, EnclaveSubnets,
                         GatewayPlan, NetworkSpec, allocate_subnets)
from deploy.readiness import wait_for_http_ok
from enclave.kiosk.ready import find_ready

ROLE = f"{LABEL}.role"
RID = f"{LABEL}.rid"
REMOVAL_ORDER = {"kiosk": 0, "app": 1}  # the reverse of the start order; anything unknown last


class ReconcileError(Exception):
    """The engine could not be brought to the plan; what was being built is removed again."""


@dataclass
class Applied:
    status: str  # created (no container of the enclave was there), replaced, unchanged
    containers: dict[str, str]  # role -> container id


@dataclass
class Removed:
    containers: list[str]
    networks: list[str]


@contextmanager
def engine_errors() -> Iterator[None]:
    """The SDK's exceptions as ReconcileError, so that callers handle one kind of failure."""
    import docker

    try:
        yield
    except docker.errors.APIError as exc:
        raise ReconcileError(f"the Docker engine refused: {exc.explanation or exc}") from None
    except docker.errors.DockerException as exc:
        raise ReconcileError(f"the Docker engine failed: {exc}") from None


def _subnet(net: Any) -> str | None:
    configs = (net.attrs.get("IPAM") or {}).get("Config") or []
    return configs[0].get("Subnet") if configs else None


class DockerReconciler:
    """One site's enclaves on one Docker engine (`client`: a docker.DockerClient)."""

    def __init__(self, client: Any, site_id: str, *, ready_timeout: float = 90.0,
                 gateway_timeout: float = 30.0) -> None:
        self.client = client
        self.site_id = site_id
        self.ready_timeout = ready_timeout
        self.gateway_timeout = gateway_timeout

    # --- what the engine has ---------------------------------------------------------------------------------------

    def find(self, kind: str, role: str | None = None, rid: str | None = None) -> list[Any]:
        """The site's containers or networks, by label."""
        filters = [f"{LABEL}.site={self.site_id}"]
        if role:
            filters.append(f"{ROLE}={role}")
        if rid:
            filters.append(f"{RID}={rid}")
        with engine_errors():
            if kind == "container":
                return self.client.containers.list(all=True, filters={"label": filters})
            return self.client.networks.list(filters={"label": filters})

    def container_states(self) -> dict[str, dict[str, str]]:
        """rid -> role -> status, for every enclave container of the site."""
        states: dict[str, dict[str, str]] = {}
        for container in self.find("container"):
            rid = container.labels.get(RID)
            if rid:
                states.setdefault(rid, {})[container.labels.get(ROLE, "?")] = container.status
        return states

    def enclave_recipients(self) -> list[str]:
        return sorted({c.labels.get(f"{LABEL}.recipient", "?") for c in self.find("container")
                       if c.labels.get(RID)})

    def allocate(self, names: EnclaveNames, pool: Sequence[ipaddress.IPv4Network]) -> EnclaveSubnets:
        """The subnets a plan for `names` should use: its networks' own where they exist, else free /27s of the
        pool (raises plan.PoolFull)."""
        existing = {net.name: _subnet(net) for net in self.find("network", rid=names.rid)}
        existing = {name: subnet for name, subnet in existing.items() if subnet}
        used: list[ipaddress.IPv4Network] = []
        if not {names.enclave_net, names.vnc_net} <= set(existing):
            with engine_errors():
                every = self.client.networks.list()
            for net in every:
                for config in (net.attrs.get("IPAM") or {}).get("Config") or []:
                    try:
                        used.append(ipaddress.IPv4Network(config.get("Subnet", ""), strict=False))
                    except ValueError:
                        continue
        return allocate_subnets(names, pool, used, existing)

    # --- the gateway -----------------------------------------------------------------------------------------------

    def ensure_gateway(self, plan: GatewayPlan) -> list[str]:
        """The front network and the site's gateway as planned (joined to every enclave's VNC network when it is
        created); returns notes for the custodian."""
        notes: list[str] = []
        with engine_errors():
            self._ensure_network(plan.front_net)
            found = self.find("container", role="gateway")
            if found:
                gateway = found[0]
                if gateway.labels.get(SPEC_LABEL) == plan.gateway.spec_hash:
                    if gateway.status != "running":
                        gateway.start()
                        notes.append("the gateway was not running: started")
                        self._wait_gateway(plan)
                    return notes
                notes.append("the gateway's image or settings changed: recreated (live sessions were ended)")
                gateway.remove(force=True)
            gateway = self._create(plan.gateway)
            try:
                for net in self.find("network", role="vnc-net"):
                    net.connect(gateway)
                gateway.start()
                self._wait_gateway(plan)
            except BaseException:
                gateway.remove(force=True)
                raise
        return notes

    def _wait_gateway(self, plan: GatewayPlan) -> None:
        if not wait_for_http_ok(plan.health_url, self.gateway_timeout):
            raise ReconcileError(f"the gateway did not answer at {plan.health_url} within "
                                 f"{self.gateway_timeout:.0f} s")

    def remove_gateway(self) -> Removed:
        with engine_errors():
            containers = []
            for container in self.find("container", role="gateway"):
                container.remove(force=True)
                containers.append(container.name)
            return Removed(containers, self._remove_networks(self.find("network", role="front-net")))

    # --- enclaves --------------------------------------------------------------------------------------------------

    def apply(self, plan: EnclavePlan) -> Applied:
        """Make the enclave match `plan`: nothing when its containers run with the planned specs, else replace
        them all; the gateway joins once the kiosk is ready."""
        if plan.placement is not None:
            raise ReconcileError(f"one Docker engine runs everything on its own host; placement on "
                                 f"{plan.placement!r} needs a Swarm")
        with engine_errors():
            self._ensure_networks(plan.networks)
            existing = {c.labels.get(ROLE): c for c in self.find("container", rid=plan.rid)}
            if all(spec.role in existing and existing[spec.role].labels.get(SPEC_LABEL) == spec.spec_hash
                   and existing[spec.role].status == "running" for spec in plan.containers):
                self._attach_gateway(plan.gateway_attachment)
                return Applied("unchanged", {role: c.id for role, c in existing.items()})
            for container in existing.values():
                container.remove(force=True)
            try:
                started = {}
                for spec in plan.containers:
                    started[spec.role] = self._create(spec)
                    started[spec.role].start()
                self._wait_ready(started[plan.kiosk.role])
                self._attach_gateway(plan.gateway_attachment)
            except BaseException:
                self.remove_enclave(plan.rid)
                raise
        return Applied("replaced" if existing else "created", {role: c.id for role, c in started.items()})

    def remove_enclave(self, rid: str) -> Removed:
        """The enclave's containers and networks, in the reverse of the start order: the gateway leaves the VNC
        network first, so nothing new reaches the kiosk while it goes."""
        import docker

        with engine_errors():
            networks = self.find("network", rid=rid)
            for gateway in self.find("container", role="gateway"):
                for net in networks:
                    if net.attrs.get("Labels", {}).get(ROLE) == "vnc-net":
                        try:
                            net.disconnect(gateway, force=True)
                        except docker.errors.APIError:  # not attached
                            pass
            containers = sorted(self.find("container", rid=rid),
                                key=lambda c: REMOVAL_ORDER.get(c.labels.get(ROLE), len(REMOVAL_ORDER)))
            for container in containers:
                container.remove(force=True)
            return Removed([c.name for c in containers], self._remove_networks(networks))

    def _wait_ready(self, kiosk: Any) -> None:
        """The kiosk prints a `ready` event once the app answered and Xvfb, the VNC server and Chromium run."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if find_ready(kiosk.logs(stdout=True, stderr=False).decode(errors="replace")) is not None:
                return
            kiosk.reload()
            if kiosk.status in ("exited", "dead", "restarting"):  # it stopped before it was ever ready
                raise ReconcileError(f"the kiosk {kiosk.name} exited before it was ready:\n{self._tail(kiosk)}")
            time.sleep(0.2)
        raise ReconcileError(f"the kiosk {kiosk.name} was not ready within {self.ready_timeout:.0f} s:\n"
                             f"{self._tail(kiosk)}")

    @staticmethod
    def _tail(container: Any) -> str:
        return container.logs(stdout=True, stderr=True, tail=20).decode(errors="replace")

    def _attach_gateway(self, attachment: Attachment) -> None:
        found = self.find("container", role="gateway")
        if not found:
            raise ReconcileError("the site's gateway is gone; provision again to recreate it")
        gateway = found[0]
        gateway.reload()
        if attachment.network not in gateway.attrs["NetworkSettings"]["Networks"]:
            self._connect(attachment, gateway)

    # --- building blocks -------------------------------------------------------------------------------------------

    def _connect(self, attachment: Attachment, container: Any) -> None:
        self.client.networks.get(attachment.network).connect(
            container, aliases=list(attachment.aliases) or None, ipv4_address=attachment.address)

    def _create(self, spec: ContainerSpec) -> Any:
        """Created (not started) on its first network, then joined to the others with their addresses."""
        first, *others = spec.networks
        hardening, resources = spec.hardening, spec.resources
        options: dict[str, Any] = {
            "read_only": hardening.read_only, "cap_drop": list(hardening.cap_drop) or None,
            "cap_add": list(hardening.cap_add) or None, "security_opt": list(hardening.security_opt) or None,
            "tmpfs": dict(hardening.tmpfs) or None, "shm_size": hardening.shm_size,
            "mem_limit": resources.memory_limit, "mem_reservation": resources.memory_reservation,
            "environment": dict(spec.env) or None, "user": spec.user,
            "ports": {f"{p.container_port}/tcp": (p.host_ip, p.host_port) for p in spec.ports} or None}
        container = self.client.containers.create(
            spec.image, list(spec.command), name=spec.name, detach=True, labels=spec.engine_labels(),
            volumes={m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in spec.mounts},
            restart_policy={"Name": spec.restart}, network=first.network,
            networking_config={first.network: self.client.api.create_endpoint_config(
                aliases=list(first.aliases) or None, ipv4_address=first.address)},
            **{key: value for key, value in options.items() if value is not None})
        try:
            for attachment in others:
                self._connect(attachment, container)
        except BaseException:
            container.remove(force=True)
            raise
        return container

    def _ensure_networks(self, specs: Sequence[NetworkSpec]) -> None:
        """All of `specs`, or none of those this call created."""
        created = []
        try:
            for spec in specs:
                net, new = self._ensure_network(spec)
                if new:
                    created.append(net)
        except BaseException:
            self._remove_networks(created)
            raise

    def _ensure_network(self, spec: NetworkSpec) -> tuple[Any, bool]:
        import docker

        found = [net for net in self.client.networks.list(names=[spec.name]) if net.name == spec.name]
        if found:
            if found[0].attrs.get("Internal") != spec.internal:
                raise ReconcileError(f"network {spec.name} exists but is {'not ' if spec.internal else ''}internal; "
                                     f"remove it")
            return found[0], False
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=spec.subnet)])
        options = {"com.docker.network.bridge.name": spec.bridge} if spec.bridge else None
        try:
            net = self.client.networks.create(spec.name, driver="bridge", internal=spec.internal, ipam=ipam,
                                              labels=dict(spec.labels), check_duplicate=True, options=options)
        except docker.errors.APIError as exc:
            raise ReconcileError(f"network {spec.name} ({spec.subnet}) could not be created: "
                                 f"{exc.explanation}") from None
        return net, True

    def _remove_networks(self, networks: list[Any]) -> list[str]:
        """Whatever is still attached is disconnected first (the engine refuses to remove a network in use)."""
        import docker

        removed = []
        for net in networks:
            net.reload()
            for attached in list(net.attrs.get("Containers") or {}):
                try:
                    net.disconnect(attached, force=True)
                except docker.errors.APIError:  # already gone
                    pass
            net.remove()
            removed.append(net.name)
        return removed
