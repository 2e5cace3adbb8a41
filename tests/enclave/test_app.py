"""The analytics app on the ADULT release: every analysis checked against pandas, the chi-square test against a hand
computation, the security headers and the absence of any way to take data out, saved analyses, read-only data."""
from __future__ import annotations

import html
import json
import math
import re
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from scipy.stats import chi2

from enclave.app import create_app
from enclave.app.analyses import chi_square
from enclave.app.release import DATA_TABLE, META_TABLE, SQLITE_NAME
from enclave.app.security import CSP
from enclave.app.workspace import WORKSPACE_NAME
from tests.enclave.test_app_support import ASSETS, DATA, PAGES, TestClient, adult_bundle

if not DATA.is_dir():
    pytest.skip(f"benchmark data not found at {DATA}", allow_module_level=True)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return adult_bundle(tmp_path_factory.mktemp("adult"))


@pytest.fixture(scope="module")
def frame(bundle) -> pd.DataFrame:
    """The released table as the test reads it itself, independently of the app."""
    return pd.read_parquet(bundle / "data.parquet").astype(str)


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def app(bundle, state):
    return create_app(bundle, state_dir=state, trust=bundle.parents[2] / "trust.json")  # the site's (RELEASES/..)


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app) as test_client:
        yield test_client


def select(frame: pd.DataFrame, filters: dict[str, list[str]], exclude_suppressed: bool = False) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)
    for name, values in filters.items():
        keep &= frame[name].isin(values)
    if exclude_suppressed:
        keep &= ~(frame[["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
                         "occupation", "salary-class"]] == "*").all(axis=1)
    return frame[keep]


COHORTS = [
    ({}, False),
    ({"sex": ["Female"]}, False),
    ({"sex": ["Male"], "age": ["30-39", "40-49"]}, False),
    ({"race": ["Black", "Other"], "salary-class": [">50K"], "education": ["Bachelors", "Masters", "Doctorate"]}, False),
    ({"age": ["*"]}, False),
    ({}, True),
    ({"sex": ["Female", "*"]}, True),
]


def test_suppressed_records_are_stars_in_every_quasi_identifier(frame, bundle) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    stars = (frame[list(manifest["transformation"])] == "*").all(axis=1)
    assert int(stars.sum()) == manifest["suppressed_records"] > 0


@pytest.mark.parametrize("filters, exclude", COHORTS)
def test_cohort_count_matches_pandas(client, frame, filters, exclude) -> None:
    response = client.post("/api/count", json={"filters": filters, "exclude_suppressed": exclude})
    assert response.status_code == 200, response.text
    body = response.json()
    expected = len(select(frame, filters, exclude))
    assert body["count"] == expected and body["total"] == len(frame)
    assert body["percent"] == pytest.approx(100 * expected / len(frame))


def test_cohort_facets_count_each_value_under_the_other_filters(client, frame) -> None:
    filters = {"sex": ["Male"], "race": ["White", "Black"]}
    body = client.post("/api/count", json={"filters": filters, "facets": True}).json()
    labels = {a["name"]: [v["label"] for v in a["values"]] for a in client.get("/api/release").json()["attributes"]}
    for name, counts in body["facets"].items():
        others = {k: v for k, v in filters.items() if k != name}
        expected = select(frame, others)[name].value_counts()
        assert counts == [int(expected.get(label, 0)) for label in labels[name]], name


def test_cohort_page_has_the_ids_a_test_drives(client, frame) -> None:
    page = client.get("/cohort?where=sex%3DFemale&where=age%3D20-29").text
    assert 'id="cohort-count"' in page and 'id="cohort-form"' in page
    assert re.search(r'<span id="cohort-count" class="big">([\d,]+)</span>', page).group(1) == \
        f"{len(select(frame, {'sex': ['Female'], 'age': ['20-29']})):,}"
    labels = client.get("/api/release").json()["attributes"]
    for attribute in labels:
        for index, value in enumerate(attribute["values"]):
            checkbox = re.search(rf'<input type="checkbox" id="f-{re.escape(attribute["name"])}-{index}" '
                                 rf'name="where" value="([^"]*)"( checked)?>', page)
            assert checkbox, (attribute["name"], index)
            assert html.unescape(checkbox.group(1)) == \
                f'{attribute["name"]}={value["label"]}'
            assert bool(checkbox.group(2)) == ((attribute["name"], value["label"]) in
                                               {("sex", "Female"), ("age", "20-29")})
    assert '<script src="/static/app.js" defer></script>' in page
    # the kiosk guard runs before the page exists: in <head>, not deferred
    head = page.split("</head>", 1)[0]
    assert '<script src="/static/guard.js"></script>' in head


