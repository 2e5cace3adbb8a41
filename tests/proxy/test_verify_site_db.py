"""`audit verify` of a site's sessions checks the anchors in the site's database by default (issue 24, item 12
follow-up). It checked none without `--db`: a writer of the sessions folder who deleted the newest session's folder
got a clean pass from `audit verify --site SITE`, though the gateway's row for that session was in SITE/db. Now the
site's database (safeshare.sitedb) is the default when what is verified is the site's sessions; --no-db skips it,
and a folder outside the site (a copy) is verified without one unless --db names it.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.proxy.test_seals import SiteFiles, audit, ordered, record_sessions


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    site = SiteFiles.create(tmp_path_factory.mktemp("verify-db") / "site")
    record_sessions(site, 2)
    return site


@pytest.fixture
def site(recorded: SiteFiles, tmp_path: Path) -> SiteFiles:
    return recorded.copy_to(tmp_path / "site")


def test_the_newest_session_deleted_from_the_folder_is_found_with_the_sites_database(site: SiteFiles) -> None:
    older, newest = ordered(site)
    shutil.rmtree(newest)  # a writer of the sessions folder
    for how, env in ((["--site", str(site.root)], None), ([], {"SAFESHARE_SITE": str(site.root)})):
        result = audit("verify", *how, env=env)
        assert result.returncode == 1 and "Traceback" not in result.stderr, (how, result.stdout, result.stderr)
        assert newest.name in result.stdout and "missing" in result.stdout, result.stdout
        assert f"ok       {older.name}" in result.stdout
    skipped = audit("verify", "--site", str(site.root), "--no-db")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "anchors not checked (--no-db)" in skipped.stderr


def test_a_session_folder_of_the_site_is_checked_against_its_anchor(site: SiteFiles) -> None:
    older, _ = ordered(site)
    result = audit("verify", str(older), "--json", env={"SAFESHARE_SITE": str(site.root)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["checks"][0]["anchor"] == "anchored"
    with sqlite3.connect(site.db_file) as db:  # the row says another head: found
        db.execute("UPDATE gateway_sessions SET seal_hash = ? WHERE id = ?", ("0" * 64, older.name))
    assert audit("verify", str(older), "--site", str(site.root)).returncode == 1
    assert audit("verify", str(older), "--site", str(site.root), "--no-db").returncode == 0


def test_a_copy_outside_the_site_gets_no_database_unless_named(site: SiteFiles, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(site.sessions, copy)
    result = audit("verify", str(copy), "--site", str(site.root), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert {check["anchor"] for check in json.loads(result.stdout)["checks"]} == {"not checked"}
    assert "anchors not checked" in result.stderr and "--db" in result.stderr
    named = audit("verify", str(copy), "--site", str(site.root), "--db", site.db, "--json")
    assert {check["anchor"] for check in json.loads(named.stdout)["checks"]} == {"anchored"}, named.stderr


def test_no_db_and_checkpoint_exclude_each_other_and_help_says_the_default(site: SiteFiles, tmp_path: Path) -> None:
    both = audit("verify", "--site", str(site.root), "--no-db", "--checkpoint", str(tmp_path / "c.json"))
    assert both.returncode == 2 and "--checkpoint" in both.stderr and "--no-db" in both.stderr
    assert audit("verify", "--db", site.db, "--no-db").returncode == 2
    text = " ".join(audit("verify", "--help").stdout.split())
    assert "--no-db" in text and "SITE/db/safeshare.db" in text and "default" in text
