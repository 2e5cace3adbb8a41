"""The airlock where enclaves really run (issue 27), with the real Docker engine and the offline images: the
researcher's app in its provisioned container saves an output and submits a release request (through its own API,
called from inside the enclave network), the custodian side's intake freezes it from the workspace the app writes
(SITE/enclaves/<rid>/workspace) into SITE/airlock, two checkers approve it through the airlock library while the
recipient is revoked in the middle of the review (the request is kept; the download is refused while revoked), and
once the recipient is provisioned again the signed package is downloaded through the gateway container and passes
`safeshare verify-output`. Skipped with the reason only when no engine can start here."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import docker
import pytest

from deploy.provision import LABEL
from deploy.records import Records
from deploy.site.folder import Site
from tests.deploy.site_helpers import cli

pytestmark = pytest.mark.docker

# the app's own API, called from the kiosk (on the enclave network, as the kiosk's browser would call it)
RESEARCHER = """
import json, sys, urllib.request
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request("http://app:8050" + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)
output = call("POST", "/api/outputs", {"name": "sex", "kind": "frequencies",
                                       "query": {"attribute": "sex", "exclude_suppressed": True}})
made = call("POST", "/api/requests", {"context": "Table 1 of the provisioned study",
                                      "controls": "counts of at least 10, suppressed records left out",
                                      "outputs": [{"output_id": output["id"]}]})
