"""People who sign in to the review pages (deploy/custodian/people.py): scrypt password hashes, web sessions with
absolute and idle timeouts stored hashed, disabling, the sign-in throttle, and `safeshare custodian person
add|list|disable`."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from deploy.custodian.people import (MAX_FAILURES, People, PersonError, SignInThrottle, check_password, csrf_matches,
                           hash_password)
from tests.cli_inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=os.environ.copy())


def stored_bytes(folder: Path) -> bytes:
    """The database's bytes, its write-ahead log included (SQLite in WAL mode keeps recent rows there)."""
    return b"".join(path.read_bytes() for path in sorted(folder.glob("db.sqlite*")))


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 26, 9, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def test_scrypt_matches_the_rfc_7914_test_vector() -> None:
    # RFC 7914 section 12: scrypt("password", "NaCl", N=1024, r=8, p=16, dkLen=64)
    expected = bytes.fromhex(
        "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
        "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640")
    stored = f"scrypt$1024$8$16${base64.b64encode(b'NaCl').decode()}${base64.b64encode(expected).decode()}"
    assert check_password("password", stored)
    assert not check_password("passwore", stored)
    assert hash_password("password", n=1024, r=8, p=16, salt=b"NaCl").split("$")[5] == \
        base64.b64encode(expected[:32]).decode()  # the first 32 bytes: scrypt's output is a PBKDF2 stream


@pytest.mark.parametrize("stored", ["", "bcrypt$1$2$3$4$5", "scrypt$x$8$1$AA==$AA==", "scrypt$1024$8$1$!!$AA==",
                                    "scrypt$4194304$8$1$AA==$AA=="])
def test_a_malformed_or_too_costly_hash_never_matches(stored: str) -> None:
    assert not check_password("anything at all", stored)


def test_add_authenticate_and_disable(tmp_path: Path) -> None:
    people = People(f"sqlite:///{tmp_path / 'db.sqlite'}", scrypt_n=2 ** 10)
    carol = people.add("carol", "checker", PASSWORD)
    assert carol.role == "checker" and carol.active
    with pytest.raises(PersonError, match="exists"):
        people.add("carol", "checker", PASSWORD)
    with pytest.raises(PersonError, match="role"):
        people.add("dave", "admin", PASSWORD)
    with pytest.raises(PersonError, match="at least 12"):
        people.add("dave", "checker", "short")
    with pytest.raises(PersonError, match="name"):
        people.add("../dave", "checker", PASSWORD)
    assert people.authenticate("carol", PASSWORD) == (people.get("carol"), "ok")
    assert people.authenticate("carol", PASSWORD + "x") == (None, "wrong-password")
    assert people.authenticate("nobody", PASSWORD) == (None, "unknown")
    assert people.authenticate("no body", PASSWORD) == (None, "unknown")
    assert people.disable("carol") and not people.disable("carol") and not people.disable("nobody")
    assert people.authenticate("carol", PASSWORD) == (None, "disabled")
    assert people.authenticate("carol", "wrong password!") == (None, "wrong-password")  # no hint it is disabled
    assert [p.name for p in people.list()] == ["carol"] and people.list()[0].disabled_at is not None
    stored = stored_bytes(tmp_path)
    assert PASSWORD.encode() not in stored and b"scrypt$1024$8$1$" in stored


def test_sessions_expire_idle_and_absolute_and_are_stored_hashed(tmp_path: Path) -> None:
    clock = Clock()
    people = People(f"sqlite:///{tmp_path / 'db.sqlite'}", clock=clock, absolute_seconds=3600, idle_seconds=600,
                    scrypt_n=2 ** 10)
    carol = people.add("carol", "checker", PASSWORD)
    token, started = people.start_session(carol, "127.0.0.1")
    stored = stored_bytes(tmp_path)
    assert token.encode() not in stored and hashlib.sha256(token.encode()).hexdigest().encode() in stored
    session, reason = people.session(token)
    assert reason == "ok" and session.person.name == "carol" and session.csrf == started.csrf
    assert people.session("x" * 43) == (None, "unknown") and people.session(None) == (None, "missing")
    # requests every 9 minutes keep it alive up to its absolute lifetime
    for _ in range(6):
        clock.now += timedelta(minutes=9)
        assert people.session(token)[1] == "ok"
    clock.now += timedelta(minutes=9)  # 63 minutes after sign-in
    assert people.session(token) == (None, "expired")
    assert people.session(token) == (None, "ended")
    token, _ = people.start_session(carol, "127.0.0.1")
    clock.now += timedelta(minutes=10)
    assert people.session(token) == (None, "idle")
    token, _ = people.start_session(carol, "127.0.0.1")
    assert people.end_session(token) and not people.end_session(token)
    assert people.session(token) == (None, "ended")
    token, _ = people.start_session(carol, "127.0.0.1")
    people.disable("carol")
    assert people.session(token) == (None, "ended")


