"""Each ADULT example policy of the attribute-disclosure and average-risk models: the search's optimum equals an
exhaustive evaluation of every transformation of the lattice (no pruning, no predictive property), so whatever
monotonicity the models declare cannot have pruned the optimum away."""
from __future__ import annotations

import pytest

from engine.deid import deidentify, privacy_configuration
from engine.lattice import Lattice
from engine.policy import load_policy
from engine.quality import make_quality_model
from engine.search import Evaluator
from engine.sitegate import BUILT_IN_GATE
from tests.engine.conftest import EXAMPLES

POLICIES = ["adult-distinct-l3", "adult-entropy-l3", "adult-recursive-c4-l3", "adult-tcloseness-equal-02",
            "adult-tcloseness-hierarchical-02", "adult-average-risk-005", "adult-k5-distinct-l2"]


@pytest.mark.parametrize("name", POLICIES)
def test_example_optimum_equals_exhaustive_search(name, demo_dir):
    policy = load_policy(EXAMPLES / f"{name}.yaml")
    result = deidentify(policy, site=BUILT_IN_GATE)
    table = result.table
    quality = make_quality_model(policy.quality.model, table, policy.quality.aggregation, policy.quality.gs_factor)
    evaluator = Evaluator(table, privacy_configuration(policy, table.n), quality)
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    solutions = [e for e in map(evaluator.evaluate, lattice) if e.solution]
    best = min(solutions, key=lambda e: (e.loss, e.levels))
    assert result.search.optimal
    assert result.best.loss == pytest.approx(best.loss, abs=1e-12)
    assert tuple(result.best.levels) == tuple(best.levels)
    assert result.best.suppressed_records == best.suppressed_records
