"""Saving outputs with their checks (issue 26): the `POST /api/outputs` contract through the app on a sealed bundle,
per-cell checks named by their labels, remedies (suppression, rounding), a regression's residual degrees of freedom,
differencing against the recipient's earlier outputs, bounds, what is stored where, and the outputs pages."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re

import numpy as np
import pandas as pd
import pytest

from enclave.app import create_app
from enclave.app import output_store
from tests.enclave.test_app_support import TestClient, synthetic_bundle

NASTY = '<script>alert("x")</script> & co'
GROUPS = [("Female", "White", 40), ("Female", "Black", 30), ("Female", "Other", 3),
          ("Male", "White", 50), ("Male", "Black", 35), ("Male", "Other", 12)]


def outputs_frame() -> pd.DataFrame:
    """Sex by race with one small cell (Female, Other: 3), 12 suppressed records; batches of 12, 13 and 3 records
    for model and differencing cohorts; numeric income, x0, x1 (not quasi-identifiers)."""
    rng = np.random.default_rng(26)
    rows = []
    for sex, race, n in GROUPS:
        rows += [{"sex": sex, "race": race} for _ in range(n)]
    for i, row in enumerate(rows):
        row["age"] = ["20-39", "40-59", "60+"][i % 3]
    rows += [{"sex": "*", "race": "*", "age": "*"} for _ in range(12)]
    frame = pd.DataFrame(rows)
    n = len(frame)
    batch = np.array(["main"] * n, dtype=object)
    batch[0:12], batch[12:25], batch[25:28] = "b12", "b13", "tiny"
    frame["batch"] = batch
    frame["ward"] = rng.choice(["A", NASTY], n)
    frame["x0"] = [f"{v:.2f}" for v in rng.normal(0, 1, n)]
    frame["x1"] = [f"{v:.2f}" for v in rng.normal(5, 2, n)]
    income = rng.integers(900, 1100, n).astype(float)
    other_male = frame.index[(frame.sex == "Male") & (frame.race == "Other")][0]
    income[other_male] = 5_000_000.0  # dominates its cell: NK and p% fail there
    frame["income"] = [f"{v:.0f}" for v in income]
    return frame


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    return synthetic_bundle(root, outputs_frame(), quasi_identifiers=["sex", "race", "age"])


@pytest.fixture()
def app_and_state(bundle, tmp_path):
    state = tmp_path / "state"
    app = create_app(bundle, state_dir=state, trust=bundle.parents[2] / "trust.json", recipient="alice")
    with TestClient(app) as client:
        yield client, state


@pytest.fixture()
def client(app_and_state):
    return app_and_state[0]


def save(client, kind: str, query: dict, name: str = "out", remedy: dict | None = None, status: int = 200) -> dict:
    body = {"name": name, "kind": kind, "query": query}
    if remedy is not None:
        body["remedy"] = remedy
    response = client.post("/api/outputs", json=body)
    assert response.status_code == status, response.text
    return response.json()


def failing(record: dict) -> dict[str, list[list[str]]]:
    return {c["rule"]: c["cells"] for c in record["checks"] if c["status"] != "pass"}


CROSSTAB = {"row": "sex", "col": "race", "exclude_suppressed": False}


def test_contract_crosstab_small_cell_fails_naming_its_labels(client) -> None:
    record = save(client, "crosstab", CROSSTAB, "sex by race")
    assert record["status"] == "fail"
    assert {"id", "status", "checks", "data"} <= set(record)
    threshold = next(c for c in record["checks"] if c["rule"] == "threshold")
    assert threshold["status"] == "fail" and threshold["cells"] == [["Female", "Other"]]
    assert all(set(c) >= {"rule", "status", "cells"} for c in record["checks"])
    # the suppressed records' * against a real value cannot hold a record: structural, reported, not failed
    structural = next(c for c in record["checks"] if c["rule"] == "structural-zeros")
    assert structural["status"] == "pass" and ["Female", "*"] in structural["cells"] and ["*", "White"] in \
        structural["cells"]
    assert "zeros" not in failing(record)
    data = record["data"]
    assert data["row_labels"] == ["Female", "Male", "*"] and data["col_labels"] == ["Black", "White", "Other", "*"] \
        or data["row_labels"][0] == "Female"
    i, j = data["row_labels"].index("Female"), data["col_labels"].index("Other")
    assert data["cells"][i][j] == 3 and data["total"] == 182
    # GET returns the same record; the list holds it
    got = client.get(f"/api/outputs/{record['id']}").json()
    assert got["status"] == "fail" and got["checks"] == record["checks"] and got["data"] == data
    listed = client.get("/api/outputs").json()
    assert [(o["id"], o["status"], o["checks"]) for o in listed] == [(record["id"], "fail", record["checks"])]
    schema = client.get("/openapi.json").json()["paths"]
    assert {"/api/outputs", "/api/outputs/{output_id}", "/api/outputs/{output_id}/remedy"} <= set(schema)
    assert client.get("/api/outputs/999").status_code == 404
    assert client.get("/api/outputs/abc").status_code == 404


def test_frequency_table_cells_and_the_query_as_its_own_endpoint_takes_it(client) -> None:
    query = {"attribute": "race", "filters": {"sex": ["Female"]}, "exclude_suppressed": True}
    assert client.post("/api/frequencies", json=query).status_code == 200
    record = save(client, "frequencies", query)
    assert failing(record)["threshold"] == [["Other"]]
    # no Female record can have race "*" (a suppressed record is "*" in every quasi-identifier): structural
    structural = next(c for c in record["checks"] if c["rule"] == "structural-zeros")
    assert structural["cells"] == [["*"]] and "impossible" in structural["reason"]
    assert record["query"]["filters"] == {"sex": ["Female"]}
    bad = client.post("/api/outputs", json={"name": "x", "kind": "frequencies", "query": {"attribute": "nope"}})
    assert bad.status_code == 422 and "nope" in bad.json()["detail"]
    bad = client.post("/api/outputs", json={"name": "x", "kind": "frequencies", "query": {"attr": "race"}})
    assert bad.status_code == 422 and "query." in bad.json()["detail"]


def test_stored_files_metadata_and_acro_layout(app_and_state) -> None:
    client, state = app_and_state
    record = save(client, "crosstab", {**CROSSTAB, "filters": {"batch": ["main", "b12", "b13", "tiny"]}}, "stored")
    folder = state / "outputs" / str(record["id"])
    assert sorted(p.name for p in folder.iterdir()) == ["data.csv", "meta.json", "rendering.html"]
    meta = json.loads((folder / "meta.json").read_text())
    for name in ("data.csv", "rendering.html"):
        assert meta["files"][name]["sha256"] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
    rows = list(csv.reader(io.StringIO((folder / "data.csv").read_text())))
    assert rows[0][0] == "sex \\ race" and rows[-1][0] == "total"
    assert meta["created_by"] == "alice" and meta["created_at"]
    assert meta["release"]["id"] and len(meta["release"]["seal_sha256"]) == 64
    assert meta["cohorts"] == [{"filters": {"batch": ["b12", "b13", "main", "tiny"]}, "exclude_suppressed": False}] \
        or meta["cohorts"][0]["filters"]["batch"]
    assert meta["rules"]["rules"]["safe_threshold"] == 10 and meta["rules"]["origin"]["safe_threshold"] == "default"
    acro = meta["acro"]
    assert acro["status"] == "fail" and acro["type"] == "table"
    assert acro["files"][0]["sdc"]["summary"]["MinimumThresholdCheck"] == 1
    i, j = record["data"]["row_labels"].index("Female"), record["data"]["col_labels"].index("Other")
    assert acro["files"][0]["sdc"]["cells"]["MinimumThresholdCheck"] == [[i, j]]
    html = (folder / "rendering.html").read_text()
    assert "flag-fail" in html and "<script" not in html
    assert not list((state / "outputs").glob(".new-*"))


def test_suppression_hides_the_cell_and_its_complements_and_is_review(client) -> None:
    record = save(client, "crosstab", CROSSTAB, "suppressed", remedy={"kind": "suppress"})
    assert record["status"] == "review"
    data = record["data"]
    i, j = data["row_labels"].index("Female"), data["col_labels"].index("Other")
    assert data["cells"][i][j] is None
    shown = [v for row in data["cells"] for v in row if v is not None]
    hidden = sum(v is None for row in data["cells"] for v in row)
    assert hidden >= 4  # a rectangle: one cell alone would follow from the totals
    # neither 3 nor the row's and column's rest can be derived: row total minus shown cells is not a single cell
    female = data["cells"][i]
    assert data["row_totals"][i] is None or sum(v is None for v in female) >= 2
    assert record["remedy"]["kind"] == "suppress" and record["remedy"]["actions"]
    threshold = next(c for c in record["checks"] if c["rule"] == "threshold")
    assert threshold["status"] == "review" and "suppression" in threshold["reason"]
    assert any(c["rule"] == "remedy" and c["status"] == "review" for c in record["checks"])
    assert 3 not in shown or data["cells"][i][j] is None


def test_rounding_and_opensafely(client) -> None:
    record = save(client, "crosstab", CROSSTAB, "rounded", remedy={"kind": "round", "base": 5})
    assert record["status"] == "review" and record["remedy"]["base"] == 5
    assert all(v % 5 == 0 for row in record["data"]["cells"] for v in row if v is not None)
    i, j = record["data"]["row_labels"].index("Female"), record["data"]["col_labels"].index("Other")
    assert record["data"]["cells"][i][j] == 5
    assert record["data"]["totals_basis"] == "rounded-cells"
    safely = save(client, "frequencies", {"attribute": "race", "filters": {"sex": ["Female"]}}, "os",
                  remedy={"kind": "opensafely"})
    assert safely["status"] == "review"
    cells = dict(zip(safely["data"]["row_labels"], [r[0] for r in safely["data"]["cells"]]))
    assert cells["Other"] is None and cells["White"] == 40


def test_regression_output_residual_dof(client) -> None:
    model = {"model": "ols", "outcome": "income", "predictors": [{"attribute": "x0"}, {"attribute": "x1"}]}
    small = save(client, "regression", {**model, "filters": {"batch": ["b12"]}}, "n12")
    assert small["status"] == "fail" and small["data"]["df_resid"] == 9
    assert small["checks"][0]["rule"] == "dof" and "9" in small["checks"][0]["reason"]
    assert small["data"]["row_labels"] == ["(intercept)", "x0", "x1"]
    assert small["acro"]["type"] == "regression" and small["acro"]["properties"]["dof"] == 9
    ok = save(client, "regression", {**model, "filters": {"batch": ["b13"]}}, "n13")
    assert ok["status"] == "pass" and ok["data"]["df_resid"] == 10
    again = client.post("/api/regression", json=ok["query"])  # the stored query runs as its endpoint takes it
    assert again.status_code == 200 and again.json()["df_resid"] == 10
    for kind in ("logit", "probit"):
        query = {"model": kind, "outcome": "sex", "predictors": [{"attribute": "x0"}], "exclude_suppressed": True}
        record = save(client, "regression", query, kind)
        assert record["status"] == "pass" and record["checks"][0]["rule"] == "dof"
    refused = client.post(f"/api/outputs/{small['id']}/remedy", json={"remedy": {"kind": "suppress"}})
    assert refused.status_code == 422


def test_differencing_nested_cohorts_names_the_earlier_output(client) -> None:
    everyone = save(client, "frequencies", {"attribute": "sex"}, "sex of everyone")
    assert not any(c["rule"] == "differencing" and c["status"] == "fail" for c in everyone["checks"])
    # the same cohort again differences nothing
    same = save(client, "frequencies", {"attribute": "age"}, "age of everyone")
    assert next(c for c in same["checks"] if c["rule"] == "differencing")["status"] == "pass"
    three_fewer = {"attribute": "race", "filters": {"batch": ["main", "b12", "b13"]}}
    record = save(client, "frequencies", three_fewer, "three fewer")
    check = next(c for c in record["checks"] if c["rule"] == "differencing")
    assert record["status"] == "fail" and check["status"] == "fail"
    assert sorted(check["cells"]) == [[str(everyone["id"])], [str(same["id"])]]
    assert f"earlier output {everyone['id']}" in check["reason"] and "sex of everyone" in check["reason"]
    # a cohort far from every earlier one passes
    far = save(client, "frequencies", {"attribute": "age", "filters": {"batch": ["b13"]}}, "b13")
    assert next(c for c in far["checks"] if c["rule"] == "differencing")["status"] == "pass"
    # one comparison of A with "A without three records" describes those three
    compare = save(client, "compare", {"attribute": "sex", "a": {"filters": {}},
                                       "b": {"filters": {"batch": ["main", "b12", "b13"]}}}, "A vs A-3")
    assert next(c for c in compare["checks"] if c["rule"] == "differencing")["status"] == "fail"


def test_descriptive_output_checks_per_statistic(client) -> None:
    record = save(client, "descriptive", {"attribute": "income", "group": "race", "exclude_suppressed": True}, "inc")
    bad = failing(record)
    assert ["Other", "mean"] in bad["nk-rule"] and ["Other", "sum"] in bad["nk-rule"]
    assert ["Other", "mean"] in bad["p-ratio"]
    other, mean = record["data"]["row_labels"].index("Other"), record["data"]["col_labels"].index("mean")
    assert [other, mean] in record["acro"]["files"][0]["sdc"]["cells"]["NKCheck"]
    assert record["data"]["row_labels"][-1] == "all"
    assert ["White", "mean"] not in bad.get("nk-rule", [])
    assert not any(cell[0] == "*" for cells in bad.values() for cell in cells)  # none left: structural
    structural = next(c for c in record["checks"] if c["rule"] == "structural-zeros")
    assert ["*", "count"] in structural["cells"]
    remedied = client.post(f"/api/outputs/{record['id']}/remedy", json={"remedy": {"kind": "suppress"}})
    assert remedied.status_code == 200, remedied.text
    data = remedied.json()["data"]
    row = data["row_labels"].index("Other")
    assert data["cells"][row][data["col_labels"].index("mean")] is None
    assert "all" not in data["row_labels"]  # the cohort's row would give the hidden group away
    assert client.post(f"/api/outputs/{record['id']}/remedy",
                       json={"remedy": {"kind": "round"}}).status_code == 422


def test_comments_exceptions_and_remedy_through_the_api(client) -> None:
    record = save(client, "crosstab", CROSSTAB, "needs review")
    response = client.post(f"/api/outputs/{record['id']}/comments", json={"text": "the small cell is expected"})
    assert response.status_code == 200 and response.json()["comments"][0]["text"] == "the small cell is expected"
    response = client.post(f"/api/outputs/{record['id']}/exception", json={"text": "published counts"})
    assert response.json()["exception"]["justification"] == "published counts"
    assert response.json()["acro"]["exception"] == "published counts"
    passing = save(client, "frequencies", {"attribute": "sex"}, "fine")
    assert passing["status"] == "pass"
    assert client.post(f"/api/outputs/{passing['id']}/exception", json={"text": "x"}).status_code == 409
    remedied = client.post(f"/api/outputs/{record['id']}/remedy", json={"remedy": {"kind": "round"}}).json()
    assert remedied["remedied_from"] == record["id"] and remedied["status"] == "review"
    assert remedied["name"] == "needs review (rounded)"


def test_bounds_on_count_and_size(client, monkeypatch) -> None:
    monkeypatch.setattr(output_store, "MAX_OUTPUTS", 2)
    save(client, "frequencies", {"attribute": "sex"}, "one")
    save(client, "frequencies", {"attribute": "race"}, "two")
    full = client.post("/api/outputs", json={"name": "three", "kind": "frequencies", "query": {"attribute": "age"}})
    assert full.status_code == 409 and "most" in full.json()["detail"]
    monkeypatch.setattr(output_store, "MAX_OUTPUTS", 100)
    monkeypatch.setattr(output_store, "MAX_OUTPUT_BYTES", 2000)
    big = client.post("/api/outputs", json={"name": "big", "kind": "crosstab", "query": CROSSTAB})
    assert big.status_code == 413
    assert len(client.get("/api/outputs").json()) == 2
    long_name = client.post("/api/outputs", json={"name": "n" * 121, "kind": "frequencies",
                                                  "query": {"attribute": "sex"}})
    assert long_name.status_code == 422


def test_pages_save_as_output_highlight_the_failing_cell_and_escape(client) -> None:
    page = client.get("/crosstab?row=sex&col=race&pct=none")
    assert 'action="/outputs"' in page.text and 'id="output-params"' in page.text
    response = client.post("/outputs", data={"kind": "crosstab", "params": "row=sex&col=race&pct=none",
                                              "name": NASTY}, follow_redirects=False)
    assert response.status_code == 303
    target = response.headers["location"]
    page = client.get(target)
    assert page.status_code == 200
    assert NASTY not in page.text and "&lt;script&gt;" in page.text
    record = client.get("/api/" + target.lstrip("/")).json()
    i, j = record["data"]["row_labels"].index("Female"), record["data"]["col_labels"].index("Other")
    cell = re.search(rf'<td class="num flag-fail" id="cell-{i}-{j}">(.*?)</td>', page.text, re.S)
    assert cell and "fewer than 10 records" in cell.group(1)
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert "<style" not in page.text and "onclick" not in page.text
    listing = client.get("/outputs")
    assert listing.status_code == 200 and "status-fail" in listing.text and NASTY not in listing.text
    # a label with markup (a ward named like a script) is escaped in the rendered table too
    ward = client.post("/outputs", data={"kind": "frequencies", "params": "attr=ward", "name": "wards"},
                       follow_redirects=False)
    assert ward.status_code == 303
    assert NASTY not in client.get(ward.headers["location"]).text
    # comment, exception and remedy forms
    oid = record["id"]
    assert client.post(f"/outputs/{oid}/comment", data={"text": "<b>hi</b>"}, follow_redirects=False).status_code \
        == 303
    assert client.post(f"/outputs/{oid}/exception", data={"text": "needed"}, follow_redirects=False).status_code \
        == 303
    remedy = client.post(f"/outputs/{oid}/remedy", data={"remedy": "suppress"}, follow_redirects=False)
    assert remedy.status_code == 303
    remedied = client.get(remedy.headers["location"])
    assert "status-review" in remedied.text and "<em>hidden</em>" in remedied.text
    shown = client.get(f"/outputs/{oid}").text
    assert "&lt;b&gt;hi&lt;/b&gt;" in shown and "needed" in shown
    # a cross-origin form post is refused like the save-analysis form's
    refused = client.post("/outputs", data={"kind": "crosstab", "params": "", "name": "x"},
                          headers={"sec-fetch-site": "cross-site"})
    assert refused.status_code == 403


def test_every_analysis_page_offers_save_as_output(client) -> None:
    for path in ["/cohort", "/frequencies?attr=sex", "/crosstab?row=sex&col=race", "/compare?attr=sex&a=sex%3DMale",
                 "/descriptive?attr=income&by=sex", "/histogram?attr=income",
                 "/regression?model=ols&y=income&x=x0&x=x1"]:
        page = client.get(path)
        assert page.status_code == 200, path
        assert 'id="output-form"' in page.text, path
    for kind, params in [("cohort", "where=sex%3DMale"), ("compare", "attr=sex&a=sex%3DMale&b=sex%3DFemale"),
                         ("descriptive", "attr=income&by=sex"), ("histogram", "attr=income&bins=5"),
                         ("regression", "model=ols&y=income&x=x0&x=x1")]:
        response = client.post("/outputs", data={"kind": kind, "params": params, "name": kind},
                               follow_redirects=False)
        assert response.status_code == 303, (kind, response.text[:500])
        assert client.get(response.headers["location"]).status_code == 200


def test_differencing_holds_for_outputs_saved_at_the_same_time(client) -> None:
    """A script posting two nested cohorts in parallel must not have each miss the other."""
    from concurrent.futures import ThreadPoolExecutor

    queries = [{"attribute": "sex"}, {"attribute": "sex", "filters": {"batch": ["main", "b12", "b13"]}}]

    def post(query: dict) -> dict:
        return client.post("/api/outputs", json={"name": "parallel", "kind": "frequencies", "query": query}).json()

    with ThreadPoolExecutor(2) as pool:
        records = list(pool.map(post, queries))
    statuses = sorted(next(c for c in r["checks"] if c["rule"] == "differencing")["status"] for r in records)
    assert statuses == ["fail", "pass"]


def test_a_model_on_a_nested_cohort_fails_differencing(client) -> None:
    model = {"model": "ols", "outcome": "income", "predictors": [{"attribute": "x0"}]}
    first = save(client, "regression", model, "everyone")
    second = save(client, "regression", {**model, "filters": {"batch": ["main", "b12", "b13"]}}, "three fewer")
    check = next(c for c in second["checks"] if c["rule"] == "differencing")
    assert check["status"] == "fail" and check["cells"] == [[str(first["id"])]]


def test_suppressed_cell_cannot_be_narrowed_from_what_is_shown(client) -> None:
    """The linear-programming bounds a reader can derive from the published cells and totals leave the hidden
    small cell an interval at least the threshold wide."""
    from outputs.remedies import Shown, derivable_bounds

    record = save(client, "crosstab", CROSSTAB, "suppressed", remedy={"kind": "suppress"})
    data = record["data"]
    true = save(client, "crosstab", CROSSTAB, "true")["data"]["cells"]
    cells = np.array(true, dtype=float)
    hidden = np.array([[v is None for v in row] for row in data["cells"]])
    rows = np.array([v is not None for v in data["row_totals"]])
    cols = np.array([v is not None for v in data["col_totals"]])
    i, j = data["row_labels"].index("Female"), data["col_labels"].index("Other")
    (low, high), = derivable_bounds(cells, Shown(hidden, rows, cols, data["total"] is not None), [("cell", i, j)])
    assert high - low >= 10
    shown = [v for row, mask in zip(data["cells"], hidden) for v, h in zip(row, mask) if not h]
    assert all(v == c for v, c in zip(shown, cells[~hidden]))


def rules_bundle(root, outputs_block: dict | None):
    """A sealed bundle whose manifest carries an `outputs:` block (the engine's manifest allows extra blocks)."""
    from engine.bundle import seal_release
    from tests.enclave.test_app_support import policy_of, write_output

    write_output(root / "out", outputs_frame(), quasi_identifiers=["sex", "race", "age"])
    if outputs_block is not None:
        path = root / "out" / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["outputs"] = outputs_block
        path.write_text(json.dumps(manifest, indent=2) + "\n")
    return seal_release(root / "out", root / "releases", policy=policy_of(root / "out"))


def test_rules_from_the_site_floor_tightened_by_the_manifest(tmp_path) -> None:
    from enclave.app.release import ReleaseError

    site = tmp_path / "site"
    site.mkdir()
    (site / "outputs.yaml").write_text("safe_threshold: 13\n")
    bundle = rules_bundle(tmp_path / "a", {"safe_dof_threshold": 12})
    app = create_app(bundle, state_dir=tmp_path / "state", trust=bundle.parents[2] / "trust.json", site=site)
    with TestClient(app) as client:
        record = save(client, "frequencies", {"attribute": "race", "filters": {"sex": ["Male"]}})
        assert failing(record)["threshold"] == [["Other"]]  # 12 records: passes at 10, fails at the site's 13
        rules = record["rules"]
        assert rules["rules"]["safe_threshold"] == 13 and rules["origin"]["safe_threshold"] == "site"
        assert rules["rules"]["safe_dof_threshold"] == 12 and rules["origin"]["safe_dof_threshold"] == "policy"
        assert rules["site"]["source"].endswith("outputs.yaml") and len(rules["site"]["sha256"]) == 64
        assert "13" in client.get("/outputs").text
    relaxing = rules_bundle(tmp_path / "b", {"safe_threshold": 5})
    with pytest.raises(ReleaseError, match="relax"):
        create_app(relaxing, state_dir=tmp_path / "state2", trust=relaxing.parents[2] / "trust.json", site=site)


def test_app_command_refuses_a_bad_site_floor_naming_the_file(bundle, tmp_path, capsys) -> None:
    from safeshare.cli import main

    site = tmp_path / "site"
    site.mkdir()
    (site / "outputs.yaml").write_text("safe_threshold: ten\n")
    code = main(["app", "--bundle", str(bundle), "--state", str(tmp_path / "state"), "--port", "0",
                 "--trust", str(bundle.parents[2] / "trust.json"), "--site", str(site)])
    assert code == 2
    err = capsys.readouterr().err
    assert "outputs.yaml" in err and "safe_threshold" in err


def test_cohort_count_output_and_its_suppression(client) -> None:
    record = save(client, "cohort", {"filters": {"batch": ["tiny"]}}, "tiny")
    assert record["status"] == "fail" and failing(record)["threshold"] == [["records"]]
    assert record["data"]["cells"] == [[3]]
    remedied = client.post(f"/api/outputs/{record['id']}/remedy", json={"remedy": {"kind": "suppress"}}).json()
    assert remedied["status"] == "review" and remedied["data"]["cells"] == [[None]]
    assert remedied["data"]["total"] is None  # the total would be the hidden count itself
    assert "3" not in json.dumps(remedied["data"])


def test_bounds_on_table_cells_and_suppression(client, monkeypatch) -> None:
    from enclave.app import output_checks

    monkeypatch.setattr(output_checks, "MAX_SUPPRESS_CELLS", 6)
    refused = client.post("/api/outputs", json={"name": "x", "kind": "crosstab", "query": CROSSTAB,
                                                "remedy": {"kind": "suppress"}})
    assert refused.status_code == 413 and "at most 6 cells" in refused.json()["detail"]
    monkeypatch.setattr(output_checks, "MAX_OUTPUT_CELLS", 6)
    refused = client.post("/api/outputs", json={"name": "x", "kind": "crosstab", "query": CROSSTAB})
    assert refused.status_code == 413 and "at most 6" in refused.json()["detail"]
    assert client.get("/api/outputs").json() == []


def test_compare_output_checks_both_cohorts_and_the_test(client) -> None:
    record = save(client, "compare", {"attribute": "race", "a": {"filters": {"sex": ["Male"]}},
                                      "b": {"filters": {"sex": ["Female"]}}}, "race by sex")
    bad = failing(record)
    assert bad["threshold"] == [["Other", "B"]]   # 3 women of race Other
    assert "zeros" not in bad                     # race "*" in a cohort of men or women: no record can be there
    structural = next(c for c in record["checks"] if c["rule"] == "structural-zeros")
    assert sorted(structural["cells"]) == [["*", "A"], ["*", "B"]]
    dof = next(c for c in record["checks"] if c["rule"] == "dof")
    assert dof["status"] == "pass" and record["data"]["test"]["dof"] == 2


def test_store_never_lists_half_written_outputs_and_keeps_ids(tmp_path) -> None:
    store = output_store.OutputStore(tmp_path)
    first = store.add({"name": "a", "status": "pass"}, "x\n", "<p>a</p>")
    partial = tmp_path / "outputs" / ".new-crashed"
    partial.mkdir()
    (partial / "data.csv").write_text("half")
    (tmp_path / "outputs" / "7").mkdir()  # no meta.json: not an output
    reopened = output_store.OutputStore(tmp_path)
    assert not partial.exists()
    assert [r["id"] for r in reopened.list()] == [first["id"]]
    assert reopened.get("../outputs/1") is None and reopened.get("01") is None and reopened.get(7) is None
    second = reopened.add({"name": "b", "status": "fail"}, "y\n", "<p>b</p>")
    assert second["id"] == 8  # ids only grow: a folder that exists keeps its number
    with pytest.raises(output_store.OutputStoreError) as refused:
        reopened.update(second["id"], lambda record: record.update(comments=["x" * output_store.MAX_OUTPUT_BYTES]))
    assert refused.value.status == 413
    assert "x" * 100 not in (tmp_path / "outputs" / "8" / "meta.json").read_text()
