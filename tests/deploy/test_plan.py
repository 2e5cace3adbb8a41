"""The provisioning plan without an engine: a recipient policy and a release give the expected names, networks,
subnets, read-only mounts, hardening and command lines (the same builders `safeshare up` uses), and a spec hash that
stays put for the same inputs and moves when the policy or the release does."""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import sys
from pathlib import Path

import pytest

from deploy import local
from deploy.images.hardening import HARDENING
from deploy.plan import (APP_TRUST, LABEL, SPEC_LABEL, EnclaveSubnets, Hardening, PoolFull, allocate_subnets,
                         app_argv, enclave_names, gateway_argv, kiosk_argv, plan_enclave, plan_gateway,
                         release_ref)
from deploy.site.folder import Site
from policies.recipient import RecipientPolicy
from safeshare.signing import GATEWAY_KEY

IMAGES = {"app": "safeshare/app:1", "kiosk": "safeshare/kiosk:1", "gateway": "safeshare/gateway:1"}
SUBNETS = EnclaveSubnets(enclave="10.214.0.0/27", vnc="10.214.0.32/27")


@pytest.fixture
def site(tmp_path: Path) -> Site:
    root = tmp_path / "site"
    root.mkdir()
    (root / "site.json").write_text(json.dumps({"site_id": "abc123", "gateway_port": 6090}))
    return Site(root)


def policy(**fields) -> RecipientPolicy:
    return RecipientPolicy.model_validate({"recipient": "alice", "release": "adult-k5", "expires": "2099-12-31",
                                           "screen": "1280x800", **fields})


def bundle(site: Site, release_id: str = "00aa11bb22cc33dd") -> Path:
    return site.releases / "adult" / release_id


def options(argv: tuple[str, ...] | list[str]) -> list[str]:
    return [arg for arg in argv if arg.startswith("--")]


def test_names_networks_and_subnets(site: Site) -> None:
    plan = plan_enclave(site, policy(), bundle(site), IMAGES, SUBNETS)
    rid = site.recipient_id("alice")
    assert plan.rid == rid and len(rid) == 10 and plan.release == "adult/00aa11bb22cc33dd"
    assert (plan.app.name, plan.kiosk.name) == (f"ss-abc123-{rid}-app", f"ss-abc123-{rid}-kiosk")
    assert [n.name for n in plan.networks] == [f"ss-e-{rid}", f"ss-v-{rid}"]
    for net, subnet, role in zip(plan.networks, (SUBNETS.enclave, SUBNETS.vnc), ("enclave-net", "vnc-net")):
        assert net.internal is True and net.subnet == subnet and net.role == role
        assert net.bridge == net.name and net.bridge.startswith("ss-") and len(net.bridge) <= 15
        assert dict(net.labels) == {f"{LABEL}.site": "abc123", f"{LABEL}.role": role, f"{LABEL}.recipient": "alice",
                                    f"{LABEL}.rid": rid}
    # the app is on the enclave network only (reached as `app`), the kiosk on both, with a fixed VNC address
    assert [(a.network, a.aliases) for a in plan.app.networks] == [(f"ss-e-{rid}", ("app",))]
    kiosk_ip = str(ipaddress.IPv4Network(SUBNETS.vnc)[20])
    assert [(a.network, a.address) for a in plan.kiosk.networks] == [(f"ss-e-{rid}", None), (f"ss-v-{rid}", kiosk_ip)]
    assert plan.gateway_attachment.network == f"ss-v-{rid}"
    assert plan.upstream == f"ss-abc123-{rid}-kiosk:5900" and plan.placement is None
    assert enclave_names("abc123", rid).target == f"abc123-{rid}"
    assert dict(plan.kiosk.labels)[f"{LABEL}.role"] == "kiosk" and SPEC_LABEL not in dict(plan.kiosk.labels)
    assert plan.kiosk.engine_labels()[SPEC_LABEL] == plan.kiosk.spec_hash


