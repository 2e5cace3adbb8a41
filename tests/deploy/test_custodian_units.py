"""The custodian's parts that need no Docker engine: site settings, records (recipients, audit events, API keys),
the HTTP API's authentication and roles, and the CLI's errors for bad input."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deploy.custodian.api import create_app
from deploy.provision import Provisioner
from deploy.records import Records
from deploy.site.folder import Site, SiteError, SiteSettings, write_atomic
from policies.recipient import RecipientPolicy
from tests.cli_inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_site_settings_and_layout(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    assert len(site.site_id) == 6 and site.settings.url == "http://127.0.0.1:6080/"
    rid = site.recipient_id("alice")
    assert len(rid) == 10 and rid == site.recipient_id("alice") and rid != site.recipient_id("bob")
    assert len(f"ss-e-{rid}") <= 15  # a Linux interface name
    assert site.settings.gateway_ip.endswith(".10") and site.settings.front_subnet.startswith("10.213.")
    subnets = site.settings.enclave_subnets()
    assert len(subnets) == 2048 and subnets[0].prefixlen == 27 and not subnets[0].overlaps(subnets[1])
    site.prepare()
    assert {p.name for p in site.root.iterdir()} >= {"db", "releases", "policies", "secrets", "sessions", "site.json"}
    again = Site(tmp_path / "site")
    assert again.site_id == site.site_id and again.recipient_id("alice") == rid  # stable across runs
    assert again.configure(gateway_port=7000) and again.settings.url == "http://127.0.0.1:7000/"
    assert not again.configure(gateway_port=7000)


@pytest.mark.parametrize("text, field", [
    ('{"site_id": "xyz"}', "site_id"), ('{"gateway_port": 70000}', "gateway_port"),
    ('{"front_subnet": "10.0.0.0/16"}', "front_subnet"), ('{"enclave_pool": "10.1.2.3/28"}', "enclave_pool"),
    ('{"colour": "blue"}', "colour"), ('[1]', "JSON object"), ('{', "JSON"),
])
def test_bad_site_settings_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / "site.json").write_text(text)
    with pytest.raises(SiteError) as raised:
        Site(tmp_path)
    assert field in str(raised.value) and "site.json" in str(raised.value)


def test_overlapping_pools_are_refused() -> None:
    with pytest.raises(SiteError, match="overlap"):
        SiteSettings(front_subnet="10.214.3.0/24")


def test_write_atomic_leaves_no_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    write_atomic(target, b"one", 0o600)
    assert target.read_bytes() == b"one" and (target.stat().st_mode & 0o777) == 0o600

    class Boom(bytes):
        pass

    with pytest.raises(TypeError):
        write_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"one" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_screen_size_from_the_policy() -> None:
    assert RecipientPolicy(recipient="a").screen_text == "1280x800"
    assert RecipientPolicy(recipient="a", screen="1600x900").screen_text == "1600x900"
    assert RecipientPolicy(recipient="a", screen={"width": 1024, "height": 768}).screen_text == "1024x768"


def test_records_recipients_events_and_keys(tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 23, 12, tzinfo=dt.timezone.utc)
    records = Records(f"sqlite:///{tmp_path / 'db.sqlite'}", clock=lambda: now)
    saved = records.save_recipient("alice", rid="r1", release_ref="adult-k5", release="adult/abc",
                                   policy_sha256="0" * 64, policy_file="/p.yaml", expires_at=now)
    assert saved.status == "active" and saved.created_at == now
    records.end_recipient("alice", "revoked", "done")
    assert records.recipient("alice").status == "revoked" and records.recipient("alice").end_reason == "done"
    again = records.save_recipient("alice", rid="r1", release_ref="adult-k5", release="adult/def",
                                   policy_sha256="1" * 64, policy_file="/p.yaml", expires_at=None)
    assert again.status == "active" and again.end_reason is None and again.release == "adult/def"
    assert [r.name for r in records.recipients(status="active")] == ["alice"]

    first = records.audit("cli:root", "provision", "ok", "alice", release="adult/abc")
    records.audit("api:ops", "revoke", "ok", "alice", reason="x")
    records.audit("cli:root", "provision", "refused", "bob", error="bad")
    events = records.events()
    assert [e.id for e in events] == sorted(e.id for e in events) and events[0].id == first
    assert [e.action for e in records.events(recipient="alice")] == ["provision", "revoke"]
    assert records.events(action="revoke")[0].detail == {"reason": "x"}
    assert records.events(limit=1)[0].recipient == "bob"  # the newest, still in order

    key = records.add_key("ops", "custodian")
    assert key.startswith("ssk_") and len(key) > 40
    assert records.check_key(key).role == "custodian"
    assert records.check_key("ssk_wrong") is None and records.check_key(None) is None
    with pytest.raises(ValueError, match="exists"):
        records.add_key("ops", "auditor")
    with pytest.raises(ValueError, match="role"):
        records.add_key("x", "admin")
    assert records.revoke_key("ops") and not records.revoke_key("ops")
    assert records.check_key(key) is None
    assert records.add_key("ops", "auditor") != key  # the name is free again
    stored = Path(tmp_path / "db.sqlite").read_bytes()
    assert key.encode() not in stored  # only hashes are stored


@pytest.fixture
def api(tmp_path: Path):
    provisioner = Provisioner(Site(tmp_path / "site"))
    custodian = provisioner.records.add_key("ops", "custodian")
    auditor = provisioner.records.add_key("audit", "auditor")
    with TestClient(create_app(provisioner, expiry_interval=None)) as client:
        yield client, provisioner, {"Authorization": f"Bearer {custodian}"}, {"Authorization": f"Bearer {auditor}"}
    provisioner.close()


def test_api_needs_a_key_and_the_role(api) -> None:
    client, provisioner, custodian, auditor = api
    assert client.get("/healthz").status_code == 200
    assert client.get("/recipients").status_code == 401
    assert client.get("/recipients", headers={"Authorization": "Bearer ssk_nope"}).status_code == 401
    assert client.get("/recipients", headers=auditor).json() == []
    assert client.get("/audit-events", headers=auditor).status_code == 200
    refused = client.post("/recipients", headers=auditor, json={"policy_yaml": "recipient: x\n"})
    assert refused.status_code == 403 and "auditor" in refused.json()["detail"]
    assert client.delete("/recipients/x", headers=auditor).status_code == 403
    denied = provisioner.records.events(action="api-denied")
    assert denied and denied[-1].actor == "api:audit" and denied[-1].outcome == "refused"
    spec = client.get("/openapi.json").json()
    assert {"/recipients", "/recipients/{name}", "/audit-events", "/expire"} <= set(spec["paths"])
    assert "HTTPBearer" in json.dumps(spec["components"])


def test_api_bad_policies_are_400_and_audited(api) -> None:
    client, provisioner, custodian, _ = api
    bad = client.post("/recipients", headers=custodian, json={"policy_yaml": "recipient: eve\nlimits: {keys: 3}\n"})
    assert bad.status_code == 400 and "limits" in bad.json()["detail"]
    no_release = client.post("/recipients", headers=custodian, json={"policy_yaml": "recipient: eve\n"})
    assert no_release.status_code == 400 and "field 'release'" in no_release.json()["detail"]
    missing = client.post("/recipients", headers=custodian,
                          json={"policy_yaml": "recipient: eve\nrelease: nothing-here\n"})
    assert missing.status_code == 400 and "no such sealed release" in missing.json()["detail"]
    expired = client.post("/recipients", headers=custodian,
                          json={"policy_yaml": "recipient: eve\nrelease: r\nexpires: 2001-01-01\n"})
    assert expired.status_code == 400 and "expires" in expired.json()["detail"]
    assert client.post("/recipients", headers=custodian, json={"policy_yaml": "x", "ttl": "soon"}).status_code == 400
    events = provisioner.records.events(action="provision")
    assert len(events) == 4 and {e.outcome for e in events} == {"refused"}
    assert all(e.actor == "api:ops" for e in events)
    assert client.delete("/recipients/nobody", headers=custodian).status_code in (404, 409)


def test_cli_bad_input_exits_2_naming_the_field(tmp_path: Path) -> None:
    """One real `python -m safeshare.cli` run per command checks the process's exit code; the other bad inputs run the
    same main(argv) in process (tests/cli_inprocess.py)."""
    site = tmp_path / "site"
    policy = tmp_path / "p.yaml"
    policy.write_text("recipient: eve\nexpires: 2099-01-01\n")
    done = cli("provision", str(policy), "--site", str(site))
    assert done.returncode == 2 and "field 'release'" in done.stderr and str(policy) in done.stderr
    policy.write_text("recipient: eve\nrelease: adult-k5\nscreen: [1]\nlimits: {nope: 1}\n")
    done = run_cli("provision", str(policy), "--site", str(site))
    assert done.returncode == 2 and "nope" in done.stderr
    assert run_cli("provision", str(tmp_path / "missing.yaml"), "--site", str(site)).returncode == 2
    assert cli("revoke", "--site", str(site)).returncode == 2  # neither a recipient nor --expired
    (site / "site.json").write_text('{"gateway_port": "x"}')
    done = run_cli("recipients", "--site", str(site), "--no-engine")
    assert done.returncode == 2 and "site.json" in done.stderr


def test_cli_keys_and_events(tmp_path: Path) -> None:
    site = str(tmp_path / "site")
    added = json.loads(run_cli("custodian", "key", "add", "ops", "--role", "auditor", "--site", site, "--json").stdout)
    assert added["key"].startswith("ssk_") and added["role"] == "auditor"
    listed = json.loads(run_cli("custodian", "key", "list", "--site", site, "--json").stdout)
    assert [(k["name"], k["role"], k["revoked_at"]) for k in listed] == [("ops", "auditor", None)]
    assert added["key"] not in json.dumps(listed)
    assert run_cli("custodian", "key", "revoke", "ops", "--site", site).returncode == 0
    assert cli("custodian", "key", "revoke", "ops", "--site", site).returncode == 1  # a real process's exit code
    events = json.loads(cli("custodian", "events", "--site", site, "--json").stdout)
    assert [e["action"] for e in events] == ["api-key-add", "api-key-revoke"]
    assert json.loads(run_cli("recipients", "--site", site, "--no-engine", "--json").stdout) == []
