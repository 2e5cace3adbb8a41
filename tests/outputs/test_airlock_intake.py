"""The host-side intake: a submission frozen from a workspace, refusals with their reason, and an enclave that plants
links, FIFOs or huge files where the host reads or writes (issue 27)."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from outputs.airlock.intake import IntakeLoop, run_intake
from outputs.airlock.workspace import (Layout, TooLargeError, UnsafePathError, read_file, rel_output, rel_status,
                                       write_file)
from tests.outputs.airlock_helpers import CSV, db_url, draft, open_airlock, save_output, status, workspace


def _run(site: Path, ws):
    return run_intake(site, [ws], db_url=db_url(site))


def test_submission_is_frozen_hashed_and_reported(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1)
    save_output(state, 2, status="review")
    draft(state, 1, [{"output_id": 1}, {"output_id": 2, "justification": "rounded to 5"}])
    supporting = Layout(state).supporting_dir(1)
    supporting.mkdir(parents=True)
    (supporting / "notes.txt").write_text("how the cohort was chosen")
    result = _run(site, ws)
    assert result.errors == [] and result.saved == 2
    [handled] = result.handled
    assert handled["outcome"] == "ok", handled
    request_id = handled["request_id"]
    assert not Layout(state).outbox_file(1).exists()  # the entry is consumed
    airlock = open_airlock(site)
    frozen = airlock.frozen(request_id)
    assert frozen["recipient"] == "alice" and frozen["release"] == {"ref": "adult/20261126-abc",
                                                                    "seal_sha256": "f" * 64}
    files = frozen["outputs"][0]["files"]
    assert set(files) == {"data.csv", "meta.json"}  # rendering.html is never copied
    assert files["data.csv"]["sha256"] == hashlib.sha256(CSV).hexdigest()
    assert airlock.store.read_output_file(request_id, "1", "data.csv") == CSV
    assert frozen["outputs"][1]["justification"] == "rounded to 5"
    assert frozen["supporting"]["notes.txt"]["size"] == len("how the cohort was chosen")
    assert status(state, 1)["state"] == "submitted" and status(state, 1)["request_id"] == request_id
    # the workspace changing after submission changes nothing in the store
    (state / "outputs" / "1" / "data.csv").write_bytes(b"sex,count\nfemale,3\n")
    assert airlock.store.read_output_file(request_id, "1", "data.csv") == CSV
    # saved outputs are recorded once, with their hashes
    assert _run(site, ws).saved == 0
    saved = airlock.records.events(action="output-saved")
    assert [e.detail["output_id"] for e in saved] == ["1", "2"]
    assert saved[0].detail["files"]["data.csv"] == hashlib.sha256(CSV).hexdigest()
    # decisions reach the status file, checker names do not
    for checker in ("bob", "carol"):
        airlock.vote(request_id, "1", checker, "approve")
        airlock.vote(request_id, "2", checker, "changes" if checker == "carol" else "approve", f"{checker}: round")
    assert _run(site, ws).statuses == 1
    report = status(state, 1)
    assert report["state"] == "returned" and report["outputs"]["2"]["decision"] == "changes"
    assert "carol: round" in [c["comment"] for c in report["outputs"]["2"]["comments"]]
    assert "checker" not in json.dumps(report)
    airlock.close()


def test_missing_justification_is_refused_with_its_reason(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1, status="fail")
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "needs a justification" in handled["reason"]
    report = status(state, 1)
    assert report["state"] == "draft" and "needs a justification" in report["refusal"]["reason"]
    assert not Layout(state).outbox_file(1).exists()
    assert not (site / "airlock").exists() or not list((site / "airlock").rglob("request.json"))
    # the app's exception justification counts
    meta = json.loads((state / "outputs" / "1" / "meta.json").read_text())
    meta["exception"] = {"justification": "the cell is a structural zero"}
    (state / "outputs" / "1" / "meta.json").write_text(json.dumps(meta))
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "ok"
    assert status(state, 1)["refusal"] is None and status(state, 1)["state"] == "submitted"


@pytest.mark.parametrize("name, data", [("model.py", b"print(1)\n"), ("table.xlsx", b"PK\x03\x04"),
                                        ("chart.png", b"<svg/>"), ("big.csv", b"a\n" * 10_001)])
def test_file_outside_the_allowlist_is_refused(tmp_path: Path, name: str, data: bytes) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    (save_output(state, 1) / name).write_bytes(data)
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and name in handled["reason"]
    assert name in status(state, 1)["refusal"]["reason"]
    refused = open_airlock(site).records.events(action="refused")
    assert len(refused) == 1 and name in refused[0].detail["reason"]


def test_a_symlink_planted_in_the_workspace_is_refused_not_followed(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    secret = tmp_path / "secret.csv"
    secret.write_text("key,value\nsite-secret,42\n")
    ws = workspace(state)
    folder = save_output(state, 1)
    (folder / "data.csv").unlink()
    (folder / "data.csv").symlink_to(secret)
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "not a plain file" in handled["reason"]
    # a linked output folder, and a linked draft
    os.rename(folder, state / "outputs" / "9")
    (state / "outputs" / "1").symlink_to(state / "outputs" / "9")
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "refused, not followed" in handled["reason"]
    request = Layout(state).request_file(2)
    request.parent.mkdir(parents=True)
    request.symlink_to(secret)
    Layout(state).outbox_file(2).write_text(json.dumps({"request": 2, "action": "submit"}))
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "symlink" in handled["reason"]
    everything = b"".join(p.read_bytes() for p in site.rglob("*") if p.is_file() and p.suffix != ".db")
    assert b"site-secret" not in everything
    with pytest.raises(UnsafePathError):
        read_file(state, rel_output(1) + ("data.csv",), 1000)


def test_status_written_through_a_planted_link_replaces_the_link(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    target = tmp_path / "host-file.txt"
    target.write_text("must not change")
    ws = workspace(state)
    save_output(state, 1, status="fail")
    draft(state, 1, [{"output_id": 1}])
    status_dir = Layout(state).status
    status_dir.mkdir(parents=True)
    (status_dir / "1.json").symlink_to(target)
    _run(site, ws)
    assert target.read_text() == "must not change"
    assert not (status_dir / "1.json").is_symlink() and status(state, 1)["refusal"]
    # the status folder itself replaced by a link to a host folder: nothing is written there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for child in status_dir.iterdir():
        child.unlink()
    status_dir.rmdir()
    status_dir.symlink_to(elsewhere)
    result = _run(site, ws)
    assert list(elsewhere.iterdir()) == [] and any("not a plain folder" in e for e in result.errors)
    with pytest.raises(UnsafePathError):
        write_file(state, rel_status() + ("1.json",), b"{}")


def test_fifo_and_oversized_files_are_refused_without_blocking(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    folder = save_output(state, 1)
    os.mkfifo(folder / "notes.txt")
    draft(state, 1, [{"output_id": 1}])
    started = time.monotonic()
    [handled] = _run(site, ws).handled
    assert time.monotonic() - started < 20
    assert handled["outcome"] == "refused" and "not a plain file" in handled["reason"]
    (folder / "notes.txt").unlink()
    (folder / "notes.txt").write_bytes(b"a" * (2 * 1024 * 1024 + 1))
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "2097152" in handled["reason"]
    with pytest.raises(TooLargeError):
        read_file(state, rel_output(1) + ("notes.txt",), 1024)
    hardlink = folder / "copy.txt"
    os.link(folder / "notes.txt", hardlink)
    with pytest.raises(UnsafePathError, match="hard links"):
        read_file(state, rel_output(1) + ("copy.txt",), 10 ** 8)


def test_output_of_another_release_is_refused(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1, release="adult/older")
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "made on release adult/older" in handled["reason"]


def test_withdraw_and_one_open_request_through_the_outbox(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1)
    draft(state, 1, [{"output_id": 1}])
    draft(state, 2, [{"output_id": 1}])
    handled = _run(site, ws).handled
    assert [h["outcome"] for h in handled] == ["ok", "refused"]
    assert "one open request per release" in status(state, 2)["refusal"]["reason"]
    Layout(state).outbox_file(1).write_text(json.dumps({"request": 1, "action": "withdraw"}))
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "ok" and status(state, 1)["state"] == "withdrawn"


def test_intake_loop_picks_up_a_submission(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1)
    with IntakeLoop(site, lambda: [ws], interval=0.05, db_url=db_url(site)) as loop:
        draft(state, 1, [{"output_id": 1}])
        deadline = time.monotonic() + 30
        while not Layout(state).status_file(1).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert loop.passes >= 1 and status(state, 1)["state"] == "submitted"


def test_odd_outbox_entries_are_removed_once_and_folders_ignored(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    outbox = Layout(state).outbox
    outbox.mkdir(parents=True)
    (outbox / "notes.json").write_text("{}")
    (outbox / "7.json").symlink_to(tmp_path)
    (outbox / "8.json").mkdir()
    assert _run(site, ws).errors == []
    assert sorted(p.name for p in outbox.iterdir()) == ["8.json"]  # the link itself removed, its target kept
    assert tmp_path.is_dir()
    _run(site, ws)
    assert len(open_airlock(site).records.events(action="refused")) == 2