def test_mounts_are_read_only_and_the_enclave_sees_no_recordings(site: Site) -> None:
    plan = plan_enclave(site, policy(), bundle(site), IMAGES, SUBNETS)
    app_mounts = {m.target: m for m in plan.app.mounts}
    # the custodian's verified copy of the release (deploy/release_copy.py), never the live SITE/releases folder
    copy = site.enclaves / plan.rid / "release" / "adult" / bundle(site).name
    assert app_mounts["/release"].source == str(copy) and app_mounts["/release"].read_only
    assert site.release_copy(plan.rid, plan.release) == copy
    assert app_mounts[APP_TRUST].source == str(site.trust_file) and app_mounts[APP_TRUST].read_only
    (secrets,) = plan.kiosk.mounts
    assert secrets.source == str(site.secrets / plan.rid) and secrets.target == "/secrets" and secrets.read_only
    for spec in plan.containers:  # the app's workspace is the one mount it writes (tests/deploy/test_plan_airlock.py)
        assert all(m.read_only for m in spec.mounts if (spec.role, m.target) != ("app", "/state"))
        assert not [m for m in spec.mounts if "sessions" in m.source or "keys" in m.source]
    assert plan.password_file == str(site.password_file(plan.rid))
    gateway = plan_gateway(site, IMAGES["gateway"]).gateway
    assert {m.target: m.read_only for m in gateway.mounts} == {
        str(site.db_dir): False, str(site.sessions): False, str(site.secrets): True, str(site.policies): True,
        str(site.airlock): True}


def test_hardening_and_commands(site: Site) -> None:
    plan = plan_enclave(site, policy(screen="1024x768"), bundle(site), IMAGES, SUBNETS)
    for spec in plan.containers:  # the app's /state is its workspace's bind mount, not a tmpfs
        assert spec.hardening == Hardening.of(spec.role).without_tmpfs("/state" if spec.role == "app" else "")
        assert spec.restart == "unless-stopped"
    assert plan.kiosk.hardening.cap_add == tuple(HARDENING["kiosk"]["cap_add"])
    assert dict(plan.app.hardening.tmpfs) == {k: v for k, v in HARDENING["app"]["tmpfs"].items() if k != "/state"}
    app = list(plan.app.command)
    assert app[app.index("--trust") + 1] == APP_TRUST and app[app.index("--bundle") + 1] == "/release"
    # /release names no release: the app is told which one the mount holds, and refuses a bundle sealed as another
    assert app[app.index("--release") + 1] == f"{bundle(site).parent.name}/{bundle(site).name}" == plan.release
    kiosk = list(plan.kiosk.command)
    assert kiosk[kiosk.index("--size") + 1] == "1024x768"
    assert kiosk[kiosk.index("--vnc-listen") + 1] == plan.kiosk.networks[1].address
    assert kiosk[kiosk.index("--url") + 1] == "http://app:8050/"
    assert kiosk[kiosk.index("--vnc-password-file") + 1] == "/secrets/vnc-password"
    assert plan_enclave(site, policy(screen=None), bundle(site), IMAGES, SUBNETS).kiosk.command[-1] == "1280x800"


def test_the_gateway(site: Site) -> None:
    gateway_plan = plan_gateway(site, IMAGES["gateway"])
    gateway, front = gateway_plan.gateway, gateway_plan.front_net
    assert gateway.name == "ss-abc123-gateway" and dict(gateway.labels)[f"{LABEL}.role"] == "gateway"
    assert front.name == "ssf-abc123" and front.internal is False and front.subnet == site.settings.front_subnet
    assert not front.bridge.startswith("ss-")  # the host rule (INPUT -i ss-+ DROP) must not cut the front off
    assert [(a.network, a.address) for a in gateway.networks] == [("ssf-abc123", site.settings.gateway_ip)]
    assert [(p.container_port, p.host_ip, p.host_port) for p in gateway.ports] == [(6080, "127.0.0.1", 6090)]
    command = list(gateway.command)
    assert command[command.index("--allowed-origin") + 1] == "http://127.0.0.1:6090"
    assert "--secure-cookies" not in command and gateway_plan.health_url == "http://127.0.0.1:6090/healthz"
    site.configure(public_url="https://enclave.example.org/")
    assert "--secure-cookies" in plan_gateway(site, IMAGES["gateway"]).gateway.command


