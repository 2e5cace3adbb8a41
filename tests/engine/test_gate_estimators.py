"""Issue 24, item 6: the site gate names the estimator(s) that decide (SITE/gate.yaml `estimator:`, default Dankar's
rule); a dataset policy's `gate.estimator` only adds estimators, and the gate holds for the strictest of them. Before,
the policy's estimator replaced the site's: `gate: {estimator: snb}` passed ADULT under a floor its default estimator
refuses."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from engine.gate import evaluate_gate
from engine.policy import GateSpec
from engine.risk import population_uniqueness
from engine.sitegate import BUILT_IN_GATE, SiteGate, SiteGateSource, combine
from safeshare.cli import main
from tests.engine.site_files import site_with, tiny_policy, write_tiny

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


def localized(name: str) -> str:
    """An example policy's text with its relative data paths made absolute (resolved from policies/examples), so
    that a copy elsewhere reads the same files; skips when the ADULT table is not there."""
    text = (EXAMPLES / name).read_text()
    text = re.sub(r"(?<=path: |file: )([^\s},]+)",
                  lambda m: m.group(1) if m.group(1).startswith("/") else str((EXAMPLES / m.group(1)).resolve()),
                  text)
    table = re.search(r"(?<=path: )(\S+)", text).group(1)
    if not Path(table).is_file():
        pytest.skip(f"the ADULT table is not at {table}")
    return text


def adult_pu1(tmp_path: Path, extra: str = "") -> Path:
    """The example ADULT policy (population uniqueness <= 1 % in the USA under Pitman), with `extra` appended."""
    text = localized("adult-pu1.yaml")
    policy = tmp_path / "adult-pu1.yaml"
    policy.write_text(text + extra)
    return policy


@pytest.fixture(autouse=True)
def no_machine_site(tmp_path, monkeypatch):
    """The machine's own site ($SAFESHARE_SITE, /var/lib/safeshare) never leaks in: every run names its site."""
    monkeypatch.setenv("SAFESHARE_SITE", str(site_with(tmp_path, "env-site", None)))


def test_a_policy_naming_snb_does_not_pass_adult_under_the_site_floor(tmp_path, capsys):
    """The issue's case end to end: a site floor of population uniqueness 0.035 refuses ADULT (Los Angeles: 0.046
    under Dankar's rule, which picks Pitman); the same policy with `gate: {estimator: snb}` (0.031 in Los Angeles
    under SNB) is refused as well, by deid and by release, since the site's estimator still decides."""
    strict = site_with(tmp_path, "strict", "max_population_uniqueness: 0.035\n")
    policy = adult_pu1(tmp_path, "gate: {estimator: snb}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(strict)]) == 1
    manifest = json.loads((out / "manifest.json").read_text())
    gate, risk = manifest["gate"], manifest["risk"]
    assert gate["passed"] is False and gate["estimator"] == risk["estimator"] == ["dankar", "snb"]
    assert gate["site_gate"]["estimator"] == "dankar" and gate["policy_gate"]["estimator"] == "snb"
    assert any(r.startswith("Los Angeles: population uniqueness 0.046") and f"site gate {strict / 'gate.yaml'}" in r
               and "the strictest estimator: dankar" in r for r in gate["reasons"]), gate["reasons"]
    los_angeles = next(e for e in risk["populations"] if e["population"] == "Los Angeles")
    by_estimator = {e["estimator"]: e for e in los_angeles["estimates"]}
    assert by_estimator["dankar"]["model"] == "pitman" and by_estimator["snb"]["model"] == "snb"
    assert by_estimator["snb"]["population_uniqueness"] < 0.035 < by_estimator["dankar"]["population_uniqueness"]
    assert los_angeles["population_uniqueness"] == by_estimator["dankar"]["population_uniqueness"]
    assert los_angeles["model"] == "pitman"
    capsys.readouterr()
    assert main(["release", str(out), "--to", str(strict / "releases")]) == 1
    assert "gate did not pass" in capsys.readouterr().err
    assert not (strict / "releases").exists() and not (strict / "keys").exists()

    # Made under a site without a floor on population uniqueness, the output passes there; sealed into the strict
    # site it is refused, whatever estimator the policy named.
    lax = site_with(tmp_path, "lax", None)
    out_lax = tmp_path / "out-lax"
    assert main(["deid", str(policy), "--out", str(out_lax), "--quiet", "--site", str(lax)]) == 0
    capsys.readouterr()
    assert main(["release", str(out_lax), "--to", str(strict / "releases")]) == 1
    err = capsys.readouterr().err
    assert "Los Angeles" in err and "0.035" in err, err
    assert not (strict / "releases").exists() and not (strict / "keys").exists()


def tiny(tmp_path: Path, gate: str = "") -> Path:
    """280 records over 40 values of A, one of which occurs once (a sample unique)."""
    return write_tiny(tmp_path, tiny_policy(gate=gate or None))


def test_the_site_gate_names_the_estimators_and_a_policy_only_adds(tmp_path, capsys):
    site = site_with(tmp_path, "site", "estimator: [pitman, zayatz]\nrequired_populations: [1000000]\n")
    out = tmp_path / "out"
    assert main(["deid", str(tiny(tmp_path)), "--out", str(out), "--quiet", "--site", str(site)]) in (0, 1)
    risk = json.loads((out / "manifest.json").read_text())["risk"]
    assert risk["estimator"] == ["pitman", "zayatz"]          # the site's, with no estimator in the policy
    assert [e["estimator"] for e in risk["populations"][0]["estimates"]] == ["pitman", "zayatz"]
    # the policy adds SNB after the site's; naming one of the site's again changes nothing
    policy = tiny(tmp_path, "{estimator: [snb, zayatz]}")
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(site)]) in (0, 1)
    gate = json.loads((out / "manifest.json").read_text())["gate"]
    assert gate["estimator"] == ["pitman", "zayatz", "snb"] and gate["limits_from"]["estimator"] == "site+policy"
    # one estimator is recorded as a name, as manifests always had it
    single = site_with(tmp_path, "single", "estimator: snb\nrequired_populations: [1000000]\n")
    assert main(["deid", str(tiny(tmp_path)), "--out", str(out), "--quiet", "--site", str(single)]) in (0, 1)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["risk"]["estimator"] == "snb" and manifest["risk"]["populations"][0]["model"] == "snb"
    assert "estimates" not in manifest["risk"]["populations"][0]


