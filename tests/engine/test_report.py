"""report.html: risk profile before/after, PU/SU per population, value distributions, escaping, self-containment.

Every number in the report is checked against an independent computation: class sizes by pandas groupby over the
quasi-identifiers of the input and of the released data, value counts by pandas.
"""
from __future__ import annotations

import json
import re
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.analysis import prosecutor_profile
from engine.deid import build_manifest, deidentify, write_release
from engine.manifest import parse_manifest
from engine.report import TOP_VALUES, render_report
from engine.report_data import report_data
from engine.risk import population_uniqueness
from engine.svgcharts import nice_ceiling, percent, step_chart
from safeshare.cli import main
from tests.engine.site_files import tiny_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source", "track", "embed"}


# --- a small tree parser: fails on unbalanced tags ------------------------------------------------------------------
class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: "Node | None"):
        self.tag, self.attrs, self.parent, self.children, self.parts = tag, attrs, parent, [], []

    @property
    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text for p in self.parts)

    def iter(self, tag: str | None = None, **attrs: str):
        for child in self.children:
            if (tag is None or child.tag == tag) and all(child.attrs.get(k.replace("_", "-")) == v
                                                         for k, v in attrs.items()):
                yield child
            yield from child.iter(tag, **attrs)

    def find(self, tag: str | None = None, **attrs: str) -> "Node":
        found = list(self.iter(tag, **attrs))
        assert len(found) == 1, f"expected one <{tag} {attrs}>, found {len(found)}"
        return found[0]


class TreeParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        self.current.parts.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        self.current.parts.append(node)

    def handle_endtag(self, tag):
        assert tag not in VOID, f"end tag for void element <{tag}>"
        assert self.current.tag == tag, f"</{tag}> closes <{self.current.tag}>"
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.parts.append(data)


def parse(html_text: str) -> Node:
    parser = TreeParser()
    parser.feed(html_text)
    parser.close()
    assert parser.current is parser.root, f"unclosed <{parser.current.tag}>"
    return parser.root


# --- independent computations ----------------------------------------------------------------------------------------
def read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, sep=";", dtype=str, keep_default_na=False, na_filter=False)


def groupby_sizes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    return frame.groupby(columns, sort=False).size().to_numpy()


def suppressed_mask(released: pd.DataFrame, qis: list[str]) -> np.ndarray:
    return (released[qis] == "*").all(axis=1).to_numpy()


# --- the checks, shared by the synthetic and the ADULT release -------------------------------------------------------
def check_self_contained(html_text: str) -> None:
    lowered = html_text.lower()
    for forbidden in ("http://", "https://", "<script", "javascript:", "url(", "@import", " src=", " href=",
                      "<link", "<iframe", "<object", "<img"):
        assert forbidden not in lowered, forbidden
    assert not re.search(r"\son[a-z]+\s*=", lowered), "event handler attribute"
    assert html_text.count("<svg") == html_text.count("</svg>") >= 2


def check_risk_profile(root: Node, input_frame: pd.DataFrame, released: pd.DataFrame, qis: list[str],
                       suppressed: np.ndarray | None = None) -> None:
    suppressed = suppressed_mask(released, qis) if suppressed is None else suppressed
    expected = {"before": prosecutor_profile(groupby_sizes(input_frame, qis)),
                "after": prosecutor_profile(groupby_sizes(released[~suppressed], qis))}
    svg = root.find("svg", id="risk-profile")
    legend = [t.text for t in svg.iter("text") if t.attrs.get("class") == "legend"]
    assert legend[:2] == ["before", "after"]
    for series, profile in expected.items():
        bars = list(svg.iter("rect", data_series=series))
        assert len(bars) == len(profile["intervals"]) == 22
        for bar, interval in zip(bars, profile["intervals"]):
            assert float(bar.attrs["data-value"]) == pytest.approx(interval["records"], abs=1e-12)
            assert bar.attrs["data-category"] == f"{interval['upper'] * 100:.4g}%"
            assert percent(interval["records"], 2) in bar.text  # the tooltip
            if interval["records"] == 0:
                assert float(bar.attrs["height"]) == 0
        points = list(svg.iter("circle", data_series=f"{series} (cumulative)"))
        assert [float(p.attrs["data-value"]) for p in points] == pytest.approx(
            [i["cumulative"] for i in profile["intervals"]], abs=1e-12)
    # Bar heights are proportional to the values (same scale for before and after).
    bars = [b for b in svg.iter("rect") if b.attrs.get("class") == "bar"]
    ratios = [float(b.attrs["height"]) / float(b.attrs["data-value"]) for b in bars
              if float(b.attrs["data-value"]) > 0.05]
    assert ratios and max(ratios) == pytest.approx(min(ratios), rel=0.01)
    # The numbers table below the chart.
    rows = list(root.find("table", **{"class": "risk-levels"}).iter("tr"))[1:]
    shown = [i for i, (b, a) in enumerate(zip(expected["before"]["intervals"], expected["after"]["intervals"]))
             if b["records"] > 0 or a["records"] > 0]
    assert len(rows) == len(shown)
    for row, i in zip(rows, shown):
        cells = [c.text for c in row.iter("td")]
        b, a = expected["before"]["intervals"][i], expected["after"]["intervals"][i]
        assert cells[1:] == [percent(b["records"], 2), percent(b["cumulative"], 2), percent(a["records"], 2),
                             percent(a["cumulative"], 2)]


