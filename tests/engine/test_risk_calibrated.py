"""`estimator: calibrated` (issue 29, item 3): the smallest solved of Pitman, Zayatz and SNB plus ten sample records'
worth of population uniques (10 / f); offered in privacy models, gates, site gates and `risk --json`."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from engine.risk import ESTIMATORS, SizeHistogram, population_uniqueness
from engine.risk import calibrated as calibrated_module
from engine.risk.calibrated import ALLOWANCE, calibrated_uniques
from engine.risk.pitman_arx import arx_pitman_uniques
from engine.risk.snb import SNBFit, fit_snb
from engine.risk.zayatz import zayatz_uniques


def _histogram(seed: int = 1, classes: int = 3000, p: float = 0.35) -> SizeHistogram:
    sizes = np.random.default_rng(seed).geometric(p, size=classes)
    return SizeHistogram.from_class_sizes(sizes)


def test_the_allowance_is_ten_sample_records():
    """Ten records cover the largest shortfall of the smallest model on the benchmark (7.9 sample records)."""
    assert ALLOWANCE == 10.0


def test_calibrated_takes_the_smallest_solved_model_and_adds_ten_sample_records():
    histogram = _histogram()
    population = 1_000_000.0
    f = histogram.n / population
    pitman, _ = arx_pitman_uniques(histogram, population)
    snb = fit_snb(histogram, population)
    candidates = {"pitman": pitman, "zayatz": zayatz_uniques(histogram, population),
                  "snb": snb.population_uniques if snb.solved else None}
    solved = {k: v for k, v in candidates.items() if v is not None}
    base = min(solved, key=solved.get)
    model, value, parameters = calibrated_uniques(histogram, population)
    assert parameters["base"] == base and model == f"{base} (+10 sample records)"
    # the value implies exactly ten more sample records that are population uniques than the base does
    assert value * f == pytest.approx(solved[base] * f + 10.0, rel=1e-12)
    assert value == pytest.approx(solved[base] + 10.0 * population / histogram.n, rel=1e-12)
    assert parameters["allowance_sample_records"] == 10.0

    estimate = population_uniqueness(histogram, population, estimator="calibrated")
    assert estimate.estimator == "calibrated" and estimate.solved and estimate.model_used == model
    assert estimate.population_uniques == pytest.approx(value) and estimate.population_uniqueness == value / population


def test_the_allowance_is_a_large_share_where_few_population_uniques_exist(monkeypatch):
    """Census QI A+ at f = 2 % (626 population uniques): SNB's median 347 becomes 847, above the truth;
    QI C at 30 % (105,139): 110,000 becomes 110,033, three hundredths of a percent more."""
    histogram = SizeHistogram.from_counts({1: 460, 2: 180, 3: 100, 7: 600})
    n = histogram.n
    monkeypatch.setattr(calibrated_module, "arx_pitman_uniques", lambda h, N: (None, {}))
    monkeypatch.setattr(calibrated_module, "fit_snb", lambda h, N: SNBFit(True, 1.0, 0.5, 1000.0, 347.0))
    monkeypatch.setattr(calibrated_module, "zayatz_uniques", lambda h, N: 2545.0)
    model, value, _ = calibrated_uniques(histogram, n / 0.02)
    assert model == "snb (+10 sample records)" and value == pytest.approx(847.0) and value > 626
    monkeypatch.setattr(calibrated_module, "fit_snb", lambda h, N: SNBFit(True, 1.0, 0.5, 1e6, 110_000.0))
    monkeypatch.setattr(calibrated_module, "zayatz_uniques", lambda h, N: 111_467.0)
    large = SizeHistogram.from_counts({1: 20_000, 2: 5_000, 7: 3_000})   # 51,000 records, N = 170,000
    _, value, _ = calibrated_uniques(large, large.n / 0.3)
    assert value == pytest.approx(110_000.0 + 10 / 0.3)


def test_calibrated_skips_an_unsolved_model_and_is_unsolved_when_none_solves(monkeypatch):
    histogram = _histogram(seed=2)
    population = 500_000.0
    f = histogram.n / population
    monkeypatch.setattr(calibrated_module, "arx_pitman_uniques", lambda h, N: (None, {}))
    monkeypatch.setattr(calibrated_module, "zayatz_uniques", lambda h, N: 900.0)
    model, value, parameters = calibrated_uniques(histogram, population)
    snb = fit_snb(histogram, population)
    expected_base = "snb" if snb.solved and snb.population_uniques < 900.0 else "zayatz"
    expected = snb.population_uniques if expected_base == "snb" else 900.0
    assert parameters["base"] == expected_base and parameters["pitman"] is None
    assert value == pytest.approx(expected + 10.0 / f)

    monkeypatch.setattr(calibrated_module, "zayatz_uniques", lambda h, N: None)
    monkeypatch.setattr(calibrated_module, "fit_snb", lambda h, N: SNBFit(False, None, None, None, None))
    estimate = population_uniqueness(histogram, population, estimator="calibrated")
    assert not estimate.solved and estimate.population_uniques is None and estimate.population_uniqueness is None
    assert "no solution" in estimate.note


def test_calibrated_is_capped_at_the_population_and_zero_without_sample_uniques(monkeypatch):
    no_uniques = SizeHistogram.from_counts({2: 10, 5: 3})
    estimate = population_uniqueness(no_uniques, 1000, estimator="calibrated")
    assert estimate.solved and estimate.population_uniques == 0.0

    histogram = SizeHistogram.from_counts({1: 50, 2: 5})
    monkeypatch.setattr(calibrated_module, "arx_pitman_uniques", lambda h, N: (N * 0.99, {}))
    monkeypatch.setattr(calibrated_module, "zayatz_uniques", lambda h, N: N * 0.999)
    _, value, _ = calibrated_uniques(histogram, 70.0)
    assert value == 70.0


def test_calibrated_never_below_its_base_and_above_dankar_when_dankar_takes_the_same_model():
    """Where Dankar's rule picks the model calibrated also picks, calibrated is that estimate raised: it can only be
    more conservative than the model it starts from."""
    for seed in range(4):
        histogram = _histogram(seed=seed, classes=1500 + 500 * seed)
        for population in (2e4, 1e5, 1e6):
            estimate = population_uniqueness(histogram, population, estimator="calibrated")
            base = estimate.parameters["base_population_uniques"]
            assert estimate.population_uniques >= base
            dankar = population_uniqueness(histogram, population, estimator="dankar")
            if dankar.model_used == estimate.parameters["base"]:
                assert estimate.population_uniques >= dankar.population_uniques


def test_calibrated_is_an_estimator_everywhere_estimators_are_named():
    from engine.analysis import ESTIMATORS as ANALYSIS_ESTIMATORS
    from engine.policy import ESTIMATOR_NAMES, GateSpec, PopulationUniqueness
    from engine.sitegate import SiteGate

    assert "calibrated" in ESTIMATORS and "calibrated" in ESTIMATOR_NAMES and "calibrated" in ANALYSIS_ESTIMATORS
    assert PopulationUniqueness(model="population_uniqueness", threshold=0.01, population="USA",
                                estimator="calibrated").estimator == "calibrated"
    assert GateSpec(estimator="calibrated").estimator == "calibrated"
    assert GateSpec(estimator=["dankar", "calibrated"]).estimator == ["dankar", "calibrated"]
    assert SiteGate(estimator="calibrated").estimator == "calibrated"
    # Dankar stays the default everywhere
    assert PopulationUniqueness(model="population_uniqueness", threshold=0.01, population="USA").estimator == "dankar"
    assert SiteGate().estimator == "dankar"
    with pytest.raises(ValueError, match="unknown estimator 'calibrate'"):
        GateSpec(estimator="calibrate")


def test_gate_with_calibrated_names_the_model_and_the_benchmark_finding():
    from engine.gate import evaluate_gate
    from engine.policy import GateSpec

    sizes = np.random.default_rng(5).geometric(0.4, size=4000)
    risk, gate = evaluate_gate(GateSpec(populations=[2_000_000], estimator="calibrated"), sizes)
    entry = next(e for e in risk["populations"] if e["size"] == 2_000_000)   # the site's populations come too
    assert risk["estimator"] == ["dankar", "calibrated"]
    calibrated = next(e for e in entry["estimates"] if e["estimator"] == "calibrated")
    dankar = next(e for e in entry["estimates"] if e["estimator"] == "dankar")
    assert calibrated["model"].endswith("(+10 sample records)") and calibrated["solved"]
    for estimate in (calibrated, dankar):
        assert "measured" in estimate["benchmark"]
    # the entry's figure is the strictest estimate's, and names its estimator and finding
    top = max(entry["estimates"], key=lambda e: e["population_uniqueness"])
    assert entry["estimator"] == top["estimator"] and entry["benchmark"] == top["benchmark"]
    assert entry["population_uniqueness"] == top["population_uniqueness"]


def test_population_uniqueness_privacy_model_accepts_calibrated():
    from engine.privacy.population import PopulationUniquenessModel

    sizes = np.random.default_rng(7).geometric(0.5, size=3000)
    model = PopulationUniquenessModel(threshold=1.0, population_size=5e6, estimator="calibrated")
    holds, details = model.assess(sizes)
    assert details["estimator"] == "calibrated" and details["solved"]
    assert holds
    strict = PopulationUniquenessModel(threshold=details["population_uniqueness"] * 0.5, population_size=5e6,
                                       estimator="calibrated")
    assert not strict.assess(sizes)[0]


# --- through the CLI: `safeshare risk --json` and a release's manifest and report --------------------------------
ADULT_K5 = Path(__file__).resolve().parents[2] / "policies" / "examples" / "adult-k5.yaml"


def _adult_policy(tmp_path: Path, extra: str = "") -> Path:
    text = ADULT_K5.read_text()
    text = re.sub(r"(?<=path: |file: )([^\s},]+)",
                  lambda m: str((ADULT_K5.parent / m.group(1)).resolve()), text)
    table = re.search(r"(?<=path: )(\S+)", text).group(1)
    if not Path(table).is_file():
        pytest.fail(f"the demo ADULT table is not at {table}")
    policy = tmp_path / "adult.yaml"
    policy.write_text(text + extra)
    return policy


@pytest.fixture
def no_site(tmp_path, monkeypatch):
    """An empty site folder: the built-in gate floor, never the machine's own site."""
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))


