"""Enclaves on a real two-node Docker Swarm on this machine: the host's engine is the manager (and control node:
the gateway runs there), a second dockerd in its own network namespace (tests/deploy/swarm_helpers.py) the worker.
Two recipients pinned to different nodes, the isolation probes of the single-host tests across nodes, idempotent
re-provisioning, revocation of a live session, and a worker that dies during a session.

The fixture leaves the swarm on both engines and removes the worker, its namespace and its link, also when a test
fails: the host's engine is shared with other tests.
"""
from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import aiohttp
import docker
import pytest

from deploy.images.build import image_refs
from deploy.plan import LABEL
from deploy.site.folder import Site
from deploy.swarm.provision import SwarmProvisioner
from tests.deploy.site_helpers import seal_releases
from tests.deploy.swarm_helpers import WorkerNode, host_networks, init_swarm, leave_swarm, run, swarm_state
from tests.deploy.test_provision import (FETCH, PROBE, _free_port, _token, address, cli, exec_python,
                                         revoke_during_session, write_policy)
from tests.proxy.test_gateway import ws_rfb_connect

pytestmark = [pytest.mark.docker, pytest.mark.swarm]

OPT_OUT = "--allow-unencrypted-overlay"


@pytest.fixture(scope="module")
def swarm(isolated_engine, offline_images):
    """The host's engine as manager, a worker in the netns `ssw1` with the enclave images loaded."""
    if swarm_state()["LocalNodeState"] != "inactive":
        pytest.skip("the host's Docker engine is already in a swarm")
    before = host_networks()
    worker = WorkerNode()
    try:
        worker.start()
        worker_id = init_swarm(worker)
        refs = image_refs()
        worker.load_images([refs["app"], refs["kiosk"]])
        yield {"worker": worker, "worker_id": worker_id, "manager_id": swarm_state()["NodeID"]}
    finally:
        leave_swarm(worker, before)
        worker.stop()


def test_two_nodes_are_ready(swarm: dict) -> None:
    client = docker.from_env()
    nodes = {node.id: node.attrs for node in client.nodes.list()}
    client.close()
    assert set(nodes) == {swarm["manager_id"], swarm["worker_id"]}
    assert all(attrs["Status"]["State"] == "ready" for attrs in nodes.values())
    assert nodes[swarm["worker_id"]]["Status"]["Addr"] == swarm["worker"].node_ip


@pytest.fixture(scope="module")
def site(swarm: dict, tmp_path_factory: pytest.TempPathFactory):
    """Two sealed releases; alice's enclave pinned to the manager, bob's to the worker (through the CLI)."""
    root = tmp_path_factory.mktemp("swarm-site")
    seal_releases(root)
    # a pool of its own: single-engine tests on the shared engine take /27s of the default pool meanwhile
    (root / "site.json").write_text(json.dumps({"enclave_pool": "10.215.0.0/16"}))
    policies = root.parent / "swarm-policies"
    policies.mkdir(exist_ok=True)
    port = _free_port()
    results = {}
    images = image_refs()
    try:
        for recipient, release, node in (("alice", "adult-k5", swarm["manager_id"]),
                                         ("bob", "fars-k5", swarm["worker_id"])):
            started = time.monotonic()
            done = cli("provision", str(write_policy(policies, recipient, release)), "--site", str(root),
                       "--gateway-port", str(port), "--orchestrator", "swarm", "--node", node, OPT_OUT, "--json")
            assert done.returncode == 0, done.stderr[-3000:]
            results[recipient] = {**json.loads(done.stdout), "wall": time.monotonic() - started, "node": node}
        yield {"root": root, "port": port, "policies": policies, "results": results, "site": Site(root),
               "swarm": swarm, "images": images}
    finally:
        client = docker.from_env()
        site_id = Site(root).site_id
        for service in client.services.list(filters={"label": f"{LABEL}.site={site_id}"}):
            service.remove()
        for container in client.containers.list(all=True, filters={"label": f"{LABEL}.site={site_id}"}):
            container.remove(force=True)
        for net in client.networks.list(filters={"label": f"{LABEL}.site={site_id}", "driver": "bridge"}):
            net.remove()
        client.close()


