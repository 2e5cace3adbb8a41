"""Local recoding (engine.local): ARX's iterations over the suppressed records, the combined output re-checked and
measured over the whole table."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.deid import deidentify
from engine.errors import InputError
from engine.policy import load_policy
from tests.engine.lattice_tables import make_hierarchy

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


@pytest.fixture(autouse=True)
def no_site(tmp_path, monkeypatch):
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))


def skewed_policy(folder: Path, search_block: str, k: int = 5, privacy: str | None = None) -> Path:
    """A generated table where most records share a few values and a tail is rare: the global optimum suppresses
    the tail (cheapest under gs 0.5), which a second part can release generalized."""
    rng = np.random.default_rng(11)
    hierarchies = {name: make_hierarchy(name, 8, 3, 3) for name in "abc"}
    n = 400
    columns = {}
    for name in "abc":
        common = rng.integers(0, 2, n)
        rare = rng.integers(2, 8, n)
        columns[name] = [f"{name}{v}" for v in np.where(rng.random(n) < 0.85, common, rare)]
    pd.DataFrame(columns).to_csv(folder / "data.csv", sep=";", index=False)
    for name, h in hierarchies.items():
        pd.DataFrame(h.labels).to_csv(folder / f"h_{name}.csv", sep=";", index=False, header=False)
    attributes = "".join(f"  {n}: {{type: quasi_identifying, hierarchy: {{file: h_{n}.csv}}}}\n" for n in "abc")
    privacy = privacy or f"  - {{model: k_anonymity, k: {k}}}\n"
    policy = folder / "policy.yaml"
    policy.write_text(f"dataset: skewed\ninput: {{path: data.csv, separator: ';'}}\nattributes:\n{attributes}"
                      f"privacy:\n{privacy}suppression_limit: 1.0\n"
                      f"quality: {{model: loss, aggregation: arithmetic_mean, gs_factor: 0.5}}\n{search_block}")
    return policy


def released_classes(frame: pd.DataFrame, names: list[str]) -> pd.Series:
    """Sizes of the released (non-suppressed) classes, straight from the output values."""
    kept = frame[~(frame[names] == "*").all(axis=1)]
    return kept.groupby(names).size()


def test_local_recoding_beats_global_and_keeps_every_class_k_anonymous(tmp_path):
    from engine.deid import write_release

    global_ = deidentify(skewed_policy(tmp_path, "search: {time_limit_seconds: 30}\n"))
    local = deidentify(skewed_policy(tmp_path, "search: {time_limit_seconds: 30, recoding: local}\n"))
    parts = local.local.iterations
    assert len(parts) >= 2 and parts[0]["transformation"] == global_.transformation
    assert parts[1]["released_records"] > 0
    assert local.quality["loss"] > global_.quality["loss"]
    assert int(local.record_suppressed.sum()) < int(global_.record_suppressed.sum())
    sizes = released_classes(local.released, list("abc"))
    assert sizes.min() >= 5 and int(sizes.sum()) == len(local.released) - int(local.record_suppressed.sum())
    # The parts' record counts add up: each part covers what the previous one suppressed.
    for before, after in zip(parts, parts[1:]):
        assert after["records"] == before["suppressed_records"]
    out = tmp_path / "out"
    manifest = write_release(local, out)
    assert manifest.recoding == "local" and manifest.local_recoding.iterations == parts
    assert json.loads((out / "manifest.json").read_text())["recoding"] == "local"
    assert "local: " in (out / "report.html").read_text()
    assert write_release(global_, tmp_path / "g").recoding == "global"


def test_local_quality_of_one_part_equals_the_global_quality(tmp_path):
    """With one iteration local recoding is the global search, so every quality model must agree with the global
    formulas (the per-record computation over the whole table is checked against them)."""
    global_ = deidentify(skewed_policy(tmp_path, "search: {time_limit_seconds: 30}\n"))
    local = deidentify(skewed_policy(tmp_path, "search: {time_limit_seconds: 30, recoding: local, "
                                               "local_iterations: 1}\n"))
    assert len(local.local.iterations) == 1
    for name, value in global_.quality.items():
        assert local.quality[name] == pytest.approx(value, abs=1e-9), name
    assert np.array_equal(local.record_suppressed, global_.record_suppressed)


def test_population_uniqueness_is_rechecked_on_the_combined_output(tmp_path):
    """The model is re-assessed on the classes of the whole released output (computed here from its values)."""
    from engine.deid import privacy_configuration

    privacy = ("  - {model: k_anonymity, k: 5}\n"
               "  - {model: population_uniqueness, threshold: 0.01, population: 1000000}\n")
    policy = skewed_policy(tmp_path, "search: {time_limit_seconds: 30, recoding: local}\n", privacy=privacy)
    local = deidentify(policy)
    assert len(local.local.iterations) >= 2 and local.local.fell_back is None
    model = privacy_configuration(load_policy(policy)).risk_models[0]
    sizes = released_classes(local.released, list("abc")).to_numpy()
    holds, estimate = model.assess(sizes)
    assert holds, estimate
    assert sizes.min() >= 5


def test_bad_recoding_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as exc:
        load_policy(skewed_policy(tmp_path, "search: {recoding: partial}\n"))
    assert "search.recoding" in str(exc.value)
    with pytest.raises(InputError) as exc:
        load_policy(skewed_policy(tmp_path, "search: {recoding: local, local_iterations: 0}\n"))
    assert "search.local_iterations" in str(exc.value)


def test_creditcard_k5_local_beats_global_with_the_same_limit(data_dir):
    # the genetic algorithm with its fixed iteration count and seed: the same result on any machine (a time limit
    # would make both runs depend on the machine's speed); the limit is only a safety net
    policy = load_policy(EXAMPLES / "creditcard-k5.yaml")
    policy = policy.model_copy(update={"search": policy.search.model_copy(update={"algorithm": "genetic"})})
    global_ = deidentify(policy, time_limit=600)
    local_policy = policy.model_copy(update={"search": policy.search.model_copy(update={"recoding": "local"})})
    local = deidentify(local_policy, time_limit=600)
    assert local.quality["loss"] > global_.quality["loss"]
    names = policy.quasi_identifiers
    sizes = released_classes(local.released, names)
    assert sizes.min() >= 5
    assert int(sizes.sum()) + int(local.record_suppressed.sum()) == len(local.released)


def test_a_combined_output_failing_the_risk_model_falls_back_to_the_global_part(tmp_path, monkeypatch):
    """Fail closed: when the whole output does not meet population uniqueness, only the first (global) part is
    released, with the reason in the manifest."""
    from dataclasses import replace

    from engine.privacy.population import PopulationUniquenessModel

    original = PopulationUniquenessModel.enforce
    calls = []

    def failing_combined(self, evaluation, order, max_suppressed, visible=None, hopeless=None):
        result = original(self, evaluation, order, max_suppressed, visible, hopeless)
        if evaluation.levels == ():   # the combined output (search evaluations have levels)
            calls.append(evaluation.sizes.size)
            if len(calls) == 1:
                return replace(result, solution=False)
        return result

    monkeypatch.setattr(PopulationUniquenessModel, "enforce", failing_combined)
    privacy = ("  - {model: k_anonymity, k: 5}\n"   # k-anonymity makes the global part suppress records
               "  - {model: population_uniqueness, threshold: 0.01, population: 1000000}\n")
    global_ = deidentify(skewed_policy(tmp_path, "search: {time_limit_seconds: 30}\n", privacy=privacy))
    local = deidentify(skewed_policy(tmp_path, "search: {time_limit_seconds: 30, recoding: local}\n",
                                     privacy=privacy))
    assert len(calls) == 2   # the combined output, then the first part alone
    assert local.local.fell_back
    assert len(local.local.iterations) == 1
    pd.testing.assert_frame_equal(local.released, global_.released)