def test_risk_json_lists_calibrated_beside_the_others_with_each_models_finding(tmp_path, capsys):
    from safeshare.cli import main

    policy = _adult_policy(tmp_path, "gate: {populations: [USA, 300000]}\n")
    assert main(["risk", str(policy), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for entry in report["population_estimates"]:
        assert list(entry["models"]) == ["pitman", "zayatz", "snb", "dankar", "calibrated"]
        calibrated = entry["models"]["calibrated"]
        assert calibrated["estimator"] == "calibrated" and calibrated["solved"]
        assert calibrated["model_used"].endswith("(+10 sample records)")
        assert calibrated["population_uniques"] >= calibrated["parameters"]["base_population_uniques"]
        for model in entry["models"].values():
            assert model["benchmark"]["measured"] is (entry["sampling_fraction"] >= 0.001 / 1.5)
    usa = next(e for e in report["population_estimates"] if e["population"] == "USA")
    assert "was not measured" in usa["models"]["calibrated"]["benchmark"]["note"]   # n / N = 1e-4
    local = next(e for e in report["population_estimates"] if e["population"] != "USA")
    assert local["models"]["calibrated"]["benchmark"]["fraction"] == 0.1            # 30,162 / 300,000


def test_release_manifest_and_report_say_which_model_solved_and_what_the_benchmark_found(tmp_path, no_site, capsys):
    from safeshare.cli import main

    # k = 1 keeps sample uniques (so every population needs a model); the site allows them for this test
    (tmp_path / "site" / "gate.yaml").write_text("max_pu_su_ratio: 1.0\n")
    policy = _adult_policy(tmp_path, "gate: {populations: [300000], estimator: calibrated, max_pu_su_ratio: 1.0}\n")
    policy.write_text(policy.read_text().replace("{model: k_anonymity, k: 5}", "{model: k_anonymity, k: 1}"))
    out = tmp_path / "release"
    code = main(["deid", str(policy), "--out", str(out), "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 0, (captured.out[-2000:], captured.err)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["risk"]["estimator"] == ["dankar", "calibrated"]
    assert manifest["risk"]["sample_uniques"] > 0
    for entry in manifest["risk"]["populations"]:
        # the fields that were there stay, with their names
        assert {"population", "size", "model", "solved", "population_uniques", "population_uniqueness",
                "pu_su_ratio"} <= set(entry)
        assert entry["estimator"] in ("dankar", "calibrated") and "measured" in entry["benchmark"]
        for estimate in entry["estimates"]:
            assert estimate["benchmark"]["measured"] is (entry["size"] < 30_162 / 0.001 * 1.5)
    text = (out / "report.html").read_text()
    assert 'id="risk-accuracy"' in text and 'class="risk-accuracy"' in text
    assert "below the truth in" in text and "(+10 sample records)" in text


def test_the_search_models_estimate_in_the_manifest_carries_its_finding_too():
    from engine.gate import gate_result
    from engine.policy import GateSpec

    sizes = np.random.default_rng(11).geometric(0.5, size=3000)
    estimate = population_uniqueness(sizes, 100_000, estimator="calibrated")   # f about 6 %: measured (5 %)
    risk, _ = gate_result(GateSpec(populations=[100_000]), sizes,
                          details={"population_uniqueness": estimate.to_dict()})
    recorded = risk.privacy_model_estimate
    assert recorded["estimator"] == "calibrated" and recorded["model_used"] == estimate.model_used
    assert recorded["benchmark"]["measured"] and recorded["benchmark"]["fraction"] == 0.05
    assert recorded["population_uniques"] == pytest.approx(estimate.population_uniques)


def test_a_site_gate_on_calibrated_seals_exact_figures_and_refuses_lowered_ones(tmp_path, monkeypatch, capsys):
    """SITE/gate.yaml `estimator: calibrated`: `safeshare release` recomputes the calibrated estimate on the released
    data; the untouched output seals, one whose calibrated figure was lowered by hand does not."""
    import shutil

    from safeshare.cli import main

    site = tmp_path / "site"
    site.mkdir()
    (site / "gate.yaml").write_text("max_pu_su_ratio: 1.0\nestimator: calibrated\nrequired_populations: [300000]\n")
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    policy = _adult_policy(tmp_path, "gate: {populations: [300000], max_pu_su_ratio: 1.0}\n")
    policy.write_text(policy.read_text().replace("{model: k_anonymity, k: 5}", "{model: k_anonymity, k: 1}"))
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(site)]) == 0, \
        capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = manifest["risk"]["populations"]
    assert manifest["risk"]["estimator"] == "calibrated" and entry["estimator"] == "calibrated"
    assert entry["model"].endswith("(+10 sample records)") and entry["benchmark"]["fraction"] == 0.1

    lowered = tmp_path / "lowered"
    shutil.copytree(out, lowered)
    edited = json.loads((lowered / "manifest.json").read_text())
    edited["risk"]["populations"][0]["population_uniqueness"] *= 0.5
    (lowered / "manifest.json").write_text(json.dumps(edited, indent=2) + "\n")
    capsys.readouterr()
    assert main(["release", str(lowered), "--to", str(site / "releases")]) == 1
    assert "population_uniqueness" in capsys.readouterr().err
    assert main(["release", str(out), "--to", str(site / "releases")]) == 0, capsys.readouterr().err


def test_risk_html_gives_each_models_benchmark_finding(tmp_path, capsys):
    from safeshare.cli import main

    policy = _adult_policy(tmp_path, "gate: {populations: [USA, 300000]}\n")
    page = tmp_path / "risk.html"
    assert main(["risk", str(policy), "--html", str(page)]) == 0, capsys.readouterr().err
    text = page.read_text()
    assert "benchmark finding" in text and "calibrated -&gt; " in text
    assert "sampling fraction 9.46e-05 was not measured" in text          # USA
    assert text.count("below the truth in") == 5                          # 300,000: each of the five models