def node_client(site: dict, node: str) -> docker.DockerClient:
    swarm = site["swarm"]
    return docker.DockerClient(base_url=swarm["worker"].host) if node == swarm["worker_id"] else docker.from_env()


def enclave(site: dict, recipient: str) -> dict:
    """The recipient's app and kiosk containers, from the engine of the node they run on."""
    result = site["results"][recipient]
    client = node_client(site, result["node"])
    found = {}
    for container in client.containers.list(filters={"label": [f"{LABEL}.site={site['site'].site_id}",
                                                               f"{LABEL}.rid={result['rid']}"]}):
        found[container.labels[f"{LABEL}.role"]] = container
    return found


def gateway(site: dict):
    client = docker.from_env()
    (found,) = client.containers.list(filters={"label": [f"{LABEL}.site={site['site'].site_id}",
                                                         f"{LABEL}.role=gateway"]})
    return found


def test_each_enclave_runs_on_its_node_and_sees_only_its_release(site: dict) -> None:
    results = site["results"]
    assert {r["status"] for r in results.values()} == {"created"}
    assert all(r["url"].startswith(f"http://127.0.0.1:{site['port']}/?token=") for r in results.values())
    assert any(note.startswith("overlay networks NOT encrypted") for note in results["alice"]["notes"])
    for recipient in ("alice", "bob"):
        found = enclave(site, recipient)
        assert set(found) == {"app", "kiosk"}, recipient  # both on the pinned node's engine
        release = exec_python(found["kiosk"], FETCH, "http://app:8050/api/release").strip()
        assert release == results[recipient]["release"]
        denied = found["app"].exec_run(["sh", "-c", "touch /release/x 2>&1; touch /opt/x 2>&1"]).output.decode()
        assert denied.count("Read-only file system") == 2, denied
        checked = found["app"].exec_run(["safeshare", "verify-release", "/release", "--trust", "/trust.json",
                                         "--release", release])
        assert checked.exit_code == 0, checked.output.decode()[-2000:]
        status = found["kiosk"].exec_run(["sh", "-c", "grep NoNewPrivs /proc/1/status"]).output.decode()
        assert status.split() == ["NoNewPrivs:", "1"], status
    rows = {row["name"]: row for row in json.loads(cli("recipients", "--site", str(site["root"]), "--json").stdout)}
    for recipient in ("alice", "bob"):
        containers = rows[recipient]["containers"]
        assert containers["app"] == containers["kiosk"] == "running"
        assert containers["node"].endswith(results[recipient]["node"][:12])


def test_networks_keep_each_enclave_in_across_nodes(site: dict) -> None:
    s, swarm = site["site"], site["swarm"]
    alice, bob = enclave(site, "alice"), enclave(site, "bob")
    rid_a, rid_b = site["results"]["alice"]["rid"], site["results"]["bob"]["rid"]
    gw = gateway(site)
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    host_port = server.getsockname()[1]
    hosts = [swarm["worker"].host_ip, swarm["worker"].node_ip, "127.0.0.1", s.settings.gateway_ip]
    outside = [("1.1.1.1", 443), ("8.8.8.8", 53), ("deb.debian.org", 80)]
    try:
        probes = {}
        for mine, other, rid in ((alice, bob, rid_a), (bob, alice, rid_b)):
            probes[rid, "kiosk"] = json.loads(exec_python(mine["kiosk"], PROBE, json.dumps([
                ("app", 8050), (address(other["app"], "ss-e-"), 8050), (address(other["kiosk"], "ss-v-"), 5900),
                (address(gw, f"ss-v-{rid}"), 6080), (s.settings.gateway_ip, 6080),
                *[(h, host_port) for h in hosts], *[(h, site["port"]) for h in hosts], *outside])))
            probes[rid, "app"] = json.loads(exec_python(mine["app"], PROBE, json.dumps([
                (address(mine["kiosk"], "ss-v-"), 5900), (address(mine["kiosk"], "ss-e-"), 5900),
                (address(other["app"], "ss-e-"), 8050), (address(other["kiosk"], "ss-e-"), 5900),
                *[(h, host_port) for h in hosts], *outside])))
    finally:
        server.close()
    for (rid, role), found in probes.items():
        if role == "kiosk":
            assert found.pop("app:8050") == "OPEN", found
        assert "OPEN" not in found.values(), (rid, role, found)
    # the gateway (control node) reaches each kiosk's VNC server, on whichever node it runs
    names = [(f"ss-{s.site_id}-{rid}-kiosk", 5900) for rid in (rid_a, rid_b)]
    assert set(json.loads(exec_python(gw, PROBE, json.dumps(names))).values()) == {"OPEN"}
    client = docker.from_env()
    for rid in (rid_a, rid_b):
        for name in (f"ss-e-{rid}", f"ss-v-{rid}"):
            attrs = client.networks.get(name).attrs
            assert attrs["Driver"] == "overlay" and attrs["Internal"] is True and attrs["Scope"] == "swarm"
    client.close()
    for found in (alice, bob):
        assert set(found["app"].attrs["NetworkSettings"]["Networks"]) == {f"ss-e-{found['app'].labels[LABEL + '.rid']}"}
        for container in found.values():
            assert not [m for m in container.attrs["Mounts"] if m.get("Type") == "bind"], container.attrs["Mounts"]