submitted = call("POST", "/api/requests/%d/submit" % made["number"])
print(json.dumps({"output": output["id"], "status": output["status"], "number": made["number"],
                  "state": submitted["state"]}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _remove_site(root: Path) -> None:
    client = docker.from_env()
    site_id = Site(root).site_id
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}.site={site_id}"}):
        container.remove(force=True)
    for net in client.networks.list(filters={"label": f"{LABEL}.site={site_id}"}):
        net.remove()
    client.close()


@pytest.fixture(scope="module")
def site(isolated_engine, offline_images, tmp_path_factory: pytest.TempPathFactory):
    """A site with a small sealed release (the app tests' table: a de-identification of ADULT takes minutes on a
    busy machine, and the airlock does not depend on the data) and alice provisioned (torn down after)."""
    from tests.enclave.test_app_outputs import outputs_frame
    from tests.enclave.test_app_support import synthetic_bundle

    root = tmp_path_factory.mktemp("airlock-site")
    bundle = synthetic_bundle(root, outputs_frame(), quasi_identifiers=["sex", "race", "age"])  # SITE/releases, key
    (root / "outputs.yaml").write_text("safe_threshold: 12\n")  # the site's floor reaches the provisioned app
    policy = root.parent / "alice.yaml"
    policy.write_text(f"recipient: alice\nrelease: {bundle.parent.name}/{bundle.name}\nexpires: 2099-12-31\n"
                      "screen: 1280x800\n")
    port = _free_port()
    try:
        done = cli("provision", str(policy), "--site", str(root), "--gateway-port", str(port), "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        yield {"root": root, "port": port, "policy": policy, "provisioned": json.loads(done.stdout),
               "site": Site(root)}
    finally:
        _remove_site(root)


def container(site: Site, rid: str, role: str):
    client = docker.from_env()
    (found,) = client.containers.list(filters={"label": [f"{LABEL}.site={site.site_id}", f"{LABEL}.rid={rid}",
                                                         f"{LABEL}.role={role}"]})
    client.close()
    return found


def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def download(port: int, request_id: str, token: str) -> tuple[int, bytes]:
    """GET the package through the gateway container with the token as its cookie (the session link's)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/outputs/{request_id}/package.zip",
                                     headers={"Cookie": f"safeshare_token={token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def token_of(url: str) -> str:
    return url.split("?token=", 1)[1]


def test_a_request_from_a_provisioned_enclave_is_frozen_reviewed_released_and_downloaded(site: dict) -> None:
    from deploy.airlock.intake import run_site_intake
    from outputs.airlock.workflow import Airlock

    root, s, provisioned = site["root"], site["site"], site["provisioned"]
    rid = provisioned["rid"]
    workspace = s.workspace(rid)
    app = container(s, rid, "app")
    # the app writes its workspace as its own uid, and finds the site's floor at /site/outputs.yaml
    assert workspace.stat().st_uid == 10001 and (workspace.stat().st_mode & 0o777) == 0o700
    command = app.attrs["Config"]["Cmd"]
    assert command[command.index("--recipient") + 1] == "alice" and command[command.index("--site") + 1] == "/site"

    kiosk = container(s, rid, "kiosk")
    result = kiosk.exec_run(["python3", "-c", RESEARCHER])
    assert result.exit_code == 0, result.output.decode()[-3000:]
    made = json.loads(result.output.decode().strip().splitlines()[-1])
    assert made["status"] == "pass" and made["state"] in ("submitting", "submitted"), made
    meta = json.loads((workspace / "outputs" / str(made["output"]) / "meta.json").read_text())
    rules = meta["rules"]  # the site's floor, read by the app from the mounted /site/outputs.yaml
    assert rules["rules"]["safe_threshold"] == 12 and rules["origin"]["safe_threshold"] == "site"
    assert rules["site"]["source"] == "/site/outputs.yaml"
    outbox = workspace / "airlock" / "outbox" / f"{made['number']}.json"
    assert outbox.is_file() and outbox.stat().st_uid == 10001  # written by the app, in its container

    records = Records(s.db_url)
    try:
        run_site_intake(s, records)  # what the custodian service does every second
    finally:
        records.dispose()
    assert not outbox.exists()
    airlock = Airlock.open(root, s.db_url)
    try:
        (request,) = airlock.records.requests(recipient="alice")
        assert request.state == "submitted" and request.rid == rid
        frozen = airlock.store.request_dir(request.request_id)
        assert (frozen / "request.json").is_file()
        status = json.loads((workspace / "airlock" / "status" / f"{made['number']}.json").read_text())
        assert status["state"] == "submitted" and status["request_id"] == request.request_id
        old_token = token_of(provisioned["url"])

        # one checker approves; then the recipient is revoked in the middle of the review
        airlock.vote(request.request_id, str(made["output"]), "carol", "approve", "fine")
        done = cli("revoke", "alice", "--site", str(root), "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        assert workspace.is_dir()  # the workspace (and its outputs) stay with the revocation
        assert airlock.get(request.request_id).state == "submitted"  # the request is kept
        airlock.vote(request.request_id, str(made["output"]), "dave", "approve", "agreed")
        assert airlock.get(request.request_id).state == "approved"
        from safeshare.signing import ensure_outputs_key

        released = airlock.release(request.request_id, ensure_outputs_key(root), "custodian:test")
        assert released.state == "released"

        # the gateway container serves the package only to a valid token: the revoked one is refused
        status_code, body = download(site["port"], request.request_id, old_token)
        assert status_code == 403 and b"PK" not in body and b'data-reason="revoked"' in body
        refused = airlock.records.events(request_id=request.request_id, action="download-refused")
        assert refused and refused[-1].detail["reason"] == "token revoked"

        # provisioned again: a new token, and the download through the gateway container works
        done = cli("provision", str(site["policy"]), "--site", str(root), "--gateway-port", str(site["port"]),
                   "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        new_token = token_of(json.loads(done.stdout)["url"])
        status_code, body = download(site["port"], request.request_id, new_token)
        assert status_code == 200, body[:500]
        package = root.parent / "package.zip"
        package.write_bytes(body)
        downloaded = airlock.records.events(request_id=request.request_id, action="downloaded")
        assert len(downloaded) == 1 and downloaded[0].actor == "recipient:alice"
        assert downloaded[0].detail["package_sha256"] == airlock.get(request.request_id).package_sha256
    finally:
        airlock.close()
    verified = cli("verify-output", str(package), "--site", str(root), "--json")
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    changed = bytearray(body)
    changed[len(changed) // 2] ^= 1
    (root.parent / "changed.zip").write_bytes(bytes(changed))
    assert cli("verify-output", str(root.parent / "changed.zip"), "--site", str(root)).returncode == 1