def check_populations(root: Node, manifest: dict, input_frame: pd.DataFrame, qis: list[str]) -> int:
    """Returns the number of populations whose before-estimate was solved and compared."""
    table = root.find("table", **{"class": "populations"})
    rows = [r for r in table.iter("tr") if "data-population" in r.attrs]
    populations = manifest["risk"]["populations"]
    assert [r.attrs["data-population"] for r in rows] == [p["population"] for p in populations]
    before_sizes = groupby_sizes(input_frame, qis)
    compared = 0
    for row, entry in zip(rows, populations):
        cells = {c.attrs["data-field"]: c for c in row.iter("td") if "data-field" in c.attrs}
        assert float(cells["size"].attrs["data-value"]) == entry["size"]
        assert cells["after-model"].text == (entry["model"] or "none needed")
        for field in ("population_uniques", "population_uniqueness", "pu_su_ratio"):
            assert float(cells[f"after-{field}"].attrs["data-value"]) == entry[field]
        assert float(cells["after-pu_su_ratio"].text) == pytest.approx(entry["pu_su_ratio"], abs=5e-5)
        assert float(cells["after-population_uniqueness"].text.rstrip("%")) / 100 == pytest.approx(
            entry["population_uniqueness"], abs=5e-7)
        # Before: the same estimator(s) on the input's class sizes (from pandas); with several, the strictest.
        recorded = manifest["risk"]["estimator"]
        estimates = [population_uniqueness(before_sizes, entry["size"], estimator=name)
                     for name in ([recorded] if isinstance(recorded, str) else recorded)]
        unsolved = [e for e in estimates if not e.solved]
        estimate = unsolved[0] if unsolved else max(estimates, key=lambda e: e.population_uniqueness)
        if not estimate.solved:
            assert cells["before-population_uniqueness"].text == "no solution"
            assert "data-value" not in cells["before-population_uniqueness"].attrs
        else:
            compared += 1
            assert cells["before-model"].text == estimate.model_used
            su = (before_sizes == 1).sum() / before_sizes.sum()
            assert float(cells["before-population_uniqueness"].attrs["data-value"]) == pytest.approx(
                estimate.population_uniqueness, rel=1e-9)
            assert float(cells["before-pu_su_ratio"].attrs["data-value"]) == pytest.approx(
                estimate.population_uniqueness / su, rel=1e-9)
    return compared


def _dist_rows(table: Node) -> tuple[dict[str, int], list[int], int, int]:
    values, order, other, suppressed = {}, [], 0, 0
    for row in table.iter("tr"):
        if "data-suppressed" in row.attrs:
            suppressed = int(row.attrs["data-suppressed"])
        elif "data-other" in row.attrs:
            other = int(row.attrs["data-other"])
        elif "data-records" in row.attrs:
            value = row.attrs["data-value"]
            assert next(row.iter("td")).text == value  # the visible cell shows the same (unescaped) value
            values[value] = int(row.attrs["data-records"])
            order.append(int(row.attrs["data-records"]))
    return values, order, other, suppressed


