"""Adversarial tests of the airlock's host side (issue 27, DESIGN invariant 8): checkers on the review pages who try
to count twice, vote on their own request, forge forms or fix a session, see other votes early or vote where no vote
belongs; a writer of SITE/airlock who changes what was frozen or replays a package; a researcher at the front door
with another's request, an expired token or a crafted id. Each test does the attack through the real HTTP
interface and asserts what the airlock must keep."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from datetime import timedelta

import pytest

from deploy.airlock.review import SESSION_COOKIE
from deploy.custodian.people import People, PersonError
from outputs.airlock.store import FrozenFile, FrozenOutput
from tests.deploy.review_helpers import PASSWORD, crosstab_output, csrf_of, frequency_output, submit
from tests.deploy.test_review_pages import client_of, service, signed_in, vote, votes_table  # noqa: F401
from tests.proxy.test_outputs_door import Site as DoorSite
from tests.proxy.test_outputs_door import fetch, gateway, run


# --- what a checker is shown is what leaves ------------------------------------------------------------------

def test_meta_json_is_shown_whole_including_keys_the_page_does_not_draw(service) -> None:
    """meta.json is released byte for byte; a key the page has no place for (or a key given twice, whose first
    value a parser drops) would leave unseen. The page shows the stored bytes whole."""
    _, _, airlock = service
    app = service[0]
    base = crosstab_output()
    meta = json.loads(next(f.data for f in base.files if f.name == "meta.json"))
    meta["notes"] = "SMUGGLED 1961-02-03 90210 F 52000"
    text = json.dumps(meta)[:-1] + ', "checks": [], "notes2": "FIRST-OF-TWO"}'  # `checks` given twice
    text = text.replace('"notes2": "FIRST-OF-TWO"', '"notes2": "FIRST-OF-TWO", "notes2": "second"')
    output = FrozenOutput(**{**base.__dict__, "files": (next(f for f in base.files if f.name == "data.csv"),
                                                         FrozenFile("meta.json", text.encode()))})
    request_id = submit(airlock, outputs=(output,))
    page = signed_in(app, "carol").get(f"/review/requests/{request_id}").text
    raw = page.split('id="meta-raw-1">')[1].split("</pre>")[0]
    assert "SMUGGLED 1961-02-03 90210 F 52000" in raw and "FIRST-OF-TWO" in raw


# --- checkers ------------------------------------------------------------------------------------------------

def test_a_person_name_differing_only_in_case_cannot_be_added(service) -> None:
    """'Carol' beside 'carol' would be two sign-ins for what the airlock treats as one person."""
    _, provisioner, _ = service
    people = People(provisioner.records.engine, scrypt_n=2 ** 10)
    with pytest.raises(PersonError, match="differing only in case"):
        people.add("Carol", "checker", PASSWORD)
    with pytest.raises(PersonError, match="differing only in case"):
        people.add("ALICE", "checker", PASSWORD)


def test_the_requester_cannot_vote_under_another_letter_case(service) -> None:
    app, provisioner, airlock = service
    People(provisioner.records.engine, scrypt_n=2 ** 10).add("Bob", "checker", PASSWORD)
    request_id = submit(airlock, recipient="bob", rid="r2bob")
    answer = vote(signed_in(app, "Bob"), request_id, "1", "approve")
    assert answer.status_code == 403 and "never reviews their own request" in answer.text
    assert airlock.records.votes(request_id) == []
    refused = [e for e in airlock.records.events(request_id=request_id, action="voted") if e.outcome == "refused"]
    assert len(refused) == 1 and refused[0].detail["checker"] == "Bob"


def test_voting_twice_is_one_approval(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("1"),))
    carol = signed_in(app, "carol")
    for _ in range(3):
        assert vote(carol, request_id, "1", "approve").status_code == 303
    assert airlock.get(request_id).state == "submitted"
    assert airlock.decisions(request_id)["1"].approvals == 1


def test_csrf_token_of_another_session_or_a_cross_site_post_casts_nothing(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("1"),))
    carol, dave = signed_in(app, "carol"), signed_in(app, "dave")
    carols_token = csrf_of(carol.get(f"/review/requests/{request_id}").text)
    url = f"/review/requests/{request_id}/outputs/1/vote"
    answer = dave.post(url, data={"csrf": carols_token, "vote": "approve"}, follow_redirects=False)
    assert answer.status_code == 403
    answer = carol.post(url, data={"csrf": carols_token, "vote": "approve"}, follow_redirects=False,
                        headers={"Sec-Fetch-Site": "cross-site"})
    assert answer.status_code == 403
    answer = carol.post(url, data={"csrf": carols_token, "vote": "approve"}, follow_redirects=False,
                        headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403
    assert airlock.records.votes(request_id) == []


def test_a_session_cookie_planted_before_sign_in_is_never_the_session(service) -> None:
    """Session fixation: a token set in the browser beforehand (made up, or the attacker's own live session) is not
    what the victim is signed in with afterwards."""
    app, _, _ = service
    mallory = signed_in(app, "erin")  # the attacker's own live session
    planted = mallory.cookies.get(SESSION_COOKIE)
    victim = client_of(app)
    victim.cookies.set(SESSION_COOKIE, planted, path="/review")
    page = victim.get("/review/login", follow_redirects=False)
    assert page.status_code == 303  # a live session is erin's, and the pages say so to whoever holds it
    assert 'id="signed-in-as">erin (checker)<' in victim.get("/review").text
    people = People(service[1].records.engine, scrypt_n=2 ** 10)
    for fixed in ("made-up-token", "x" * 43):
        victim = client_of(app)
        victim.cookies.set(SESSION_COOKIE, fixed, path="/review")
        from tests.deploy.review_helpers import sign_in
        answer = sign_in(victim, "dave")
        assert answer.status_code == 303
        issued = re.search(rf"{SESSION_COOKIE}=([^;]+)", answer.headers["set-cookie"]).group(1)
        assert issued != fixed  # a fresh token, made by the server
        session, _ = people.session(issued)
        assert session is not None and session.person.name == "dave"
        session, _ = people.session(fixed)  # the planted token never became dave's
        assert session is None


def test_no_other_vote_or_comment_is_seen_before_both_voted(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("1"),))
    carol, dave = signed_in(app, "carol"), signed_in(app, "dave")
    vote(carol, request_id, "1", "reject", "CAROL-THINKS-IT-DISCLOSES")
    page = dave.get(f"/review/requests/{request_id}").text
    assert "CAROL-THINKS-IT-DISCLOSES" not in page and "carol" not in votes_table(page, "1")
    queue = dave.get("/review").text
    assert "CAROL-THINKS-IT-DISCLOSES" not in queue
    vote(dave, request_id, "1", "approve")
    assert "CAROL-THINKS-IT-DISCLOSES" in dave.get(f"/review/requests/{request_id}").text


def test_votes_where_no_vote_belongs_are_refused(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("1"),))
    carol = signed_in(app, "carol")
    assert vote(carol, request_id, "99", "approve").status_code == 409  # no such output
    assert vote(carol, request_id, "1", "approve-twice").status_code == 409  # no such vote
    page = carol.get(f"/review/requests/{request_id}").text
    bad = carol.post(f"/review/requests/{request_id}/outputs/..%2F1/vote",
                     data={"csrf": csrf_of(page), "vote": "approve"}, follow_redirects=False)
    assert bad.status_code in (404, 409)
    airlock.withdraw(request_id, "recipient:alice", "changed my mind")
    assert vote(carol, request_id, "1", "approve").status_code == 409  # withdrawn: not under review
    assert airlock.records.votes(request_id) == []


# --- a writer of SITE/airlock --------------------------------------------------------------------------------

def test_a_rewritten_request_json_is_never_shown_or_released(service) -> None:
    """request.json's hash is in the database: a justification rewritten in the store after submission makes the
    page refuse (409) and the release refuse, rather than show or package the rewritten text."""
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("1"),))
    path = airlock.store.request_file(request_id)
    path.write_text(path.read_text().replace("wage-gap study", "wage-gap study REWRITTEN"))
    page = signed_in(app, "carol").get(f"/review/requests/{request_id}")
    assert page.status_code == 409 and "REWRITTEN" not in page.text and "checksum mismatch" in page.text
    from outputs.airlock.store import ChecksumMismatch
    from safeshare.signing import ensure_outputs_key

    airlock.vote(request_id, "1", "carol", "approve")
    airlock.vote(request_id, "1", "dave", "approve")
    with pytest.raises(ChecksumMismatch):
        airlock.release(request_id, ensure_outputs_key(airlock.store.site_root), "cli:custodian")
    assert airlock.get(request_id).state == "approved" and not airlock.store.package_file(request_id).exists()


# --- the front door ------------------------------------------------------------------------------------------

@pytest.fixture
def door(tmp_path):
    made = DoorSite(tmp_path / "door-site")
    yield made
    made.close()


def test_a_replayed_or_swapped_package_is_refused_and_the_genuine_one_still_served(door) -> None:
    """A writer of SITE/airlock copies an older released package (genuine, signed) over a newer one, and links a
    third to another recipient's: neither is served; each refusal is an event."""
    alice = door.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    old = door.request("alice", "aaaa000001", package=b"PK old package", number=1)
    new = door.request("alice", "aaaa000001", package=b"PK new package", number=2)
    linked = door.request("alice", "aaaa000001", package=b"PK third package", number=3)
    bobs = door.request("bob", "bbbb000002", package=b"PK bob's package", number=1)
    shutil.copyfile(door.store.package_file(old), door.store.package_file(new))
    door.store.package_file(linked).unlink()
    door.store.package_file(linked).symlink_to(door.store.package_file(bobs))

    async def scenario():
        async with gateway(door) as base:
            return {name: await fetch(f"{base}/outputs/{rid}/package.zip", alice.token)
                    for name, rid in (("old", old), ("new", new), ("linked", linked), ("bobs", bobs))}

    answers = run(scenario())
    assert answers["old"][0] == 200 and answers["old"][1] == b"PK old package"
    assert answers["new"][0] == 403 and b"checksum-mismatch" in answers["new"][1]
    assert answers["linked"][0] in (403, 503) and b"bob" not in answers["linked"][1]
    assert answers["bobs"][0] == 403 and b"PK" not in answers["bobs"][1]
    refused = {e.request_id for e in door.records.events(action="download-refused")}
    assert {new, linked, bobs} <= refused


def test_an_expired_token_downloads_nothing(door) -> None:
    alice = door.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    mine = door.request("alice", "aaaa000001", package=b"PK alice")
    from datetime import datetime, timezone

    from sqlalchemy import update

    from proxy.tokens import Token

    with door.tokens._session.begin() as db:  # the token's hour has passed
        db.execute(update(Token).where(Token.id == alice.token_id)
                   .values(expires_at=datetime.now(timezone.utc) - timedelta(seconds=1)))

    async def scenario():
        async with gateway(door) as base:
            return (await fetch(f"{base}/outputs/{mine}/package.zip", alice.token),
                    await fetch(f"{base}/outputs", alice.token))

    (status, body, _), (list_status, list_body, _) = run(scenario())
    assert status == 403 and b"PK" not in body and 'data-reason="expired"' in body.decode()
    assert list_status == 403 and mine.encode() not in list_body
    (event,) = door.records.events(action="download-refused")
    assert event.request_id == mine and "expired" in event.detail["reason"]


@pytest.mark.parametrize("crafted", ["..%2F..%2Fdb%2Fsafeshare.db", "aaaa000001-0001-0000000%2F", "%2e%2e",
                                     "aaaa000001-0001-ZZZZZZZZ", "AAAA000001-0001-00000000"])
def test_crafted_request_ids_reach_no_file(door, crafted: str) -> None:
    alice = door.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    door.request("alice", "aaaa000001", package=b"PK alice")

    async def scenario():
        async with gateway(door) as base:
            return await fetch(f"{base}/outputs/{crafted}/package.zip", alice.token)

    status, body, _ = run(scenario())
    assert status in (403, 404) and b"PK" not in body and b"SQLite" not in body
    assert not door.records.events(action="downloaded")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_package_sha_listed_is_the_recorded_one(door) -> None:
    """The list page's sha256 is the database's (what verify-output is checked against), not the file's."""
    alice = door.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    mine = door.request("alice", "aaaa000001", package=b"PK alice")
    door.store.package_file(mine).write_bytes(b"PK replaced")

    async def scenario():
        async with gateway(door) as base:
            return await fetch(f"{base}/outputs", alice.token)

    status, body, _ = run(scenario())
    assert status == 200 and _sha(b"PK alice") in body.decode() and _sha(b"PK replaced") not in body.decode()
    assert re.search(r"<code>[0-9a-f]{64}</code>", body.decode())


def test_a_page_left_open_across_a_resubmission_votes_on_nothing_it_did_not_show(service) -> None:
    """Carol loads round 1; the request is returned and resubmitted with a changed table (round 2, votes reset);
    her open tab's Approve must not count for round 2's table, which she never saw."""
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("1"),))
    carol, dave, erin = signed_in(app, "carol"), signed_in(app, "dave"), signed_in(app, "erin")
    stale = carol.get(f"/review/requests/{request_id}").text
    assert 'name="round" value="1"' in stale
    vote(dave, request_id, "1", "changes", "round the counts")
    vote(erin, request_id, "1", "changes")
    assert airlock.get(request_id).state == "returned"
    changed = frequency_output("1")
    changed = FrozenOutput(**{**changed.__dict__, "files": (
        FrozenFile("data.csv", b"education,count\nBachelors,400\nMasters,150\n"),
        next(f for f in changed.files if f.name == "meta.json"))})
    assert submit(airlock, outputs=(changed,)) == request_id and airlock.get(request_id).round == 2
    answer = carol.post(f"/review/requests/{request_id}/outputs/1/vote",
                        data={"csrf": csrf_of(stale), "round": "1", "vote": "approve"}, follow_redirects=False)
    assert answer.status_code == 409 and "resubmitted" in answer.text
    assert airlock.counted_votes(request_id, "1") == []
    fresh = carol.get(f"/review/requests/{request_id}").text
    assert 'name="round" value="2"' in fresh
    assert vote(carol, request_id, "1", "approve").status_code == 303
    assert [v.checker for v in airlock.counted_votes(request_id, "1")] == ["carol"]