def test_hash_is_stable_and_follows_policy_and_release(site: Site) -> None:
    first = plan_enclave(site, policy(), bundle(site), IMAGES, SUBNETS)
    again = plan_enclave(Site(site.root), policy(), bundle(site), dict(IMAGES), SUBNETS)
    assert first == again and [s.spec_hash for s in first.containers] == [s.spec_hash for s in again.containers]
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.app.image = "other"  # type: ignore[misc]
    hash(first)  # hashable all the way down: no dicts or lists inside
    # limits the gateway enforces do not change the enclave; the screen changes the kiosk only
    limits = plan_enclave(site, policy(limits={"keys": {"rate": 5}}), bundle(site), IMAGES, SUBNETS)
    assert [s.spec_hash for s in limits.containers] == [s.spec_hash for s in first.containers]
    screen = plan_enclave(site, policy(screen="1024x768"), bundle(site), IMAGES, SUBNETS)
    assert screen.app.spec_hash == first.app.spec_hash and screen.kiosk.spec_hash != first.kiosk.spec_hash
    release = plan_enclave(site, policy(), bundle(site, "ffee"), IMAGES, SUBNETS)
    assert release.app.spec_hash != first.app.spec_hash and release.release == "adult/ffee"
    # a changed release is another copy: the mount moves with it (and the spec with the mount)
    mounted = lambda plan: next(m.source for m in plan.app.mounts if m.target == "/release")  # noqa: E731
    assert mounted(release) != mounted(first) and mounted(release).endswith("/release/adult/ffee")
    image = plan_enclave(site, policy(), bundle(site), {**IMAGES, "kiosk": "safeshare/kiosk:2"}, SUBNETS)
    assert image.kiosk.spec_hash != first.kiosk.spec_hash
    # the gateway's hash does not depend on any recipient
    assert plan_gateway(site, "g").gateway.spec_hash == plan_gateway(Site(site.root), "g").gateway.spec_hash


def test_subnets_allocation() -> None:
    names = enclave_names("abc123", "0123456789")
    pool = list(ipaddress.IPv4Network("10.214.0.0/25").subnets(new_prefix=27))
    used = [ipaddress.IPv4Network("10.214.0.0/26"), ipaddress.IPv4Network("172.17.0.0/16")]
    assert allocate_subnets(names, pool, used, {}) == EnclaveSubnets("10.214.0.64/27", "10.214.0.96/27")
    kept = allocate_subnets(names, pool, used, {names.vnc_net: "10.214.0.32/27"})
    assert kept == EnclaveSubnets("10.214.0.64/27", "10.214.0.32/27")
    with pytest.raises(PoolFull):
        allocate_subnets(names, pool, [ipaddress.IPv4Network("10.214.0.0/25")], {})


def test_safeshare_up_uses_the_same_command_lines(tmp_path: Path, site: Site) -> None:
    """`safeshare up` builds its components' argv with the plan's builders: the same options as the containers',
    with local paths and addresses."""
    config = local.UpConfig(home=tmp_path / "home", size="1024x768")
    release = tmp_path / "home" / "releases" / "adult" / "00aa"
    commands = local.component_argv(config, release, app_port=8123, recipient="alice")
    prefix = [sys.executable, "-m", "safeshare.cli"]
    for name, argv in commands.items():
        assert argv[:4] == [*prefix, name], argv
    assert commands["app"][4:] == list(app_argv(bundle=str(release), trust=str(config.home / "trust.json"),
                                                state=str(config.home / "app"), host="127.0.0.1", port=8123,
                                                release="adult/00aa", recipient="alice"))
    plan = plan_enclave(site, policy(), bundle(site), IMAGES, SUBNETS)
    assert options(commands["app"]) == options(plan.app.command)
    kiosk = commands["kiosk"][4:]
    assert kiosk == list(kiosk_argv(url="http://127.0.0.1:8123/", state=str(config.home / "kiosk"), network="auto",
                                    logs=str(config.home / "logs" / "kiosk"), size="1024x768",
                                    policy=str(config.recipient_policy)))
    assert {"--url", "--state", "--network", "--app-title", "--size"} <= set(options(plan.kiosk.command)) & \
        set(options(kiosk))
    gateway = commands["gateway"][4:]
    assert gateway == list(gateway_argv(listen="127.0.0.1:6080", sessions=str(config.home / "sessions"),
                                        db=config.db, signing_key=str(config.home / GATEWAY_KEY),
                                        limits=str(config.recipient_policy), novnc=config.novnc_dir,
                                        airlock=str(config.home / "airlock")))
    assert set(options(plan_gateway(site, "g").gateway.command)) & set(options(gateway)) == {
        "--listen", "--sessions", "--db", "--signing-key", "--airlock"}
    assert release_ref(release) == "adult/00aa" and local.release_ref is release_ref
    by_policy = local.component_argv(dataclasses.replace(config, size=None), release, app_port=8123)["kiosk"]
    assert by_policy[by_policy.index("--policy") + 1] == str(config.recipient_policy)
