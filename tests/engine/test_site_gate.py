"""Issue 12, item 3: the site gate, a floor set by the custodian that a dataset policy can only tighten; non-finite
numbers are refused everywhere in policies, and the manifest is strict JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.policy import GateSpec
from engine.sitegate import BUILT_IN_GATE, SiteGate, SiteGateSource, combine, load_site_gate
from safeshare.cli import main
from tests.engine.site_files import TINY, site, site_with, write_tiny as tiny  # noqa: F401 (site: a fixture)

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


def strict_json(path: Path) -> dict:
    """Parse as standard JSON: Infinity and NaN are not JSON."""
    def refuse(name: str):
        raise AssertionError(f"{path}: non-standard JSON constant {name}")
    return json.loads(path.read_text(), parse_constant=refuse)


def adult_policy(tmp_path: Path, extra: str, k: int = 1) -> Path:
    text = (EXAMPLES / "adult-k5.yaml").read_text().replace("k: 5}", f"k: {k}}}")
    text = text.replace("../../data/", str(EXAMPLES.parents[1] / "data") + "/")  # the demo table, from tmp_path
    policy = tmp_path / "adult-k1.yaml"
    policy.write_text(text + extra)
    return policy


def test_policy_cannot_switch_the_gate_off_on_adult(tmp_path, demo_dir, site, capsys):
    """The issue's case: k = 1 with a gate the policy made toothless is refused by the site gate (exit 1)."""
    policy = adult_policy(tmp_path, "gate: {max_pu_su_ratio: 1000}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 1
    manifest = strict_json(out / "manifest.json")
    gate = manifest["gate"]
    assert gate["passed"] is False
    assert any("built-in site gate" in reason for reason in gate["reasons"]), gate["reasons"]
    assert gate["max_pu_su_ratio"] == 0.25 and gate["limits_from"]["max_pu_su_ratio"] == "site"
    assert gate["site_gate"]["source"] == "built-in"
    assert gate["policy_gate"]["max_pu_su_ratio"] == 1000
    assert "site gate" in capsys.readouterr().out
    assert main(["release", str(out), "--to", str(tmp_path / "releases")]) == 1
    assert not (tmp_path / "releases" / "adult").exists()


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_non_finite_gate_limit_is_bad_input(tmp_path, demo_dir, site, capsys, value):
    policy = adult_policy(tmp_path, f"gate: {{max_pu_su_ratio: {value}}}\n")
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{policy}: gate.max_pu_su_ratio: " in err and ("finite" in err or "greater than" in err), err
    assert not (tmp_path / "out").exists()


def test_site_gate_file_tightens_and_is_recorded(tmp_path, site, capsys):
    gate_file = site / "gate.yaml"
    gate_file.write_text("max_pu_su_ratio: 0.0\nrequired_populations: [300]\n")
    policy = tiny(tmp_path, TINY + "    gate: {populations: [1000], max_pu_su_ratio: 0.9}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 1
    gate = strict_json(out / "manifest.json")["gate"]
    assert gate["populations"] == ["300.0", "1000.0"]      # the site's required ones plus the policy's
    assert gate["max_pu_su_ratio"] == 0.0
    assert gate["site_gate"]["source"] == str(gate_file) and len(gate["site_gate"]["sha256"]) == 64
    assert all(f"site gate {gate_file}" in reason for reason in gate["reasons"])
    # --site overrides $SAFESHARE_SITE: a site without a gate file applies the built-in floor
    other = tmp_path / "other-site"
    other.mkdir()
    policy = tiny(tmp_path, unique=False)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out2"), "--quiet", "--site", str(other)]) == 0
    assert strict_json(tmp_path / "out2" / "manifest.json")["gate"]["site_gate"]["source"] == "built-in"


def test_stricter_policy_limit_is_the_one_in_force(tmp_path, site):
    effective = combine(GateSpec(max_pu_su_ratio=0.1, min_k=3, populations=[5000.0]), BUILT_IN_GATE)
    assert effective.max_pu_su_ratio == 0.1 and effective.origin["max_pu_su_ratio"] == "policy"
    assert effective.min_k == 3 and effective.origin["min_k"] == "policy"
    assert [p.label for p in effective.populations] == ["USA", "California", "Los Angeles", "5000.0"]
    loose = combine(GateSpec(max_pu_su_ratio=1.0, max_population_uniqueness=1.0),
                    SiteGateSource(SiteGate(max_population_uniqueness=0.01, min_k=2)))
    assert (loose.max_pu_su_ratio, loose.max_population_uniqueness, loose.min_k) == (0.25, 0.01, 2)


def test_site_min_k_refuses_small_classes(tmp_path, site, capsys):
    (site / "gate.yaml").write_text("min_k: 3\n")
    policy = tiny(tmp_path, unique=False)   # every class has 7 records...
    assert main(["deid", str(policy), "--out", str(tmp_path / "ok"), "--quiet"]) == 0
    policy = tiny(tmp_path, unique=True)    # ...but now one has a single record
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 1
    reasons = strict_json(tmp_path / "out" / "manifest.json")["gate"]["reasons"]
    assert any("minimum k = 3" in r and "site gate" in r for r in reasons), reasons


@pytest.mark.parametrize("text, field, words", [
    ("max_pu_su_ratio: .inf\n", "max_pu_su_ratio", "finite"),
    ("max_population_uniqueness: .nan\n", "max_population_uniqueness", "finite"),
    ("min_k: '5'\n", "min_k", "valid integer"),
    ("min_k: true\n", "min_k", "valid integer"),
    ("required_populations: [.inf]\n", "required_populations[0]", "finite"),
    ("max_ratio: 0.1\n", "max_ratio", "unknown key"),
    ("[1, 2]\n", None, "mapping"),
])
def test_bad_site_gate_is_bad_input(tmp_path, site, capsys, text, field, words):
    (site / "gate.yaml").write_text(text)
    policy = tiny(tmp_path, unique=False)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(site / "gate.yaml") in err and words in err, err
    if field:
        assert f": {field}: " in err
    assert not (tmp_path / "out").exists()


def test_named_site_must_exist(tmp_path, monkeypatch, capsys):
    policy = tiny(tmp_path, unique=False)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet", "--site", str(tmp_path / "nope")]) == 2
    assert "--site: not a folder" in capsys.readouterr().err
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "nope"))
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "$SAFESHARE_SITE: not a folder" in capsys.readouterr().err