def check_top(table: Node, counts: pd.Series, records: int, suppressed: int = 0) -> None:
    values, order, other, shown_suppressed = _dist_rows(table)
    assert order == sorted(order, reverse=True)
    assert len(values) == min(TOP_VALUES, counts.size)
    for value, count in values.items():
        assert counts[value] == count, value
    # A top list: the counts shown are the largest counts (ties may be broken either way).
    assert sorted(values.values(), reverse=True) == sorted(counts.to_numpy(), reverse=True)[:TOP_VALUES]
    assert shown_suppressed == suppressed
    assert other == records - sum(values.values()) - suppressed


def check_distributions(root: Node, input_frame: pd.DataFrame, released: pd.DataFrame, qis: list[str],
                        others: list[str] = (), suppressed: np.ndarray | None = None) -> None:
    suppressed = suppressed_mask(released, qis) if suppressed is None else suppressed
    n = len(input_frame)
    for name in qis:
        section = root.find("section", data_attribute=name)
        tin = section.find("table", data_side="input")
        tout = section.find("table", data_side="output")
        assert int(tin.attrs["data-distinct"]) == input_frame[name].nunique()
        assert int(tout.attrs["data-distinct"]) == released[name].nunique()
        check_top(tin, input_frame[name].value_counts(), n)
        check_top(tout, released.loc[~suppressed, name].value_counts(), n, int(suppressed.sum()))
    for name in others:
        table = root.find("section", data_attribute=name).find("table", data_side="both")
        assert input_frame[name].value_counts().equals(released[name].value_counts())
        check_top(table, released[name].value_counts(), n)
        assert int(table.attrs["data-distinct"]) == released[name].nunique()


# --- synthetic release ---------------------------------------------------------------------------------------------
WEIRD = "we<ird>&name"
SCRIPT = "<script>alert(1)</script>"

