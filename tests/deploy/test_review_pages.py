"""The checkers' review pages in the custodian service (deploy/airlock/review.py), through its HTTP interface: sign
in, wrong passwords (audited, throttled), sessions that expire, CSRF, the Content-Security-Policy on every answer,
the requester who cannot vote, two approvals from two checkers, independent review, conflicts, and an output's
table with its failing cell highlighted. Requests are submitted through the airlock library."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from deploy.custodian.api import create_app
from deploy.airlock.review import CSP, SESSION_COOKIE
from deploy.custodian.people import MAX_FAILURES, People, WebSessionRow
from deploy.provision import Provisioner
from deploy.site.folder import Site
from outputs.airlock.records import AirlockRecords
from outputs.airlock.store import AirlockStore, FrozenFile, FrozenOutput
from outputs.airlock.workflow import Airlock
from tests.deploy.review_helpers import PASSWORD, crosstab_output, csrf_of, frequency_output, sign_in, submit


@pytest.fixture
def service(tmp_path: Path):
    provisioner = Provisioner(Site(tmp_path / "site"))
    people = People(provisioner.records.engine, scrypt_n=2 ** 10)  # fast hashes; the pages check any parameters
    for name in ("carol", "dave", "erin", "alice"):
        people.add(name, "checker", PASSWORD)
    airlock = Airlock(AirlockStore(provisioner.site.root), AirlockRecords(provisioner.records.engine))
    app = create_app(provisioner, expiry_interval=None)
    yield app, provisioner, airlock
    provisioner.close()


def client_of(app) -> TestClient:
    return TestClient(app, base_url="http://testserver")


def signed_in(app, name: str) -> TestClient:
    client = client_of(app)
    answer = sign_in(client, name)
    assert answer.status_code == 303 and answer.headers["location"] == "/review", answer.text
    return client


def vote(client: TestClient, request_id: str, output_id: str, choice: str, comment: str = ""):
    page = client.get(f"/review/requests/{request_id}")
    return client.post(f"/review/requests/{request_id}/outputs/{output_id}/vote",
                       data={"csrf": csrf_of(page.text), "vote": choice, "comment": comment}, follow_redirects=False)


def decision(page: str, output_id: str) -> str:
    return re.search(rf'id="decision-{output_id}">([^<]*)<', page).group(1)


def votes_table(page: str, output_id: str) -> str:
    return page.split(f'id="votes-{output_id}"')[1].split("</table>")[0]


def test_sign_in_sets_a_strict_cookie_and_is_audited(service) -> None:
    app, provisioner, airlock = service
    client = client_of(app)
    assert client.get("/review", follow_redirects=False).headers["location"] == "/review/login"
    answer = sign_in(client, "carol")
    assert answer.status_code == 303
    cookie = next(v for k, v in answer.headers.multi_items() if k == "set-cookie" and v.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/review" in cookie
    assert "Secure" not in cookie  # plain http here; https sets it (test_secure_cookie_over_https)
    queue = client.get("/review")
    assert queue.status_code == 200 and 'id="signed-in-as">carol (checker)<' in queue.text
    signed = provisioner.records.events(action="review-sign-in")
    assert [(e.actor, e.outcome) for e in signed] == [("review:carol", "ok")]
    # signing out ends the session on the server, not only in the browser
    token = client.cookies.get(SESSION_COOKIE)
    out = client.post("/review/logout", data={"csrf": csrf_of(queue.text)}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"].startswith("/review/login")
    again = client_of(app)
    again.cookies.set(SESSION_COOKIE, token, path="/review")
    assert again.get("/review", follow_redirects=False).headers["location"].startswith("/review/login")
    assert [e.actor for e in provisioner.records.events(action="review-sign-out")] == ["review:carol"]


def test_secure_cookie_over_https(service) -> None:
    app, _, _ = service
    client = TestClient(app, base_url="https://testserver")
    answer = sign_in(client, "carol")
    cookie = next(v for k, v in answer.headers.multi_items() if k == "set-cookie" and v.startswith(SESSION_COOKIE))
    assert "Secure" in cookie


def test_wrong_password_is_refused_audited_and_throttled(service) -> None:
    app, provisioner, _ = service
    client = client_of(app)
    wrong = sign_in(client, "carol", "not the password at all")
    assert wrong.status_code == 401 and "Wrong name or password." in wrong.text
    assert SESSION_COOKIE not in client.cookies
    unknown = sign_in(client, "mallory", PASSWORD)
    assert unknown.status_code == 401 and "Wrong name or password." in unknown.text  # the same answer
    failed = provisioner.records.events(action="auth-failed")
    assert [(e.detail["reason"], e.detail["via"], e.detail["person"]) for e in failed] == [
        ("wrong-password", "review", "carol"), ("unknown", "review", "mallory")]
    assert not any(PASSWORD in str(e.detail) or "not the password" in str(e.detail) for e in failed)
    for _ in range(MAX_FAILURES - 2):  # five failures from this source in all
        assert sign_in(client, "carol", "not the password at all").status_code == 401
    throttled = sign_in(client, "carol", PASSWORD)  # the right password, too late
    assert throttled.status_code == 429 and SESSION_COOKIE not in client.cookies
    assert provisioner.records.events(action="auth-failed")[-1].detail["reason"] == "throttled"


def test_expired_and_idle_sessions_send_back_to_sign_in(service) -> None:
    app, provisioner, _ = service
    client = signed_in(app, "carol")
    assert client.get("/review").status_code == 200
    with Session(provisioner.records.engine) as db, db.begin():  # an hour without a request (idle limit: 30 min)
        for row in db.scalars(select(WebSessionRow)):
            row.last_seen_at -= timedelta(hours=1)
    answer = client.get("/review", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/review/login?notice=expired"
    assert "session has ended" in client.get(answer.headers["location"]).text
    client = signed_in(app, "carol")
    with Session(provisioner.records.engine) as db, db.begin():  # past the absolute lifetime, though used just now
        for row in db.scalars(select(WebSessionRow).where(WebSessionRow.ended_at.is_(None))):
            row.expires_at = row.created_at
    assert client.get("/review", follow_redirects=False).headers["location"] == "/review/login?notice=expired"


def test_csrf_missing_or_wrong_is_refused(service) -> None:
    app, provisioner, airlock = service
    request_id = submit(airlock)
    client = signed_in(app, "carol")
    url = f"/review/requests/{request_id}/outputs/2/vote"
    assert client.post(url, data={"vote": "approve"}, follow_redirects=False).status_code == 403
    assert client.post(url, data={"vote": "approve", "csrf": "x" * 43}, follow_redirects=False).status_code == 403
    token = csrf_of(client.get(f"/review/requests/{request_id}").text)
    cross = client.post(url, data={"vote": "approve", "csrf": token}, headers={"Sec-Fetch-Site": "cross-site"},
                        follow_redirects=False)
    assert cross.status_code == 403
    other_origin = client.post(url, data={"vote": "approve", "csrf": token}, headers={"Origin": "http://evil.test"},
                               follow_redirects=False)
    assert other_origin.status_code == 403
    another = signed_in(app, "dave")  # a token of another session is not this session's
    assert another.post(url, data={"vote": "approve", "csrf": token}, follow_redirects=False).status_code == 403
    assert airlock.records.votes(request_id) == []
    assert {e.detail["reason"] for e in provisioner.records.events(action="auth-failed")} == {"csrf"}
    assert client.post("/review/logout", data={}, follow_redirects=False).status_code == 403
    # the sign-in form's own token: bound to its cookie
    fresh = client_of(app)
    page = fresh.get("/review/login")
    fresh.cookies.clear()
    refused = fresh.post("/review/login", data={"csrf": csrf_of(page.text), "name": "carol", "password": PASSWORD},
                         follow_redirects=False)
    assert refused.status_code == 403 and SESSION_COOKIE not in fresh.cookies
    ok = client.post(url, data={"vote": "approve", "csrf": token}, headers={"Sec-Fetch-Site": "same-origin",
                                                                            "Origin": "http://testserver"},
                     follow_redirects=False)
    assert ok.status_code == 303 and len(airlock.records.votes(request_id)) == 1


def test_every_review_answer_has_the_strict_csp(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock)
    anonymous = client_of(app)
    client = signed_in(app, "carol")
    answers = [anonymous.get("/review/login"), anonymous.get("/review", follow_redirects=False),
               anonymous.get("/review/static/review.css"), client.get("/review"),
               client.get(f"/review/requests/{request_id}"), client.get("/review/requests/r1alice-0009-00000000"),
               client.get("/review/requests/..%2F..%2Fetc"), client.get("/review/nothing-here"),
               client.post(f"/review/requests/{request_id}/outputs/1/vote", data={}, follow_redirects=False)]
    for answer in answers:
        assert answer.headers["content-security-policy"] == CSP, (answer.url, answer.status_code)
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in CSP and "script-src" not in CSP and "frame-ancestors 'none'" in CSP
    assert [a.status_code for a in answers] == [200, 303, 200, 200, 200, 404, 404, 404, 403]
    page = answers[4].text
    assert "<script" not in page and "style=" not in page and "http://" not in page and "https://" not in page
    assert answers[2].headers["content-type"].startswith("text/css")


def test_the_request_page_shows_the_table_with_the_failing_cell_and_everything_a_checker_needs(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock)
    page = signed_in(app, "carol").get(f"/review/requests/{request_id}").text
    table = page.split('id="table-1"')[1].split("</table>")[0]
    flagged = re.findall(r'<td class="flag-fail" title="([^"]*)">([^<]*)</td>', table)
    assert flagged == [("threshold (fail): 1 cell has fewer than 10 records", "3")]
    assert "<th>Female</th>" in table and table.count("<td") == 12
    assert 'id="table-2"' in page and "flag-fail" not in page.split('id="table-2"')[1].split("</table>")[0]
    for text in ("Income by sex and race for the wage-gap study (protocol 7).",
                 "Cells under 10 are suppressed in the paper; no record-level data.",
                 "Only 3 records; rounded in the paper.", "Female × Other", "age&gt;=30", "crosstab",
                 "adult/20261126T000000Z", "ab" * 32):
        assert text in page, text
    frozen = airlock.store.read_request(request_id)
    for output in frozen["outputs"]:
        for meta in output["files"].values():
            assert meta["sha256"] in page
    assert 'id="vote-form-1"' in page and 'id="vote-form-2"' in page


def test_researcher_text_is_escaped(service) -> None:
    app, _, airlock = service
    hostile = crosstab_output(justification='<script>alert(1)</script><img src=x onerror="alert(2)">')
    csv_text = 'label,"<b onmouseover=alert(3)>n</b>"\n"<script>alert(4)</script>",5\n'
    hostile = FrozenOutput(**{**hostile.__dict__, "files": (FrozenFile("data.csv", csv_text.encode()),
                                                             *[f for f in hostile.files if f.name != "data.csv"])})
    request_id = submit(airlock, outputs=(hostile,))
    page = signed_in(app, "carol").get(f"/review/requests/{request_id}").text
    assert "<script>" not in page and "<img src=x" not in page and "<b onmouseover" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;script&gt;alert(4)&lt;/script&gt;" in page


def test_a_stored_file_changed_after_submission_is_not_shown(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock)
    path = airlock.store.output_file(request_id, "1", "data.csv")
    path.write_text(path.read_text().replace("Female,120,40,3", "Female,120,40,30"))
    page = signed_in(app, "carol").get(f"/review/requests/{request_id}").text
    assert "checksum mismatch: data.csv" in page and "<th>Female</th>" not in page.split('id="output-2"')[0]


def test_the_requester_cannot_vote(service) -> None:
    app, provisioner, airlock = service
    request_id = submit(airlock, recipient="alice")
    client = signed_in(app, "alice")  # a checker account with the requester's name
    page = client.get(f"/review/requests/{request_id}").text
    assert 'id="requester-note"' in page and 'id="vote-form-1"' not in page
    answer = client.post(f"/review/requests/{request_id}/outputs/1/vote",
                         data={"csrf": csrf_of(page), "vote": "approve"}, follow_redirects=False)
    assert answer.status_code == 403 and "never reviews their own request" in answer.text
    assert airlock.records.votes(request_id) == []
    refused = airlock.records.events(request_id=request_id, action="voted")
    assert [(e.outcome, e.actor) for e in refused] == [("refused", "checker:alice")]


def test_one_approval_is_not_enough_a_second_checkers_releases(service) -> None:
    app, provisioner, airlock = service
    request_id = submit(airlock)
    carol, dave = signed_in(app, "carol"), signed_in(app, "dave")
    for output_id in ("1", "2"):
        assert vote(carol, request_id, output_id, "approve", "fine").status_code == 303
    assert airlock.get(request_id).state == "submitted"
    assert decision(carol.get(f"/review/requests/{request_id}").text, "1") == "pending"
    # the same checker again changes nothing: two approvals must come from two people
    vote(carol, request_id, "1", "approve", "still fine")
    assert airlock.get(request_id).state == "submitted"
    assert vote(dave, request_id, "1", "approve").status_code == 303
    assert airlock.get(request_id).state == "submitted"  # output 2 has one approval only
    done = vote(dave, request_id, "2", "approve")
    assert done.status_code == 303 and "notice=released" in done.headers["location"]
    record = airlock.get(request_id)
    assert record.state == "released" and record.package_sha256
    assert airlock.store.package_file(request_id).is_file()
    page = dave.get(done.headers["location"]).text
    assert decision(page, "1") == "approved" and decision(page, "2") == "approved"
    assert 'id="released-at"' in page and record.package_sha256 in page and 'id="vote-form-1"' not in page
    released = airlock.records.events(request_id=request_id, action="released")
    assert [e.actor for e in released] == ["checker:dave"]
    queue = dave.get("/review").text
    assert re.search(rf'{request_id}</a></td>\s*<td>alice</td>.*?<span class="state">released</span>', queue, re.S)


def test_independent_review_hides_other_votes_until_two_checkers_voted(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock)
    carol, dave = signed_in(app, "carol"), signed_in(app, "dave")
    vote(carol, request_id, "1", "reject", "carol thinks the cell of 3 is disclosive")
    dave_page = dave.get(f"/review/requests/{request_id}").text
    assert "carol thinks" not in dave_page and "carol" not in votes_table(dave_page, "1")
    assert decision(dave_page, "1") == "pending" and 'id="hidden-1"' in dave_page
    carol_page = carol.get(f"/review/requests/{request_id}").text
    assert "carol thinks" in votes_table(carol_page, "1") and "(now: reject" in carol_page
    vote(dave, request_id, "1", "reject", "dave agrees")
    for client in (carol, dave):
        page = client.get(f"/review/requests/{request_id}").text
        table = votes_table(page, "1")
        assert "carol thinks" in table and "dave agrees" in table and decision(page, "1") == "rejected"


def test_a_conflict_is_shown_and_a_third_vote_decides(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("2"),))
    carol, dave, erin = signed_in(app, "carol"), signed_in(app, "dave"), signed_in(app, "erin")
    vote(carol, request_id, "2", "approve")
    vote(dave, request_id, "2", "reject", "too detailed")
    page = erin.get(f"/review/requests/{request_id}").text
    assert decision(page, "2") == "conflict" and 'id="conflict-2"' in page
    assert airlock.get(request_id).state == "submitted"
    vote(erin, request_id, "2", "approve")
    assert airlock.get(request_id).state == "released"
    page = carol.get(f"/review/requests/{request_id}").text
    assert decision(page, "2") == "approved" and 'id="conflict-2"' not in page


def test_a_png_output_is_shown_as_an_image_from_the_service(service) -> None:
    app, _, airlock = service
    png = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\x00\x00:~\x9bU"
           b"\x00\x00\x00\nIDATx\x9cch\x00\x00\x00\x82\x00\x81w\xcdr\xb6\x00\x00\x00\x00IEND\xaeB`\x82")  # 1x1 grey
    output = FrozenOutput(output_id="3", name="plot", kind="histogram", status="pass", checks=[],
                          justification=None, files=(FrozenFile("plot.png", png),))
    request_id = submit(airlock, outputs=(output,))
    page = signed_in(app, "carol").get(f"/review/requests/{request_id}").text
    assert 'src="data:image/png;base64,iVBORw0KGgo' in page  # data: only, as img-src allows


def test_a_file_changed_in_the_store_blocks_the_release_until_it_is_restored(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("2"),))
    carol, dave = signed_in(app, "carol"), signed_in(app, "dave")
    vote(carol, request_id, "2", "approve")
    path = airlock.store.output_file(request_id, "2", "data.csv")
    original = path.read_bytes()
    path.write_bytes(original.replace(b"410", b"411"))
    done = vote(dave, request_id, "2", "approve")
    assert "notice=release-refused" in done.headers["location"]
    assert airlock.get(request_id).state == "approved" and not airlock.store.package_file(request_id).exists()
    refused = airlock.records.events(request_id=request_id, action="release-refused")
    assert len(refused) == 1 and "checksum mismatch" in refused[0].detail["reason"]
    page = dave.get(done.headers["location"]).text
    assert "checksum mismatch" in page and 'id="release-form"' in page
    path.write_bytes(original)
    again = dave.post(f"/review/requests/{request_id}/release", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert again.status_code == 303 and "notice=released" in again.headers["location"]
    assert airlock.get(request_id).state == "released"
    assert dave.post(f"/review/requests/{request_id}/release", data={"csrf": csrf_of(page)},
                     follow_redirects=False).status_code == 409


def test_disabling_a_person_ends_their_signed_in_session(service) -> None:
    app, provisioner, _ = service
    client = signed_in(app, "carol")
    assert client.get("/review").status_code == 200
    People(provisioner.records.engine).disable("carol")
    assert client.get("/review", follow_redirects=False).headers["location"] == "/review/login"
    assert sign_in(client_of(app), "carol").status_code == 401


def test_changes_requested_by_two_checkers_return_the_request(service) -> None:
    app, _, airlock = service
    request_id = submit(airlock, outputs=(frequency_output("2"),))
    carol, dave = signed_in(app, "carol"), signed_in(app, "dave")
    vote(carol, request_id, "2", "changes", "name the cohort in the title")
    done = vote(dave, request_id, "2", "approve")
    assert "notice=decided" in done.headers["location"] and airlock.get(request_id).state == "returned"
    page = carol.get(done.headers["location"]).text
    assert decision(page, "2") == "changes" and 'id="vote-form-2"' not in page
    assert "name the cohort in the title" in votes_table(page, "2")
    late = carol.post(f"/review/requests/{request_id}/outputs/2/vote",
                      data={"csrf": csrf_of(page), "vote": "approve"}, follow_redirects=False)
    assert late.status_code == 409 and "not under review" in late.text
