"""Issue 24, item 4: deleting sessions with their database rows is found.

Three sessions sealed and signed by the site's gateway (each seal names the one before). The attacks, as a writer of
the sessions folder and the database does them: delete the newest session's folder and row (no later seal names
it), and delete a middle session's folder and row and add a `session-deleted` audit event for it. The first is found
with a checkpoint the auditor exported before (`audit checkpoint`) and kept outside the site; the second because a
deletion event must name the deleted log's head and be dated after its retention ended. A genuine retention
deletion after its due date still passes."""
from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from deploy.records import Records
from deploy.audit.retention import apply_retention
from deploy.site.folder import Site
from proxy.audit.sequence import Deletion, check_deletions, deletion_problems
from safeshare.cli import main
from tests.proxy.test_seals import SiteFiles, ordered, record_sessions


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    site = SiteFiles.create(tmp_path_factory.mktemp("sequence") / "site")
    record_sessions(site, 3)
    return site


@pytest.fixture
def site(recorded: SiteFiles, tmp_path: Path) -> SiteFiles:
    return recorded.copy_to(tmp_path / "site")


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["audit", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def verify(site: SiteFiles, capsys, *extra: str) -> tuple[int, list[str]]:
    """`audit verify --db` over the site's sessions: the exit code and every finding's problem."""
    code, out, err = run(capsys, "verify", str(site.sessions), "--trust", str(site.trust_file), "--db", site.db,
                         "--site", str(site.root), "--json", *extra)
    assert code in (0, 1), err
    return code, [f["problem"] for check in json.loads(out)["checks"] for f in check["findings"]]


def checkpoint(site: SiteFiles, capsys, out: Path) -> dict:
    code, _, err = run(capsys, "checkpoint", str(site.sessions), "--site", str(site.root), "--db", site.db,
                       "--trust", str(site.trust_file), "--out", str(out))
    assert code == 0, err
    assert "keep it outside the site" in err
    return json.loads(out.read_text())


def head_of(folder: Path) -> str:
    return json.loads((folder / "meta.json").read_text())["log_head"]


def delete(site: SiteFiles, folder: Path) -> None:
    """What a writer of the folder and the database does: the folder and its row go."""
    shutil.rmtree(folder)
    with sqlite3.connect(site.db_file) as db:
        db.execute("DELETE FROM gateway_sessions WHERE id = ?", (folder.name,))


def test_deleting_the_newest_session_is_found_with_the_auditors_checkpoint(site: SiteFiles, tmp_path: Path,
                                                                         capsys) -> None:
    first, middle, newest = ordered(site)
    kept = tmp_path / "auditor" / "checkpoint.json"  # outside the site
    saved = checkpoint(site, capsys, kept)
    assert saved["count"] == 3 and saved["last"] == {"session": newest.name, "head": head_of(newest)}
    assert [entry["session"] for entry in saved["sessions"]] == [first.name, middle.name, newest.name]
    assert verify(site, capsys, "--checkpoint", str(kept)) == (0, [])

    delete(site, newest)
    assert verify(site, capsys) == (0, [])  # no later seal names it: the database alone cannot tell
    code, problems = verify(site, capsys, "--checkpoint", str(kept))
    assert code == 1
    assert problems == [f"missing: the checkpoint {kept} (of {saved['created']}) records this session, sealed at "
                        f"{saved['sessions'][2]['sealed_at']} with head {head_of_entry(saved, newest.name)}, and no "
                        f"session-deleted event accounts for it"]


def head_of_entry(saved: dict, session: str) -> str:
    return next(entry["head"] for entry in saved["sessions"] if entry["session"] == session)


def test_a_middle_session_deleted_with_a_forged_deletion_event_is_found(site: SiteFiles, tmp_path: Path,
                                                                       capsys) -> None:
    first, middle, newest = ordered(site)
    kept = tmp_path / "auditor" / "checkpoint.json"
    checkpoint(site, capsys, kept)
    head = head_of(middle)
    delete(site, middle)
    records = Records(site.db)
    # the head copied from the next session's seal, as retention would write it; but the session ended just now
    records.audit("system:retention", "session-deleted", "ok", "ann", session=middle.name, log_head=head)
    records.dispose()
    for extra in ((), ("--checkpoint", str(kept))):
        code, problems = verify(site, capsys, *extra)
        assert code == 1 and len(problems) == 1 + bool(extra), problems
        if extra:
            assert problems[0].startswith(f"missing: the checkpoint {kept} (of ")
        assert problems[-1].startswith("deleted before its retention allowed: the session-deleted event (#1) is "
                                       "dated ")
        assert "(20" in problems[-1] and "+ 365 days)" in problems[-1]

    # an event that names another head, dated late enough (a writer of the database picks the date)
    records = Records(site.db, clock=lambda: datetime.now(timezone.utc) + timedelta(days=400))
    records.audit("system:retention", "session-deleted", "ok", "ann", session=middle.name, log_head="0" * 64)
    records.dispose()
    code, problems = verify(site, capsys)
    assert code == 1
    assert any(p.startswith("the session-deleted event (#2) names log head " + "0" * 64 + f", the signed seal of "
                            f"{newest.name} names {head}") for p in problems), problems
    assert any("(#2) is dated" in p and "in the future" in p for p in problems), problems


def test_a_genuine_retention_deletion_after_its_due_date_passes(site: SiteFiles, tmp_path: Path, capsys,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import deploy.audit.sequence

    first, middle, newest = ordered(site)
    kept = tmp_path / "auditor" / "checkpoint.json"
    checkpoint(site, capsys, kept)
    later = datetime.now(timezone.utc) + timedelta(days=366)  # past the site's 365 days
    records = Records(site.db, clock=lambda: later)
    done = apply_retention(Site(site.root), records, later)  # the custodian service's retention, a year on
    records.dispose()
    assert sorted(item["session"] for item in done) == sorted([first.name, middle.name, newest.name])
    monkeypatch.setattr(deploy.audit.sequence, "now", lambda: later + timedelta(hours=1))
    assert verify(site, capsys, "--checkpoint", str(kept)) == (0, [])
    # the same deletions checked today would be in the future: that is found
    monkeypatch.setattr(deploy.audit.sequence, "now", lambda: datetime.now(timezone.utc))
    code, problems = verify(site, capsys)
    assert code == 1 and len(problems) == 3 and all("in the future" in p for p in problems)


def test_the_checkpoint_is_checked_before_it_is_used(site: SiteFiles, tmp_path: Path, capsys) -> None:
    first, middle, newest = ordered(site)
    kept = tmp_path / "checkpoint.json"
    saved = checkpoint(site, capsys, kept)
    saved["sessions"][1]["seal"] = saved["sessions"][1]["seal"].replace('"event":"seal"', '"event":"seal" ')
    kept.write_text(json.dumps(saved))
    code, _, err = run(capsys, "verify", str(site.sessions), "--trust", str(site.trust_file), "--db", site.db,
                       "--checkpoint", str(kept))
    assert code == 2 and f"{kept}: sessions[1]: field 'head' is not the hash of its seal line" in err
    # a checkpoint is made of a site that verifies: one with a session missing is refused
    delete(site, middle)
    code, _, err = run(capsys, "checkpoint", str(site.sessions), "--site", str(site.root), "--db", site.db,
                       "--trust", str(site.trust_file), "--out", str(tmp_path / "refused.json"))
    assert code == 1 and "no checkpoint written" in err and not (tmp_path / "refused.json").exists()


def test_deletion_checks_count_from_signed_times() -> None:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    now = start + timedelta(days=40)
    on_time = Deletion("20260101T000000Z-00aa", "h", start + timedelta(days=30, minutes=1), "ann", 7)
    assert deletion_problems(on_time, {"the seal of b": "h"}, start, 30, now) == []
    early = Deletion("20260101T000000Z-00aa", "h", start + timedelta(days=29), "ann", 8)
    assert deletion_problems(early, {}, start, 30, now)[0].startswith("deleted before its retention allowed")
    report = check_deletions("/nowhere", [], [on_time, early], lambda recipient: 30, now)
    assert report.findings == []  # one valid event accounts for the session
    report = check_deletions("/nowhere", [], [early], lambda recipient: 30, now)
    assert [c.session for c in report.findings] == ["20260101T000000Z-00aa"]


def test_the_help_says_what_a_checkpoint_proves_and_where_to_keep_it(capsys) -> None:
    for command in (["audit", "checkpoint", "--help"], ["audit", "verify", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(command)
        text = " ".join(capsys.readouterr().out.split())
        assert done.value.code == 0
        assert "outside the site" in text.lower() and "session-deleted" in text