POLICY = f"""\
    dataset: tiny-report
    input: {{path: data.csv}}
    attributes:
      "{WEIRD}": {{type: quasi_identifying, hierarchy: {{file: zone.csv}}}}
      age: {{type: quasi_identifying, hierarchy: {{builder: intervals, widths: [10, 20]}}}}
      sex: {{type: quasi_identifying, hierarchy: {{file: sex.csv}}}}
      name: {{type: identifying}}
      diagnosis: {{type: sensitive}}
    privacy:
      - {{model: k_anonymity, k: 3}}
    suppression_limit: 0.2
    gate: {{populations: [5000, 20000], estimator: zayatz}}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny")
    zones = [SCRIPT, "a&b", "n1", "n2", "n3"]
    (tmp / "zone.csv").write_text(f"{SCRIPT};x<y;*\na&b;x<y;*\nn1;n;*\nn2;n;*\nn3;n;*\n")
    (tmp / "sex.csv").write_text("F;*\nM;*\n")
    rng = np.random.default_rng(7)
    n = 240
    frame = pd.DataFrame({
        WEIRD: rng.choice(zones, n, p=[0.05, 0.15, 0.4, 0.3, 0.1]),
        "age": rng.integers(18, 90, n).astype(str),
        "sex": rng.choice(["F", "M"], n),
        "name": [f"SECRET-NAME-{i:04d}" for i in range(n)],
        "diagnosis": rng.choice(["flu", "<b>bold</b>", "cold & cough", "none"], n),
    })
    frame.to_csv(tmp / "data.csv", sep=";", index=False)
    (tmp / "policy.yaml").write_text(textwrap.dedent(POLICY))
    result = deidentify(tmp / "policy.yaml")
    manifest = write_release(result, tmp / "out").document()
    html_text = (tmp / "out" / "report.html").read_text()
    return {"result": result, "manifest": manifest, "html": html_text, "input": read_csv(tmp / "data.csv"),
            "data": report_data(result),
            "released": read_csv(tmp / "out" / "data.csv"), "qis": [WEIRD, "age", "sex"]}


def test_synthetic_release_has_generalization_and_suppression(tiny):
    # The fixture is only useful if the report has something to show: generalized labels and suppressed records.
    assert tiny["manifest"]["suppressed_records"] > 0
    assert any(level > 0 for level in tiny["manifest"]["transformation"].values())
    assert suppressed_mask(tiny["released"], tiny["qis"]).sum() == tiny["manifest"]["suppressed_records"]


def test_synthetic_report_is_self_contained_and_balanced(tiny):
    check_self_contained(tiny["html"])
    root = parse(tiny["html"])
    # class sizes, risk profile, per-record risk histogram, search progress; and four attribute-disclosure plots for
    # the sensitive diagnosis
    assert len(list(root.iter("svg"))) == 4 + 4


def test_synthetic_report_escapes_user_values(tiny):
    html_text = tiny["html"]
    assert SCRIPT not in html_text and "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text
    assert WEIRD not in html_text and "we&lt;ird&gt;&amp;name" in html_text
    assert "<b>bold</b>" not in html_text and "&lt;b&gt;bold&lt;/b&gt;" in html_text
    assert "a&amp;b" in html_text and "a&b<" not in html_text
    # Identifying attributes are not released, and nothing of them appears in the report.
    assert "SECRET-NAME" not in html_text
    root = parse(html_text)
    assert root.find("section", data_attribute=WEIRD).find("h3").text.startswith(WEIRD)
    assert not list(root.iter("section", data_attribute="name"))


def test_synthetic_risk_profile_matches_pandas(tiny):
    check_risk_profile(parse(tiny["html"]), tiny["input"], tiny["released"], tiny["qis"])


def test_synthetic_populations_table(tiny):
    root = parse(tiny["html"])
    # The policy's populations come after those the (built-in) site gate requires of every release.
    assert check_populations(root, tiny["manifest"], tiny["input"], tiny["qis"]) == 5
    assert [p["population"] for p in tiny["manifest"]["risk"]["populations"]] == [
        "USA", "California", "Los Angeles", "5000.0", "20000.0"]


def test_synthetic_distributions_match_value_counts(tiny):
    check_distributions(parse(tiny["html"]), tiny["input"], tiny["released"], tiny["qis"], others=["diagnosis"])


def test_gate_verdict_and_reasons_near_the_top(tiny):
    manifest = json.loads(json.dumps(tiny["manifest"]))
    manifest["gate"] = {**manifest["gate"], "passed": False,
                        "reasons": ["<Springfield>: |PU|/|SU| = 0.5000 above the allowed 0.25"]}
    html_text = render_report(parse_manifest(manifest), tiny["data"])
    root = parse(html_text)
    gate = root.find("section", id="gate")
    assert gate.attrs["data-passed"] == "false" and "REFUSED" in gate.find("h2").text
    assert [li.text for li in gate.find("ul").iter("li")] == manifest["gate"]["reasons"]
    assert "&lt;Springfield&gt;" in html_text
    assert html_text.index('id="gate"') < html_text.index("<h2>Summary</h2>") < html_text.index('id="risk"')
    passed = parse(tiny["html"]).find("section", id="gate")
    assert passed.attrs["data-passed"] == "true"


def test_the_report_renders_from_the_manifest_and_the_run_data_alone(tiny, monkeypatch):
    """The gate's estimates on the input are computed once, in the run (engine.report_data): rendering needs neither
    the run nor the input table, and runs no risk model; it gives the page written with the release."""
    import engine.gate
    import engine.risk

    data = tiny["data"]
    populations = [p["population"] for p in tiny["manifest"]["risk"]["populations"]]
    assert [p.population for p in data.input_gate.risk.populations] == populations

    def recomputed(*args, **kwargs):
        raise AssertionError("the report re-ran a risk estimate")

    monkeypatch.setattr(engine.gate, "evaluate_gate", recomputed)
    monkeypatch.setattr(engine.risk, "population_uniqueness", recomputed)
    html_text = render_report(parse_manifest(json.loads(json.dumps(tiny["manifest"]))), data)

    def generated(text: str) -> str:
        return re.sub(r"Generated [0-9: -]+ UTC", "Generated", text)

    written = tiny["html"]
    assert generated(html_text) == generated(written)
    cells = parse(html_text).find("table", **{"class": "populations"}).iter("td", data_field="before-model")
    assert [cell.text for cell in cells] and "–" not in [cell.text for cell in cells]


def test_report_without_suppression_or_sample_uniques(tmp_path):
    """Everything generalized to one class: after-profile entirely in the lowest risk level, PU = 0, no '*' row."""
    (tmp_path / "h.csv").write_text("a1;*\na2;*\n")
    (tmp_path / "data.csv").write_text("A;B\n" + "a1;x\na2;y\n" * 5)
    (tmp_path / "policy.yaml").write_text(textwrap.dedent(tiny_policy(k=6)))
    result = deidentify(tmp_path / "policy.yaml")
    manifest = build_manifest(result, "0" * 64, {})
    html_text = render_report(manifest, report_data(result))
    check_self_contained(html_text)
    root = parse(html_text)
    released, frame = result.released.astype(str), read_csv(tmp_path / "data.csv")
    # Every record is "*" but none is suppressed: the one released class has all 10 records.
    assert (released["A"] == "*").all() and manifest.suppressed_records == 0
    none = np.zeros(len(frame), dtype=bool)
    check_risk_profile(root, frame, released, ["A"], none)
    check_distributions(root, frame, released, ["A"], others=["B"], suppressed=none)
    assert not list(root.iter("tr", **{"class": "suppressed"}))
    for row in root.find("table", **{"class": "populations"}).iter("td", data_field="after-pu_su_ratio"):
        assert float(row.attrs["data-value"]) == 0.0


def test_search_section_draws_the_manifest_quality_over_time(tiny):
    """Every improvement the search recorded is a point of the curve, with its exact second and quality."""
    manifest = tiny["manifest"]
    trace = manifest["quality_over_time"]
    assert trace and trace[-1][1] == pytest.approx(manifest["quality"][manifest["optimized_for"]])
    points = list(parse(tiny["html"]).iter("circle", **{"class": "improvement"}))
    assert [(float(c.attrs["data-x"]), float(c.attrs["data-value"])) for c in points] == \
        [(float(s), float(q)) for s, q in trace]
    assert "Best quality found during the search" in tiny["html"] and "optimum proven" in tiny["html"]


def test_step_chart_holds_each_value_until_the_next_and_the_end():
    svg = step_chart([(0.5, 0.2), (2.0, 0.6)], "t", "seconds", "quality", end=4.0)
    path = parse(svg).find("path").attrs["d"]
    # Start at (0.5, lowest), flat to x=2 then up to the highest value, flat to the end (x axis 0..4).
    moves = path.replace("M", " M").replace("H", " H").replace("V", " V").split()
    assert [m[0] for m in moves] == ["M", "H", "V", "H"]
    x0, x_end = float(moves[0][1:].split(",")[0]), float(moves[3][1:])
    assert x_end > float(moves[1][1:]) > x0
    assert float(moves[2][1:]) < float(moves[0].split(",")[1])   # higher quality is drawn higher (smaller y)
    assert step_chart([], "t", "x", "y").startswith("<svg")


def test_nice_ceiling():
    assert [nice_ceiling(v) for v in (0.514, 0.25, 0.26, 0.9, 1.0, 7.0, 0.013)] == pytest.approx(
        [0.6, 0.25, 0.3, 1.0, 1.0, 8.0, 0.015])


# --- one real run: ADULT, population uniqueness <= 1 % ---------------------------------------------------------------
@pytest.fixture(scope="module")
def adult(tmp_path_factory, demo_dir):
    out = tmp_path_factory.mktemp("adult-report") / "out"
    assert main(["deid", str(EXAMPLES / "adult-pu1.yaml"), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    qis = list(manifest["transformation"])
    return {"html": (out / "report.html").read_text(), "manifest": manifest, "qis": qis,
            "input": read_csv(demo_dir / "adult" / "adult.csv"), "released": read_csv(out / "data.csv")}


def test_adult_report_risk_profile(adult):
    assert suppressed_mask(adult["released"], adult["qis"]).sum() == adult["manifest"]["suppressed_records"] > 0
    check_self_contained(adult["html"])
    check_risk_profile(parse(adult["html"]), adult["input"], adult["released"], adult["qis"])


def test_adult_report_populations(adult):
    populations = adult["manifest"]["risk"]["populations"]
    assert [p["population"] for p in populations] == ["USA", "California", "Los Angeles"]
    assert all(p["pu_su_ratio"] > 0 for p in populations)
    assert check_populations(parse(adult["html"]), adult["manifest"], adult["input"], adult["qis"]) == 3


def test_adult_report_distributions(adult):
    check_distributions(parse(adult["html"]), adult["input"], adult["released"], adult["qis"])


def test_adult_report_keeps_existing_sections(adult):
    root = parse(adult["html"])
    headings = [h.text for h in root.iter("h2")]
    for title in ("Summary", "Transformation", "Quality (1 = original data)", "Quality per attribute",
                  "Equivalence classes", "Re-identification risk before and after",
                  "Population uniqueness per population", "Value distributions per attribute"):
        assert title in headings
    assert headings[0] == "Release gate: passed"
