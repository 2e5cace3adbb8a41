"""A `safeshare up` home is a site (issue 24, item 12): the database `up` and its gateway write is the one the
custodian service, the audit commands and provisioning open when pointed at the home with --site.

The home is made by `up`'s own pieces (its config's database, its gateway command line from
deploy.local.component_argv, its gateway key) and one real session runs through the real gateway in front of a
scripted VNC server; then the custodian service is created on Site(HOME), as `safeshare custodian serve --site HOME`
does. Before the fix `up` wrote HOME/safeshare.db while a site's is HOME/db/safeshare.db: the service found no
anchor and showed the intact session `verified: false`."""
from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deploy.custodian.api import create_app
from deploy.local import UpConfig, component_argv, ensure_gateway_key
from deploy.provision import Provisioner
from deploy.site.folder import Site, SiteError
from proxy.eventlog import KeySource
from proxy.tokens import TokenStore
from tests.cdp import wait_for
from tests.proxy.rfbtools import FakeVncServer
from tests.proxy.test_gateway import running_gateway
from tests.proxy.test_seals import SECRET, UPDATE, session_through

REPO = Path(__file__).resolve().parents[2]


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def up_session(home: Path) -> str:
    """One session recorded as `safeshare up` records it: the gateway gets up's --db, --sessions and --signing-key.
    Returns the session id."""
    config = UpConfig(home=home)
    argv = component_argv(config, home / "releases" / "adult" / "0123456789abcdef", 8050)["gateway"]
    db, sessions, key = option(argv, "--db"), Path(option(argv, "--sessions")), Path(option(argv, "--signing-key"))
    assert db == config.db and sessions == home / "sessions"
    assert ensure_gateway_key(home) == key
    store = TokenStore(db)  # `up` issues the researcher's token in this database
    issued = store.issue("demo", "127.0.0.1:1", release="adult/0123456789abcdef")
    fake = FakeVncServer(script=b"\x03\x00\x00\x00" + len(SECRET).to_bytes(4, "big") + SECRET + UPDATE)

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(sessions.parent, store, name="up", novnc_dir=None,
                                       signing_key=KeySource(key)) as (gateway, base):
                await session_through(base, issued.token)
                await wait_for(lambda: len(gateway.ended) == 1, 10)
        finally:
            await fake.close()

    asyncio.run(run())
    store.dispose()
    (folder,) = sessions.iterdir()
    return folder.name


@pytest.fixture
def service(tmp_path: Path):
    """The custodian service on Site(HOME), an auditor's key, and the session `up`'s gateway recorded there."""
    home = tmp_path / "home"
    session = up_session(home)
    provisioner = Provisioner(Site(home))
    key = provisioner.records.add_key("aud", "auditor")
    with TestClient(create_app(provisioner, expiry_interval=None)) as client:
        yield {"client": client, "headers": {"Authorization": f"Bearer {key}"}, "session": session, "home": home}
    provisioner.close()


def test_the_service_on_an_up_home_finds_the_gateways_anchors(service) -> None:
    client, headers, session = service["client"], service["headers"], service["session"]
    checked = client.get(f"/audit/sessions/{session}/verify", headers=headers)
    assert checked.status_code == 200, checked.text
    assert checked.json()["anchor"] == "anchored" and checked.json()["ok"] is True, checked.json()
    player = client.get(f"/audit/sessions/{session}/player", headers=headers)
    assert player.status_code == 200, player.text
    assert player.json()["verified"] is True, player.json()["integrity"]
    # the audit command pointed at the same home with its database agrees
    home = service["home"]
    done = subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", "verify", str(home / "sessions"),
                           "--site", str(home), "--db", Site(home).db_url], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0 and "anchor anchored" in done.stdout, done.stdout + done.stderr


def test_up_and_a_site_name_one_database_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert UpConfig(home=home).db == Site(home).db_url == f"sqlite:///{home / 'db' / 'safeshare.db'}"
    assert Site(home).db_file == home / "db" / "safeshare.db"
    assert UpConfig(home=home, db_url="sqlite:////elsewhere.db").db == "sqlite:////elsewhere.db"  # --db wins


def _old_home(tmp_path: Path) -> tuple[Path, str]:
    """A home of the old layout: its database (with a token and the session's anchor) at HOME/safeshare.db."""
    home = tmp_path / "home"
    session = up_session(home)
    for name in ("safeshare.db", "safeshare.db-wal", "safeshare.db-shm"):
        if (home / "db" / name).exists():
            (home / "db" / name).rename(home / name)
    (home / "db").rmdir()
    return home, session


def test_an_old_up_home_is_refused_by_the_site_tools_then_moved_by_up(tmp_path: Path) -> None:
    from safeshare.sitedb import migrate_legacy

    home, session = _old_home(tmp_path)
    with pytest.raises(SiteError, match="old `safeshare up` layout"):
        Site(home)  # never a second, empty database next to the real one
    done = subprocess.run([sys.executable, "-m", "safeshare.cli", "custodian", "events", "--site", str(home)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 2 and str(home / "safeshare.db") in done.stderr, done.stderr
    assert not (home / "db").exists()

    moved = migrate_legacy(home)  # what `safeshare up` does before it starts anything
    assert moved == home / "db" / "safeshare.db" and not (home / "safeshare.db").exists()
    with sqlite3.connect(moved) as db:
        assert db.execute("SELECT count(*) FROM gateway_tokens").fetchone()[0] == 1
    provisioner = Provisioner(Site(home))
    key = provisioner.records.add_key("aud", "auditor")
    with TestClient(create_app(provisioner, expiry_interval=None)) as client:
        player = client.get(f"/audit/sessions/{session}/player", headers={"Authorization": f"Bearer {key}"})
    provisioner.close()
    assert player.status_code == 200 and player.json()["verified"] is True, player.json()
    assert migrate_legacy(home) is None  # nothing left to move


def test_a_home_with_both_databases_is_refused(tmp_path: Path) -> None:
    from safeshare.sitedb import SiteDatabaseError, migrate_legacy

    home, _ = _old_home(tmp_path)
    (home / "db").mkdir()
    (home / "db" / "safeshare.db").write_bytes((home / "safeshare.db").read_bytes())
    for attempt in (lambda: migrate_legacy(home), lambda: UpConfig(home=home).db):
        with pytest.raises(SiteDatabaseError, match="two databases"):
            attempt()
    with pytest.raises(SiteError, match="two databases"):
        Site(home)
    assert (home / "safeshare.db").exists() and (home / "db" / "safeshare.db").exists()  # nothing overwritten


def _up(home: Path, policy: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--policy",
                           str(REPO / "policies" / "examples" / policy)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))


def test_safeshare_up_moves_an_old_homes_database_first_and_refuses_two(tmp_path: Path) -> None:
    """`up` itself: the move happens before anything else (here a release whose gate fails then stops it, so no
    component starts); a home with both files starts nothing and names both (exit 2)."""
    home, _ = _old_home(tmp_path)
    done = _up(home, "adult-pu5.yaml")
    assert done.returncode == 1 and "gate" in done.stderr, done.stderr
    assert "moved the database of the old layout" in done.stdout, done.stdout
    assert (home / "db" / "safeshare.db").is_file() and not (home / "safeshare.db").exists()
    (home / "safeshare.db").write_bytes((home / "db" / "safeshare.db").read_bytes())
    done = _up(home, "adult-k5.yaml")
    assert done.returncode == 2 and "two databases" in done.stderr, done.stderr
    assert not (home / "up.json").exists() and not (home / "logs" / "app.log").exists()
