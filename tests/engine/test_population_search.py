"""Population uniqueness as a privacy model: risk-based suppression and the optimum of the search, checked against an
exhaustive search written here with pandas (the risk estimator itself is tested in test_risk_models.py)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.privacy import KAnonymity
from engine.privacy.population import PopulationUniquenessModel
from engine.quality import make_quality_model
from engine.risk import population_uniqueness
from engine.search import search

QIS = ["age", "sex", "race", "marital-status"]
POPULATION = 318.9e6


@pytest.fixture(scope="module")
def adult_sample(demo_dir):
    frame = pd.read_csv(demo_dir / "adult" / "adult.csv", sep=";", dtype=str).iloc[:4000][QIS].reset_index(drop=True)
    hierarchies = {}
    for name in QIS:
        rows = pd.read_csv(demo_dir / "adult" / f"adult_hierarchy_{name}.csv", sep=";", header=None, dtype=str)
        hierarchies[name] = Hierarchy(rows.to_numpy(dtype=object), name=name)
    return frame, hierarchies


def exhaustive(frame, hierarchies, threshold, limit, k=None):
    """Every transformation: classes by pandas groupby, then suppression of whole classes ordered by size, mean
    hierarchy share (most specific first) and first appearance, shortest prefix meeting the threshold found by
    scanning every prefix length; Loss straight from its definition."""
    n = len(frame)
    max_suppressed = math.floor(limit * n + 1e-9)
    best = None
    for levels in itertools.product(*(range(h.levels) for h in hierarchies.values())):
        generalized = pd.DataFrame({a: frame[a].map(dict(zip(h.labels[:, 0], h.labels[:, lv])))
                                    for (a, h), lv in zip(hierarchies.items(), levels)})
        shares = {a: pd.Series(h.labels[:, lv]).value_counts() / len(h) for (a, h), lv in zip(hierarchies.items(), levels)}
        classes = generalized.groupby(QIS, sort=False)
        table = classes.size().rename("size").reset_index()
        table["first"] = [group.index.min() for _, group in classes]
        table["share"] = np.mean([table[a].map(shares[a]).to_numpy() for a in QIS], axis=0)
        suppressed = np.zeros(len(table), dtype=bool)
        if k is not None:
            suppressed |= table["size"].to_numpy() < k
        if table["size"].to_numpy()[suppressed].sum() > max_suppressed:
            continue
        kept = table[~suppressed]
        order = kept.sort_values(["size", "share", "first"], kind="stable").index.to_numpy()
        cut = None
        for prefix in range(0, len(order) + 1):
            if table["size"].to_numpy()[suppressed].sum() + table.loc[order[:prefix], "size"].sum() > max_suppressed:
                break
            remaining = table.drop(index=np.concatenate([order[:prefix], np.flatnonzero(suppressed)]))["size"]
            if remaining.empty:
                cut = prefix
                break
            estimate = population_uniqueness(remaining.to_numpy(), POPULATION, "pitman")
            if estimate.solved and estimate.population_uniqueness <= threshold:
                cut = prefix
                break
        if cut is None:
            continue
        suppressed[order[:cut]] = True
        record_suppressed = generalized.merge(table[suppressed][QIS].assign(_s=True), on=QIS, how="left")["_s"].notna()
        per_attribute = []
        for a, h in hierarchies.items():
            s = np.where(record_suppressed, 1.0, generalized[a].map(shares[a]).to_numpy()).sum()
            floor = n / len(h)
            per_attribute.append((s - floor) / (n - floor))
        loss = np.prod(np.array(per_attribute) + 1) ** (1 / len(per_attribute)) - 1
        if best is None or loss < best[0] - 1e-12:
            best = (loss, levels, int(record_suppressed.sum()))
    return best


@pytest.mark.parametrize("threshold,limit,k", [(0.01, 1.0, None), (0.002, 1.0, None), (0.01, 0.02, None),
                                               (0.01, 1.0, 3)])
def test_search_optimum_matches_exhaustive(adult_sample, threshold, limit, k):
    frame, hierarchies = adult_sample
    encoded = encode_table(frame, hierarchies)
    model = PopulationUniquenessModel(threshold, POPULATION, "pitman")
    class_models = [KAnonymity(k)] if k else []
    result = search(encoded, class_models + [model], make_quality_model("loss", encoded), limit)
    expected = exhaustive(frame, hierarchies, threshold, limit, k)
    assert result.optimal
    assert expected is not None and result.best is not None
    assert result.best.loss == pytest.approx(expected[0], abs=1e-9)
    assert tuple(result.best.levels) == expected[1]
    assert result.best.suppressed_records == expected[2]
    # Pruning: far fewer transformations than the lattice were evaluated.
    assert result.checked < result.lattice_size


def test_risk_based_suppression_removes_smallest_classes_first():
    # 300 uniques and a long tail of larger classes (Pitman has a root here): PU 0.37 % as it is, 0.1 % wanted.
    tail = {2: 80, 3: 40, 4: 20, 5: 10, 8: 5, 20: 2, 150: 1, 400: 1}
    values = [f"u{i}" for i in range(300)]
    for size, count in tail.items():
        values += [f"c{size}_{j}" for j in range(count) for _ in range(size)]
    frame = pd.DataFrame({"a": values})
    hierarchy = Hierarchy(np.array([[v, "*"] for v in sorted(set(values))], dtype=object), name="a")
    encoded = encode_table(frame, {"a": hierarchy})
    model = PopulationUniquenessModel(0.001, POPULATION, "pitman")
    result = search(encoded, [model], make_quality_model("loss", encoded), 1.0)
    best = result.best
    assert tuple(best.levels) == (0,)
    assert set(best.sizes[best.suppressed].tolist()) == {1}          # only uniques went
    assert 0 < best.suppressed_records < 300
    remaining = best.sizes[~best.suppressed]
    assert population_uniqueness(remaining, POPULATION, "pitman").population_uniqueness <= 0.001
    # One unique fewer suppressed would not meet the threshold: the prefix is the shortest.
    one_more = population_uniqueness(np.concatenate([remaining, [1]]), POPULATION, "pitman")
    assert not (one_more.solved and one_more.population_uniqueness <= 0.001)
    # Ties among the uniques are broken by first appearance: the first ones in the input go first.
    suppressed_values = set(frame["a"][np.repeat(best.suppressed, 1)[encoded_class_of(encoded, best)]])
    assert suppressed_values == {f"u{i}" for i in range(best.suppressed_records)}
    assert best.details["population_uniqueness"]["model_used"] == "pitman"


def encoded_class_of(encoded, evaluation):
    """The class of each record under the evaluation's transformation (level 0 here: one class per value)."""
    codes = encoded.attributes[0].records
    lookup = {tuple(c): i for i, c in enumerate(evaluation.codes.T.tolist())}
    return np.array([lookup[(int(code),)] for code in codes])


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "policies" / "examples"