def test_gate_population_below_the_sample_in_the_site_gate(tmp_path, site, capsys):
    (site / "gate.yaml").write_text("required_populations: [100]\n")
    policy = tiny(tmp_path, unique=False)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{site / 'gate.yaml'}: required_populations[0]: population of 100 is smaller than the 280 records" in err


def test_seal_refuses_an_output_made_under_a_looser_gate(tmp_path, monkeypatch, capsys):
    """An output produced under another site's (or an older engine's) gate is re-checked against the gate of the
    site it is sealed into: the releases store's site (RELEASES/..)."""
    loose = site_with(tmp_path, "loose-site", "max_pu_su_ratio: 1.0\nrequired_populations: [300]\n")
    policy = tiny(tmp_path, TINY + "    gate: {populations: [300], max_pu_su_ratio: 1.0}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(loose)]) == 0
    manifest = strict_json(out / "manifest.json")
    assert manifest["gate"]["passed"] is True and manifest["risk"]["populations"][0]["pu_su_ratio"] > 0.25
    # The strict site: built-in floor (no gate.yaml): USA, California and Los Angeles were never checked.
    strict = site_with(tmp_path, "strict-site", None)
    assert main(["release", str(out), "--to", str(strict / "releases")]) == 1
    err = capsys.readouterr().err
    assert "does not meet the site gate" in err and "Los Angeles required by the built-in site gate" in err, err
    assert not (strict / "releases" / "tiny").exists()
    # A site whose gate requires population 300 with the floor's ratio: the recorded ratio is too high.
    (strict / "gate.yaml").write_text("required_populations: [300]\n")
    assert main(["release", str(out), "--to", str(strict / "releases")]) == 1
    assert f"above the site gate {strict / 'gate.yaml'}'s 0.25" in capsys.readouterr().err
    # The loose site itself accepts it (with the policy, which declares the released columns' roles).
    assert main(["release", str(out), "--to", str(loose / "releases"), "--policy", str(policy)]) == 0


def test_site_gate_defaults_and_loading(tmp_path):
    assert load_site_gate(None) is BUILT_IN_GATE
    assert load_site_gate(tmp_path) is BUILT_IN_GATE     # a site without gate.yaml
    (tmp_path / "gate.yaml").write_text("# only a comment\n")
    loaded = load_site_gate(tmp_path)
    assert loaded.gate == SiteGate() and loaded.source == str(tmp_path / "gate.yaml")
    floor = SiteGate()
    assert (floor.max_pu_su_ratio, floor.max_population_uniqueness, floor.min_k) == (0.25, 1.0, 1)
    assert floor.required_populations == ["USA", "California", "Los Angeles"]


@pytest.mark.parametrize("change, field", [
    (("suppression_limit: 1.0", "suppression_limit: .nan"), "suppression_limit"),
    (("gs_factor: 0.5", "gs_factor: .nan"), "quality.gs_factor"),
    (("k: 5}", "k: 5}\n  - {model: population_uniqueness, population: USA, threshold: .nan}"), "privacy[1].threshold"),
    (("k: 5}", "k: 5}\n  - {model: population_uniqueness, population: .nan, threshold: 0.01}"),
     "privacy[1].population"),
    (("gs_factor: 0.5", "gs_factor: 0.5\nsearch: {time_limit_seconds: .inf}"), "search.time_limit_seconds"),
    (("gs_factor: 0.5", "gs_factor: 0.5\ngate: {max_population_uniqueness: .nan}"), "gate.max_population_uniqueness"),
    (("gs_factor: 0.5", "gs_factor: 0.5\ngate: {populations: [USA, -.inf]}"), "gate.populations[1]"),
])
def test_non_finite_numbers_are_refused_everywhere(tmp_path, site, capsys, change, field):
    text = (EXAMPLES / "adult-k5.yaml").read_text()
    assert change[0] in text
    policy = tmp_path / "policy.yaml"
    policy.write_text(text.replace(change[0], change[1], 1))
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{policy}: {field}: " in err, err


def test_manifest_check_reads_the_recorded_risk():
    from engine.sitegate import manifest_violations

    listed = [{"population": "USA", "size": 318900000.0, "population_uniqueness": 0.001, "pu_su_ratio": 0.1}]
    floor = BUILT_IN_GATE
    with_uniques = {"risk": {"sample_uniques": 5, "released_records": 100, "populations": listed}}
    assert [p.split(" required")[0] for p in manifest_violations(with_uniques, floor)] == [
        "population California", "population Los Angeles"]
    # No sample uniques: no record can be unique in any population, so unlisted populations are met too.
    without = {"risk": {"sample_uniques": 0, "released_records": 100,
                        "populations": [{**listed[0], "population_uniqueness": 0.0, "pu_su_ratio": 0.0}]}}
    assert manifest_violations(without, floor) == []
    unknown = {"risk": {"sample_uniques": 5, "released_records": 100,
                        "populations": [{**listed[0], "pu_su_ratio": None}]}}
    assert "USA: risk unknown (no solved estimate recorded)" in manifest_violations(unknown, floor)
    assert manifest_violations({"gate": {"passed": True}}, floor) == [
        "the manifest records no risk to check against the built-in site gate"]
    strict = SiteGateSource(SiteGate(min_k=5, required_populations=[]), "/site/gate.yaml")
    small = {"smallest_class": 2, "risk": {"sample_uniques": 0, "released_records": 100, "populations": []}}
    assert manifest_violations(small, strict) == ["smallest class 2 below the site gate /site/gate.yaml's min_k = 5"]