def test_provisioning_twice_changes_nothing(site: dict) -> None:
    client = docker.from_env()
    before = {s.name: s.attrs["Version"]["Index"] for s in client.services.list(
        filters={"label": f"{LABEL}.site={site['site'].site_id}"})}
    done = cli("provision", str(site["policies"] / "bob.yaml"), "--site", str(site["root"]), "--orchestrator",
               "swarm", "--node", site["results"]["bob"]["node"], OPT_OUT, "--json")
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["status"] == "unchanged" and again["url"] is None, again
    assert again["token_id"] == site["results"]["bob"]["token_id"]
    after = {s.name: s.attrs["Version"]["Index"] for s in client.services.list(
        filters={"label": f"{LABEL}.site={site['site'].site_id}"})}
    client.close()
    assert after == before


def test_without_encryption_provisioning_fails_closed(site: dict) -> None:
    from deploy.swarm.crypto import control_host_check

    check = control_host_check()
    policy = write_policy(site["policies"], "erin", "adult-k5")
    done = cli("provision", str(policy), "--site", str(site["root"]), "--orchestrator", "swarm")
    if check.ok:  # a kernel that can: the networks are encrypted and nothing needs the opt-out
        assert done.returncode == 0, done.stderr
        client = docker.from_env()
        rid = Site(site["root"]).recipient_id("erin")
        assert "encrypted" in client.networks.get(f"ss-e-{rid}").attrs["Options"]
        client.close()
        assert cli("revoke", "erin", "--site", str(site["root"])).returncode == 0
        return
    assert done.returncode == 1 and "overlay networks cannot be encrypted" in done.stderr, done.stderr
    client = docker.from_env()
    rid = Site(site["root"]).recipient_id("erin")
    assert not client.networks.list(names=[f"ss-e-{rid}"]) and not client.services.list(
        filters={"label": f"{LABEL}.rid={rid}"})
    client.close()
    events = json.loads(cli("custodian", "events", "--site", str(site["root"]), "--json").stdout)
    assert [e["action"] for e in events if e["recipient"] == "alice"].count("swarm-unencrypted") == 1


def test_revocation_ends_a_live_session_on_the_worker_within_a_second(site: dict) -> None:
    s = site["site"]
    provisioner = SwarmProvisioner(s, images=site["images"])
    base = f"http://127.0.0.1:{site['port']}"
    rid = site["results"]["bob"]["rid"]
    state = revoke_during_session(base, _token(site["results"]["bob"]["url"]), provisioner, "bob",
                                  lambda: provisioner.revoke("bob", "test:bob"))
    assert state["closed_after"] < 1.0, state
    result = state["revoke"]
    assert result.tokens_revoked == 1 and len(result.sessions_ended) == 1
    assert sorted(result.networks_removed) == [f"ss-e-{rid}", f"ss-v-{rid}"]
    assert not enclave(site, "bob")
    client = docker.from_env()
    assert not client.services.list(filters={"label": f"{LABEL}.rid={rid}"})
    assert not client.secrets.list(filters={"label": f"{LABEL}.rid={rid}"})
    client.close()
    from proxy.audit.verify import verify_session

    (ended,) = provisioner.book.list("bob")
    check = verify_session(Path(ended.folder))
    assert check.ok and check.sealed, check.findings
    provisioner.close()
    site["results"].pop("bob")


