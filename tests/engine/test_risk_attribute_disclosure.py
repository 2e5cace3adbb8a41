"""Attribute disclosure in `safeshare risk` (text, --json, --html) and in a release's report.html, on a table whose
answers are worked out by hand below, and on ADULT for consistency.

The table (quasi-identifier A; S sensitive with a two-level hierarchy and named by an l-diversity model; T declared
sensitive but named by no model):

    class a1: S = a, a, b       T = x, y, x
    class a2: S = c             T = y
    class a3: S = a, b, c, d    T = x, x, y, y

Table-wide S: a 3/8, b 2/8, c 2/8, d 1/8; T: x 1/2, y 1/2.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from fractions import Fraction as F
from html.parser import HTMLParser
from pathlib import Path

import pytest

from safeshare.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "policies" / "examples"

DATA = """\
A;S;T
a1;a;x
a1;a;y
a1;b;x
a2;c;y
a3;a;x
a3;b;x
a3;c;y
a3;d;y
"""
POLICY = """\
dataset: tiny-sensitive
input: {path: data.csv}
attributes:
  A: {type: quasi_identifying, hierarchy: {file: h_a.csv}}
  S: {type: sensitive, hierarchy: {file: h_s.csv}}
  T: {type: sensitive}
privacy:
  - {model: l_diversity, variant: distinct, attribute: S, l: 2}
suppression_limit: 0.5
"""
PLOTS = ("distinct", "distance", "l-diversity", "t-closeness")


# --- hand computations (no engine code) -----------------------------------------------------------------------------
def entropy_bits(counts: list[int]) -> float:
    total = sum(counts)
    return -sum(c / total * math.log2(c / total) for c in counts)


def equal_emd(p: dict[str, F], q: dict[str, F]) -> F:
    """EMD with the equal ground distance: half the L1 distance."""
    return sum((abs(p.get(v, F(0)) - q[v]) for v in q), F(0)) / 2


Q_S = {"a": F(3, 8), "b": F(2, 8), "c": F(2, 8), "d": F(1, 8)}
Q_T = {"x": F(1, 2), "y": F(1, 2)}
CLASS_S = [{"a": F(2, 3), "b": F(1, 3)}, {"c": F(1)}, {v: F(1, 4) for v in "abcd"}]
CLASS_T = [{"x": F(2, 3), "y": F(1, 3)}, {"y": F(1)}, {"x": F(1, 2), "y": F(1, 2)}]
SIZES = [3, 1, 4]

# Hierarchical EMD (Li et al. 2007), tree {a, b} -> ab, {c, d} -> cd -> *, height 2; extra = p - q per leaf.
#  a1: leaves +7/24 +2/24 -6/24 -3/24; ab and cd are one-signed (cost 0), the root moves 9/24 at cost 2/2: 3/8.
#  a2: leaves -3/8 -2/8 +6/8 -1/8; cd moves 1/8 at cost 1/2, the root 5/8 at cost 1: 11/16.
#  a3: leaves -1/8 0 0 +1/8; the root moves 1/8 at cost 1: 1/8.
HIERARCHICAL_S = [F(3, 8), F(11, 16), F(1, 8)]


def test_hand_computations_are_what_the_docstring_says():
    assert [float(equal_emd(p, Q_S)) for p in CLASS_S] == [0.375, 0.75, 0.125]
    assert [float(equal_emd(p, Q_T)) for p in CLASS_T] == [pytest.approx(1 / 6), 0.5, 0.0]
    assert entropy_bits([2, 1]) == pytest.approx(0.9183, abs=1e-4)


# --- fixtures -------------------------------------------------------------------------------------------------------
def write_table(folder: Path, policy: str = POLICY) -> Path:
    (folder / "data.csv").write_text(DATA)
    (folder / "h_a.csv").write_text("a1;*\na2;*\na3;*\n")
    (folder / "h_s.csv").write_text("a;ab;*\nb;ab;*\nc;cd;*\nd;cd;*\n")
    path = folder / "policy.yaml"
    path.write_text(textwrap.dedent(policy))
    return path


@pytest.fixture
def policy(tmp_path) -> Path:
    return write_table(tmp_path)


@pytest.fixture
def no_site(tmp_path, monkeypatch):
    """An empty site folder: the built-in gate floor, never the machine's own site."""
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))