# Optima of the population-uniqueness examples, each confirmed by evaluating the whole lattice
# (benchmarks/exhaustive_check.py): transformation, suppressed records, quality of the optimized model.
PU_EXPECTED = {
    "adult-pu1.yaml": ((0, 2, 0, 0, 0, 0, 0, 0, 0), 268, 0.981479762373),
    "adult-pu5.yaml": ((0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 1.0),
    "adult-dankar-usa.yaml": ((0, 2, 0, 0, 0, 0, 0, 0, 0), 268, 0.981479762373),
    "adult-pu1-entropy.yaml": ((0, 2, 0, 0, 0, 0, 0, 0, 0), 268, 0.925433498841),
    "cup-pu1.yaml": ((3, 1, 0, 0, 0, 1, 0, 0), 0, 0.973184551878),
    "fars-subset-pu1.yaml": ((1, 0, 1, 1, 0, 0, 0, 0), 0, 0.943693609307),
}


@pytest.mark.parametrize("name", sorted(PU_EXPECTED))
def test_example_policy_optima(name):
    from tests.datasets import example_data

    example_data(name)  # the demo table, or benchmark tables (fail under CI, skip elsewhere, when missing)
    from engine import load_policy
    from engine.deid import deidentify

    result = deidentify(load_policy(EXAMPLES / name))
    levels, suppressed, quality = PU_EXPECTED[name]
    assert result.search.optimal
    assert tuple(result.best.levels) == levels
    assert result.best.suppressed_records == suppressed
    assert result.quality[result.policy.quality.model] == pytest.approx(quality, abs=1e-9)
    estimate = result.best.details.get("population_uniqueness")
    threshold = result.policy.privacy[0].threshold
    assert estimate is None or estimate["population_uniqueness"] <= threshold


def test_dankar_criterion_does_not_fall_back_to_zayatz():
    """ARX's criterion uses Dankar's rule without the fallback: where Pitman has no solution (a histogram ARX's Pitman
    fails on, arx-notes 7.1) the model does not hold, although risk analysis reports a Zayatz estimate."""
    sizes = np.repeat([1, 2, 3, 10], [100, 50, 20, 5])
    analysis = population_uniqueness(sizes, 3e8, "dankar")
    assert analysis.model_used == "zayatz" and analysis.solved
    holds, details = PopulationUniquenessModel(1.0, 3e8, "dankar").assess(sizes)
    assert not holds and details["model_used"] == "zayatz"
    assert PopulationUniquenessModel(1.0, 3e8, "zayatz").assess(sizes)[0]