def test_release_lists_values_in_natural_order_with_counts(client, frame) -> None:
    attributes = {a["name"]: a for a in client.get("/api/release").json()["attributes"]}
    ages = [v["label"] for v in attributes["age"]["values"]]
    assert ages == sorted(ages[:-1], key=lambda s: int(s.split("-")[0])) + ["*"]
    for name, attribute in attributes.items():
        counts = frame[name].value_counts()
        assert {v["label"]: v["count"] for v in attribute["values"]} == {k: int(v) for k, v in counts.items()}


@pytest.mark.parametrize("attribute, filters", [("age", {}), ("education", {"sex": ["Female"]}),
                                                ("native-country", {"race": ["Asian-Pac-Islander"]})])
def test_frequency_table_matches_pandas(client, frame, attribute, filters) -> None:
    body = client.post("/api/frequencies", json={"attribute": attribute, "filters": filters}).json()
    cohort = select(frame, filters)
    expected = cohort[attribute].value_counts()
    got = {row["value"]: row["count"] for row in body["rows"]}
    assert {k: v for k, v in got.items() if v} == {k: int(v) for k, v in expected.items()}
    assert body["total"] == len(cohort)
    for row in body["rows"]:
        assert row["percent"] == pytest.approx(100 * row["count"] / len(cohort))
    assert body["rows"][-1]["cumulative_percent"] == pytest.approx(100.0)
    page = client.get("/frequencies", params=[("attr", attribute)] +
                      [("where", f"{k}={v}") for k, vs in filters.items() for v in vs])
    assert page.status_code == 200
    top = expected.index[0]
    assert f"<td>{top}</td><td class=\"num\">{int(expected.iloc[0]):,}</td>" in html.unescape(page.text)
    assert "<svg" in page.text


@pytest.mark.parametrize("row, col, filters", [("sex", "salary-class", {}),
                                               ("age", "education", {"race": ["White"], "sex": ["Male"]}),
                                               ("marital-status", "workclass", {"salary-class": [">50K"]})])
def test_crosstab_matches_pandas(client, frame, row, col, filters) -> None:
    body = client.post("/api/crosstab", json={"row": row, "col": col, "filters": filters}).json()
    cohort = select(frame, filters)
    expected = pd.crosstab(cohort[row], cohort[col])
    counts = pd.DataFrame(body["counts"], index=body["row_labels"], columns=body["col_labels"])
    assert counts.loc[expected.index, expected.columns].to_numpy().tolist() == expected.to_numpy().tolist()
    assert counts.to_numpy().sum() == len(cohort) == body["total"]
    row_pct = pd.crosstab(cohort[row], cohort[col], normalize="index") * 100
    col_pct = pd.crosstab(cohort[row], cohort[col], normalize="columns") * 100
    got_row = pd.DataFrame(body["row_percent"], index=body["row_labels"], columns=body["col_labels"])
    got_col = pd.DataFrame(body["col_percent"], index=body["row_labels"], columns=body["col_labels"])
    np.testing.assert_allclose(got_row.loc[row_pct.index, row_pct.columns], row_pct, atol=1e-9)
    np.testing.assert_allclose(got_col.loc[col_pct.index, col_pct.columns], col_pct, atol=1e-9)
    assert body["row_totals"] == counts.sum(axis=1).tolist()
    for mode in ("row", "col", "total", "none"):
        page = client.get("/crosstab", params=[("row", row), ("col", col), ("pct", mode)] +
                          [("where", f"{k}={v}") for k, vs in filters.items() for v in vs])
        assert page.status_code == 200 and 'id="crosstab-table"' in page.text and "<svg" in page.text


def hand_chi_square(table: list[list[int]]) -> tuple[float, int]:
    """Pearson's statistic the long way: sum over cells of (observed - expected)^2 / expected."""
    rows = [sum(r) for r in table]
    cols = [sum(c) for c in zip(*table)]
    total = sum(rows)
    statistic = 0.0
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            expected = r * c / total
            statistic += (table[i][j] - expected) ** 2 / expected
    return statistic, (len(rows) - 1) * (len(cols) - 1)


