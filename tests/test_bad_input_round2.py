"""Bad input gets a clear error, never a traceback or a 500 (issue 24, item 11): a non-ASCII `signed_at` in a release
seal and in a session seal, a pointer event whose `mask` is not a number, token lifetimes and dates beyond what a
datetime holds, a token database URL nobody can open, a port outside 0-65535. In a listing or a verification of a
sessions root, one bad folder is reported as bad and the others are still listed and verified.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deploy.custodian.api import create_app
from deploy.provision import Provisioner
from deploy.site.folder import Site
from proxy.audit.sessions import find_sessions
from safeshare.signing import SigningKey, TrustStore
from tests.cli_inprocess import run_cli
from tests.proxy.test_seals import SiteFiles, ordered, record_sessions

REPO = Path(__file__).resolve().parents[1]
NON_ASCII = "2026-11-26T10:00:00+00:00\u00e9"


def safeshare(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


# --- a release seal ------------------------------------------------------------------------------------------------

def test_a_release_seal_with_a_non_ascii_signed_at_is_refused_not_a_traceback(tmp_path: Path) -> None:
    key = SigningKey.generate(tmp_path / "keys" / "release-signing.key")
    trust = TrustStore.load_or_empty(tmp_path / "trust.json")
    trust.add("release", key)
    trust.save(tmp_path / "trust.json")
    bundle = tmp_path / "releases" / "adult" / "0123456789abcdef"
    bundle.mkdir(parents=True)
    (bundle / "seal.json").write_text(json.dumps({
        "format": "safeshare-seal/2", "dataset": "adult", "release": "0123456789abcdef",
        "signature": {"alg": "ed25519", "key_id": key.key_id, "signed_at": NON_ASCII, "signature": "AAAA"}}))
    result = safeshare("verify-release", str(bundle), "--trust", str(tmp_path / "trust.json"))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "seal.json" in result.stderr and "signed_at" in result.stderr and "ASCII" in result.stderr


# --- sessions: a seal and an event that do not parse ----------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    """Two sessions sealed by the site's gateway (real gateway, real key, anchored in the site's database)."""
    site = SiteFiles.create(tmp_path_factory.mktemp("bad-input") / "site")
    record_sessions(site, 2)
    return site


def rewrite_line(folder: Path, pick, change) -> None:
    """Change the first event `pick` selects, as a writer of the folder would (the rest of the file as it was)."""
    lines = (folder / "events.jsonl").read_bytes().splitlines()
    for index, line in enumerate(lines):
        event = json.loads(line)
        if pick(event):
            change(event)
            lines[index] = json.dumps(event, separators=(",", ":")).encode()
            break
    else:
        raise AssertionError(f"no such event in {folder}")
    (folder / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def non_ascii_signed_at(event: dict) -> None:
    event["signature"]["signed_at"] = NON_ASCII


def test_a_session_seal_with_a_non_ascii_signed_at_is_one_bad_session(recorded: SiteFiles, tmp_path: Path) -> None:
    """`audit verify` of the root reports that session (its file, the field) and still verifies the other; the
    service's verify answers its findings and the player `verified: false`, not a 500."""
    import shutil

    shutil.copytree(recorded.root, tmp_path / "site", symlinks=True)
    site = SiteFiles(tmp_path / "site")
    good, bad = ordered(site)
    rewrite_line(bad, lambda e: e.get("event") == "seal", non_ascii_signed_at)
    result = safeshare("audit", "verify", str(site.sessions), "--site", str(site.root))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"ok       {good.name}" in result.stdout and f"FAILED   {bad.name}" in result.stdout, result.stdout
    assert "signed_at" in result.stdout and "ASCII" in result.stdout

    provisioner = Provisioner(Site(site.root))
    try:
        records = provisioner.records
        key = records.add_key("aud", "auditor")
        with TestClient(create_app(provisioner, expiry_interval=None), raise_server_exceptions=False) as client:
            headers = {"Authorization": f"Bearer {key}"}
            verdict = client.get(f"/audit/sessions/{bad.name}/verify", headers=headers)
            assert verdict.status_code == 200, verdict.text
            assert verdict.json()["ok"] is False and "signed_at" in json.dumps(verdict.json())
            assert client.get(f"/audit/sessions/{good.name}/verify", headers=headers).json()["ok"] is True
            player = client.get(f"/audit/sessions/{bad.name}/player", headers=headers)
            assert player.status_code == 200 and player.json()["verified"] is False, player.text
    finally:
        provisioner.close()