def _node_ready(node_id: str) -> bool:
    client = docker.from_env()
    state = client.nodes.get(node_id).attrs["Status"]["State"]
    client.close()
    return state == "ready"


def test_a_lost_worker_ends_its_session_and_the_enclave_moves(site: dict) -> None:
    """The worker dies during a session on it, as a host losing power does: its link goes down, and its dockerd,
    containerd, shims and containers are killed at once (WorkerNode.kill). The gateway's connection to the lost kiosk
    gets no FIN or RST; its keepalive (proxy.transport) ends the session within
    about 8 s, with a connection error, sealed. The manager sees the node down; provisioning the recipient again moves
    the enclave to the manager's node with a new token."""
    s, swarm = site["site"], site["swarm"]
    base = f"http://127.0.0.1:{site['port']}"
    policy = write_policy(site["policies"], "carol", "fars-k5")
    # the images the worker was given (another build on the shared engine may have moved the tags since)
    images = site["images"]
    on_worker = SwarmProvisioner(s, pins={"carol": swarm["worker_id"]}, allow_unencrypted=True, images=images)
    first = on_worker.provision(policy, "test:carol")
    assert first.url and on_worker.engine.container_states()[first.rid]["node"].endswith(swarm["worker_id"][:12])
    moved = SwarmProvisioner(s, pins={"carol": swarm["manager_id"]}, allow_unencrypted=True, images=images)
    state: dict[str, object] = {}

    async def run() -> None:
        async with aiohttp.ClientSession() as http:
            client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={_token(first.url or '')}")
            deadline = time.monotonic() + 5
            while not on_worker.book.list("carol", live_only=True) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            state["live"] = [x.session_id for x in on_worker.book.list("carol", live_only=True)]
            killed = time.monotonic()
            await asyncio.to_thread(swarm["worker"].kill)
            while stream.close_code is None and not stream.reader.at_eof() and time.monotonic() - killed < 30:
                await asyncio.sleep(0.05)
            state["ended_by_itself_after"] = time.monotonic() - killed
            await stream.wait_closed()
            while _node_ready(swarm["worker_id"]) and time.monotonic() - killed < 60:
                await asyncio.sleep(0.2)
            state["seen_down_after"] = time.monotonic() - killed
            state["result"] = await asyncio.to_thread(moved.provision, policy, "test:carol")

    asyncio.run(run())
    print(json.dumps({k: v for k, v in state.items() if k != "result"}, default=str))
    assert len(state["live"]) == 1 and state["seen_down_after"] < 60
    assert state["ended_by_itself_after"] < 20, state  # keepalive: about 8 s
    result = state["result"]
    assert result.status == "replaced" and result.url and result.url != first.url
    assert any("is down" in note for note in result.notes), result.notes
    (ended,) = [x for x in moved.book.list("carol") if x.session_id == state["live"][0]]
    assert ended.ended_at is not None and "connection error" in (ended.end_reason or ""), (ended, result.notes)
    from proxy.audit.verify import verify_session

    check = verify_session(Path(ended.folder))  # sealed (signed, anchored) by the gateway as it ended it
    assert check.ok and check.sealed, check.findings
    audited = cli("audit", "verify", str(s.sessions), "--db", s.db_url, "--site", str(s.root), "--json")
    assert audited.returncode == 0, audited.stdout[-2000:]
    assert moved.engine.container_states()[result.rid]["node"].endswith(swarm["manager_id"][:12])

    async def again() -> tuple[int, int]:
        async with aiohttp.ClientSession() as http:
            client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={_token(result.url)}")
            await stream.wait_closed()
            return client.width, client.height

    assert asyncio.run(again()) == (1280, 800)
    revoked = moved.revoke("carol", "test:carol")
    assert revoked.tokens_revoked == 1
    for provisioner in (on_worker, moved):
        provisioner.close()


