"""Adversarial tests of the airlock (issue 27, DESIGN invariant 8): a researcher who controls everything in the
enclave's workspace, a checker who tries to count twice, a writer of SITE/airlock. Each test does the attack end to
end through the real intake / workflow and asserts what must hold: nothing leaves that the checkers were not shown,
no pass of the intake is stopped by one workspace, a `fail` output cannot skip its justification by claiming `pass`,
one person's votes count once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from outputs.airlock.intake import run_intake
from outputs.airlock.store import StoreError, check_file
from outputs.airlock.workflow import Refused, decide, visible_votes
from outputs.airlock.records import Vote
from tests.outputs.airlock_helpers import (CSV, RELEASE, db_url, draft, frozen_output, open_airlock,
                                           save_output, status, submit, workspace)
from outputs.airlock.workspace import Layout, Workspace, write_json_atomic

DEEP = "[" * 200_000  # nested past Python's recursion limit: json.loads raises RecursionError, not ValueError


def _run(site: Path, *workspaces):
    return run_intake(site, list(workspaces), db_url=db_url(site))


# --- (a) a researcher controlling the workspace ---------------------------------------------------------------

@pytest.mark.parametrize("where", ["outbox", "request", "meta"])
def test_deeply_nested_json_neither_stops_the_pass_nor_other_recipients(tmp_path: Path, where: str) -> None:
    """A JSON file nested 200,000 deep (outbox entry, draft or an output's meta.json) is refused with its reason; the
    pass goes on to the next recipient's workspace, whose submission is taken (before: RecursionError escaped
    run_intake, every pass died at the same entry and no later workspace was ever served)."""
    site = tmp_path / "site"
    evil_state, good_state = tmp_path / "evil", tmp_path / "good"
    evil = Workspace(evil_state, "mallory", "mallory1", RELEASE)
    evil_state.mkdir()
    save_output(evil_state, 1)
    draft(evil_state, 1, [{"output_id": 1}])
    layout = Layout(evil_state)
    target = {"outbox": layout.outbox_file(1), "request": layout.request_file(1),
              "meta": layout.output_dir(1) / "meta.json"}[where]
    target.write_text(DEEP)
    good = workspace(good_state)
    save_output(good_state, 1)
    draft(good_state, 1, [{"output_id": 1}])
    result = _run(site, evil, good)
    outcomes = {(h.get("recipient"), h["outcome"]) for h in result.handled}
    assert ("alice", "ok") in outcomes
    assert status(good_state, 1)["state"] == "submitted"
    assert not layout.outbox_file(1).exists()  # handled (refused) once, not retried forever
    assert status(evil_state, 1)["state"] == "draft" and status(evil_state, 1)["refusal"]["reason"]


def test_check_file_refuses_deep_json_as_bad_json() -> None:
    with pytest.raises(StoreError, match="not JSON"):
        check_file("meta.json", DEEP.encode())


@pytest.mark.parametrize("claimed", ["pass", "review"])
def test_meta_claiming_pass_does_not_let_a_failing_output_skip_its_justification(tmp_path: Path,
                                                                                  claimed: str) -> None:
    """meta.json is written in the enclave: its `status` may say pass while its checks say fail. The intake derives
    the status from the checks (the worst of them), so the justification rule still applies, and what the checkers
    and the package are told is the derived status."""
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    folder = save_output(state, 1, status="fail")
    meta = json.loads((folder / "meta.json").read_text())
    meta["status"] = claimed
    (folder / "meta.json").write_text(json.dumps(meta))
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "justification" in handled["reason"]
    # with a justification it is taken, and frozen as `fail`
    draft(state, 1, [{"output_id": 1, "justification": "the cell is rounded in the paper"}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "ok"
    frozen = open_airlock(site).frozen(handled["request_id"])
    assert frozen["outputs"][0]["status"] == "fail"


def test_a_remedied_output_claiming_pass_is_review(tmp_path: Path) -> None:
    """The app makes a remedied output `review` at least (output_routes: combine(..., REVIEW if remedy))."""
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1, extra={"remedy": {"kind": "suppress"}})
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "review" in handled["reason"]


def test_validate_submission_applies_the_worst_check_not_the_claimed_status(tmp_path: Path) -> None:
    """A direct caller of Airlock.submit (not the intake) is held to the same rule: checks decide."""
    airlock = open_airlock(tmp_path / "site")
    forged = frozen_output("1", status="pass")
    forged = type(forged)(**{**forged.__dict__, "checks": [{"rule": "threshold", "status": "fail", "reason": "x",
                                                            "cells": 1}]})
    with pytest.raises(Refused, match="justification"):
        submit(airlock, outputs=[forged])
    unknown = type(forged)(**{**forged.__dict__, "checks": [{"rule": "threshold", "status": "maybe",
                                                             "reason": "x", "cells": 1}]})
    with pytest.raises(Refused, match="justification"):  # an unknown check status counts as review
        submit(airlock, outputs=[unknown])


@pytest.mark.parametrize("name, data", [("secret.txt", b"row-level data the checkers never see\n"),
                                        ("extra.json", b'{"records": [1, 2, 3]}'),
                                        ("more.csv", b"id,income\n1,52000\n")])
def test_an_extra_file_in_an_output_folder_never_leaves(tmp_path: Path, name: str, data: bytes) -> None:
    """The review pages show an output's data.csv, meta.json and images; any other file planted in
    STATE/outputs/<id>/ would be frozen and released without a checker seeing it. Refused with the reason."""
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    (save_output(state, 1) / name).write_bytes(data)
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and name in handled["reason"]
    assert not list((site / "airlock").glob("*/*/outputs/1/" + name))


@pytest.mark.parametrize("csv, problem", [
    (b"a,b\r" + b"1,2\r" * 20_000, "rows"),              # CR line ends: csv reads 20,001 rows, "\n" counts 0
    (b"a,b\n1," + b"x" * 5000 + b"\n", "characters"),    # a cell the page clips at 500 characters
    (b",".join(b"c%d" % i for i in range(600)) + b"\n", "columns"),  # columns the page cuts at 500
])
def test_a_csv_the_review_page_cannot_show_whole_is_refused(csv: bytes, problem: str) -> None:
    """What a checker is shown of data.csv is what leaves: rows past the bound (however lines end), cells past the
    page's clip and columns past its cut are refused at the allowlist check."""
    with pytest.raises(StoreError, match=problem):
        check_file("data.csv", csv)
    check_file("data.csv", CSV)


