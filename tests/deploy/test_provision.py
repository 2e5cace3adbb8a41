"""Custodian provisioning with the real Docker engine: two recipients side by side, each enclave kept in by its
networks, idempotent re-provisioning, the researcher's headless Chromium through noVNC, revocation of a live
session, a gateway killed and restarted, expiry. Skipped with the reason only when no engine can start here.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import time
from pathlib import Path

import aiohttp
import docker
import pytest

from deploy.provision import LABEL, Provisioner
from deploy.site.folder import Site
from proxy.tokens import SessionBook
from tests.deploy.site_helpers import cli, seal_releases
from tests.deploy.test_containers import novnc_sees_the_app
from tests.proxy.test_gateway import ws_rfb_connect

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_policy(folder: Path, recipient: str, release: str, expires: str = "2099-12-31", **extra: str) -> Path:
    path = folder / f"{recipient}.yaml"
    lines = [f"recipient: {recipient}", f"release: {release}", f"expires: {expires}", "screen: 1280x800",
             *[f"{key}: {value}" for key, value in extra.items()]]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def site(isolated_engine, offline_images, tmp_path_factory: pytest.TempPathFactory):
    """A site with two sealed releases and two recipients provisioned through the CLI (torn down after)."""
    root = tmp_path_factory.mktemp("site")
    seal_releases(root)
    policies = root.parent / "policies"
    policies.mkdir(exist_ok=True)
    port = _free_port()
    results = {}
    try:
        for recipient, release in (("alice", "adult-k5"), ("bob", "fars-k5")):
            started = time.monotonic()
            done = cli("provision", str(write_policy(policies, recipient, release)), "--site", str(root),
                       "--gateway-port", str(port), "--json")
            assert done.returncode == 0, done.stderr[-3000:]
            results[recipient] = {**json.loads(done.stdout), "wall": time.monotonic() - started}
        yield {"root": root, "port": port, "policies": policies, "results": results, "site": Site(root)}
    finally:
        client = docker.from_env()
        site_id = Site(root).site_id
        for container in client.containers.list(all=True, filters={"label": f"{LABEL}.site={site_id}"}):
            container.remove(force=True)
        for net in client.networks.list(filters={"label": f"{LABEL}.site={site_id}"}):
            net.remove()
        client.close()


def containers(site: Site, rid: str | None = None, role: str | None = None) -> list:
    client = docker.from_env()
    filters = [f"{LABEL}.site={site.site_id}"] + ([f"{LABEL}.rid={rid}"] if rid else []) + \
        ([f"{LABEL}.role={role}"] if role else [])
    found = client.containers.list(all=True, filters={"label": filters})
    client.close()
    return found


def exec_python(container, code: str, *args: str) -> str:
    result = container.exec_run(["python3", "-c", code, *args])
    assert result.exit_code == 0, result.output.decode()[-2000:]
    return result.output.decode()


PROBE = ("import socket, json, sys\nout = {}\nfor h, p in json.loads(sys.argv[1]):\n"
         "    try:\n        socket.create_connection((h, p), 2).close(); out[f'{h}:{p}'] = 'OPEN'\n"
         "    except Exception as e:\n        out[f'{h}:{p}'] = type(e).__name__\nprint(json.dumps(out))")

FETCH = ("import urllib.request, json, sys\n"
         "r = json.load(urllib.request.urlopen(sys.argv[1], timeout=5)); print(r['dataset'] + '/' + r['release'])")


def address(container, network_prefix: str) -> str:
    container.reload()
    for name, net in container.attrs["NetworkSettings"]["Networks"].items():
        if name.startswith(network_prefix):
            return net["IPAddress"]
    raise AssertionError(f"{container.name} is not on {network_prefix}*")


def bridge_address(network_name: str) -> str:
    client = docker.from_env()
    config = client.networks.get(network_name).attrs["IPAM"]["Config"][0]
    client.close()
    return config.get("Gateway") or config["Subnet"].rsplit(".", 1)[0].rsplit("/", 1)[0] + ".1"


def test_provisioned_side_by_side_each_sees_only_its_release(site: dict) -> None:
    results = site["results"]
    assert {r["status"] for r in results.values()} == {"created"}
    assert results["alice"]["release"].startswith("adult/") and results["bob"]["release"].startswith("fars")
    assert all(r["url"].startswith(f"http://127.0.0.1:{site['port']}/?token=") for r in results.values())
    assert all(r["seconds"] < 30 for r in results.values()), results  # target < 10 s: benchmarks/provision_bench.py
    for recipient, other in (("alice", "bob"), ("bob", "alice")):
        rid, other_rid = results[recipient]["rid"], results[other]["rid"]
        (kiosk,) = containers(site["site"], rid, "kiosk")
        (app,) = containers(site["site"], rid, "app")
        assert exec_python(kiosk, FETCH, "http://app:8050/api/release").strip() == results[recipient]["release"]
        # the release is mounted read-only, the root filesystem too
        denied = app.exec_run(["sh", "-c", "touch /release/x 2>&1; touch /opt/x 2>&1"]).output.decode()
        assert denied.count("Read-only file system") == 2, denied
        (other_app,) = containers(site["site"], other_rid, "app")
        release_mount = lambda c: next(m["Source"] for m in c.attrs["Mounts"] if m["Destination"] == "/release")  # noqa: E731
        assert release_mount(other_app) != release_mount(app)
        # the custodian's verified copy, not the live bundle folder a writer of SITE/releases can add files to
        assert Path(release_mount(app)).is_relative_to(site["site"].enclaves / rid), release_mount(app)
    listed = cli("recipients", "--site", str(site["root"]), "--json")
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["alice"]["containers"] == {"app": "running", "kiosk": "running"}
    assert rows["bob"]["release_ref"] == "fars-k5" and rows["bob"]["expires_at"].startswith("2100-01-01")


def test_networks_keep_each_enclave_in(site: dict) -> None:
    s, results = site["site"], site["results"]
    alice, bob = results["alice"]["rid"], results["bob"]["rid"]
    (kiosk_a,) = containers(s, alice, "kiosk")
    (app_a,) = containers(s, alice, "app")
    (app_b,) = containers(s, bob, "app")
    (kiosk_b,) = containers(s, bob, "kiosk")
    (gateway,) = containers(s, role="gateway")
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    host_port = server.getsockname()[1]
    gw_front = s.settings.gateway_ip
    hosts = [bridge_address(f"ss-e-{alice}"), bridge_address(f"ss-v-{alice}"), bridge_address(f"ssf-{s.site_id}")]
    outside = [("1.1.1.1", 443), ("8.8.8.8", 53), ("deb.debian.org", 80), ("pypi.org", 443)]
    try:
        from_kiosk = json.loads(exec_python(kiosk_a, PROBE, json.dumps([
            ("app", 8050), (address(app_b, "ss-e-"), 8050), (address(kiosk_b, "ss-v-"), 5900),
            (gw_front, 6080), (address(gateway, f"ss-v-{alice}"), 6080), *[(h, host_port) for h in hosts],
            *[(h, site["port"]) for h in hosts], *outside])))
        from_app = json.loads(exec_python(app_a, PROBE, json.dumps([
            (address(kiosk_a, "ss-v-"), 5900), (address(kiosk_a, "ss-e-"), 5900), (address(app_b, "ss-e-"), 8050),
            (gw_front, 6080), *[(h, host_port) for h in hosts], *outside])))
    finally:
        server.close()
    assert from_kiosk.pop("app:8050") == "OPEN", from_kiosk
    assert "OPEN" not in from_kiosk.values(), from_kiosk
    assert "OPEN" not in from_app.values(), from_app
    # the kiosk's VNC server answers the gateway on the kiosk's VNC network only
    probe = json.loads(exec_python(gateway, PROBE, json.dumps([(f"ss-{s.site_id}-{alice}-kiosk", 5900)])))
    assert set(probe.values()) == {"OPEN"}, probe
    # every enclave network is internal; the app is on one network, the kiosk on two
    assert set(app_a.attrs["NetworkSettings"]["Networks"]) == {f"ss-e-{alice}"}
    assert set(kiosk_a.attrs["NetworkSettings"]["Networks"]) == {f"ss-e-{alice}", f"ss-v-{alice}"}
    client = docker.from_env()
    for name in (f"ss-e-{alice}", f"ss-v-{alice}", f"ss-e-{bob}", f"ss-v-{bob}"):
        assert client.networks.get(name).attrs["Internal"] is True
    client.close()
    # the recordings folder is not in any enclave
    for container in (kiosk_a, app_a):
        assert not [m for m in container.attrs["Mounts"] if "sessions" in m["Source"]]


def test_provisioning_twice_changes_nothing(site: dict) -> None:
    before = {c.name: c.id for c in containers(site["site"])}
    policy = site["policies"] / "alice.yaml"
    done = cli("provision", str(policy), "--site", str(site["root"]), "--json")
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["status"] == "unchanged" and again["url"] is None
    assert again["token_id"] == site["results"]["alice"]["token_id"]
    assert {c.name: c.id for c in containers(site["site"])} == before
    events = json.loads(cli("custodian", "events", "--site", str(site["root"]), "--recipient", "alice",
                            "--json").stdout)
    assert [(e["action"], e["outcome"]) for e in events] == [("provision", "ok"), ("provision", "unchanged")]
    assert events[0]["actor"].startswith("cli:") and events[0]["detail"]["token_issued"] is True


def test_app_checks_the_release_signature_with_the_sites_trust_store(site: dict) -> None:
    """The app container gets SITE/trust.json read-only and --trust: its image can check the Ed25519 signature
    itself (cryptography is in it), and the private key is nowhere in the container."""
    s = site["site"]
    (app,) = containers(s, site["results"]["alice"]["rid"], "app")
    mounts = {m["Destination"]: m for m in app.attrs["Mounts"]}
    assert mounts["/trust.json"]["Source"] == str(s.trust_file) and mounts["/trust.json"]["RW"] is False
    assert not [m for m in app.attrs["Mounts"] if "keys" in m["Source"] or "secrets" in m["Source"]]
    assert app.attrs["Args"][app.attrs["Args"].index("--trust") + 1] == "/trust.json"
    # /release names no release: provisioning tells the app which one it mounted, and the seal must say the same
    release = site["results"]["alice"]["release"]
    assert app.attrs["Args"][app.attrs["Args"].index("--release") + 1] == release
    result = app.exec_run(["safeshare", "verify-release", "/release", "--trust", "/trust.json", "--release", release])
    assert result.exit_code == 0 and b"signed by release key" in result.output, result.output.decode()[-2000:]
    unnamed = app.exec_run(["safeshare", "verify-release", "/release", "--trust", "/trust.json"])
    assert unnamed.exit_code == 1 and b"name the release it must be" in unnamed.output, unnamed.output.decode()


def test_researcher_sees_the_app_through_novnc(site: dict, tmp_path: Path) -> None:
    seen = novnc_sees_the_app(site["results"]["alice"]["url"], tmp_path)
    assert seen["state"] == "connected" and seen["pixels"]
    sessions = list(site["site"].sessions.iterdir())
    assert sessions  # recorded by the gateway in the site's sessions folder
    book = SessionBook(Provisioner(site["site"]).store)
    (gateway,) = containers(site["site"], role="gateway")
    assert any(s.recipient == "alice" and s.release == site["results"]["alice"]["release"] for s in book.list()), \
        gateway.logs(tail=30).decode()


def _token(url: str) -> str:
    return url.split("token=", 1)[1]


def test_gateway_restart_keeps_tokens_and_sessions(site: dict) -> None:
    """A gateway killed mid-session: its session row is closed as interrupted when it starts again, the token stays
    valid and a new session works."""
    s = site["site"]
    base = f"http://127.0.0.1:{site['port']}"
    token = _token(site["results"]["alice"]["url"])
    provisioner = Provisioner(s)
    book = provisioner.book
    (gateway,) = containers(s, role="gateway")
    state: dict[str, object] = {}

    async def first() -> None:
        async with aiohttp.ClientSession() as http:
            client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={token}")
            deadline = time.monotonic() + 5
            while not book.list("alice", live_only=True) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            state["live"] = [x.session_id for x in book.list("alice", live_only=True)]
            await asyncio.to_thread(gateway.kill)
            deadline = time.monotonic() + 5
            while stream.close_code is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            state["closed"] = stream.close_code is not None or stream.reader.at_eof()
            await stream.wait_closed()

    asyncio.run(first())
    assert len(state["live"]) == 1 and state["closed"]
    gateway.start()  # a no-op when the engine restarted it already (restart policy unless-stopped)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", site["port"]), 1):
                pass
            import urllib.request

            if urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200:
                break
        except OSError:
            time.sleep(0.2)
    (interrupted,) = [x for x in book.list("alice") if x.session_id == state["live"][0]]
    assert interrupted.ended_at is not None and interrupted.end_reason.startswith("interrupted")
    from proxy.audit.verify import verify_session

    # sealed as recovered by the restarted gateway: proven up to its last signed checkpoint (partial)
    check = verify_session(Path(interrupted.folder), allow_partial=True)
    assert check.ok and check.partial, check.findings
    seal = json.loads((Path(interrupted.folder) / "events.jsonl").read_text().splitlines()[-1])
    assert seal["recovered"] is True

    async def second() -> None:
        async with aiohttp.ClientSession() as http:
            client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={token}")
            state["size"] = (client.width, client.height)
            await stream.wait_closed()

    asyncio.run(second())
    assert state["size"] == (1280, 800)
    provisioner.close()


def revoke_during_session(base: str, token: str, provisioner: Provisioner, recipient: str, revoke) -> dict:
    """Open a live session with `token`, call `revoke()` in a thread once the gateway has it on record, and measure
    the seconds until the researcher's WebSocket closes; returns those and what `revoke()` returned."""
    state: dict[str, object] = {}

    async def run() -> None:
        async with aiohttp.ClientSession() as http:
            client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={token}")
            deadline = time.monotonic() + 5
            while not provisioner.book.list(recipient, live_only=True) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            started = time.monotonic()
            revoking = asyncio.create_task(asyncio.to_thread(revoke))
            while stream.close_code is None and not stream.reader.at_eof():
                await asyncio.sleep(0.01)
            state["closed_after"] = time.monotonic() - started
            state["revoke"] = await revoking
            await stream.wait_closed()

    asyncio.run(run())
    return state