# --- the translation of a plan's container into a service, without a swarm -----------------------------------------

def _kiosk_spec():
    from deploy.plan import Attachment, ContainerSpec, Hardening, Mount

    return ContainerSpec(name="ss-abc123-0123456789-kiosk", role="kiosk", image="safeshare/kiosk:x",
                         command=("--vnc-listen", "10.215.0.52", "--vnc-password-file", "/secrets/vnc-password",
                                  "--state", "/state"),
                         labels=(("org.safeshare.role", "kiosk"),),
                         networks=(Attachment("ss-e-0123456789"), Attachment("ss-v-0123456789", "10.215.0.52")),
                         mounts=(Mount("/site/secrets/0123456789", "/secrets"),),
                         hardening=Hardening(read_only=True, cap_drop=("ALL",), cap_add=("KILL",),
                                             security_opt=("no-new-privileges:true",), shm_size="512m",
                                             tmpfs=(("/state", "size=64m,uid=10001"), ("/tmp", "size=1m"))))


def test_a_container_spec_becomes_a_pinned_service_as_strict() -> None:
    from deploy.swarm.specs import MOVED_TMPFS, NodeFiles, service_draft

    files = NodeFiles(vnc_secret=("sid", "ss-abc123-0123456789-vnc-aaaa"))
    draft = service_draft(_kiosk_spec(), image_id="sha256:feed", entrypoint=["tini", "--", "safeshare", "kiosk"],
                          node_id="node-1", files=files, listen_subnet="10.215.0.32/27")
    kwargs = draft.kwargs
    assert kwargs["image"] == "sha256:feed" and kwargs["constraints"] == ["node.id==node-1"]
    assert kwargs["read_only"] is True and kwargs["cap_drop"] == ["ALL"] and kwargs["cap_add"] == ["KILL"]
    assert kwargs["endpoint_spec"]["Mode"] == "dnsrr" and kwargs["healthcheck"] == {"Test": ["NONE"]}
    command = kwargs["command"]
    assert command[:2] == ["python3", "-c"] and "PR_SET_NO_NEW_PRIVS" in command[2]
    assert command[3:6] == ["10.215.0.32/27", "--", "tini"]  # the launcher finds the address in this subnet
    assert f"{MOVED_TMPFS}/state" in command and "/state" not in command  # an owned tmpfs moves, and its argument
    targets = {m["Target"]: m for m in kwargs["mounts"]}
    assert targets[f"{MOVED_TMPFS}/state"]["TmpfsOptions"] == {"SizeBytes": 64 << 20, "Mode": 0o777}
    assert targets["/dev/shm"]["TmpfsOptions"]["SizeBytes"] == 512 << 20
    (secret,) = kwargs["secrets"]
    assert secret["File"]["Name"] == "/secrets/vnc-password" and secret["File"]["Mode"] == 0o400
    assert kwargs["labels"]["org.safeshare.node"] == "node-1" and kwargs["labels"]["org.safeshare.swarm-spec"]
    other = service_draft(_kiosk_spec(), image_id="sha256:feed", entrypoint=["tini"], node_id="node-2", files=files,
                          listen_subnet="10.215.0.32/27")
    assert other.swarm_hash != draft.swarm_hash  # another node is another service


def test_what_a_service_cannot_do_as_strictly_is_refused() -> None:
    import dataclasses

    from deploy.plan import Mount
    from deploy.swarm.specs import NodeFiles, SpecError, service_draft

    spec = _kiosk_spec()
    with pytest.raises(SpecError, match="path on the control host"):  # no secret given for /secrets
        service_draft(spec, image_id="x", entrypoint=[], node_id="n", files=NodeFiles())
    files = NodeFiles(vnc_secret=("sid", "name"))
    for changed in (dataclasses.replace(spec, mounts=(*spec.mounts, Mount("/etc", "/host-etc"))),
                    dataclasses.replace(spec, hardening=dataclasses.replace(
                        spec.hardening, security_opt=("seccomp=unconfined",)))):
        with pytest.raises(SpecError):
            service_draft(changed, image_id="x", entrypoint=[], node_id="n", files=files)
