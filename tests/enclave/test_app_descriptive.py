"""Descriptive statistics and histograms in the analytics app (issue 26) against pandas and numpy computing the same
figures from the released table themselves; which attributes count as numeric; the pages through the app on a sealed
bundle; and the overview's risk table when no estimate was needed."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from enclave.app import create_app
from tests.enclave.test_app_support import TestClient, synthetic_bundle

N = 500
NASTY = '<script>alert("x")</script> & co'


def numeric_frame(seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    amount = rng.lognormal(6, 1, N).round(2)
    balance = rng.normal(0, 500, N).round(1)  # negative values too
    frame = pd.DataFrame({
        "sex": rng.choice(["f", "m", "*"], N, p=[0.49, 0.49, 0.02]),
        "age": rng.choice(["20-29", "30-39", "40-49", "50-59"], N),
        "ward": rng.choice(["A", "B", NASTY], N),
        "code": rng.choice(["1", "2", "3"], N),  # a numeric-looking quasi-identifier: a category
        "stay": rng.integers(1, 30, N).astype(str),
        "amount": pd.Series(amount).astype(str).astype(object),
        "balance": pd.Series(balance).astype(str),
    })
    frame.loc[rng.choice(N, 9, replace=False), "amount"] = None  # missing values
    frame.loc[frame.sex == "*", ["age", "code"]] = "*"
    return frame


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return numeric_frame()


@pytest.fixture(scope="module")
def client(tmp_path_factory, frame):
    root = tmp_path_factory.mktemp("descriptive")
    bundle = synthetic_bundle(root, frame, quasi_identifiers=["sex", "age", "code"])
    app = create_app(bundle, state_dir=root / "state", trust=bundle.parents[2] / "trust.json")
    with TestClient(app) as test_client:
        yield test_client


def select(frame: pd.DataFrame, filters: dict[str, list[str]]) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)
    for name, values in filters.items():
        keep &= frame[name].isin(values)
    return frame[keep]


def check_stats(row: dict, values: pd.Series) -> None:
    assert row["count"] == len(values)
    if not len(values):
        assert row["mean"] is None and row["median"] is None and row["min"] is None and row["sum"] == 0
        return
    assert row["sum"] == pytest.approx(values.sum(), rel=1e-12)
    assert row["mean"] == pytest.approx(values.mean(), rel=1e-12)
    assert row["median"] == pytest.approx(values.median(), rel=1e-12)
    assert row["min"] == values.min() and row["max"] == values.max()
    if len(values) > 1:
        assert row["sd"] == pytest.approx(values.std(ddof=1), rel=1e-9)
    else:
        assert row["sd"] is None


@pytest.mark.parametrize("attribute", ["amount", "balance", "stay"])
@pytest.mark.parametrize("group", [None, "age", "ward"])
@pytest.mark.parametrize("filters", [{}, {"sex": ["f"]}, {"ward": ["A", "B"], "age": ["30-39", "40-49"]}])
def test_descriptive_statistics_match_pandas_groupby(client, frame, attribute, group, filters) -> None:
    response = client.post("/api/descriptive", json={"attribute": attribute, "group": group, "filters": filters})
    assert response.status_code == 200, response.text
    body = response.json()
    cohort = select(frame, filters)
    values = cohort[attribute].astype(float)
    known = cohort[values.notna()]
    assert body["missing"] == int(values.isna().sum()) and body["records"] == len(cohort)
    check_stats(body["total"], values.dropna())
    if group is None:
        assert body["rows"] == []
        return
    expected = known.groupby(group)[attribute].apply(lambda s: s.astype(float).tolist())
    labels = [r["group"] for r in body["rows"]]
    assert set(labels) == set(frame[group])  # every value of the grouping attribute, empty ones too
    for row in body["rows"]:
        check_stats(row, pd.Series(expected.get(row["group"], []), dtype=float))
    if group == "ward" and filters.get("ward"):
        assert next(r for r in body["rows"] if r["group"] == NASTY)["count"] == 0  # filtered out, still listed


def test_numeric_attributes_are_released_numbers_not_quasi_identifiers(client) -> None:
    page = client.get("/descriptive").text
    options = re.findall(r'<select id="attr" name="attr">(.*?)</select>', page, re.S)[0]
    assert re.findall(r'<option value="([^"]*)"', options) == ["stay", "amount", "balance"]
    for attribute, reason in [("code", "not a numeric attribute"), ("ward", "not a numeric attribute"),
                              ("nope", "no attribute 'nope'")]:
        response = client.post("/api/descriptive", json={"attribute": attribute})
        assert response.status_code == 422 and reason in response.json()["detail"], response.text
    same = client.post("/api/descriptive", json={"attribute": "amount", "group": "amount"})
    assert same.status_code == 422


def test_numeric_histogram_matches_numpy(client, frame) -> None:
    for bins, filters in [(None, {}), (7, {"sex": ["m"]}), (1, {"ward": ["B"]})]:
        response = client.post("/api/histogram", json={"attribute": "amount", "bins": bins, "filters": filters})
        assert response.status_code == 200, response.text
        body = response.json()
        values = select(frame, filters)["amount"].dropna().astype(float).to_numpy()
        expected_bins = bins or math.ceil(math.log2(len(values)) + 1)
        counts, edges = np.histogram(values, bins=expected_bins)
        assert body["kind"] == "histogram" and body["bins"] == expected_bins
        assert [r["count"] for r in body["rows"]] == counts.tolist()
        assert [r["low"] for r in body["rows"]] == pytest.approx(edges[:-1].tolist())
        assert body["total"] == len(values) and body["missing"] == int(select(frame, filters)["amount"].isna().sum())
        assert body["rows"][-1]["label"].endswith("]") and body["rows"][0]["label"].startswith("[")


def test_bar_chart_of_a_categorical_column_matches_value_counts(client, frame) -> None:
    body = client.post("/api/histogram", json={"attribute": "age", "filters": {"ward": ["A"]}}).json()
    counts = select(frame, {"ward": ["A"]})["age"].value_counts()
    assert body["kind"] == "bar"
    assert {r["label"]: r["count"] for r in body["rows"]} == {k: int(counts.get(k, 0)) for k in
                                                               ["20-29", "30-39", "40-49", "50-59", "*"]}
    assert [r["label"] for r in body["rows"]] == ["20-29", "30-39", "40-49", "50-59", "*"]  # natural order
    assert client.post("/api/histogram", json={"attribute": "age", "bins": 4}).status_code == 422
    assert client.post("/api/histogram", json={"attribute": "amount", "bins": 0}).status_code == 422
    assert client.post("/api/histogram", json={"attribute": "amount", "bins": 101}).status_code == 422


def test_pages_render_with_escaped_labels_and_server_drawn_charts(client, frame) -> None:
    for path in ["/descriptive", "/descriptive?attr=amount&by=ward&where=sex%3Df", "/histogram",
                 "/histogram?attr=ward", "/histogram?attr=balance&bins=12&xs=1", "/regression"]:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        page = response.text
        assert re.search(r"<title>safeshare · ", page), path
        assert "<script>alert" not in page, path
        assert not re.search(r"<script(?![^>]*\bsrc=\"/static/)[^>]*>", page), path
        assert "<style" not in page and not re.search(r"\sstyle=", page) and not re.search(r"\son[a-z]+=", page)
    page = client.get("/histogram?attr=ward").text
    svg = re.search(r"<svg.*?</svg>", page, re.S).group(0)
    root = ET.fromstring(svg)
    assert len(root.findall(".//{http://www.w3.org/2000/svg}rect")) == 3
    assert NASTY in ET.tostring(root, encoding="unicode").replace("&lt;", "<").replace("&gt;", ">").replace(
        "&amp;", "&").replace("&quot;", '"')
    table = client.get("/descriptive?attr=amount&by=ward").text
    assert "&lt;script&gt;alert" in table and 'id="descriptive-table"' in table
    assert client.get("/histogram?attr=amount&bins=x").status_code == 422
    assert client.get("/descriptive?attr=code").status_code == 422


def test_descriptive_and_histogram_are_saved_as_analyses(client) -> None:
    for kind, query in [("descriptive", "attr=amount&by=age"), ("histogram", "attr=stay&bins=5")]:
        response = client.post("/analyses", data={"kind": kind, "name": kind, "params": query},
                               follow_redirects=False)
        assert response.status_code == 303, response.text
        target = client.get(response.headers["location"], follow_redirects=False).headers["location"]
        assert target.startswith(f"/{kind}?") and query.split("&")[0] in target


def test_overview_names_no_estimate_instead_of_none(tmp_path) -> None:
    """A release without sample uniques needs no population model; the overview says so instead of 'None'."""
    frame = pd.DataFrame({"sex": ["f", "m"] * 20, "age": ["20-29", "30-39", "40-49", "50-59"] * 10})
    bundle = synthetic_bundle(tmp_path, frame)
    app = create_app(bundle, state_dir=tmp_path / "state", trust=bundle.parents[2] / "trust.json")
    with TestClient(app) as client:
        page = client.get("/").text
    populations = re.search(r'<table class="data" id="risk-populations">.*?</table>', page, re.S).group(0)
    assert "None" not in populations
    assert "no estimate needed (no sample uniques)" in populations


def test_values_near_the_largest_float_give_answers_not_errors() -> None:
    """Sums and squares past the floats' range are None (JSON has no infinity), the median is still right, a range
    too wide to bin and a predictor whose squares overflow are messages (422), never a 500."""
    from enclave.app.analyses import CohortSpec
    from enclave.app.descriptive import describe, histogram
    from enclave.app.regression import Predictor, RegressionError, RegressionSpec, fit
    from enclave.app.table import CodedTable, FilterError

    big = ["1.5e308", "1.7e308", "-1.6e308", "1e308"] * 5
    table = CodedTable.from_columns({"x": big, "g": ["a", "b"] * 10, "y": [str(i % 7) for i in range(20)]})
    total = describe(table, "x", "g", CohortSpec(), [])["total"]
    assert total["max"] == 1.7e308 and total["median"] == pytest.approx(1.25e308) and total["count"] == 20
    assert total["sum"] is None or math.isfinite(total["sum"])
    with pytest.raises(FilterError, match="too wide a range"):
        histogram(table, "x", CohortSpec(), [])
    with pytest.raises(RegressionError, match="too large"):
        fit(table, RegressionSpec("ols", "y", [Predictor("x")]), CohortSpec(), [])
