"""`safeshare token ...` and `safeshare gateway` open the site's database, never a stray one inside a site (issue 24,
item 12 follow-up). They defaulted to `$SAFESHARE_DB` or `./safeshare.db`: `safeshare token list` run inside a
`safeshare up` home created `HOME/safeshare.db`, an empty second database, and every site tool then refused the home
as holding two databases. Now: --db, else $SAFESHARE_DB, else the database of --site or $SAFESHARE_SITE
(safeshare.sitedb: SITE/db/safeshare.db), else ./safeshare.db, refused (exit 2, naming the file) when the current
folder is or lies in a site folder (one with db/safeshare.db or trust.json).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.tokens import TokenStore
from safeshare.sitedb import site_db_file, site_db_url
from safeshare.signing import ensure_key

REPO = Path(__file__).resolve().parents[2]


def safeshare(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("SAFESHARE_DB", "SAFESHARE_SITE")}
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**clean, **(env or {})})


def safeshare_in_process(monkeypatch: pytest.MonkeyPatch, *args: str, cwd: Path,
                         env: dict | None = None) -> subprocess.CompletedProcess:
    """`safeshare` above through the same main(argv) in this process: the same working folder and environment
    (restored after the test), no interpreter start. Each test keeps real runs of `safeshare` for the exit code."""
    from tests.cli_inprocess import run_cli

    for name in ("SAFESHARE_DB", "SAFESHARE_SITE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    return run_cli(*args)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home laid out as `safeshare up` leaves it: trust.json, keys, HOME/db/safeshare.db with a token of ann."""
    home = tmp_path / "home"
    ensure_key(home / "keys" / "gateway-signing.key", home / "trust.json", "gateway")
    (home / "sessions").mkdir()
    store = TokenStore(site_db_url(home))
    try:
        store.issue("ann", "127.0.0.1:5900", release="adult/0123456789abcdef")
    finally:
        store.dispose()
    return home


@pytest.mark.parametrize("where", [".", "sessions"])
@pytest.mark.parametrize("command", [["token", "list"], ["token", "revoke", "--recipient", "ann"],
                                     ["token", "issue", "--recipient", "ben", "--upstream", "127.0.0.1:5901"]])
def test_a_token_command_inside_a_site_makes_no_second_database(home: Path, where: str, command: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`token list` in the site's folder runs a real process; the other five, the same main(argv) in process."""
    cwd = (home / where).resolve()
    if where == "." and command == ["token", "list"]:
        result = safeshare(*command, cwd=cwd)
    else:
        result = safeshare_in_process(monkeypatch, *command, cwd=cwd)
    assert result.returncode == 2 and "Traceback" not in result.stderr, (result.stdout, result.stderr)
    assert str(cwd / "safeshare.db") in result.stderr and f"--site {home}" in result.stderr, result.stderr
    assert not (cwd / "safeshare.db").exists()
    assert site_db_url(home) == f"sqlite:///{site_db_file(home)}"  # site tools still accept the home
    store = TokenStore(site_db_url(home))
    try:  # nothing was revoked or issued anywhere
        assert [(t.recipient, t.status) for t in store.list_tokens()] == [("ann", "active")]
    finally:
        store.dispose()


def test_site_and_safeshare_site_name_the_sites_database(home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = safeshare("token", "list", "--json", "--site", str(home), cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert '"recipient": "ann"' in listed.stdout
    from_env = safeshare_in_process(monkeypatch, "token", "list", "--json", cwd=elsewhere,
                                    env={"SAFESHARE_SITE": str(home)})
    assert from_env.returncode == 0 and '"recipient": "ann"' in from_env.stdout, from_env.stderr
    inside = safeshare("token", "revoke", "--recipient", "ann", cwd=home, env={"SAFESHARE_SITE": str(home)})
    assert inside.returncode == 0 and "revoked 1" in inside.stdout, inside.stderr
    assert not (elsewhere / "safeshare.db").exists() and not (home / "safeshare.db").exists()
    missing = safeshare_in_process(monkeypatch, "token", "list", "--site", str(tmp_path / "nosuch"), cwd=elsewhere)
    assert missing.returncode == 2 and "no such site folder" in missing.stderr
    assert not (tmp_path / "nosuch").exists()


def test_an_old_up_home_is_refused_naming_both_layouts(home: Path, tmp_path: Path) -> None:
    os.replace(site_db_file(home), home / "safeshare.db")
    result = safeshare("token", "list", "--site", str(home), cwd=tmp_path)
    assert result.returncode == 2 and "old `safeshare up` layout" in result.stderr, result.stderr
    assert not site_db_file(home).exists()


def test_outside_any_site_the_current_folder_is_still_the_default(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    issued = safeshare("token", "issue", "--recipient", "ann", "--upstream", "127.0.0.1:5900", cwd=plain)
    assert issued.returncode == 0, issued.stderr
    assert (plain / "safeshare.db").is_file()


def test_the_gateway_refuses_a_stray_database_and_serves_the_sites(home: Path) -> None:
    refused = safeshare("gateway", "--listen", "127.0.0.1:0", "--sessions", str(home / "sessions"), cwd=home)
    assert refused.returncode == 2 and str(home / "safeshare.db") in refused.stderr, refused.stderr
    assert not (home / "safeshare.db").exists()
    clean = {k: v for k, v in os.environ.items() if k not in ("SAFESHARE_DB", "SAFESHARE_SITE")}
    gateway = subprocess.Popen([sys.executable, "-m", "safeshare.cli", "gateway", "--listen", "127.0.0.1:0",
                                "--site", str(home)], cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=clean)
    try:
        line = gateway.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), (line, gateway.stderr.read())
        import json
        import urllib.request

        with urllib.request.urlopen(f"{line.split()[-1].rstrip('/')}/healthz", timeout=10) as response:
            assert json.load(response)["database"] is True
    finally:
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(20)
        except subprocess.TimeoutExpired:
            gateway.kill()
            gateway.wait()
    assert gateway.returncode == 0
    assert not (home / "safeshare.db").exists()
