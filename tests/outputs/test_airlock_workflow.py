"""The airlock's rules: who may vote, when an output is approved, what each checker sees, rounds, the audit trail and
the checksum check before release (issue 27)."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from outputs.airlock.records import Vote
from outputs.airlock.store import ChecksumMismatch, StoreError, check_file
from outputs.airlock.workflow import (APPROVED, CHANGES, CONFLICT, PENDING, REJECTED, RELEASED, RETURNED, SUBMITTED,
                                      WITHDRAWN, Refused, decide, request_outcome, visible_votes)
from safeshare.signing import ensure_outputs_key
from tests.outputs.airlock_helpers import frozen_output, open_airlock, submit

AT = datetime(2026, 11, 26, tzinfo=timezone.utc)


def votes(*pairs: tuple[str, str]) -> list[Vote]:
    return [Vote(i, "r", "1", 1, checker, vote, "", AT) for i, (checker, vote) in enumerate(pairs, start=1)]


@pytest.mark.parametrize("cast, state", [
    ([], PENDING),
    ([("bob", "approve")], PENDING),                                    # one approval is not enough
    ([("bob", "approve"), ("bob", "approve")], PENDING),                # nor the same checker twice
    ([("bob", "approve"), ("carol", "approve")], APPROVED),
    ([("bob", "reject"), ("carol", "reject")], REJECTED),
    ([("bob", "approve"), ("carol", "reject")], CONFLICT),              # shown as such
    ([("bob", "approve"), ("carol", "reject"), ("dan", "approve")], APPROVED),   # a third vote ends it
    ([("bob", "approve"), ("carol", "reject"), ("dan", "reject")], REJECTED),
    ([("bob", "approve"), ("carol", "reject"), ("carol", "approve")], APPROVED),  # or agreement
    ([("bob", "approve"), ("carol", "changes")], CHANGES),
    ([("bob", "changes")], PENDING),                                    # one checker cannot return it alone
    ([("bob", "approve"), ("carol", "approve"), ("dan", "changes")], CHANGES),
    ([("bob", "approve"), ("carol", "approve"), ("dan", "reject"), ("erin", "reject")], CONFLICT),
])
def test_decide(cast: list[tuple[str, str]], state: str) -> None:
    assert decide(votes(*cast)).state == state


def test_request_outcome_waits_for_every_output() -> None:
    approved, rejected = decide(votes(("a", "approve"), ("b", "approve"))), decide(votes(("a", "reject"), ("b", "reject")))
    changes, pending = decide(votes(("a", "changes"), ("b", "approve"))), decide(votes(("a", "approve")))
    assert request_outcome([approved, pending]) is None
    assert request_outcome([approved, rejected]) == APPROVED
    assert request_outcome([rejected, rejected]) == REJECTED
    assert request_outcome([approved, changes]) == RETURNED
    assert request_outcome([changes, decide(votes(("a", "approve"), ("b", "reject")))]) is None


def test_visible_votes_are_own_only_until_two_checkers_voted() -> None:
    one = votes(("bob", "approve"))
    assert visible_votes(one, "carol") == [] and visible_votes(one, "bob") == one
    two = votes(("bob", "approve"), ("carol", "reject"))
    assert visible_votes(two, "carol") == two and visible_votes(two, "dan") == two
    assert visible_votes(one, None) == one  # the audit view


def test_fail_or_review_output_needs_a_justification(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    for status in ("fail", "review"):
        with pytest.raises(Refused, match="needs a justification"):
            submit(airlock, [frozen_output("1", status)])
        with pytest.raises(Refused, match="needs a justification"):
            submit(airlock, [frozen_output("1", status, justification="   ")])
    refused = airlock.records.events(action="refused")
    assert len(refused) == 4 and all(e.outcome == "refused" and e.detail["outputs"]["1"]["data.csv"]
                                     for e in refused)
    assert not airlock.store.root.exists() or not any(airlock.store.root.rglob("request.json"))
    record = submit(airlock, [frozen_output("1", "fail", justification="cells under 10 are structural zeros")])
    assert record.state == SUBMITTED
    airlock.close()


def test_file_type_outside_the_allowlist_is_refused(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    output = frozen_output()
    for name, data, reason in (("model.pkl", b"\x80\x04", "not allowed"), ("page.html", b"<p>", "not allowed"),
                               ("plot.png", b"GIF89a", "not a PNG"), ("notes.txt", b"\xff\xfe", "not UTF-8"),
                               ("data2.csv", b"x\n" * 10_001, "rows"), ("x.json", b"{", "not JSON")):
        bad = type(output)(output.output_id, output.name, output.kind, output.status, output.checks, None,
                           output.files + (type(output.files[0])(name, data),))
        with pytest.raises(Refused, match=reason):
            submit(airlock, [bad])
    with pytest.raises(StoreError, match="2097152"):
        check_file("big.txt", b"a" * (2 * 1024 * 1024 + 1))
    airlock.close()


def test_requester_cannot_vote(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock, recipient="alice")
    for name in ("alice", " Alice ", "ALICE"):
        with pytest.raises(Refused, match="never reviews their own"):
            airlock.vote(record.request_id, "1", name, "approve")
    assert airlock.records.votes(record.request_id) == []
    refused = [e for e in airlock.records.events(action="voted") if e.outcome == "refused"]
    assert len(refused) == 3 and refused[0].request_id == record.request_id
    airlock.close()


def test_two_approvals_from_different_checkers_make_it_releasable(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock)
    assert airlock.vote(record.request_id, "1", "bob", "approve").state == PENDING
    assert airlock.vote(record.request_id, "1", "bob", "approve").state == PENDING  # the same checker again
    assert airlock.get(record.request_id).state == SUBMITTED
    key = ensure_outputs_key(tmp_path / "site")
    with pytest.raises(Refused, match="only an approved"):
        airlock.release(record.request_id, key, "cli:test")
    assert airlock.vote(record.request_id, "1", "carol", "approve").state == APPROVED
    assert airlock.get(record.request_id).state == APPROVED
    released = airlock.release(record.request_id, key, "cli:test")
    assert released.state == RELEASED and released.package_sha256
    assert (released.download_until - released.released_at).days == 7
    with pytest.raises(Refused):
        airlock.vote(record.request_id, "1", "dan", "reject")  # decided: no more votes
    airlock.close()


def test_conflict_needs_a_third_vote(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock)
    airlock.vote(record.request_id, "1", "bob", "approve")
    assert airlock.vote(record.request_id, "1", "carol", "reject").state == CONFLICT
    assert airlock.get(record.request_id).state == SUBMITTED
    assert airlock.vote(record.request_id, "1", "dan", "approve").state == APPROVED
    assert airlock.get(record.request_id).state == APPROVED
    airlock.close()


def test_independent_review(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock)
    airlock.vote(record.request_id, "1", "bob", "reject", "a cell of 3")
    carol = airlock.show(record.request_id, viewer="carol")["outputs"][0]
    assert carol["votes"] == [] and carol["decision"] is None  # not even the decision gives bob's vote away
    bob = airlock.show(record.request_id, viewer="bob")["outputs"][0]
    assert [v["vote"] for v in bob["votes"]] == ["reject"] and bob["decision"] is None
    assert airlock.votes_visible_to(record.request_id, "1", "carol") == []
    airlock.vote(record.request_id, "1", "carol", "approve")
    carol = airlock.show(record.request_id, viewer="carol")["outputs"][0]
    assert sorted(v["checker"] for v in carol["votes"]) == ["bob", "carol"]
    assert carol["decision"]["state"] == CONFLICT
    # the researcher sees nothing of the reviews until the request is decided
    assert "decision" not in airlock.researcher_view(record.request_id)["outputs"]["1"]
    airlock.close()


def test_editing_a_returned_output_resets_its_approvals(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    first = [frozen_output("1"), frozen_output("2", "review", justification="rounded to 5")]
    record = submit(airlock, first)
    rid = record.request_id
    for checker in ("bob", "carol"):
        airlock.vote(rid, "1", checker, "approve")
    airlock.vote(rid, "2", "bob", "approve")
    airlock.vote(rid, "2", "carol", "changes", "round to 10 instead")
    assert airlock.get(rid).state == RETURNED
    view = airlock.researcher_view(rid)["outputs"]
    assert view["2"]["decision"] == CHANGES and view["2"]["comments"][0]["comment"] == "round to 10 instead"
    # resubmitted: output 1 unchanged, output 2 with new data
    second = [frozen_output("1"), frozen_output("2", "review", justification="rounded to 10",
                                                   csv=b"sex,count\nfemale,120\nmale,130\nother,10\n")]
    again = submit(airlock, second)
    assert again.request_id == rid and again.round == 2 and again.state == SUBMITTED
    decisions = airlock.decisions(rid)
    assert decisions["1"].state == APPROVED  # unchanged: its approvals stand
    assert decisions["2"].state == PENDING and decisions["2"].checkers == ()  # changed: reset
    assert len(airlock.records.votes(rid, "2")) == 2  # the older round's votes are kept for the record
    assert airlock.frozen(rid)["round"] == 2
    airlock.vote(rid, "2", "bob", "approve")
    airlock.vote(rid, "2", "carol", "approve")
    assert airlock.get(rid).state == APPROVED
    airlock.close()


def test_one_open_request_per_release(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    first = submit(airlock, number=1)
    with pytest.raises(Refused, match="one open request per release"):
        submit(airlock, number=2)
    with pytest.raises(Refused, match="already submitted"):
        submit(airlock, number=1)
    assert submit(airlock, number=2, release="adult/other").state == SUBMITTED  # another release
    assert submit(airlock, number=3, recipient="bob").state == SUBMITTED  # another recipient
    airlock.withdraw(first.request_id, "recipient:alice")
    assert airlock.get(first.request_id).state == WITHDRAWN
    assert submit(airlock, number=4).state == SUBMITTED
    with pytest.raises(Refused):
        airlock.withdraw(first.request_id, "recipient:alice")
    airlock.close()


def test_each_step_writes_its_event(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock, [frozen_output("1"), frozen_output("2")])
    rid = record.request_id
    airlock.vote(rid, "1", "bob", "approve")
    airlock.vote(rid, "1", "carol", "approve")
    airlock.vote(rid, "2", "bob", "reject", "identifies a person")
    airlock.vote(rid, "2", "carol", "reject")
    airlock.release(rid, ensure_outputs_key(tmp_path / "site"), "cli:custodian")
    airlock.record_download(rid, "recipient:alice", True)
    actions = [(e.action, e.actor) for e in airlock.records.events(request_id=rid)]
    assert actions == [("submitted", "recipient:alice"), ("voted", "checker:bob"), ("voted", "checker:carol"),
                       ("voted", "checker:bob"), ("voted", "checker:carol"), ("approved", "system:airlock"),
                       ("released", "cli:custodian"), ("downloaded", "recipient:alice")]
    events = airlock.records.events(request_id=rid)
    data_sha = events[0].detail["outputs"]["1"]["data.csv"]
    assert events[1].detail["files"]["data.csv"] == data_sha  # each vote names the hashes it was cast on
    assert list(events[6].detail["outputs"]) == ["1"]  # only the approved output left
    assert events[6].detail["outputs"]["1"]["data.csv"] == data_sha
    history = airlock.history("alice")[0]
    assert [o["released"] for o in history["outputs"]] == [True, False]
    assert [a["checker"] for a in history["outputs"][0]["approved_by"]] == ["bob", "carol"]
    # second request: returned and withdrawn steps
    other = submit(airlock, number=2)
    airlock.return_request(other.request_id, "cli:custodian", "say which table")
    airlock.withdraw(other.request_id, "recipient:alice")
    steps = airlock.records.events(request_id=other.request_id)
    assert [e.action for e in steps] == ["submitted", "returned", "withdrawn"]
    assert all(e.detail["outputs"]["1"]["data.csv"] == data_sha for e in steps)
    airlock.close()


def _approved(tmp_path: Path):
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock)
    airlock.vote(record.request_id, "1", "bob", "approve")
    airlock.vote(record.request_id, "1", "carol", "approve")
    return airlock, record.request_id, ensure_outputs_key(tmp_path / "site")


@pytest.mark.parametrize("tamper", ["data", "added", "removed", "request-json"])
def test_a_file_changed_in_the_store_blocks_release(tmp_path: Path, tamper: str) -> None:
    airlock, rid, key = _approved(tmp_path)
    data = airlock.store.output_file(rid, "1", "data.csv")
    if tamper == "data":
        data.write_bytes(data.read_bytes().replace(b"120", b"121"))
    elif tamper == "added":
        (data.parent / "extra.csv").write_bytes(b"a\n1\n")
    elif tamper == "removed":
        data.unlink()
    else:  # request.json rewritten with the tampered file's hash: the database's hash of request.json catches it
        data.write_bytes(b"sex,count\nfemale,3\n")
        path = airlock.store.request_file(rid)
        frozen = json.loads(path.read_text())
        frozen["outputs"][0]["files"]["data.csv"]["sha256"] = "0" * 64
        path.write_text(json.dumps(frozen))
    with pytest.raises(ChecksumMismatch, match="checksum mismatch"):
        airlock.release(rid, key, "cli:custodian")
    assert airlock.get(rid).state == APPROVED
    assert not airlock.store.package_file(rid).exists()
    refused = airlock.records.events(request_id=rid, action="release-refused")
    assert len(refused) == 1 and "checksum mismatch" in refused[0].detail["reason"]
    assert refused[0].actor == "cli:custodian" and refused[0].outcome == "refused"
    airlock.close()


def test_a_resubmission_keeps_the_earlier_round_in_the_store(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    record = submit(airlock)
    airlock.return_request(record.request_id, "cli:custodian", "name the table")
    again = submit(airlock, [frozen_output("1", csv=b"sex,count\nfemale,125\nmale,125\n")])
    assert again.round == 2
    assert airlock.store.read_output_file(record.request_id, "1", "data.csv") == b"sex,count\nfemale,125\nmale,125\n"
    kept = [p for p in airlock.store.request_dir(record.request_id).parent.iterdir() if p.name.startswith(".round-1-")]
    assert len(kept) == 1 and json.loads((kept[0] / "request.json").read_text())["round"] == 1
    assert [e.detail["round"] for e in airlock.records.events(request_id=record.request_id, action="submitted")] == [1, 2]
    airlock.close()