def test_chi_square_against_hand_computation() -> None:
    table = [[30, 10, 25], [20, 40, 15]]
    result = chi_square(np.array(table))
    statistic, dof = hand_chi_square(table)
    assert result["ok"] and result["dof"] == dof == 2
    assert result["statistic"] == pytest.approx(statistic, rel=1e-12)
    assert result["p_value"] == pytest.approx(chi2.sf(statistic, dof), rel=1e-9)
    assert result["warning"] is None
    # 2 x 2: still the plain statistic (no Yates correction), and a warning when expected counts are small.
    small = chi_square(np.array([[3, 1], [1, 3]]))
    assert small["statistic"] == pytest.approx(hand_chi_square([[3, 1], [1, 3]])[0])
    assert small["expected_below_5"] == 4 and "below 5" in small["warning"]
    # A value absent from both cohorts is left out; an empty cohort is no test.
    assert chi_square(np.array([[5, 0, 7], [6, 0, 9]]))["dof"] == 1
    assert chi_square(np.array([[0, 0], [6, 9]]))["ok"] is False


def test_compare_cohorts_matches_pandas_and_hand_chi_square(client, frame) -> None:
    a, b = {"sex": ["Male"]}, {"sex": ["Female"]}
    body = client.post("/api/compare", json={"attribute": "salary-class", "a": {"filters": a},
                                             "b": {"filters": b}}).json()
    counts_a = select(frame, a)["salary-class"].value_counts()
    counts_b = select(frame, b)["salary-class"].value_counts()
    values = sorted(set(counts_a.index) | set(counts_b.index))
    table = [[int(counts_a.get(v, 0)) for v in values], [int(counts_b.get(v, 0)) for v in values]]
    for row in body["rows"]:
        assert row["count_a"] == int(counts_a.get(row["value"], 0))
        assert row["count_b"] == int(counts_b.get(row["value"], 0))
    statistic, dof = hand_chi_square(table)
    test = body["chi_square"]
    assert test["statistic"] == pytest.approx(statistic) and test["dof"] == dof
    assert test["p_value"] == pytest.approx(chi2.sf(statistic, dof))
    assert body["overlap"] == 0
    page = client.get("/compare?attr=salary-class&a=sex%3DMale&b=sex%3DFemale").text
    assert 'id="chi2-statistic"' in page and f"{statistic:.4g}" in page and 'id="chi2-dof">1<' in page


def test_compare_warns_on_small_expected_counts(client) -> None:
    body = client.post("/api/compare", json={
        "attribute": "race", "a": {"filters": {"native-country": ["Cambodia"]}},
        "b": {"filters": {"native-country": ["Canada"]}}}).json()
    assert body["chi_square"]["ok"] and body["chi_square"]["expected_below_5"] > 0
    page = client.get("/compare?attr=race&a=native-country%3DCambodia&b=native-country%3DCanada").text
    assert 'id="chi2-warning"' in page and "below 5" in page


@pytest.mark.parametrize("path, body", [
    ("/api/count", {"filters": {"nope": ["x"]}}),
    ("/api/count", {"filters": {"sex": ["Unknown"]}}),
    ("/api/frequencies", {"attribute": "nope"}),
    ("/api/crosstab", {"row": "sex", "col": "sex"}),
    ("/api/count", {"filters": {}, "extra": 1}),
])
def test_bad_queries_are_422(client, path, body) -> None:
    assert client.post(path, json=body).status_code == 422


def test_bad_page_parameters_show_an_error_page(client) -> None:
    response = client.get("/frequencies?attr=nope")
    assert response.status_code == 422 and "<title>safeshare" in response.text and "nope" in response.text


def every_response(client) -> list:
    responses = [client.get(path) for path in PAGES + ASSETS + ["/openapi.json", "/nope", "/static/nope.js"]]
    responses += [client.post("/api/count", json={}), client.post("/api/count", json={"filters": {"x": []}}),
                  client.get("/api/release"), client.get("/api/analyses"), client.put("/"),
                  client.delete("/api/analyses/1"), client.options("/api/count"), client.head("/"),
                  client.get("/analyses/999999"), client.post("/", content=b"x")]
    return responses