def test_a_pointer_mask_that_is_not_a_number_hides_no_other_session(recorded: SiteFiles, tmp_path: Path) -> None:
    """`audit sessions` lists both sessions, names the file and field of the bad one, exits 2; the service's list
    answers 200 with both, the bad one flagged with its problem."""
    import shutil

    shutil.copytree(recorded.root, tmp_path / "site", symlinks=True)
    site = SiteFiles(tmp_path / "site")
    good, bad = ordered(site)

    def text_mask(event: dict) -> None:
        event["mask"] = "x"

    rewrite_line(bad, lambda e: e.get("event") == "pointer", text_mask)
    result = safeshare("audit", "sessions", str(site.sessions))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert good.name in result.stdout and bad.name in result.stdout, result.stdout
    assert str(bad / "events.jsonl") in result.stderr and "'mask'" in result.stderr, result.stderr
    listed = run_cli("audit", "sessions", str(site.sessions), "--json")  # the same main(argv), in process
    assert listed.returncode == 2
    by_name = {entry["session"]: entry for entry in json.loads(listed.stdout)}
    assert by_name[good.name]["problem"] is None and "'mask'" in by_name[bad.name]["problem"]
    assert by_name[bad.name]["flagged"] and by_name[bad.name]["keys"] == by_name[good.name]["keys"]

    provisioner = Provisioner(Site(site.root))
    try:
        key = provisioner.records.add_key("aud", "auditor")
        with TestClient(create_app(provisioner, expiry_interval=None), raise_server_exceptions=False) as client:
            answer = client.get("/audit/sessions", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
            names = {entry["session"]: entry for entry in answer.json()}
            assert set(names) == {good.name, bad.name} and "'mask'" in names[bad.name]["problem"]
    finally:
        provisioner.close()


def test_a_folder_that_cannot_be_summarized_at_all_is_listed_as_bad(tmp_path: Path, monkeypatch) -> None:
    """Whatever a summary trips over in one folder, find_sessions lists it with the problem and goes on."""
    from proxy.audit import sessions as module
    from tests.proxy.test_audit import fake_session

    root = tmp_path / "sessions"
    fake_session(root, "s1", "ann", "adult/aaa", "2026-11-01T10:00:00+00:00", "key")
    fake_session(root, "s2", "ben", "adult/bbb", "2026-11-02T10:00:00+00:00", "key")
    real = module.summarize

    def summarize(folder):
        if Path(folder).name == "s1":
            raise OSError("disk error")
        return real(folder)

    monkeypatch.setattr(module, "summarize", summarize)
    found = {s.session: s for s in find_sessions(root, since=module.datetime(2026, 11, 2, tzinfo=module.timezone.utc))}
    assert set(found) == {"s1", "s2"} and "disk error" in found["s1"].problem and found["s1"].recipient == "ann"
    assert found["s2"].problem is None


def test_meta_fields_of_the_wrong_type_are_named(tmp_path: Path) -> None:
    from tests.proxy.test_audit import fake_session

    root = tmp_path / "sessions"
    fake_session(root, "s1", "ann", "adult/aaa", "2026-11-01T10:00:00+00:00", "key")
    meta = json.loads((root / "s1" / "meta.json").read_text())
    (root / "s1" / "meta.json").write_text(json.dumps({**meta, "recipient": ["a", "list"]}))
    result = run_cli("audit", "sessions", str(root))  # in process: an uncaught exception fails the test as well
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "meta.json: field 'recipient'" in result.stderr and "s1" in result.stdout


# --- tokens, ports, the service's ttl --------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--ttl", "99999999999999d"], "too long"),
    (["--expires", "9999-12-31"], "9999-12-31"),
    (["--db", "garbage://"], "--db garbage://"),
])
def test_token_issue_bad_input_is_exit_2_naming_it(tmp_path: Path, args: list[str], needle: str) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'tokens.db'}"] if "--db" not in args else []
    run = safeshare if needle == "too long" else run_cli  # one real process for the exit code, the others in process
    result = run("token", "issue", "--recipient", "ann", "--upstream", "127.0.0.1:5900", *db, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert needle in result.stderr, result.stderr


def test_token_list_with_an_unusable_database_is_exit_2(tmp_path: Path) -> None:
    result = run_cli("token", "list", "--db", "garbage://")  # in process; the next is a real process (its whole stderr)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "--db garbage://" in result.stderr
    hidden = safeshare("token", "list", "--db", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x")
    assert hidden.returncode == 2 and "Traceback" not in hidden.stderr and "hunter2" not in hidden.stderr


def test_app_port_out_of_range_is_exit_2(tmp_path: Path) -> None:
    result = safeshare("app", "--bundle", str(tmp_path), "--port", "99999")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "--port" in result.stderr, result.stderr


def test_provisioning_with_a_huge_ttl_is_a_400(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    site.prepare()
    provisioner = Provisioner(site)
    try:
        key = provisioner.records.add_key("ops", "custodian")
        with TestClient(create_app(provisioner, expiry_interval=None), raise_server_exceptions=False) as client:
            answer = client.post("/recipients", headers={"Authorization": f"Bearer {key}"},
                                 json={"policy_yaml": "recipient: ann\n", "ttl": "99999999999999d"})
    finally:
        provisioner.close()
    assert answer.status_code == 400, answer.text
    assert "ttl" in answer.json()["detail"] and "too long" in answer.json()["detail"]