# --- (c) checkers ----------------------------------------------------------------------------------------------

def _vote(i: int, checker: str, vote: str = "approve") -> Vote:
    from datetime import datetime, timezone

    return Vote(id=i, request_id="r", output_id="1", round=1, checker=checker, vote=vote, comment="",
                at=datetime(2026, 11, 26, tzinfo=timezone.utc))


def test_one_person_under_two_letter_cases_is_one_checker() -> None:
    """same_person (the requester rule) ignores case; the count of approvals must too: 'carol' and 'Carol' are one
    approval, not the two that release an output."""
    decision = decide([_vote(1, "carol"), _vote(2, "Carol")])
    assert decision.state == "pending" and decision.approvals == 1
    assert decide([_vote(1, "carol"), _vote(2, "Carol"), _vote(3, "dave")]).state == "approved"
    # independence: one person's two names do not open the other checkers' votes to them
    votes = [_vote(1, "carol"), _vote(2, "Carol"), _vote(3, "dave", "reject")]
    assert [v.checker for v in visible_votes(votes[:2], "carol")] == ["carol", "Carol"]


def test_two_case_variants_of_one_checker_cannot_approve_through_the_workflow(tmp_path: Path) -> None:
    airlock = open_airlock(tmp_path / "site")
    request_id = submit(airlock).request_id
    airlock.vote(request_id, "1", "carol", "approve")
    airlock.vote(request_id, "1", "CAROL", "approve")
    assert airlock.get(request_id).state == "submitted"
    airlock.vote(request_id, "1", "dave", "approve")
    assert airlock.get(request_id).state == "approved"


# --- images: only the picture leaves ---------------------------------------------------------------------------

def _chunk(kind: bytes, body: bytes) -> bytes:
    import zlib

    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def png(width: int = 2, height: int = 2, pixels: bytes | None = None, extra: bytes = b"", tail: bytes = b"",
        before_iend: bytes = b"") -> bytes:
    """A real grey 8-bit PNG (each row: filter byte 0 and `width` pixels), with chunks or bytes added."""
    import zlib

    raw = pixels if pixels is not None else b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + extra + _chunk(b"IDAT", zlib.compress(raw) + tail)
            + before_iend + _chunk(b"IEND", b""))


def test_a_png_with_a_hidden_payload_is_refused() -> None:
    """The review page draws a PNG; text chunks, private chunks, bytes after IEND, data after the deflate stream or
    more pixel rows than the header declares would all leave unseen in the package."""
    check_file("plot.png", png())
    secret = b"1961-02-03,90210,F,52000\n" * 40
    hidden = {
        "text chunk": png(extra=_chunk(b"tEXt", b"Comment\x00" + secret)),
        "private chunk": png(extra=_chunk(b"prVt", secret)),
        "after IEND": png() + secret,
        "after the deflate stream": png(tail=secret),
        "more rows than declared": png(pixels=b"".join(b"\x00" + b"\x80\x80" for _ in range(2)) + secret),
        "a big colour chunk": png(extra=_chunk(b"bKGD", secret * 2)),
        "bad CRC": png()[:-1] + b"\x00",
    }
    for what, data in hidden.items():
        with pytest.raises(StoreError):
            check_file("plot.png", data)
            pytest.fail(f"a PNG with a payload {what} passed")


def test_a_png_payload_planted_in_an_output_never_leaves(tmp_path: Path) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    (save_output(state, 1) / "chart.png").write_bytes(png() + b"row-level data" * 100)
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused" and "IEND" in handled["reason"]
    (save_output(state, 2) / "chart.png").write_bytes(png())
    draft(state, 2, [{"output_id": 2}])
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "ok"