def test_security_headers_on_every_response(client) -> None:
    for response in every_response(client):
        where = f"{response.request.method} {response.request.url.path} -> {response.status_code}"
        assert response.headers["content-security-policy"] == CSP, where
        assert response.headers["x-content-type-options"] == "nosniff", where
        assert response.headers["referrer-policy"] == "no-referrer", where
        assert response.headers["cache-control"] == "no-store", where
        assert "content-disposition" not in response.headers, where
        assert "server" not in response.headers, where
    assert "default-src 'self'" in CSP and "frame-ancestors 'none'" in CSP and "object-src 'none'" in CSP


def test_pages_titles_and_no_inline_code_or_external_references(client) -> None:
    for path in PAGES + ["/nope", "/analyses/999999"]:
        response = client.get(path)
        page = response.text
        assert response.headers["content-type"].startswith("text/html"), path
        assert re.search(r"<title>safeshare( ·|</title>)", page), path
        assert not re.search(r"<script(?![^>]*\bsrc=\"/static/)[^>]*>", page), path  # no inline script
        assert "<style" not in page and not re.search(r"\sstyle=", page), path  # no inline style
        assert not re.search(r"\son[a-z]+=", page), path  # no event handler attributes
        for url in re.findall(r'(?:href|src|action|formaction)="([^"]*)"', page):
            assert url.startswith("/") and not url.startswith("//"), (path, url)
        assert "javascript:" not in page.lower()
    for asset in ASSETS:
        text = client.get(asset).text
        assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
        assert "@import" not in text and "url(" not in text


def test_assets_are_served_from_the_package_with_types(client) -> None:
    js = client.get("/static/app.js")
    assert js.headers["content-type"].startswith("text/javascript") and "/api/count" in js.text
    assert client.get("/static/app.css").headers["content-type"].startswith("text/css")
    assert client.get("/static/../release.py").status_code == 404
    assert client.get("/static/%2e%2e%2frelease.py").status_code == 404


def test_no_export_route_and_only_get_and_post(app, client) -> None:
    forbidden = re.compile(r"export|download|csv|parquet|upload|print|file|raw|dump|records|report", re.I)
    for route in app.routes:
        path = getattr(route, "path", "")
        assert not forbidden.search(path), path
        allowed = {"GET", "HEAD", "POST"} | ({"PATCH"} if path == "/api/requests/{number}" else set())
        assert set(getattr(route, "methods", None) or {"GET"}) <= allowed, path
    for path in ["/export", "/download", "/data.csv", "/data.parquet", "/report.html", "/manifest.json",
                 "/api/export", "/api/records", "/api/download?format=csv", "/static/data.csv", "/docs", "/redoc"]:
        response = client.get(path)
        assert response.status_code == 404, path
        assert "content-disposition" not in response.headers
    for method in ("PUT", "DELETE", "OPTIONS", "HEAD", "TRACE"):
        response = client.request(method, "/api/count")
        assert response.status_code == 405 and response.headers["allow"] == "GET, POST, PATCH", method
        response = client.request(method, "/outputs")
        assert response.status_code == 405 and response.headers["allow"] == "GET, POST", method
    # PATCH only where the API edits a draft request (cross-origin refused like a POST), nowhere else
    assert client.patch("/outputs").status_code == 405 and client.patch("/api/count").status_code == 405
    assert client.patch("/api/requests/1", json={}, headers={"sec-fetch-site": "cross-site"}).status_code == 403


def test_cross_origin_posts_are_refused(client) -> None:
    response = client.post("/api/count", json={}, headers={"origin": "http://evil.example"})
    assert response.status_code == 403
    assert client.post("/api/count", json={}, headers={"origin": "http://testserver"}).status_code == 200
    # A browser's own word wins: a form posted from another site, and one from the app (Origin null under the
    # no-referrer policy, but Sec-Fetch-Site same-origin).
    assert client.post("/analyses", data={"kind": "cohort", "name": "x"},
                       headers={"sec-fetch-site": "cross-site", "origin": "null"}).status_code == 403
    assert client.post("/api/count", json={}, headers={"sec-fetch-site": "same-site"}).status_code == 403
    assert client.post("/api/count", json={},
                       headers={"sec-fetch-site": "same-origin", "origin": "null"}).status_code == 200
    assert client.post("/api/count", content=b"{}" * (1 << 20),
                       headers={"content-type": "application/json"}).status_code == 413


