"""The single-engine reconciler against the real Docker engine, on the cheap paths: subnets chosen around what the
engine has, and fail closed (a step that fails leaves none of the enclave's containers or networks, and nothing it
did not create is touched). The full provisioning walk is tests/deploy/test_provision.py."""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import secrets
from pathlib import Path

import docker
import pytest

from deploy.plan import LABEL, EnclaveSubnets, enclave_names, plan_enclave
from deploy.reconcile import DockerReconciler, ReconcileError
from deploy.site.folder import Site
from policies.recipient import RecipientPolicy

pytestmark = pytest.mark.docker


@pytest.fixture
def site(tmp_path: Path) -> Site:
    root = tmp_path / "site"
    root.mkdir()
    (root / "site.json").write_text(json.dumps({"site_id": secrets.token_hex(3)}))
    site = Site(root)
    bundle = site.releases / "synth" / "00aa"
    bundle.mkdir(parents=True)
    site.trust_file.write_text("{}\n")
    return site


@pytest.fixture
def client(docker_engine):
    client = docker.from_env()
    yield client
    client.close()


def leftovers(client, site: Site) -> list[str]:
    label = {"label": f"{LABEL}.site={site.site_id}"}
    return [c.name for c in client.containers.list(all=True, filters=label)] + \
        [n.name for n in client.networks.list(filters=label)]


def cleanup(client, site: Site) -> None:
    label = {"label": f"{LABEL}.site={site.site_id}"}
    for container in client.containers.list(all=True, filters=label):
        container.remove(force=True)
    for net in client.networks.list(filters=label):
        net.remove()


def enclave_plan(site: Site, engine: DockerReconciler, images: dict[str, str]):
    policy = RecipientPolicy.model_validate({"recipient": "rita", "release": "synth"})
    rid = site.recipient_id("rita")
    (site.secrets / rid).mkdir(parents=True)
    subnets = engine.allocate(enclave_names(site.site_id, rid), site.settings.enclave_subnets())
    return plan_enclave(site, policy, site.releases / "synth" / "00aa", images, subnets)


def test_placement_needs_a_swarm(site: Site) -> None:
    """A plan pinned to a node is refused before any engine call (there is no client here)."""
    policy = RecipientPolicy.model_validate({"recipient": "rita", "release": "synth"})
    plan = plan_enclave(site, policy, site.releases / "synth" / "00aa", {"app": "a", "kiosk": "k"},
                        EnclaveSubnets("10.214.0.0/27", "10.214.0.32/27"), placement="node-2")
    with pytest.raises(ReconcileError, match="placement"):
        DockerReconciler(None, site.site_id).apply(plan)


def test_subnets_avoid_every_network_the_engine_has(site: Site, client) -> None:
    engine = DockerReconciler(client, site.site_id)
    subnets = engine.allocate(enclave_names(site.site_id, "0123456789"), site.settings.enclave_subnets())
    ours = [ipaddress.IPv4Network(subnets.enclave), ipaddress.IPv4Network(subnets.vnc)]
    assert ours[0] != ours[1] and all(net.prefixlen == 27 for net in ours)
    for net in client.networks.list():
        for config in (net.attrs.get("IPAM") or {}).get("Config") or []:
            if "." in config.get("Subnet", ""):
                assert not any(o.overlaps(ipaddress.IPv4Network(config["Subnet"], strict=False)) for o in ours)


def test_a_network_that_cannot_be_made_undoes_the_other(site: Site, client) -> None:
    """The VNC network's subnet is taken by a network another tool made: the enclave network this call created is
    removed again, the other tool's network stays."""
    engine = DockerReconciler(client, site.site_id)
    plan = enclave_plan(site, engine, {"app": "safeshare/none:missing", "kiosk": "safeshare/none:missing"})
    foreign = client.networks.create(f"s24test-{site.site_id}", driver="bridge", internal=True,
                                     ipam=docker.types.IPAMConfig(pool_configs=[
                                         docker.types.IPAMPool(subnet=plan.vnc_net.subnet)]))
    try:
        with pytest.raises(ReconcileError, match=f"network {plan.vnc_net.name}"):
            engine.apply(plan)
        assert leftovers(client, site) == []
        foreign.reload()  # still there
    finally:
        foreign.remove()
        cleanup(client, site)


def test_a_container_that_cannot_be_made_leaves_nothing(site: Site, client) -> None:
    engine = DockerReconciler(client, site.site_id)
    plan = enclave_plan(site, engine, {"app": "safeshare/none:missing", "kiosk": "safeshare/none:missing"})
    try:
        with pytest.raises(ReconcileError, match="refused"):
            engine.apply(plan)
        assert leftovers(client, site) == []
    finally:
        cleanup(client, site)


def test_a_kiosk_that_never_gets_ready_leaves_nothing(site: Site, client, offline_images) -> None:
    """The kiosk exits before its ready event (a bad argument here): the app, the kiosk and both networks go."""
    engine = DockerReconciler(client, site.site_id, ready_timeout=60)
    images = {service: offline_images.images[service].tag for service in ("app", "kiosk")}
    plan = enclave_plan(site, engine, images)
    broken = dataclasses.replace(plan, kiosk=dataclasses.replace(plan.kiosk, command=("--no-such-option",)))
    try:
        with pytest.raises(ReconcileError, match=f"the kiosk {plan.kiosk.name} exited before it was ready"):
            engine.apply(broken)
        assert leftovers(client, site) == []
    finally:
        cleanup(client, site)