def risk_json(policy: Path, capsys) -> dict:
    assert main(["risk", str(policy), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


class Elements(HTMLParser):
    """Every start tag with its attributes, in document order."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.items: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.items.append((tag, dict(attrs)))

    def find(self, tag: str, **attrs: str) -> list[dict]:
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [a for t, a in self.items if t == tag and all(a.get(k) == v for k, v in wanted.items())]


# --- safeshare risk --json ------------------------------------------------------------------------------------------
def test_json_keeps_every_field_and_adds_attribute_disclosure(policy, capsys):
    report = risk_json(policy, capsys)
    assert list(report) == ["dataset", "records", "quasi_identifiers", "equivalence_classes", "sample_uniques",
                            "sample_uniqueness", "class_size_histogram", "prosecutor_risk", "population_estimates",
                            "attribute_disclosure", "individual_risk"]
    assert report["records"] == 8 and report["equivalence_classes"] == 3 and report["sample_uniques"] == 1
    # Every declared sensitive attribute, T included although no model names it.
    assert [e["attribute"] for e in report["attribute_disclosure"]] == ["S", "T"]


def test_json_per_class_values_are_the_hand_computed_ones(policy, capsys):
    s, t = risk_json(policy, capsys)["attribute_disclosure"]
    assert (s["values"], s["classes"], s["records"], s["suppressed_records"]) == (4, 3, 8, 0)
    assert (t["values"], t["classes"], t["records"]) == (2, 3, 8)
    assert s["per_class"]["size"] == t["per_class"]["size"] == SIZES
    assert s["per_class"]["distinct"] == [2, 1, 4]
    assert t["per_class"]["distinct"] == [2, 1, 2]
    assert s["per_class"]["entropy_bits"] == pytest.approx([entropy_bits([2, 1]), 0.0, 2.0], abs=1e-12)
    assert s["per_class"]["entropy_bits"][0] == pytest.approx(0.9183, abs=1e-4)
    assert t["per_class"]["entropy_bits"] == pytest.approx([entropy_bits([2, 1]), 0.0, 1.0], abs=1e-12)
    assert s["per_class"]["distance"] == pytest.approx([float(equal_emd(p, Q_S)) for p in CLASS_S], abs=1e-12)
    assert t["per_class"]["distance"] == pytest.approx([float(equal_emd(p, Q_T)) for p in CLASS_T], abs=1e-12)
    assert s["has_hierarchy"] and not t["has_hierarchy"]
    assert s["per_class"]["hierarchical_distance"] == pytest.approx([float(d) for d in HIERARCHICAL_S], abs=1e-12)
    assert "hierarchical_distance" not in t["per_class"] and "hierarchical_t_closeness" not in t


def test_json_violation_shares(policy, capsys):
    s, t = risk_json(policy, capsys)["attribute_disclosure"]
    # S: distinct 2, 1, 4 -> fewer than 2: a2 (1 record); fewer than 3: a1 + a2 (4); fewer than 5: all.
    assert s["l_diversity"] == {"2": 1 / 8, "3": 4 / 8, "5": 1.0}
    # Entropy 0.918, 0, 2 bits against log2 l = 1, 1.585, 2.32.
    assert s["entropy_l_diversity"] == {"2": 4 / 8, "3": 4 / 8, "5": 1.0}
    # Distances 0.375, 0.75, 0.125: above 0.1 all; above 0.2 a1 + a2; above 0.5 a2.
    assert s["t_closeness"] == {"0.1": 1.0, "0.2": 4 / 8, "0.5": 1 / 8}
    # Hierarchical 0.375, 0.6875, 0.125.
    assert s["hierarchical_t_closeness"] == {"0.1": 1.0, "0.2": 4 / 8, "0.5": 1 / 8}
    # T: distinct 2, 1, 2; entropy 0.918, 0, 1 (exactly log2 2: passes l = 2); distances 1/6, 1/2 (not above
    # 0.5: passes t = 0.5), 0.
    assert t["l_diversity"] == {"2": 1 / 8, "3": 1.0, "5": 1.0}
    assert t["entropy_l_diversity"] == {"2": 4 / 8, "3": 1.0, "5": 1.0}
    assert t["t_closeness"] == {"0.1": 4 / 8, "0.2": 1 / 8, "0.5": 0.0}


def test_json_histograms(policy, capsys):
    s, t = risk_json(policy, capsys)["attribute_disclosure"]
    assert s["distinct_histogram"] == [{"distinct": 1, "classes": 1, "records": 1},
                                       {"distinct": 2, "classes": 1, "records": 3},
                                       {"distinct": 4, "classes": 1, "records": 4}]
    assert t["distinct_histogram"] == [{"distinct": 1, "classes": 1, "records": 1},
                                       {"distinct": 2, "classes": 2, "records": 7}]
    for entry in (s, t):
        rows = entry["distance_histogram"]
        assert [(r["lower"], r["upper"]) for r in rows] == [(round(i / 10, 1), round((i + 1) / 10, 1))
                                                            for i in range(10)]
        assert sum(r["records"] for r in rows) == 8 and sum(r["classes"] for r in rows) == 3

    def records(rows):
        return {r["upper"]: r["records"] for r in rows if r["records"]}

    assert records(s["distance_histogram"]) == {0.2: 4, 0.4: 3, 0.8: 1}             # 0.125, 0.375, 0.75
    assert records(s["hierarchical_distance_histogram"]) == {0.2: 4, 0.4: 3, 0.7: 1}  # 0.125, 0.375, 0.6875
    assert records(t["distance_histogram"]) == {0.1: 4, 0.2: 3, 0.5: 1}             # 0, 1/6, 0.5 (closed above)
    # The records above an edge are those failing t at that edge.
    for entry in (s, t):
        for t_value, share in entry["t_closeness"].items():
            above = sum(r["records"] for r in entry["distance_histogram"] if r["lower"] >= float(t_value))
            assert above / entry["records"] == share


def test_json_from_the_installed_command(policy):
    """The console script, in its own process, prints the same JSON as main()."""
    script = Path(sys.executable).parent / "safeshare"
    command = [str(script)] if script.exists() else [sys.executable, "-c",
                                                      "import sys; from safeshare.cli import main; sys.exit(main())"]
    done = subprocess.run(command + ["risk", str(policy), "--json"], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    s, t = json.loads(done.stdout)["attribute_disclosure"]
    assert s["l_diversity"] == {"2": 1 / 8, "3": 4 / 8, "5": 1.0}
    assert t["t_closeness"] == {"0.1": 4 / 8, "0.2": 1 / 8, "0.5": 0.0}


def test_no_sensitive_attribute_gives_an_empty_list_and_no_text_section(tmp_path, capsys):
    plain = POLICY.replace("{type: sensitive, hierarchy: {file: h_s.csv}}", "{type: insensitive}") \
                  .replace("T: {type: sensitive}", "T: {type: insensitive}") \
                  .replace("{model: l_diversity, variant: distinct, attribute: S, l: 2}", "{model: k_anonymity, k: 1}")
    policy = write_table(tmp_path, plain)
    assert risk_json(policy, capsys)["attribute_disclosure"] == []
    assert main(["risk", str(policy)]) == 0
    assert "Attribute disclosure" not in capsys.readouterr().out


# --- text -----------------------------------------------------------------------------------------------------------
def test_text_output_has_a_section_per_sensitive_attribute(policy, capsys):
    assert main(["risk", str(policy)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Attribute disclosure"):]
    assert "S: 4 distinct values in the table, 3 classes, 8 records" in section
    assert "T: 2 distinct values in the table, 3 classes, 8 records" in section
    assert "2: 12.50%, 3: 50.00%, 5: 100.00%" in section
    assert "0.1: 50.00%, 0.2: 12.50%, 0.5: 0.00%" in section


# --- safeshare risk --html ------------------------------------------------------------------------------------------
def test_html_has_one_svg_per_plot_with_checkable_values(policy, tmp_path, capsys):
    page = tmp_path / "out" / "risk.html"
    assert main(["risk", str(policy), "--json", "--html", str(page)]) == 0
    json.loads(capsys.readouterr().out)                       # --json output stays pure JSON
    assert not [p for p in page.parent.iterdir() if p.name != "risk.html"]   # no temporary file left
    text = page.read_text()
    assert "<script" not in text.lower() and "http" not in text.replace("http-equiv", "")
    html = Elements(text)
    for attribute in ("S", "T"):
        for plot in PLOTS:
            assert len(html.find("svg", data_attribute=attribute, data_plot=plot)) == 1, (attribute, plot)
    assert len(html.find("svg", id="risk-profile")) == 1      # the existing risk figures are there too

    def bars(attribute: str, plot: str) -> list[dict]:
        svg_id = html.find("svg", data_attribute=attribute, data_plot=plot)[0]["id"]
        start = next(i for i, (t, a) in enumerate(html.items) if t == "svg" and a.get("id") == svg_id)
        end = next((i for i, (t, _) in enumerate(html.items[start + 1:], start + 1) if t == "svg"), len(html.items))
        return [a for t, a in html.items[start:end] if t == "rect" and a.get("class") == "bar"]

    def values(attribute: str, plot: str, series: str) -> dict[str, float]:
        return {b["data-category"]: float(b["data-value"]) for b in bars(attribute, plot)
                if b["data-series"] == series}

    assert values("S", "distinct", "records") == {"1": 1 / 8, "2": 3 / 8, "4": 4 / 8}
    assert values("T", "distinct", "records") == {"1": 1 / 8, "2": 7 / 8}
    assert values("S", "l-diversity", "distinct") == {"l=2": 1 / 8, "l=3": 4 / 8, "l=5": 1.0}
    assert values("S", "l-diversity", "entropy (Shannon)") == {"l=2": 4 / 8, "l=3": 4 / 8, "l=5": 1.0}
    assert values("S", "t-closeness", "equal distance") == {"t=0.1": 1.0, "t=0.2": 4 / 8, "t=0.5": 1 / 8}
    assert values("S", "t-closeness", "hierarchical distance") == {"t=0.1": 1.0, "t=0.2": 4 / 8, "t=0.5": 1 / 8}
    assert values("T", "t-closeness", "equal distance") == {"t=0.1": 4 / 8, "t=0.2": 1 / 8, "t=0.5": 0.0}
    assert {s["data-series"] for s in bars("T", "t-closeness")} == {"equal distance"}   # no hierarchy on T
    distance = values("S", "distance", "equal distance")
    assert len(distance) == 10 and sum(distance.values()) == pytest.approx(1.0)
    assert {k: v for k, v in distance.items() if v} == {"]0.1, 0.2]": 4 / 8, "]0.3, 0.4]": 3 / 8, "]0.7, 0.8]": 1 / 8}
    assert {k: v for k, v in values("S", "distance", "hierarchical distance").items() if v} == {
        "]0.1, 0.2]": 4 / 8, "]0.3, 0.4]": 3 / 8, "]0.6, 0.7]": 1 / 8}


def test_html_to_a_folder_is_bad_input(policy, tmp_path, capsys):
    assert main(["risk", str(policy), "--html", str(tmp_path)]) == 2
    assert "--html" in capsys.readouterr().err


# --- the release report ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("search, extra", [
    ("{recoding: global}", []), ("{recoding: local}", []),
    ("{recoding: global}", ["--partitions", "2", "--scheduler", "none"]),
    ("{parallel: {partitions: 2, transformation: local}}", ["--partitions", "2", "--scheduler", "none"])],
    ids=["global", "local", "p4-global", "p4-local"])
def test_release_report_shows_the_released_classes(tmp_path, no_site, capsys, search, extra):
    """P4 too: on this table its two partitions release what a single machine does, so the numbers are the same."""
    policy = write_table(tmp_path, POLICY + f"search: {search}\n")
    out = tmp_path / "release"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--json", *extra]) == 0, capsys.readouterr().err
    manifest = json.loads(capsys.readouterr().out)
    # a2 (one value of S: fails distinct 2-diversity) is suppressed; a1 and a3 are released as they are.
    assert manifest["transformation"] == {"A": 0} and manifest["suppressed_records"] == 1
    text = (out / "report.html").read_text()
    assert "<h2>Attribute disclosure</h2>" in text
    html = Elements(text)
    assert len(html.find("section", id="attribute-disclosure")) == 1
    for attribute in ("S", "T"):
        section = html.find("section", **{"class": "disclosure", "data_sensitive": attribute})
        assert len(section) == 1 and section[0]["data-records"] == "7" and section[0]["data-classes"] == "2"
        for plot in PLOTS:
            assert len(html.find("svg", data_attribute=attribute, data_plot=plot)) == 1, (attribute, plot)

    def shares(attribute: str, model: str, key: str) -> dict[str, float]:
        """The numbers table of the attribute's section: its first three cells of `model`."""
        start = next(i for i, (t, a) in enumerate(html.items)
                     if t == "section" and a.get("data-sensitive") == attribute)
        cells = [a for t, a in html.items[start:] if t == "td" and a.get("data-model") == model][:3]
        return {a[f"data-{key}"]: float(a["data-value"]) for a in cells}

    # Released: a1 (S a, a, b; T x, y, x) and a3 (S a, b, c, d; T x, x, y, y): 7 records; distances are still to
    # the whole input's distribution (S 0.375 and 0.125; T 1/6 and 0).
    assert shares("S", "distinct l-diversity", "l") == {"2": 0.0, "3": 3 / 7, "5": 1.0}
    assert shares("S", "entropy l-diversity (Shannon)", "l") == {"2": 3 / 7, "3": 3 / 7, "5": 1.0}
    assert shares("S", "t-closeness, equal distance", "t") == {"0.1": 1.0, "0.2": 3 / 7, "0.5": 0.0}
    assert shares("T", "distinct l-diversity", "l") == {"2": 0.0, "3": 1.0, "5": 1.0}
    assert shares("T", "t-closeness, equal distance", "t") == {"0.1": 3 / 7, "0.2": 0.0, "0.5": 0.0}


def test_release_report_without_sensitive_attributes_has_no_section(tmp_path, no_site, capsys):
    plain = POLICY.replace("{type: sensitive, hierarchy: {file: h_s.csv}}", "{type: insensitive}") \
                  .replace("T: {type: sensitive}", "T: {type: insensitive}") \
                  .replace("{model: l_diversity, variant: distinct, attribute: S, l: 2}", "{model: k_anonymity, k: 1}")
    policy = write_table(tmp_path, plain)
    assert main(["deid", str(policy), "--out", str(tmp_path / "release"), "--quiet"]) == 0, capsys.readouterr().err
    assert 'id="attribute-disclosure"' not in (tmp_path / "release" / "report.html").read_text()


# --- ADULT ----------------------------------------------------------------------------------------------------------
def test_adult_shares_are_consistent(demo_dir, tmp_path, capsys):
    page = tmp_path / "adult.html"
    assert main(["risk", str(EXAMPLES / "adult-distinct-l3.yaml"), "--json", "--html", str(page)]) == 0
    report = json.loads(capsys.readouterr().out)
    (entry,) = report["attribute_disclosure"]
    assert entry["attribute"] == "occupation" and entry["records"] == report["records"] == 30162
    assert entry["classes"] == report["equivalence_classes"] and entry["has_hierarchy"]
    assert sum(entry["per_class"]["size"]) == entry["records"]
    assert sum(r["records"] for r in entry["distinct_histogram"]) == entry["records"]
    assert sum(r["records"] for r in entry["distance_histogram"]) == entry["records"]
    for key in ("l_diversity", "entropy_l_diversity", "t_closeness", "hierarchical_t_closeness"):
        shares = list(entry[key].values())
        assert all(0.0 <= s <= 1.0 for s in shares), key
    for key in ("l_diversity", "entropy_l_diversity"):
        assert entry[key]["5"] >= entry[key]["3"] >= entry[key]["2"]
    for l in ("2", "3", "5"):   # entropy l-diversity fails at least where distinct l-diversity fails
        assert entry["entropy_l_diversity"][l] >= entry["l_diversity"][l]
    assert entry["t_closeness"]["0.1"] >= entry["t_closeness"]["0.2"] >= entry["t_closeness"]["0.5"]
    # Records in classes with one value are the records failing distinct 2-diversity.
    one_value = next(r["records"] for r in entry["distinct_histogram"] if r["distinct"] == 1)
    assert entry["l_diversity"]["2"] == one_value / entry["records"]
    assert all(0.0 <= d <= 1.0 + 1e-12 for d in entry["per_class"]["distance"])
    html = Elements(page.read_text())
    for plot in PLOTS:
        assert len(html.find("svg", data_attribute="occupation", data_plot=plot)) == 1


def test_adult_p4_report_shows_the_released_classes(demo_dir, tmp_path, no_site, capsys):
    """P4 suppresses per partition, so a class can be released in one partition and suppressed in the other: the
    report groups the released records themselves (it used to stop with "the released classes differ from the
    search's"). Every released class satisfies the policy's distinct 3-diversity, so no released record fails it."""
    out = tmp_path / "release"
    assert main(["deid", str(EXAMPLES / "adult-distinct-l3.yaml"), "--partitions", "2", "--scheduler", "none",
                 "--out", str(out), "--quiet", "--json"]) == 0, capsys.readouterr().err
    manifest = json.loads(capsys.readouterr().out)
    released = manifest["records"] - manifest["suppressed_records"]
    html = Elements((out / "report.html").read_text())
    (section,) = html.find("section", **{"class": "disclosure", "data_sensitive": "occupation"})
    assert int(section["data-records"]) == released
    start = next(i for i, (t, a) in enumerate(html.items) if t == "section" and a.get("data-sensitive") == "occupation")
    cells = {a["data-l"]: float(a["data-value"]) for t, a in html.items[start:]
             if t == "td" and a.get("data-model") == "distinct l-diversity"}
    assert cells["2"] == cells["3"] == 0.0 and cells["5"] > 0.0
