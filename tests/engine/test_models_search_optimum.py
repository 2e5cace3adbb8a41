"""Random tables, random combinations of the privacy models, every quality model and suppression limit: the optimal
search (auto and every exact algorithm the configuration allows) returns the optimum of an exhaustive evaluation of
the lattice. This is what a user's configuration we never saw relies on: the monotonicity each model declares must
never let the search prune the optimum away."""
from __future__ import annotations

import numpy as np
import pytest

from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.privacy.disclosure import BetaLikenessModel, DeltaDisclosureModel
from engine.privacy.kmap import KMapModel
from engine.privacy.ldiversity import LDiversityModel
from engine.privacy.sample_risk import AverageRiskModel, SampleUniquenessModel
from engine.privacy.tcloseness import TClosenessModel
from engine.quality import make_quality_model
from engine.search import Evaluator, search
from tests.engine.lattice_tables import seeded_table

S_HIERARCHY = Hierarchy(np.array([["s0", "x", "*"], ["s1", "x", "*"], ["s2", "y", "*"], ["s3", "y", "*"]],
                                 dtype=object), name="s")


def model_sets(rng: np.random.Generator, n: int) -> list:
    """One or two models drawn from every family, with parameters that make some transformations fail."""
    families = [
        lambda: LDiversityModel("s", int(rng.integers(2, 4))),
        lambda: LDiversityModel("s", float(rng.choice([1.5, 2.0, 2.5])), "entropy"),
        lambda: LDiversityModel("s", 2.0, "entropy", "grassberger"),
        lambda: LDiversityModel("s", int(rng.integers(2, 4)), "recursive", c=float(rng.choice([1.0, 2.0, 3.0]))),
        lambda: TClosenessModel("s", float(rng.choice([0.1, 0.2, 0.3])), "equal"),
        lambda: TClosenessModel("s", float(rng.choice([0.1, 0.2, 0.3])), "ordered"),
        lambda: TClosenessModel("s", float(rng.choice([0.1, 0.2, 0.3])), "hierarchical"),
        lambda: DeltaDisclosureModel("s", float(rng.choice([0.8, 1.2, 2.0]))),
        lambda: BetaLikenessModel("s", float(rng.choice([0.5, 1.0])), str(rng.choice(["basic", "enhanced"]))),
        lambda: AverageRiskModel(float(rng.choice([0.2, 0.3, 0.5]))),
        lambda: SampleUniquenessModel(float(rng.choice([0.0, 0.1, 0.2]))),
        lambda: KMapModel(int(rng.integers(2, 6)), float(n * rng.choice([2, 20])), "poisson", 0.05, n),
        lambda: KAnonymity(int(rng.integers(2, 4))),
    ]
    first = families[int(rng.integers(len(families)))]()
    if rng.random() < 0.4:
        return [first, families[int(rng.integers(len(families)))]()]
    return [first]


def exhaustive_best(table, configuration, quality):
    evaluator = Evaluator(table, configuration, quality)
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    solutions = [e for e in map(evaluator.evaluate, lattice) if e.solution]
    return min(solutions, key=lambda e: e.loss) if solutions else None


@pytest.mark.parametrize("seed", range(300))   # 1,500 seeds pass too (50 s)
def test_search_equals_exhaustive_under_random_models(seed):
    rng = np.random.default_rng(1000 + seed)
    frame, hierarchies = seeded_table(seed)
    frame["s"] = [f"s{v}" for v in rng.choice(4, size=len(frame), p=rng.dirichlet(np.ones(4)))]
    table = encode_table(frame, hierarchies, sensitive={"s": S_HIERARCHY})
    models = model_sets(rng, len(frame))
    limit = float(rng.choice([0.0, 0.1, 0.3, 1.0]))
    quality_name = str(rng.choice(["loss", "non_uniform_entropy", "discernibility", "aecs", "precision"]))
    quality = make_quality_model(quality_name, table)
    configuration = PrivacyConfiguration(models, limit)
    expected = exhaustive_best(table, configuration, quality)
    algorithms = ["auto", "bnb"]
    if configuration.privacy_monotonicity.value != "none":
        algorithms.append("flash2p")
    described = [m.describe() for m in models]
    for algorithm in algorithms:
        result = search(table, configuration, quality, algorithm=algorithm)
        assert result.optimal, (algorithm, described)
        if expected is None:
            assert result.best is None, (algorithm, described, limit, quality_name)
        else:
            assert result.best is not None, (algorithm, described, limit, quality_name)
            assert result.best.loss == pytest.approx(expected.loss, abs=1e-12), (algorithm, described, limit,
                                                                                 quality_name)