def test_openapi_schema_without_docs(client) -> None:
    schema = client.get("/openapi.json").json()
    assert {"/api/count", "/api/frequencies", "/api/crosstab", "/api/compare"} <= set(schema["paths"])
    assert all(set(item) <= {"get", "post"} | ({"patch"} if path == "/api/requests/{number}" else set())
               for path, item in schema["paths"].items())


def test_saved_analyses_round_trip(client, state) -> None:
    page_query = "row=sex&col=salary-class&pct=col&where=race%3DWhite"
    original = client.get(f"/crosstab?{page_query}")
    response = client.post("/analyses", data={"kind": "crosstab", "name": "pay by sex, white",
                                              "params": page_query + "&saved=3&evil=1"}, follow_redirects=False)
    assert response.status_code == 303
    opened = client.get(response.headers["location"], follow_redirects=False)
    assert opened.status_code == 303
    target = opened.headers["location"]
    assert target.startswith("/crosstab?") and "evil" not in target and "saved=3" not in target
    rerun = client.get(target)
    assert "pay by sex, white" in rerun.text
    table = re.compile(r'<table class="data crosstab".*?</table>', re.S)
    assert table.search(rerun.text).group(0) == table.search(original.text).group(0)
    listing = client.get("/analyses").text
    assert "pay by sex, white" in listing
    # The JSON API stores parameters only; they live in the workspace file, not in the release database.
    saved = client.post("/api/analyses", json={"name": "women", "kind": "cohort",
                                               "params": [["where", "sex=Female"]]}).json()
    assert client.get(f"/api/analyses/{saved['id']}").json()["params"] == [["where", "sex=Female"]]
    names = [item["name"] for item in client.get("/api/analyses").json()]
    assert {"women", "pay by sex, white"} <= set(names)
    with sqlite3.connect(state / WORKSPACE_NAME) as conn:
        stored = conn.execute("SELECT name, kind, params FROM analyses ORDER BY id").fetchall()
    assert ("women", "cohort", '[["where", "sex=Female"]]') in stored
    assert all("8,588" not in params for _, _, params in stored)  # no results, only parameters
    cohort = client.get(client.get(f"/analyses/{saved['id']}", follow_redirects=False).headers["location"])
    assert 'id="f-sex-0" name="where" value="sex=Female" checked' in cohort.text
    assert client.post(f"/analyses/{saved['id']}/delete", follow_redirects=False).status_code == 303
    assert client.get(f"/api/analyses/{saved['id']}").status_code == 404
    bad = client.post("/api/analyses", json={"name": "x", "kind": "export", "params": []})
    assert bad.status_code == 422
    assert client.post("/analyses", data={"kind": "cohort", "name": "  ", "params": ""}).status_code == 422


def test_release_database_is_read_only_at_run_time(app, state, bundle) -> None:
    release = app.state.ctx.release
    with pytest.raises(sa.exc.OperationalError, match="readonly"):
        with release.engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {DATA_TABLE}"))
    with pytest.raises(sa.exc.OperationalError, match="readonly"):
        with release.engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE sneaky (x INTEGER)"))
    assert (state / SQLITE_NAME).stat().st_mode & 0o222 == 0
    with release.engine.connect() as conn:
        meta = dict(conn.execute(sa.text(f"SELECT key, value FROM {META_TABLE}")).all())
        assert conn.execute(sa.text(f"SELECT COUNT(*) FROM {DATA_TABLE}")).scalar_one() == \
            json.loads((bundle / "manifest.json").read_text())["records"]
    assert meta["data_sha256"] == json.loads((bundle / "manifest.json").read_text())["data_sha256"]


def test_svg_charts_are_well_formed_and_escaped(client) -> None:
    from engine.svgcharts import horizontal_bar_chart, horizontal_grouped_bars, stacked_percent_bars

    nasty = ['<script>alert(1)</script>', 'a & b', '"quoted"']
    for svg in (horizontal_bar_chart(nasty, [1, 2, 3], "t<"),
                stacked_percent_bars(nasty, nasty, [[50, 50, 0]] * 3, "t"),
                horizontal_grouped_bars(nasty, [("A", [1, 2, 3]), ("B", [3, 2, 1])], "t")):
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg") and "<script" not in svg
    page = client.get("/frequencies?attr=salary-class").text
    svg = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    assert len(ET.fromstring(svg).findall(".//{http://www.w3.org/2000/svg}rect")) == 3
    assert not math.isnan(float(re.search(r'width="([\d.]+)"', svg.split("<rect", 1)[1]).group(1)))