@pytest.mark.parametrize("cell", ["12\t", "Fe\u200bmale", "12\u202e34", "a\nb", "x\x01", "\ufeffmale"])
def test_a_csv_cell_with_characters_the_page_cannot_show_is_refused(cell: str) -> None:
    """A tab, a line break inside a quoted cell, a control, zero-width or direction character renders as nothing
    (or as something else) in the checker's table, and would carry what no checker read."""
    data = f'sex,count\n"{cell}",120\nmale,130\n'.encode()
    with pytest.raises(StoreError, match="cannot show"):
        check_file("data.csv", data)
    check_file("data.csv", "sex,count\n\"Never married, spouse absent\",12\nmännlich,130\n".encode())


# --- (d) a writer of SITE/airlock ------------------------------------------------------------------------------

def test_a_release_lock_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    """A writer of SITE/airlock links `.release-<id>.lock` to a file elsewhere: the release neither creates nor
    locks it (refused, nothing released); with the link gone the release goes through."""
    from safeshare.signing import ensure_outputs_key

    airlock = open_airlock(tmp_path / "site")
    request_id = submit(airlock).request_id
    airlock.vote(request_id, "1", "carol", "approve")
    airlock.vote(request_id, "1", "dave", "approve")
    key = ensure_outputs_key(tmp_path / "site")
    lock = airlock.store.request_dir(request_id).parent / f".release-{request_id}.lock"
    victim = tmp_path / "elsewhere" / "made-by-the-release"
    victim.parent.mkdir()
    lock.symlink_to(victim)
    with pytest.raises(StoreError, match="not a plain lock file"):
        airlock.release(request_id, key, "cli:custodian")
    assert not victim.exists() and airlock.get(request_id).state == "approved"
    lock.unlink()
    assert airlock.release(request_id, key, "cli:custodian").state == "released"


def test_a_forged_status_file_is_rewritten_and_trusted_by_nothing(tmp_path: Path) -> None:
    """The enclave rewrites status/1.json to say its request was released (with another recipient's id): the next
    pass puts the host's view back, and no host step reads the forged state."""
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1)
    draft(state, 1, [{"output_id": 1}])
    [handled] = _run(site, ws).handled
    forged = {"request": 1, "request_id": "bbbb000002-0001-deadbeef", "state": "released", "round": 1,
              "download_until": "2099-01-01T00:00:00+00:00", "outputs": {}, "refusal": None}
    write_json_atomic(Layout(state).status_file(1), forged)
    result = _run(site, ws)
    assert result.statuses == 1 and not result.handled
    assert status(state, 1)["state"] == "submitted" and status(state, 1)["request_id"] == handled["request_id"]
    assert open_airlock(site).get(handled["request_id"]).state == "submitted"


@pytest.mark.parametrize("outputs", [[{"output_id": "1/../2"}], [{"output_id": "../1"}], [{"output_id": "01"}],
                                     [{"output_id": -1}], [{"output_id": True}], [{"output_id": 1}, {"output_id": 1}],
                                     [{"output_id": "1\x00"}], [{"output_id": 1e3}]])
def test_crafted_output_ids_are_refused(tmp_path: Path, outputs: list) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1)
    save_output(state, 2)
    draft(state, 1, outputs)
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused"
    assert not list((site / "airlock").glob("*/*/request.json"))


@pytest.mark.parametrize("entry", [{"request": "../../2", "action": "submit"}, {"request": 2, "action": "submit"},
                                   {"request": 1, "action": "release"}, ["submit"], "submit"])
def test_crafted_outbox_entries_are_refused(tmp_path: Path, entry) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    ws = workspace(state)
    save_output(state, 1)
    draft(state, 1, [{"output_id": 1}], submit=False)
    draft(state, 2, [{"output_id": 1}], submit=False)
    write_json_atomic(Layout(state).outbox_file(1), entry)
    [handled] = _run(site, ws).handled
    assert handled["outcome"] == "refused"
    assert not open_airlock(site).records.requests()


def test_a_folder_of_many_entries_is_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An enclave that fills its outbox with a million names must not make the host read them all at every pass:
    the listing stops one past the cap."""
    import os

    from outputs.airlock import workspace as ws_module

    outbox = Layout(tmp_path).outbox
    outbox.mkdir(parents=True)
    for i in range(300):
        (outbox / f"{i + 1}.json").write_text("{}")
    read = []
    real = os.scandir

    class Counting:
        def __init__(self, fd):
            self.inner = real(fd)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.inner.close()

        def __iter__(self):
            for entry in self.inner:
                read.append(entry.name)
                yield entry

    monkeypatch.setattr(ws_module.os, "scandir", Counting)
    with pytest.raises(ws_module.WorkspaceError, match="more than the 10 entries"):
        ws_module.list_dir(tmp_path, ("airlock", "outbox"), max_entries=10)
    assert len(read) == 11
    monkeypatch.undo()
    assert len(ws_module.list_dir(tmp_path, ("airlock", "outbox"))) == 300