def test_revocation_ends_a_live_session_within_a_second(site: dict) -> None:
    s = site["site"]
    base = f"http://127.0.0.1:{site['port']}"
    token = _token(site["results"]["bob"]["url"])
    rid = site["results"]["bob"]["rid"]
    provisioner = Provisioner(s)
    state = revoke_during_session(base, token, provisioner, "bob", lambda: cli(
        "revoke", "bob", "--site", str(s.root), "--reason", "test over", "--json"))
    done = state["revoke"]
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)
    # the CLI process start (~1 s of imports) is part of the measured time: the gateway's own part is < 0.6 s
    assert state["closed_after"] < 1.0 + 1.5, state
    assert result["tokens_revoked"] == 1 and len(result["sessions_ended"]) == 1
    assert sorted(result["networks_removed"]) == [f"ss-e-{rid}", f"ss-v-{rid}"]
    assert not containers(s, rid) and len(result["containers_removed"]) == 2
    assert not (s.secrets / rid).exists() and (s.policy_file(rid)).exists()
    (ended,) = [x for x in provisioner.book.list("bob")]
    assert ended.ended_at is not None and Path(ended.folder).is_dir()  # the recording stays
    from proxy.audit.verify import verify_session

    check = verify_session(Path(ended.folder))  # sealed by the gateway container as revocation ended it
    assert check.ok and check.sealed, check.findings
    # the site also holds the session an earlier test's gateway restart left recovered (partial): accepted, with no
    # finding anywhere
    audited = cli("audit", "verify", str(s.sessions), "--db", s.db_url, "--site", str(s.root), "--json",
                  "--allow-partial")
    assert audited.returncode == 0, audited.stdout[-2000:]
    refused = asyncio.run(_status(f"{base}/?token={token}"))
    assert refused == 403
    rows = {row["name"]: row for row in json.loads(cli("recipients", "--site", str(s.root), "--all",
                                                       "--json").stdout)}
    assert rows["bob"]["status"] == "revoked" and rows["bob"]["end_reason"] == "test over"
    again = cli("revoke", "bob", "--site", str(s.root))
    assert again.returncode == 0  # revoking twice is harmless
    assert cli("revoke", "nobody", "--site", str(s.root)).returncode == 2
    provisioner.close()