SIZES = np.array([1] * 400 + [2] * 50 + [3] * 10)   # many uniques in a small population


def spec(**fields) -> GateSpec:
    """A policy gate on a population of 5,000 whose ratio limit is out of the way (only uniqueness limits bind)."""
    return GateSpec(populations=[5000.0], max_pu_su_ratio=1.0, **fields)


def test_the_gate_holds_for_the_strictest_estimator():
    each = {name: population_uniqueness(SIZES, 5000.0, name).population_uniqueness
            for name in ("pitman", "zayatz", "snb", "dankar")}
    assert len({round(v, 9) for v in each.values()}) >= 3, each    # the estimators disagree here
    site = SiteGateSource(SiteGate(estimator="dankar", required_populations=[5000.0], max_pu_su_ratio=1.0,
                                   max_population_uniqueness=1.0))
    for added in ("pitman", "zayatz", "snb", ["pitman", "zayatz", "snb"]):
        risk, gate = evaluate_gate(spec(estimator=added), SIZES, site=site)
        names = ["dankar"] + [n for n in ([added] if isinstance(added, str) else added) if n != "dankar"]
        entry = risk["populations"][0]
        assert [e["estimator"] for e in entry["estimates"]] == names
        assert entry["population_uniqueness"] == pytest.approx(max(each[n] for n in names), rel=1e-12)
        assert entry["population_uniqueness"] >= each["dankar"]          # never laxer than the site's estimator
    # A limit between the estimates: the site's estimator alone passes, a stricter one the policy adds refuses, a
    # laxer one the policy names changes nothing.
    lowest, highest = min(each.values()), max(each.values())
    strictest_name = max(each, key=each.get)
    limit = (each["dankar"] + highest) / 2 if each["dankar"] < highest else None
    assert limit is not None, each
    floor = SiteGateSource(SiteGate(required_populations=[5000.0], max_pu_su_ratio=1.0,
                                    max_population_uniqueness=limit))
    assert evaluate_gate(spec(), SIZES, site=floor)[1]["passed"] is True
    _, gate = evaluate_gate(spec(estimator=strictest_name), SIZES, site=floor)
    assert gate["passed"] is False and f"the strictest estimator: {strictest_name}" in gate["reasons"][0]
    laxest = min(each, key=each.get)
    assert each[laxest] == lowest
    assert evaluate_gate(spec(estimator=laxest), SIZES, site=floor)[1]["passed"] is True


