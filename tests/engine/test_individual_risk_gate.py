"""Per-record risk as a privacy model (`model: individual_risk`) and as gate limits (`max_record_risk`,
`max_expected_reidentifications` in a policy's gate and the site gate, which a policy can tighten, never relax),
through deid, the manifest and the seal."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.errors import InputError
from engine.gate import evaluate_gate
from engine.policy import GateSpec, parse_policy
from engine.privacy.individual import IndividualRiskModel
from engine.risk.individual import key_risk
from engine.sitegate import BUILT_IN_GATE, SiteGate, SiteGateSource, combine, manifest_violations
from safeshare.cli import main
from tests.engine.site_files import TINY, site, write_tiny as tiny  # noqa: F401 (site: a fixture)

SIZES = np.array([7] * 39 + [13, 1])   # the tiny table's classes: a0..a37 seven times, a38 13 times, a39 once


def released_sizes(out: Path) -> np.ndarray:
    """Class sizes of the released records (a suppressed record stays in the file with A = '*')."""
    frame = pd.read_parquet(out / "data.parquet")
    return frame[frame["A"] != "*"].groupby("A").size().to_numpy()


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


# --- the policy schema ---------------------------------------------------------------------------------------------
def policy_with(privacy: str, gate: str = "") -> dict:
    return {"dataset": "d", "attributes": {"A": {"type": "quasi_identifying", "hierarchy": {"file": "h.csv"}}},
            "privacy": [json.loads(privacy)], "suppression_limit": 0.0,
            **({"gate": json.loads(gate)} if gate else {})}


def test_schema_accepts_the_model_and_the_gate_limits():
    policy = parse_policy(policy_with('{"model": "individual_risk", "population": 1000.0, "max_record_risk": 0.2}',
                                      '{"max_record_risk": 0.1, "max_expected_reidentifications": 3.5}'))
    assert policy.privacy[0].max_record_risk == 0.2 and policy.privacy[0].max_expected_reidentifications is None
    assert policy.gate.max_record_risk == 0.1 and policy.gate.max_expected_reidentifications == 3.5
    assert GateSpec().max_record_risk is None and SiteGate().max_expected_reidentifications is None


@pytest.mark.parametrize("privacy, gate, field, problem", [
    ('{"model": "individual_risk", "population": 1000.0}', "", "privacy[0]", "needs max_record_risk"),
    ('{"model": "individual_risk", "population": 1000.0, "max_record_risk": 0}', "", "privacy[0].max_record_risk",
     "greater than 0"),
    ('{"model": "individual_risk", "population": 1000.0, "max_record_risk": 1.5}', "",
     "privacy[0].max_record_risk", "less than or equal to 1"),
    ('{"model": "individual_risk", "population": 1000.0, "max_record_risk": "0.1"}', "",
     "privacy[0].max_record_risk", "numbers are never converted"),
    ('{"model": "individual_risk", "population": 1000.0, "max_expected_reidentifications": -1}', "",
     "privacy[0].max_expected_reidentifications", "greater than or equal to 0"),
    ('{"model": "individual_risk", "population": 1000.0, "max_record_risk": 0.1, "max_risk": 0.1}', "",
     "privacy[0].max_risk", "unknown key"),
    ('{"model": "k_anonymity", "k": 2}', '{"max_record_risk": 2}', "gate.max_record_risk", "less than or equal"),
])
def test_schema_refuses_bad_limits_naming_the_field(privacy, gate, field, problem):
    with pytest.raises(InputError) as refused:
        parse_policy(policy_with(privacy, gate), source="p.yaml")
    assert refused.value.field == field and problem in refused.value.problem, refused.value


def test_population_smaller_than_the_table_is_bad_input(tmp_path, site, capsys):
    policy = tiny(tmp_path, TINY.replace("{model: k_anonymity, k: 1}",
                                         "{model: individual_risk, population: 100, max_record_risk: 0.5}"))
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "privacy[0].population: population of 100 is smaller than the 280 records" in capsys.readouterr().err


# --- the privacy model ---------------------------------------------------------------------------------------------
def test_model_holds_exactly_up_to_its_limits():
    risk = key_risk(SIZES, 1000.0)
    highest, expected = float(risk.max()), float(np.dot(SIZES, risk))
    assert highest == pytest.approx(float(risk[-1])) and highest > 0.4   # the unique: p/q log(1/p), p = 0.28
    holds, details = IndividualRiskModel(1000.0, max_record_risk=highest).assess(SIZES)
    assert holds and details["max_risk"] == highest and details["records_above_limit"] == 0
    holds, details = IndividualRiskModel(1000.0, max_record_risk=highest * 0.999).assess(SIZES)
    assert not holds and details["records_above_limit"] == 1
    assert IndividualRiskModel(1000.0, max_expected_reidentifications=expected * 1.001).assess(SIZES)[0]
    assert not IndividualRiskModel(1000.0, max_expected_reidentifications=expected * 0.999).assess(SIZES)[0]
    both = IndividualRiskModel(1000.0, max_record_risk=1.0, max_expected_reidentifications=expected * 0.999)
    assert not both.assess(SIZES)[0]
    with pytest.raises(ValueError):
        IndividualRiskModel(1000.0)


def test_deid_suppresses_the_records_above_the_limit(tmp_path, site):
    """The sample unique (risk ~0.49 in a population of 1000) goes; every released record is at most 0.3."""
    policy = tiny(tmp_path, TINY.replace("{model: k_anonymity, k: 1}",
                                         "{model: individual_risk, population: 1000, max_record_risk: 0.3}")
                  .replace("suppression_limit: 0", "suppression_limit: 0.05"))
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0
    recorded = manifest(out)
    assert recorded["suppressed_records"] == 1 and recorded["transformation"] == {"A": 0}
    sizes = released_sizes(out)
    n = int(sizes.sum())
    assert n == 279
    assert float(key_risk(sizes, 1000.0).max()) <= 0.3


# --- the gate ------------------------------------------------------------------------------------------------------
def test_combine_takes_the_stricter_limit_and_says_who_set_it():
    site = SiteGateSource(SiteGate(max_record_risk=0.2))
    relaxed = combine(GateSpec(max_record_risk=0.9, max_expected_reidentifications=5.0), site)
    assert relaxed.max_record_risk == 0.2 and relaxed.origin["max_record_risk"] == "site"
    assert relaxed.max_expected_reidentifications == 5.0 and relaxed.origin["max_expected_reidentifications"] == "policy"
    tightened = combine(GateSpec(max_record_risk=0.05), site)
    assert tightened.max_record_risk == 0.05 and tightened.origin["max_record_risk"] == "policy"
    none = combine(GateSpec(), BUILT_IN_GATE)
    assert none.max_record_risk is None and not none.limits_individual_risk
    assert "max_record_risk" not in none.record() and relaxed.record()["max_record_risk"] == 0.2


def test_gate_refuses_records_above_the_limit_in_the_smallest_population():
    effective = combine(GateSpec(populations=[1000.0, 1e6], max_pu_su_ratio=10.0, max_record_risk=0.3),
                        SiteGateSource(SiteGate(max_pu_su_ratio=10.0, required_populations=[])))
    risk, gate = evaluate_gate(effective, SIZES)
    assert not gate["passed"]
    assert any(r.startswith("1000.0: 1 released record(s) with a re-identification risk above the allowed 0.3")
               and "dataset policy" in r for r in gate["reasons"]), gate["reasons"]
    by_size = {p["size"]: p["individual_risk"] for p in risk["populations"]}
    assert by_size[1e6]["max_risk"] < 0.3 and by_size[1e6]["records_above_limit"] == 0
    expected = float(np.dot(SIZES, key_risk(SIZES, 1000.0)))
    assert by_size[1000.0]["expected_reidentifications"] == pytest.approx(expected, rel=1e-12)
    # without the unique every record is below the limit: the gate passes, and without sample uniques it still
    # measures the per-record risk (records in larger classes carry risk too)
    risk, gate = evaluate_gate(effective, SIZES[:-1])
    assert gate["passed"], gate["reasons"]
    assert all(p["individual_risk"]["expected_reidentifications"] > 0 for p in risk["populations"])


def test_site_limit_refuses_whatever_the_policy_says(tmp_path, site, capsys):
    (site / "gate.yaml").write_text("max_expected_reidentifications: 5\nrequired_populations: [1000]\n"
                                    "max_pu_su_ratio: 10\n")
    policy = tiny(tmp_path, TINY + "    gate: {populations: [1000], max_pu_su_ratio: 10, "
                                   "max_expected_reidentifications: 500}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 1
    gate = manifest(out)["gate"]
    assert gate["max_expected_reidentifications"] == 5 and gate["limits_from"]["max_expected_reidentifications"] \
        == "site"
    assert any("expected re-identifications, above the allowed 5" in r and "site gate" in r
               for r in gate["reasons"]), gate["reasons"]


def test_manifest_violations_check_the_recorded_per_record_risk():
    floor = SiteGateSource(SiteGate(max_record_risk=0.3, required_populations=[1000.0]), "gate.yaml")
    entry = {"population": "1000.0", "size": 1000.0, "pu_su_ratio": 0.1, "population_uniqueness": 0.01}
    bare = {"risk": {"sample_uniques": 1, "released_records": 280, "populations": [entry]}}
    assert any("per-record risk not recorded" in p for p in manifest_violations(bare, floor))
    above = {"risk": {**bare["risk"], "populations": [{**entry, "individual_risk": {"max_risk": 0.49}}]}}
    assert any("max risk 0.49 above the site gate gate.yaml's max_record_risk = 0.3" in p
               for p in manifest_violations(above, floor))
    within = {"risk": {**bare["risk"], "populations": [{**entry, "individual_risk": {"max_risk": 0.2}}]}}
    assert manifest_violations(within, floor) == []


def test_seal_rechecks_the_limit_and_the_recorded_figures(tmp_path, monkeypatch, capsys):
    """An output made where no limit applied cannot be sealed at a site with one; a hand-edited figure is found."""
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "gate.yaml").write_text("max_pu_su_ratio: 10\nrequired_populations: [1000]\n")
    strict = tmp_path / "strict"
    strict.mkdir()
    (strict / "gate.yaml").write_text("max_pu_su_ratio: 10\nrequired_populations: [1000]\nmax_record_risk: 0.3\n")
    monkeypatch.delenv("SAFESHARE_SITE", raising=False)
    policy = tiny(tmp_path)
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(loose)]) == 0
    assert main(["release", str(out), "--to", str(strict / "releases"), "--policy", str(policy)]) == 1
    assert "per-record risk not recorded" in capsys.readouterr().err
    # made under a limit it meets (the unique suppressed), then a recorded figure edited
    body = TINY.replace("suppression_limit: 0", "suppression_limit: 0.05") + \
        "    gate: {populations: [1000], max_pu_su_ratio: 10, max_record_risk: 0.3}\n"
    policy = tiny(tmp_path, body.replace("{model: k_anonymity, k: 1}",
                                         "{model: individual_risk, population: 1000, max_record_risk: 0.3}"))
    good = tmp_path / "good"
    assert main(["deid", str(policy), "--out", str(good), "--quiet", "--site", str(strict)]) == 0
    data = manifest(good)
    entry = next(p for p in data["risk"]["populations"] if p["size"] == 1000.0)
    entry["individual_risk"]["expected_reidentifications"] *= 0.5
    (good / "manifest.json").write_text(json.dumps(data, indent=2))
    assert main(["release", str(good), "--to", str(strict / "releases"), "--policy", str(policy)]) == 1
    assert "individual_risk.expected_reidentifications" in capsys.readouterr().err
