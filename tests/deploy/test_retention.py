"""Retention of recorded sessions: the recipient policy's retention_days (else the site default), counted from the
session's end; live sessions are never deleted; every deletion is an audit event naming the session and its seal."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from deploy.records import Records
from deploy.audit.retention import apply_retention
from deploy.site.folder import Site
from tests.proxy.test_audit import fake_session

REPO = Path(__file__).resolve().parents[2]


def make_site(tmp_path: Path) -> tuple[Site, Records]:
    site = Site(tmp_path / "site")
    site.configure(session_retention_days=365)
    site.prepare()
    records = Records(site.db_url)
    policy = site.policy_file("ann0000000")
    policy.write_text("recipient: ann\nrelease: adult-k5\nretention_days: 30\n")
    records.save_recipient("ann", rid="ann0000000", release_ref="adult-k5", release="adult/a",
                           policy_sha256="0" * 64, policy_file=str(policy), expires_at=None)
    fake_session(site.sessions, "s-ann-old", "ann", "adult/a", "2026-09-01T10:00:00+00:00", "key")
    fake_session(site.sessions, "s-ann-new", "ann", "adult/a", "2026-11-01T10:00:00+00:00", "key")
    fake_session(site.sessions, "s-ben-old", "ben", "adult/a", "2025-10-01T10:00:00+00:00", "key")
    fake_session(site.sessions, "s-ben-new", "ben", "adult/a", "2026-09-01T10:00:00+00:00", "key")
    live = site.sessions / "s-live"
    live.mkdir()
    (live / "events.jsonl").write_text('{"seq":0,"t":1.0,"event":"connect","prev":"' + "0" * 64 + '"}\n')
    (live / "meta.json").write_text(json.dumps({"session": "s-live", "recipient": "ann",
                                                "start": "2020-01-01T00:00:00+00:00", "end": None}))
    (site.player_cache / "s-ann-old").mkdir(parents=True)
    return site, records


def test_retention_deletes_what_is_due_and_logs_it(tmp_path: Path) -> None:
    site, records = make_site(tmp_path)
    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    planned = apply_retention(site, records, now, dry_run=True)
    assert sorted(item["session"] for item in planned) == ["s-ann-old", "s-ben-old"]
    assert (site.sessions / "s-ann-old").is_dir() and not records.events(action="session-deleted")
    done = apply_retention(site, records, now)
    assert {item["session"]: item["retention_days"] for item in done} == {"s-ann-old": 30, "s-ben-old": 365}
    remaining = sorted(p.name for p in site.sessions.iterdir())
    assert remaining == ["s-ann-new", "s-ben-new", "s-live"]  # the live one is never due
    assert not (site.player_cache / "s-ann-old").exists()
    events = records.events(action="session-deleted")
    assert sorted((e.actor, e.recipient, e.detail["session"]) for e in events) == [
        ("system:retention", "ann", "s-ann-old"), ("system:retention", "ben", "s-ben-old")]
    assert all(len(e.detail["log_head"]) == 64 for e in events)
    assert apply_retention(site, records, now) == []  # nothing more
    records.dispose()


def test_retention_cli(tmp_path: Path) -> None:
    site, records = make_site(tmp_path)
    records.dispose()
    run = lambda *a: subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", "retention", "--site",  # noqa
                                     str(site.root), *a], cwd=REPO, capture_output=True, text=True, timeout=60)
    dry = run("--dry-run", "--json")
    assert dry.returncode == 0 and len(json.loads(dry.stdout)) >= 2
    assert all(not item["deleted"] for item in json.loads(dry.stdout))
    real = run("--json")
    assert all(item["deleted"] for item in json.loads(real.stdout))
    assert Records(site.db_url).events(action="session-deleted")[0].actor.startswith("cli:")
