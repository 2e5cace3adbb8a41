"""Release requests in the kiosk app (issue 27, the researcher's side of the airlock): drafts and their validation
(texts, justifications, the airlock's allowlist and bounds, one open request per release), the outbox entry written
atomically on submission, the request frozen until a newer host status returns it, editing and resubmitting a
returned request, the host's status displayed (escaped, never trusted), the pages and the OpenAPI schema."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from enclave.app import airlock_drafts, create_app
from outputs.airlock import store as airlock_store
from outputs.airlock.workspace import Layout
from tests.enclave.test_app_outputs import (  # noqa: F401 (app_and_state, bundle, client: fixtures)
    CROSSTAB, NASTY, app_and_state, bundle, client, save)
from tests.enclave.test_app_support import TestClient

PASSING = {"attribute": "sex", "exclude_suppressed": True}  # Female 73, Male 97: every cell passes


def write_status(state: Path, number: int, status: dict) -> None:
    """What the host-side intake does (atomically, by rename): the app only reads it."""
    path = Layout(state).status_file(number)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(status))
    os.replace(temp, path)


def ready_request(client) -> tuple[int, dict, dict]:
    """A request with both texts, a failing output with a justification and a passing one."""
    failing = save(client, "crosstab", CROSSTAB, "sex by race")
    passing = save(client, "frequencies", PASSING, "sex")
    assert failing["status"] == "fail" and passing["status"] == "pass"
    made = client.post("/api/requests", json={
        "context": "Table 1 of the ward study", "controls": "counts of at least 10, suppressed records left out",
        "outputs": [{"output_id": failing["id"], "justification": "the small cell is a known public figure"},
                    {"output_id": passing["id"]}]})
    assert made.status_code == 200, made.text
    return made.json()["number"], failing, passing


def test_a_request_needs_its_texts_and_a_justification_for_each_failing_output(client) -> None:
    failing = save(client, "crosstab", CROSSTAB, "sex by race")
    passing = save(client, "frequencies", PASSING, "sex")
    made = client.post("/api/requests").json()
    number = made["number"]
    assert made["state"] == "draft" and made["editable"] and made["outputs"] == []
    assert made["release"]["id"] and len(made["release"]["seal_sha256"]) == 64
    refused = client.post(f"/api/requests/{number}/submit")
    assert refused.status_code == 422
    detail = refused.json()["detail"]
    assert "context is empty" in detail and "controls text is empty" in detail and "holds no output" in detail
    changed = client.patch(f"/api/requests/{number}", json={
        "context": "  Table 1  ", "outputs": [{"output_id": failing["id"]}, {"output_id": passing["id"]}]})
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["context"] == "Table 1" and [o["output_id"] for o in body["outputs"]] == [failing["id"], passing["id"]]
    assert [o["needs_justification"] for o in body["outputs"]] == [True, False]
    refused = client.post(f"/api/requests/{number}/submit").json()["detail"]
    assert "controls text is empty" in refused and f"output {failing['id']} (sex by race) is fail" in refused
    assert "context" not in refused.split(":", 1)[1]
    client.patch(f"/api/requests/{number}", json={"controls": "rounded"})
    refused = client.post(f"/api/requests/{number}/submit")
    assert refused.status_code == 422 and "needs a justification" in refused.json()["detail"]
    assert not Layout(client.app.state.ctx.outputs.root.parent).outbox_file(number).exists()
    client.patch(f"/api/requests/{number}", json={"outputs": [
        {"output_id": failing["id"], "justification": "published elsewhere"}, {"output_id": passing["id"]}]})
    submitted = client.post(f"/api/requests/{number}/submit")
    assert submitted.status_code == 200, submitted.text
    assert submitted.json()["state"] == "submitting" and not submitted.json()["editable"]


def test_the_exception_asked_on_the_output_page_is_the_default_justification(client) -> None:
    failing = save(client, "crosstab", CROSSTAB, "sex by race")
    client.post(f"/api/outputs/{failing['id']}/exception", json={"text": "the exception text"})
    made = client.post("/api/requests", json={"outputs": [{"output_id": failing["id"]}]}).json()
    assert made["outputs"][0]["justification"] == "the exception text"
    assert all("justification" not in m for m in made["missing"])


def test_outputs_of_another_type_size_or_release_are_refused_with_the_reason(app_and_state) -> None:
    client, state = app_and_state
    output = save(client, "crosstab", CROSSTAB, "sex by race")
    number = client.post("/api/requests").json()["number"]
    folder = state / "outputs" / str(output["id"])
    (folder / "chart.svg").write_text("<svg/>")
    refused = client.patch(f"/api/requests/{number}", json={"outputs": [{"output_id": output["id"]}]})
    assert refused.status_code == 422
    assert "chart.svg: type .svg is not allowed" in refused.json()["detail"]
    (folder / "chart.svg").unlink()
    (folder / "notes.txt").write_bytes(b"caf\xe9")  # Latin-1, not UTF-8
    refused = client.patch(f"/api/requests/{number}", json={"outputs": [{"output_id": output["id"]}]})
    assert refused.status_code == 422 and "notes.txt: not UTF-8 text" in refused.json()["detail"]
    (folder / "notes.txt").write_text("x\n" * (airlock_store.MAX_CSV_ROWS + 1))
    (folder / "notes.txt").rename(folder / "extra.csv")
    refused = client.patch(f"/api/requests/{number}", json={"outputs": [{"output_id": output["id"]}]})
    assert refused.status_code == 422 and "rows, more than the 10000" in refused.json()["detail"]
    (folder / "extra.csv").unlink()
    # an output made on another release (its meta.json says so) belongs to no request of this one
    meta = json.loads((folder / "meta.json").read_text())
    meta["release"]["id"] = "older"
    (folder / "meta.json").write_text(json.dumps(meta))
    refused = client.patch(f"/api/requests/{number}", json={"outputs": [{"output_id": output["id"]}]})
    assert refused.status_code == 422 and "not on the release served" in refused.json()["detail"]
    assert client.patch(f"/api/requests/{number}", json={"outputs": [{"output_id": 77}]}).status_code == 404
    assert client.patch(f"/api/requests/{number}", json={"outputs": [{"output_id": "x"}]}).status_code == 422
    assert client.patch(f"/api/requests/{number}", json={"bogus": 1}).status_code == 422
    # nothing was changed by the refusals
    assert client.get(f"/api/requests/{number}").json()["outputs"] == []


def test_at_most_one_open_request_per_release(client) -> None:
    first = client.post("/api/requests").json()["number"]
    second = client.post("/api/requests")
    assert second.status_code == 409 and f"request {first}" in second.json()["detail"]
    assert "one open request per release" in second.json()["detail"]
    page = client.post("/requests", data={"context": "x"})
    assert page.status_code == 409 and "one open request per release" in page.text
    assert client.post(f"/api/requests/{first}/withdraw").json()["state"] == "withdrawn"
    assert client.post(f"/api/requests/{first}/withdraw").status_code == 409
    assert client.patch(f"/api/requests/{first}", json={"context": "x"}).status_code == 409
    again = client.post("/api/requests")
    assert again.status_code == 200 and again.json()["number"] == first + 1
    # a request the checkers rejected or the airlock released is closed too; one they approved is still open
    state = client.app.state.ctx.outputs.root.parent
    number, _, _ = first + 1, None, None
    failing = save(client, "crosstab", CROSSTAB, "t")
    client.patch(f"/api/requests/{number}", json={"context": "c", "controls": "k",
                                                  "outputs": [{"output_id": failing["id"], "justification": "j"}]})
    assert client.post(f"/api/requests/{number}/submit").status_code == 200
    Layout(state).outbox_file(number).unlink()  # the intake took it
    write_status(state, number, {"state": "approved", "request_id": "r1-0002-0badcafe"})
    assert client.post("/api/requests").status_code == 409
    write_status(state, number, {"state": "released", "request_id": "r1-0002-0badcafe"})
    assert client.post("/api/requests").status_code == 200


def test_submission_writes_one_outbox_entry_atomically_and_freezes_the_request(app_and_state, monkeypatch) -> None:
    client, state = app_and_state
    number, failing, _ = ready_request(client)
    layout = Layout(state)
    # a failing rename leaves no entry, no temporary file, and the draft as it was (not frozen)
    real_replace = os.replace

    def broken(src, dst, *args, **kwargs):
        if Path(dst).parent == layout.outbox:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(airlock_drafts.os, "replace", broken)
    failed = client.post(f"/api/requests/{number}/submit")
    assert failed.status_code == 503 and "No space left on device" in failed.json()["detail"]
    monkeypatch.setattr(airlock_drafts.os, "replace", real_replace)
    assert list(layout.outbox.iterdir()) == []
    draft = client.get(f"/api/requests/{number}").json()
    assert draft["state"] == "draft" and draft["editable"] and draft["submissions"] == 0
    submitted = client.post(f"/api/requests/{number}/submit")
    assert submitted.status_code == 200
    assert [p.name for p in layout.outbox.iterdir()] == [f"{number}.json"]  # no temp file left beside it
    entry = json.loads(layout.outbox_file(number).read_text())
    request_bytes = layout.request_file(number).read_bytes()
    assert entry["request"] == number and entry["action"] == "submit" and entry["submission"] == 1
    assert entry["request_sha256"] == hashlib.sha256(request_bytes).hexdigest()
    draft = json.loads(request_bytes)
    assert draft["state"] == "submitted" and draft["context"] == "Table 1 of the ward study"
    assert draft["outputs"][0] == {"output_id": failing["id"],
                                   "justification": "the small cell is a known public figure"}
    # frozen: no change through the API or a page, no second submission
    assert client.patch(f"/api/requests/{number}", json={"context": "other"}).status_code == 409
    assert client.post(f"/api/requests/{number}/submit").status_code == 409
    page = client.post(f"/requests/{number}/texts", data={"context": "other", "controls": "x"})
    assert page.status_code == 409 and "can be changed only" in page.text
    assert layout.request_file(number).read_bytes() == request_bytes
    shown = client.get(f"/requests/{number}")
    assert "waiting for the airlock" in shown.text and 'id="texts-form"' not in shown.text
    # the intake took it and wrote "submitted": still frozen
    layout.outbox_file(number).unlink()
    write_status(state, number, {"state": "submitted", "request_id": "r1-0001-0badcafe", "round": 1})
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "submitted" and not view["editable"]
    assert view["host_status"]["request_id"] == "r1-0001-0badcafe"
    assert client.patch(f"/api/requests/{number}", json={"context": "other"}).status_code == 409


def test_a_returned_request_is_edited_and_resubmitted(app_and_state) -> None:
    client, state = app_and_state
    number, failing, passing = ready_request(client)
    layout = Layout(state)
    client.post(f"/api/requests/{number}/submit")
    layout.outbox_file(number).unlink()
    write_status(state, number, {
        "state": "returned", "request_id": "r1-0001-0badcafe", "round": 1,
        "outputs": [{"output_id": str(failing["id"]), "decision": "changes",
                     "comments": [{"checker": "carol", "vote": "changes", "comment": "please suppress " + NASTY},
                                  {"checker": "dave", "vote": "changes", "comment": "suppress it"}]},
                    {"output_id": str(passing["id"]), "decision": "approved", "comments": []}]})
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "returned" and view["editable"]
    page = client.get(f"/requests/{number}").text
    assert "please suppress &lt;script&gt;alert(" in page and NASTY not in page
    assert 'id="host-returned"' in page and 'id="texts-form"' in page
    # replace the failing output by its remedied version and keep the justification
    remedied = client.post(f"/api/outputs/{failing['id']}/remedy", json={"remedy": {"kind": "suppress"}}).json()
    replaced = client.post(f"/requests/{number}/replace-output", data={"output_id": str(failing["id"]),
                                                                       "by": str(remedied["id"])},
                           follow_redirects=False)
    assert replaced.status_code == 303, replaced.text
    view = client.get(f"/api/requests/{number}").json()
    assert [o["output_id"] for o in view["outputs"]] == [remedied["id"], passing["id"]]
    assert view["outputs"][0]["justification"] == "the small cell is a known public figure"
    client.post(f"/requests/{number}/justify", data={"output_id": str(remedied["id"]), "justification": "suppressed"})
    assert client.get(f"/api/requests/{number}").json()["outputs"][0]["justification"] == "suppressed"
    again = client.post(f"/api/requests/{number}/submit")
    assert again.status_code == 200, again.text
    entry = json.loads(layout.outbox_file(number).read_text())
    assert entry["submission"] == 2
    # the old "returned" status is from before this submission: it does not unfreeze the request
    layout.outbox_file(number).unlink()
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "submitting" and not view["editable"]
    assert client.patch(f"/api/requests/{number}", json={"context": "x"}).status_code == 409
    # the same bytes written again by the host (a new file) are a new status
    write_status(state, number, json.loads(layout.status_file(number).read_text()))
    assert client.get(f"/api/requests/{number}").json()["state"] == "returned"


def test_status_is_shown_and_bounded(app_and_state) -> None:
    client, state = app_and_state
    number, failing, _ = ready_request(client)
    client.post(f"/api/requests/{number}/submit")
    layout = Layout(state)
    layout.outbox_file(number).unlink()
    for status, text in [("approved", "approved"), ("released", "Released: download the signed package"),
                         ("rejected", "rejected")]:
        write_status(state, number, {"state": status, "request_id": "r1-0001-0badcafe", "round": 1,
                                     "download_until": "2026-12-03T00:00:00+00:00"})
        page = client.get(f"/requests/{number}")
        assert f'id="host-state">{status}<' in page.text and text in page.text
        assert f'class="status status-{status}">{status}<' in client.get("/requests").text
    write_status(state, number, {"request": number, "request_id": None, "state": "draft",
                                 "refusal": {"reason": "output 1: no justification", "at": "2026-11-26T14:00:00"}})
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "refused" and view["editable"]  # refused by the intake: fix it and submit again
    assert "output 1: no justification" in client.get(f"/requests/{number}").text
    # anything else is shown as unknown, never followed through a link nor read whole
    write_status(state, number, {"state": "<b>owned</b>"})
    assert client.get(f"/api/requests/{number}").json()["state"] == "unknown"
    layout.status_file(number).unlink()
    layout.status_file(number).symlink_to(Layout(state).request_file(number))
    assert client.get(f"/api/requests/{number}").json()["host_status"]["state"] == "unknown"
    layout.status_file(number).unlink()
    layout.status_file(number).write_bytes(b" " * (airlock_drafts.MAX_STATUS_BYTES + 1))
    assert "not a small regular file" in client.get(f"/api/requests/{number}").json()["host_status"]["reason"]


def test_supporting_note_and_output_data_for_the_checkers(app_and_state) -> None:
    client, state = app_and_state
    number, failing, passing = ready_request(client)
    support = Layout(state).supporting_dir(number)
    changed = client.patch(f"/api/requests/{number}", json={"note": "the cohort is 2019 admissions",
                                                             "supporting_outputs": [failing["id"]]})
    assert changed.status_code == 200, changed.text
    names = [s["name"] for s in changed.json()["supporting"]]
    assert names == ["note.txt", f"output-{failing['id']}-data.csv"]
    assert (support / "note.txt").read_text() == "the cohort is 2019 admissions\n"
    # the draft lists the names (the intake's format), the view says what each is
    assert json.loads(Layout(state).request_file(number).read_text())["supporting"] == names
    assert changed.json()["supporting"][1] == {"name": names[1], "kind": "output", "output_id": failing["id"]}
    assert (support / names[1]).read_bytes() == (state / "outputs" / str(failing["id"]) / "data.csv").read_bytes()
    page = client.post(f"/requests/{number}/detach", data={"output_id": str(failing["id"])},
                       follow_redirects=False)
    assert page.status_code == 303
    assert sorted(p.name for p in support.iterdir()) == ["note.txt"]
    client.post(f"/requests/{number}/note", data={"note": ""})
    assert list(support.iterdir()) == [] and client.get(f"/api/requests/{number}").json()["supporting"] == []
    client.post(f"/requests/{number}/attach", data={"output_id": str(passing["id"])})
    assert client.post(f"/api/requests/{number}/submit").status_code == 200
    assert sorted(p.name for p in support.iterdir()) == [f"output-{passing['id']}-data.csv"]


def test_pages_make_a_request_from_forms(client) -> None:
    failing = save(client, "crosstab", CROSSTAB, "sex by race")
    outputs_page = client.get("/outputs").text
    assert 'href="/requests"' in outputs_page
    made = client.post("/requests", data={"context": "Table 1", "controls": ""}, follow_redirects=False)
    assert made.status_code == 303 and made.headers["location"] == "/requests/1?message=created"
    added = client.post("/requests/1/add-output", data={"output_id": str(failing["id"]), "justification": ""},
                        follow_redirects=False)
    assert added.status_code == 303
    refused = client.post("/requests/1/submit")
    assert refused.status_code == 422
    assert "controls text is empty" in refused.text and "needs a justification" in refused.text
    client.post("/requests/1/texts", data={"context": "Table 1", "controls": "suppression"})
    client.post("/requests/1/justify", data={"output_id": str(failing["id"]), "justification": "needed"})
    submitted = client.post("/requests/1/submit", follow_redirects=False)
    assert submitted.status_code == 303 and submitted.headers["location"] == "/requests/1?message=submitted"
    page = client.get("/requests/1")
    assert page.status_code == 200 and 'id="request-state">submitting<' in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    # the app's page rules (test_app.py) on the pages of a request, with a host status that holds markup
    write_status(client.app.state.ctx.outputs.root.parent, 1, {
        "state": "submitted", "request_id": "<b>x</b>",
        "outputs": {str(failing["id"]): {"decision": "changes", "comments": [{"comment": NASTY}]}}})
    for path in ("/requests", "/requests/1", "/requests/1?message=<b>x</b>"):
        text = client.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=\"/static/)[^>]*>", text), path
        assert "<style" not in text and not re.search(r"\sstyle=", text) and not re.search(r"\son[a-z]+=", text)
        assert "<b>" not in text, path
        for url in re.findall(r'(?:href|src|action|formaction)="([^"]*)"', text):
            assert url.startswith("/") and not url.startswith("//"), (path, url)
    assert client.post("/requests/1/nope").status_code in (404, 409)
    assert client.get("/requests/2").status_code == 404 and client.get("/api/requests/x").status_code == 404
    assert client.post("/requests/1/submit", headers={"sec-fetch-site": "cross-site"}).status_code == 403


def test_openapi_lists_the_request_endpoints(client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/api/requests"]) == {"get", "post"}
    assert set(paths["/api/requests/{number}"]) == {"get", "patch"}
    assert "post" in paths["/api/requests/{number}/submit"] and "post" in paths["/api/requests/{number}/withdraw"]
    schema = client.get("/openapi.json").json()["components"]["schemas"]["RequestChanges"]["properties"]
    assert {"context", "controls", "outputs", "note", "supporting_outputs"} <= set(schema)


def test_drafts_survive_a_restart_and_a_crashed_create(bundle, tmp_path) -> None:
    state = tmp_path / "state"
    trust = bundle.parents[2] / "trust.json"
    with TestClient(create_app(bundle, state_dir=state, trust=trust, recipient="alice")) as client:
        number = client.post("/api/requests", json={"context": "kept"}).json()["number"]
    (Layout(state).requests / ".new-crashed").mkdir()
    with TestClient(create_app(bundle, state_dir=state, trust=trust, recipient="alice")) as client:
        assert [r["number"] for r in client.get("/api/requests").json()] == [number]
        assert client.get(f"/api/requests/{number}").json()["context"] == "kept"
    assert not (Layout(state).requests / ".new-crashed").exists()


def test_withdrawing_a_submitted_request_tells_the_airlock_through_the_outbox(app_and_state) -> None:
    client, state = app_and_state
    number, _, _ = ready_request(client)
    layout = Layout(state)
    client.post(f"/api/requests/{number}/submit")
    # withdrawn before the intake took it: the pending submit entry is replaced, never two entries for one request
    withdrawn = client.post(f"/requests/{number}/withdraw", follow_redirects=False)
    assert withdrawn.status_code == 303
    assert [p.name for p in layout.outbox.iterdir()] == [f"{number}.json"]
    entry = json.loads(layout.outbox_file(number).read_text())
    assert entry["action"] == "withdraw" and entry["request"] == number and entry["submission"] == 1
    assert client.get(f"/api/requests/{number}").json()["state"] == "withdrawing"
    layout.outbox_file(number).unlink()
    write_status(state, number, {"state": "withdrawn", "request_id": "r1-0001-0badcafe"})
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "withdrawn" and not view["editable"]
    assert 'id="withdraw-request"' not in client.get(f"/requests/{number}").text
    # a draft never submitted closes without a word to the airlock
    other = client.post("/api/requests").json()["number"]
    assert client.post(f"/api/requests/{other}/withdraw").json()["state"] == "withdrawn"
    assert not layout.outbox_file(other).exists()


def test_the_real_intake_takes_what_the_app_wrote_and_its_refusal_is_shown(app_and_state, bundle, tmp_path) -> None:
    """The formats agree with outputs.airlock.intake: a request made through the API is frozen in the store; a
    refusal (an output folder tampered with after submission) comes back as `refused`, editable, and the fixed
    request goes through on the next submission."""
    from outputs.airlock.intake import run_intake
    from outputs.airlock.store import AirlockStore
    from outputs.airlock.workspace import Workspace

    client, state = app_and_state
    number, failing, passing = ready_request(client)
    client.patch(f"/api/requests/{number}", json={"note": "for the checkers", "supporting_outputs": [passing["id"]]})
    view = client.get(f"/api/requests/{number}").json()
    site = tmp_path / "site"
    site.mkdir()
    release = view["release"]
    workspace = Workspace(state, "alice", "r1", f"{release['dataset']}/{release['id']}", release["seal_sha256"])
    db_url = f"sqlite:///{site / 'site.sqlite'}"
    # tampered after submission: a link in the output's folder, which the intake refuses and never follows
    assert client.post(f"/api/requests/{number}/submit").status_code == 200
    (state / "outputs" / str(failing["id"]) / "extra.csv").symlink_to(state / "outputs" / "1" / "data.csv")
    result = run_intake(site, [workspace], db_url=db_url)
    assert not result.errors and [h["outcome"] for h in result.handled] == ["refused"]
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "refused" and view["editable"] and "not a plain file" in view["host_status"]["reason"]
    assert "not a plain file" in client.get(f"/requests/{number}").text
    (state / "outputs" / str(failing["id"]) / "extra.csv").unlink()
    assert client.post(f"/api/requests/{number}/submit").status_code == 200
    result = run_intake(site, [workspace], db_url=db_url)
    assert [h["outcome"] for h in result.handled] == ["ok"]
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "submitted" and not view["editable"] and view["host_status"]["round"] == 1
    frozen = AirlockStore(site).read_request(view["host_status"]["request_id"])
    assert frozen["context"] == "Table 1 of the ward study" and frozen["app_number"] == number
    assert [(str(o["output_id"]), o["justification"]) for o in frozen["outputs"]] == [
        (str(failing["id"]), "the small cell is a known public figure"), (str(passing["id"]), None)]
    assert sorted(frozen["supporting"]) == ["note.txt", f"output-{passing['id']}-data.csv"]
    assert not Layout(state).outbox_file(number).exists()


def test_the_request_bound_on_all_files_together_is_the_stores(client, monkeypatch) -> None:
    first = save(client, "crosstab", CROSSTAB, "one")
    second = save(client, "frequencies", PASSING, "two")
    number = client.post("/api/requests", json={"outputs": [{"output_id": first["id"], "justification": "j"}]}
                         ).json()["number"]
    state = client.app.state.ctx.outputs.root.parent
    size = sum(p.stat().st_size for p in (state / "outputs" / str(first["id"])).iterdir()
               if p.name != "rendering.html")
    monkeypatch.setattr(airlock_store, "MAX_REQUEST_BYTES", size + 10)
    refused = client.patch(f"/api/requests/{number}", json={"outputs": [
        {"output_id": first["id"], "justification": "j"}, {"output_id": second["id"]}]})
    assert refused.status_code == 413 and f"more than the {size + 10} a request may have" in refused.json()["detail"]
    refused = client.patch(f"/api/requests/{number}", json={"note": "x" * 20})
    assert refused.status_code == 413
    assert [o["output_id"] for o in client.get(f"/api/requests/{number}").json()["outputs"]] == [first["id"]]
    assert client.get(f"/api/requests/{number}").json()["supporting"] == []
    support = Layout(state).supporting_dir(number)
    assert list(support.iterdir()) == []  # a refused change writes nothing the intake would take
    # a file that got there otherwise (a crash, a script) does not go with the submission
    monkeypatch.undo()
    (support / "stray.txt").write_text("not listed")
    client.patch(f"/api/requests/{number}", json={"context": "c", "controls": "k"})
    assert client.post(f"/api/requests/{number}/submit").status_code == 200
    assert list(support.iterdir()) == []


def test_an_output_page_starts_a_request_or_adds_to_the_open_one(client) -> None:
    failing = save(client, "crosstab", CROSSTAB, "sex by race")
    passing = save(client, "frequencies", PASSING, "sex")
    page = client.get(f"/outputs/{failing['id']}").text
    assert 'id="start-request"' in page and 'id="request-justification"' in page
    # a refused start leaves no empty draft
    refused = client.post("/requests", data={"output_id": "999"})
    assert refused.status_code == 404 and client.get("/api/requests").json() == []
    started = client.post("/requests", data={"output_id": str(failing["id"]), "justification": "known figure"},
                          follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"] == "/requests/1?message=created"
    assert client.get("/api/requests/1").json()["outputs"] == [
        {"output_id": failing["id"], "justification": "known figure", "name": "sex by race", "status": "fail",
         "kind": "crosstab", "needs_justification": True}]
    assert 'href="/requests/1">request #1</a> (draft)' in client.get(f"/outputs/{failing['id']}").text
    page = client.get(f"/outputs/{passing['id']}").text
    assert 'id="add-to-request"' in page and 'id="request-justification"' not in page  # a pass needs none
    added = client.post("/requests/1/add-output", data={"output_id": str(passing["id"])}, follow_redirects=False)
    assert added.status_code == 303
    assert [o["output_id"] for o in client.get("/api/requests/1").json()["outputs"]] == [failing["id"], passing["id"]]
    client.patch("/api/requests/1", json={"context": "c", "controls": "k"})
    client.post("/api/requests/1/submit")
    third = save(client, "frequencies", {"attribute": "race", "exclude_suppressed": True}, "race")
    assert "it cannot take outputs now" in client.get(f"/outputs/{third['id']}").text


def test_withdrawn_before_the_intake_took_it_with_the_real_intake(app_and_state, tmp_path) -> None:
    from outputs.airlock.intake import run_intake
    from outputs.airlock.records import AirlockRecords
    from outputs.airlock.workspace import Workspace

    client, state = app_and_state
    number, _, _ = ready_request(client)
    client.post(f"/api/requests/{number}/submit")
    client.post(f"/api/requests/{number}/withdraw")
    release = client.get(f"/api/requests/{number}").json()["release"]
    site = tmp_path / "site"
    site.mkdir()
    db_url = f"sqlite:///{site / 'site.sqlite'}"
    workspace = Workspace(state, "alice", "r1", f"{release['dataset']}/{release['id']}", release["seal_sha256"])
    run_intake(site, [workspace], db_url=db_url)
    view = client.get(f"/api/requests/{number}").json()
    assert view["state"] == "withdrawn" and view["host_status"] is None
    assert not Layout(state).outbox_file(number).exists()
    records = AirlockRecords(db_url)
    try:
        assert records.requests(recipient="alice") == []  # nothing reached the store
    finally:
        records.dispose()
    assert client.post("/api/requests").status_code == 200
