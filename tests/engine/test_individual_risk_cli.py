"""Per-record risk in `safeshare risk` (text, --json, --html) and engine.risk_report, checked against sums written here
over the records themselves."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import risk_report
from engine.risk.individual import negative_binomial_risk
from engine.risk.loglinear import expected_inverse
from safeshare.cli import main

# Classes over (A, B): (x, p) x 4, (x, q) x 2, (y, p) x 1, (z, q) x 1, (y, q) x 1 -> 9 records, three sample uniques.
ROWS = [("x", "p")] * 4 + [("x", "q")] * 2 + [("y", "p"), ("z", "q"), ("y", "q")]
POPULATION = 900.0


def frame() -> pd.DataFrame:
    return pd.DataFrame(ROWS, columns=["A", "B"])


def test_negative_binomial_figures_are_the_sum_over_records():
    report = risk_report(frame(), ["A", "B"], population=POPULATION)["individual_risk"]
    entry = report["populations"][0]
    nb = entry["negative_binomial"]
    sizes_per_record = np.array([4] * 4 + [2] * 2 + [1, 1, 1])
    p = 9 / POPULATION   # equal weights: every record's key has p = n / N
    direct = negative_binomial_risk(sizes_per_record, sizes_per_record / p)
    assert nb["expected_reidentifications"] == pytest.approx(direct.sum(), rel=1e-12)
    assert nb["global_risk"] == pytest.approx(direct.mean(), rel=1e-12)
    assert nb["max_risk"] == pytest.approx(direct.max())
    assert entry["sampling_fraction"] == pytest.approx(p)
    assert sum(row["records"] for row in nb["histogram"]) == 9


def test_loglinear_main_effects_figures_by_hand():
    """Main effects: mu = n * share(A) * share(B); a = (1 - pi) mu / pi; tau1 = sum exp(-a), tau2 = sum (1-e^-a)/a
    over the sample uniques."""
    report = risk_report(frame(), ["A", "B"], population=POPULATION)["individual_risk"]
    ll = report["populations"][0]["loglinear"]
    n, pi = 9, 9 / POPULATION
    share_a = {"x": 6 / 9, "y": 2 / 9, "z": 1 / 9}
    share_b = {"p": 5 / 9, "q": 4 / 9}
    uniques = [("y", "p"), ("z", "q"), ("y", "q")]
    a = np.array([(1 - pi) * n * share_a[x] * share_b[y] / pi for x, y in uniques])
    assert ll["solved"] and ll["sample_uniques"] == 3
    assert ll["tau1"] == pytest.approx(np.exp(-a).sum(), rel=1e-12)
    assert ll["tau2"] == pytest.approx(((1 - np.exp(-a)) / a).sum(), rel=1e-12)
    classes = {("x", "p"): 4, ("x", "q"): 2, **{u: 1 for u in uniques}}
    expected = sum(f * float(expected_inverse(np.array([f]), np.array([(1 - pi) * n * share_a[x] * share_b[y] / pi]))[0])
                   for (x, y), f in classes.items())
    assert ll["expected_reidentifications"] == pytest.approx(expected, rel=1e-12)


def test_riskiest_records_are_the_rarest_uniques_with_their_rows():
    """Among the sample uniques (same negative-binomial risk), (z, q) has the smallest fitted cell and so the
    highest log-linear risk; then (y, q), then (y, p)."""
    report = risk_report(frame(), ["A", "B"], population=[POPULATION, 90_000.0])["individual_risk"]
    riskiest = report["riskiest"]
    assert riskiest["population"] == "900.0" and riskiest["ranked_by"] == "loglinear_risk"
    ranked = [(r["values"]["A"], r["values"]["B"]) for r in riskiest["records"]]
    assert ranked[:3] == [("z", "q"), ("y", "q"), ("y", "p")]
    assert riskiest["records"][0]["rows"] == [7]
    assert riskiest["records"][3]["rows"] == [4, 5] and riskiest["records"][4]["rows"] == [0, 1, 2, 3]
    risks = [r["loglinear_risk"] for r in riskiest["records"]]
    assert risks == sorted(risks, reverse=True)
    assert 0 < riskiest["share_of_expected_reidentifications"] <= 1


def test_two_way_and_none(tmp_path):
    from engine.individual_report import individual_risk_report

    none = risk_report(frame(), ["A", "B"], population=POPULATION)

    two = individual_risk_report(frame(), ["A", "B"], [("N", POPULATION)], loglinear="two_way")
    # two attributes, one pair: the two-way model is saturated, its fitted cells are the counts themselves
    assert two["populations"][0]["loglinear"]["solved"]
    off = individual_risk_report(frame(), ["A", "B"], [("N", POPULATION)], loglinear="none")
    assert "loglinear" not in off["populations"][0] and off["riskiest"]["ranked_by"] == "negative_binomial_risk"
    assert none["individual_risk"]["loglinear_model"] == "main"


def write_policy(folder: Path, populations: str = "[900]") -> Path:
    (folder / "data.csv").write_text("A;B\n" + "".join(f"{a};{b}\n" for a, b in ROWS))
    for name, values in (("A", "xyz"), ("B", "pq")):
        (folder / f"h_{name}.csv").write_text("".join(f"{v};*\n" for v in values))
    policy = folder / "policy.yaml"
    policy.write_text(f"""\
dataset: tiny-record-risk
input: {{path: data.csv}}
attributes:
  A: {{type: quasi_identifying, hierarchy: {{file: h_A.csv}}}}
  B: {{type: quasi_identifying, hierarchy: {{file: h_B.csv}}}}
privacy:
  - {{model: k_anonymity, k: 1}}
suppression_limit: 0.0
gate: {{populations: {populations}}}
""")
    return policy


def test_cli_json_text_and_html(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SAFESHARE_SITE", raising=False)
    policy = write_policy(tmp_path)
    assert main(["risk", str(policy), "--json", "--top", "2"]) == 0
    report = json.loads(capsys.readouterr().out)["individual_risk"]
    assert len(report["riskiest"]["records"]) == 2
    assert {"negative_binomial", "loglinear", "population", "size", "sampling_fraction"} <= set(
        report["populations"][0])
    assert main(["risk", str(policy)]) == 0
    text = capsys.readouterr().out
    assert "per-record risk" in text and "expected re-identifications" in text and "A=z, B=q" in text
    page = tmp_path / "risk.html"
    assert main(["risk", str(policy), "--html", str(page), "--loglinear", "two_way"]) == 0
    html = page.read_text()
    assert 'id="record-risk"' in html and 'class="risky-record"' in html
    assert html.count("data-population=\"900.0\"") >= 2   # the table row and the histogram
    with pytest.raises(SystemExit) as refused:   # not a positive number: argparse refuses it as bad usage
        main(["risk", str(policy), "--top", "0"])
    assert refused.value.code == 2