def test_a_site_estimator_stricter_than_the_policys_decides():
    """`estimator: zayatz` in the site gate refuses what the policy's SNB alone would pass (the old code let the
    policy's estimator replace the site's)."""
    zayatz = population_uniqueness(SIZES, 5000.0, "zayatz").population_uniqueness
    snb = population_uniqueness(SIZES, 5000.0, "snb").population_uniqueness
    assert snb < zayatz
    limit = (snb + zayatz) / 2
    site = SiteGateSource(SiteGate(estimator="zayatz", required_populations=[5000.0], max_pu_su_ratio=1.0,
                                   max_population_uniqueness=limit), "/site/gate.yaml")
    _, gate = evaluate_gate(spec(estimator="snb"), SIZES, site=site)
    assert gate["passed"] is False and "site gate /site/gate.yaml" in gate["reasons"][0]
    assert "the strictest estimator: zayatz" in gate["reasons"][0]


def test_an_unsolved_estimator_refuses(monkeypatch):
    """Any estimator without a solution makes the risk unknown: fail closed, even if another one solved."""
    import engine.risk.estimate as estimate

    real = estimate._estimate

    def snb_fails(histogram, population_size, model):
        return (None, {}) if model == "snb" else real(histogram, population_size, model)

    monkeypatch.setattr(estimate, "_estimate", snb_fails)
    site = SiteGateSource(SiteGate(estimator=["pitman", "snb"], required_populations=[5000.0], max_pu_su_ratio=1.0))
    risk, gate = evaluate_gate(spec(), SIZES, site=site)
    assert gate["passed"] is False and "no risk model found a solution (snb)" in gate["reasons"][0]
    assert risk["populations"][0]["population_uniqueness"] is None


def test_combine_orders_and_deduplicates_estimators():
    assert combine(None, BUILT_IN_GATE).estimators == ("dankar",)
    assert combine(GateSpec(estimator="snb"), BUILT_IN_GATE).estimators == ("dankar", "snb")
    assert combine(GateSpec(estimator=["dankar"]), BUILT_IN_GATE).origin["estimator"] == "site"
    site = SiteGateSource(SiteGate(estimator=["snb", "pitman", "snb"]))
    assert combine(GateSpec(estimator=["pitman", "zayatz"]), site).estimators == ("snb", "pitman", "zayatz")


@pytest.mark.parametrize("text, problem", [
    ("estimator: snbb\n", "unknown estimator 'snbb'"),
    ("estimator: [dankar, Pitman]\n", "item 1: unknown estimator 'Pitman'"),
    ("estimator: []\n", "name at least one estimator"),
    ("estimator: 3\n", "an estimator is a name"),
])
def test_a_bad_estimator_in_the_site_gate_is_bad_input(tmp_path, capsys, text, problem):
    site = site_with(tmp_path, "site", text)
    out = tmp_path / "out"
    assert main(["deid", str(tiny(tmp_path)), "--out", str(out), "--quiet", "--site", str(site)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{site / 'gate.yaml'}: estimator: {problem}" in err, err
    assert not out.exists()


def test_a_bad_estimator_in_the_releasing_sites_gate_is_bad_input_at_release(tmp_path, capsys):
    lax = site_with(tmp_path, "lax", None)
    out = tmp_path / "out"
    policy = tiny(tmp_path, "{populations: [1000000]}")
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(lax)]) == 0
    site = site_with(tmp_path, "site", "estimator: [dankar, snbb]\n")
    capsys.readouterr()
    assert main(["release", str(out), "--to", str(site / "releases")]) == 2
    err = capsys.readouterr().err
    assert f"{site / 'gate.yaml'}: estimator: item 1: unknown estimator 'snbb'" in err, err
    assert not (site / "releases").exists()


def test_a_bad_estimator_in_the_policy_is_bad_input(tmp_path, capsys):
    policy = tiny(tmp_path, "{estimator: [snb, laplace]}")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{policy}: gate.estimator: item 1: unknown estimator 'laplace'" in err, err
    assert not out.exists()