def test_csrf_comparison() -> None:
    assert csrf_matches("abc", "abc")
    assert not csrf_matches("abc", "abd") and not csrf_matches("abc", None) and not csrf_matches("abc", "")


def test_throttle_per_source_and_per_name() -> None:
    now = [0.0]
    throttle = SignInThrottle(window=900, clock=lambda: now[0])
    for _ in range(MAX_FAILURES):
        assert throttle.allowed("10.0.0.1", "carol")
        throttle.failed("10.0.0.1", "carol")
    assert not throttle.allowed("10.0.0.1", "carol")
    assert not throttle.allowed("10.0.0.2", "Carol")  # the name, from anywhere
    assert not throttle.allowed("10.0.0.1", "dave")  # the source, for any name
    assert throttle.allowed("10.0.0.2", "dave")
    now[0] = 899.0
    assert not throttle.allowed("10.0.0.1", "carol")
    now[0] = 900.0
    assert throttle.allowed("10.0.0.1", "carol")
    for _ in range(MAX_FAILURES - 1):
        throttle.failed("10.0.0.3", "erin")
    throttle.succeeded("10.0.0.3", "erin")  # clears the name's failures, not the source's
    throttle.failed("10.0.0.3", "frank")
    assert not throttle.allowed("10.0.0.3", "erin") and throttle.allowed("10.0.0.4", "erin")


def test_cli_person_add_list_disable(tmp_path: Path) -> None:
    """The refusals that need a real process's exit code (a short password: 2, disabling twice: 1) run
    `python -m safeshare.cli`; the rest runs the same main(argv) in process (tests/cli_inprocess.py)."""
    site = str(tmp_path / "site")
    added = run_cli("custodian", "person", "add", "carol", "--role", "checker", "--site", site, "--json")
    assert added.returncode == 0, added.stderr
    generated = json.loads(added.stdout)
    assert generated["name"] == "carol" and len(generated["password"]) >= 20
    password_file = tmp_path / "pw.txt"
    password_file.write_text(PASSWORD + "\n")
    done = run_cli("custodian", "person", "add", "dave", "--site", site, "--password-file", str(password_file))
    assert done.returncode == 0 and PASSWORD not in done.stdout
    password_file.write_text("short\n")
    bad = cli("custodian", "person", "add", "erin", "--site", site, "--password-file", str(password_file))
    assert bad.returncode == 2 and str(password_file) in bad.stderr and "at least 12" in bad.stderr
    assert run_cli("custodian", "person", "add", "carol", "--site", site).returncode == 2
    assert run_cli("custodian", "person", "add", "x", "--site", site, "--password-file",
                   str(tmp_path / "missing")).returncode == 2
    listed = json.loads(run_cli("custodian", "person", "list", "--site", site, "--json").stdout)
    assert [(p["name"], p["role"], p["disabled_at"]) for p in listed] == [("carol", "checker", None),
                                                                          ("dave", "checker", None)]
    assert generated["password"] not in json.dumps(listed)
    assert run_cli("custodian", "person", "disable", "dave", "--site", site).returncode == 0
    assert cli("custodian", "person", "disable", "dave", "--site", site).returncode == 1  # a real process's exit code
    people = People(f"sqlite:///{tmp_path / 'site' / 'db' / 'safeshare.db'}")
    assert people.authenticate("carol", generated["password"])[1] == "ok"
    assert people.authenticate("dave", PASSWORD)[1] == "disabled"
    events = json.loads(run_cli("custodian", "events", "--site", site, "--json").stdout)
    assert [(e["action"], e["detail"]["person"]) for e in events] == [("person-add", "carol"), ("person-add", "dave"),
                                                                      ("person-disable", "dave")]
