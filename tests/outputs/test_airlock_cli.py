"""`safeshare airlock ...` acts as a named checker under the same rules as the pages; `custodian events` shows the
airlock's events (issue 27)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.custodian.people import People
from safeshare.cli import main
from safeshare.sitedb import site_db_url
from tests.outputs.airlock_helpers import frozen_output, open_airlock, submit


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    airlock = open_airlock(root)
    assert airlock.records.engine.url.database == str(root / "db" / "safeshare.db")
    airlock.close()
    people = People(site_db_url(root))
    for name in ("bob", "carol"):
        people.add(name, "checker", "a long enough password")
    people.add("dave", "checker", "a long enough password")
    people.disable("dave")
    (root / "password").write_text("a long enough password\n")
    return root


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_review_from_the_command_line(site: Path, capsys) -> None:
    airlock = open_airlock(site)
    request_id = submit(airlock, [frozen_output("1"), frozen_output("2", "fail", justification="structural")]
                        ).request_id
    airlock.close()
    s = ("--site", str(site))
    pw = ("--password-file", str(site / "password"))
    code, out, _ = run(capsys, "airlock", "list", "--state", "submitted", "--json", *s)
    assert code == 0 and [i["request_id"] for i in json.loads(out)] == [request_id]
    # the requester, an unknown person and a disabled checker are refused (exit 1) and audited
    for name in ("alice", "mallory", "dave"):
        code, _, err = run(capsys, "airlock", "vote", request_id, "1", "approve", "--checker", name, *pw, *s)
        assert code == 1 and "refused" in err
    code, _, err = run(capsys, "airlock", "vote", "ab12cd34ef-0001-00000000", "1", "approve", "--checker", "bob", *pw, *s)
    assert code == 2 and "no airlock request" in err
    code, out, _ = run(capsys, "airlock", "vote", request_id, "1", "approve", "--checker", "bob", *pw,
                       "--comment", "fine", "--json", *s)
    assert code == 0 and json.loads(out)["decision"] is None  # hidden until a second checker voted
    code, out, _ = run(capsys, "airlock", "show", request_id, "--checker", "carol", "--json", *s)
    assert code == 0 and json.loads(out)["outputs"][0]["votes"] == []
    for output in ("1", "2"):
        for checker in ("bob", "carol"):
            if (output, checker) != ("1", "bob"):
                assert run(capsys, "airlock", "vote", request_id, output, "approve", "--checker", checker, *pw,
                           *s)[0] == 0
    code, out, _ = run(capsys, "airlock", "show", request_id, "--json", *s)
    assert json.loads(out)["state"] == "approved"
    code, out, err = run(capsys, "airlock", "release", request_id, "--json", *s)
    assert code == 0, err
    released = json.loads(out)
    assert released["state"] == "released" and Path(released["package"]).is_file()
    assert (site / "keys" / "outputs-signing.key").stat().st_mode & 0o777 == 0o600
    assert run(capsys, "verify-output", released["package"], "--site", str(site))[0] == 0
    code, out, _ = run(capsys, "airlock", "history", "alice", *s)
    assert code == 0 and "left the site" in out and "bob" in out and "carol" in out
    code, out, _ = run(capsys, "custodian", "events", "--json", *s)
    events = [e for e in json.loads(out) if e.get("source") == "airlock"]
    assert [e["action"] for e in events if e["outcome"] == "ok"] == \
        ["submitted", "voted", "voted", "voted", "voted", "approved", "released"]
    assert sum(e["action"] == "voted" and e["outcome"] == "refused" for e in events) == 3
    code, out, _ = run(capsys, "custodian", "events", *s)
    assert "released" in out and f"request={request_id}" in out


def test_release_refused_on_checksum_mismatch_exits_1(site: Path, capsys) -> None:
    airlock = open_airlock(site)
    request_id = submit(airlock).request_id
    airlock.vote(request_id, "1", "bob", "approve")
    airlock.vote(request_id, "1", "carol", "approve")
    path = airlock.store.output_file(request_id, "1", "data.csv")
    path.write_bytes(path.read_bytes() + b"extra,1\n")
    airlock.close()
    code, _, err = run(capsys, "airlock", "release", request_id, "--site", str(site))
    assert code == 1 and "checksum mismatch" in err
    code, out, _ = run(capsys, "custodian", "events", "--action", "release-refused", "--json", "--site", str(site))
    assert len(json.loads(out)) == 1


def test_return_and_withdraw(site: Path, capsys) -> None:
    airlock = open_airlock(site)
    request_id = submit(airlock).request_id
    airlock.close()
    s = ("--site", str(site))
    assert run(capsys, "airlock", "return", request_id, "--reason", "name the table", *s)[0] == 0
    assert run(capsys, "airlock", "return", request_id, *s)[0] == 1  # already returned
    code, out, _ = run(capsys, "airlock", "withdraw", request_id, "--json", *s)
    assert code == 0 and json.loads(out)["state"] == "withdrawn"
    assert run(capsys, "airlock", "show", "not-a-request", *s)[0] == 2


def test_rotating_the_outputs_key_keeps_released_packages_verifying(site: Path, capsys, tmp_path: Path) -> None:
    from outputs.airlock.package import PackageError, build_package, verify_package
    from safeshare.signing import SigningKey, ensure_outputs_key

    airlock = open_airlock(site)
    request_id = submit(airlock).request_id
    airlock.vote(request_id, "1", "bob", "approve")
    airlock.vote(request_id, "1", "carol", "approve")
    old_key = ensure_outputs_key(site)
    airlock.release(request_id, old_key, "cli:test")
    package = airlock.store.package_file(request_id)
    code, out, err = run(capsys, "custodian", "key", "rotate", "--purpose", "outputs", "--json", "--site", str(site))
    assert code == 0, err
    rotated = json.loads(out)
    assert rotated["retired"] == [old_key.key_id] and rotated["recorded"] == {old_key.key_id: 1}
    assert verify_package(package, site / "trust.json")["key_id"] == old_key.key_id  # still verifies
    assert ensure_outputs_key(site).key_id == rotated["key_id"] != old_key.key_id
    # a copy of the retired key signs nothing new, whatever date it writes
    stolen = SigningKey(old_key.private)  # a copy taken before the rotation (the file holds the new key now)
    frozen = airlock.frozen(request_id)
    forged = tmp_path / "forged.zip"
    forged.write_bytes(build_package(frozen, {"1": {"data.csv": b"sex,count\nfemale,3\n"}}, {}, stolen,
                                     "2026-01-01T00:00:00+00:00"))
    with pytest.raises(PackageError, match="retired"):
        verify_package(forged, site / "trust.json")
    airlock.close()


def test_intake_once_on_a_site_without_recipients(site: Path, capsys) -> None:
    code, out, err = run(capsys, "airlock", "intake", "--once", "--json", "--site", str(site))
    assert code == 0, err
    assert json.loads(out) == {"handled": [], "saved": 0, "statuses": 0, "errors": []}


def test_a_vote_from_the_command_line_needs_the_checkers_password_and_the_round_shown(site: Path, capsys) -> None:
    """One person with a shell on the custodian's host cannot cast two approvals under two names: the CLI checks the
    named checker's password like a sign-in, and a vote names the round it reviewed."""
    airlock = open_airlock(site)
    request_id = submit(airlock, [frozen_output("1")]).request_id
    airlock.close()
    s = ("--site", str(site))
    (site / "wrong").write_text("not carol's password at all\n")
    code, _, err = run(capsys, "airlock", "vote", request_id, "1", "approve", "--checker", "carol",
                       "--password-file", str(site / "wrong"), *s)
    assert code == 1 and "wrong password" in err
    with pytest.raises(SystemExit) as exited:  # argparse: --password-file is required
        run(capsys, "airlock", "vote", request_id, "1", "approve", "--checker", "carol", *s)
    assert exited.value.code == 2 and "--password-file" in capsys.readouterr().err
    code, _, err = run(capsys, "airlock", "vote", request_id, "1", "approve", "--checker", "carol",
                       "--password-file", str(site / "password"), "--round", "0", *s)
    assert code == 1 and "round" in err
    code, out, _ = run(capsys, "airlock", "show", request_id, "--json", *s)
    assert json.loads(out)["outputs"][0]["votes"] == []  # neither refused vote counted
    code, out, _ = run(capsys, "custodian", "events", "--json", *s)
    refused = [e for e in json.loads(out) if e.get("source") == "airlock" and e.get("outcome") == "refused"]
    assert any("wrong password" in json.dumps(e) for e in refused)
    assert "not carol's password" not in out and "a long enough password" not in out
    code, out, _ = run(capsys, "airlock", "vote", request_id, "1", "approve", "--checker", "carol",
                       "--password-file", str(site / "password"), "--round", "1", "--json", *s)
    assert code == 0, out