async def _status(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(url, allow_redirects=False) as response:
        return response.status


def test_revocation_measured_in_process(site: dict) -> None:
    """The same with the revocation in process, as the custodian service does it: the live session closes within a
    second of the call."""
    s = site["site"]
    provisioner = Provisioner(s)
    policy = write_policy(site["policies"], "carol", "adult-k5")
    result = provisioner.provision(policy, "test:carol")
    base = f"http://127.0.0.1:{site['port']}"
    state = revoke_during_session(base, _token(result.url or ""), provisioner, "carol",
                                  lambda: provisioner.revoke("carol", "test:carol"))
    assert state["closed_after"] < 1.0, state
    assert not containers(s, result.rid)
    provisioner.close()


def test_expiry_is_enforced(site: dict) -> None:
    s = site["site"]
    expired = write_policy(site["policies"], "dave", "adult-k5", expires="2020-01-01")
    done = cli("provision", str(expired), "--site", str(s.root))
    assert done.returncode == 2 and "field 'expires'" in done.stderr
    later = Provisioner(s, clock=lambda: dt.datetime(2100, 1, 2, tzinfo=dt.timezone.utc))
    results = later.enforce_expiry()
    assert [r.recipient for r in results] == ["alice"] and results[0].status == "expired"
    assert not containers(s, site["results"]["alice"]["rid"])
    events = later.records.events(recipient="alice", action="expire")
    assert events[-1].actor == "system:expiry" and events[-1].outcome == "ok"
    refused = later.records.events(recipient="dave")
    assert refused[-1].outcome == "refused" and "expires" in refused[-1].detail["error"]
    later.close()


def test_site_down_removes_the_gateway(site: dict) -> None:
    """Issue 12, item 19: once no enclave is left, `safeshare site down` removes the gateway container and the
    front network (idempotent), and `recipients` shows the gateway's state before and after."""
    s = site["site"]
    provisioner = Provisioner(s)
    for row in provisioner.recipients():
        provisioner.revoke(row["name"], "test:site-down")
    # an enclave container left (here a created, never started one) makes it a refusal that names its recipient
    client = docker.from_env()
    leftover = client.containers.create(provisioner.images["gateway"],
                                        ["--help"], labels={f"{LABEL}.site": s.site_id, f"{LABEL}.rid": "0" * 10,
                                                            f"{LABEL}.recipient": "zed", f"{LABEL}.role": "app"})
    provisioner.close()
    try:
        refused = cli("site", "down", "--site", str(s.root))
        assert refused.returncode == 1 and "zed" in refused.stderr, refused.stderr
        assert containers(s, role="gateway")
    finally:
        leftover.remove(force=True)
        client.close()
    listed = cli("recipients", "--site", str(s.root))
    assert listed.returncode == 0 and listed.stdout.startswith(f"gateway running (ss-{s.site_id}-gateway"), listed.stdout
    done = cli("site", "down", "--site", str(s.root), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["containers_removed"] == [f"ss-{s.site_id}-gateway"]
    assert result["networks_removed"] == [f"ssf-{s.site_id}"]
    assert not containers(s, role="gateway")
    client = docker.from_env()
    assert not client.networks.list(names=[f"ssf-{s.site_id}"])
    client.close()
    again = cli("site", "down", "--site", str(s.root))
    assert again.returncode == 0 and "no gateway or front network to remove" in again.stdout
    assert cli("recipients", "--site", str(s.root)).stdout.startswith("gateway absent")
    events = json.loads(cli("custodian", "events", "--site", str(s.root), "--action", "site-down", "--json").stdout)
    assert [e["outcome"] for e in events] == ["refused", "ok", "unchanged"]
