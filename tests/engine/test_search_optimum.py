"""The search's optimum equals an exhaustive search written independently with pandas (tests/engine/lattice_tables.py)."""
from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.encoding import encode_table
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import search
from tests.engine.lattice_tables import make_hierarchy, pandas_exhaustive, tables


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(attributes=(3, 4), records=(4, 40), levels=(2, 4)), st.integers(2, 4), st.sampled_from([0.0, 0.05, 1.0]),
       st.sampled_from([("loss", "loss-geometric"), ("non_uniform_entropy", "entropy")]))
def test_optimum_matches_exhaustive_search(table, k, limit, model):
    """Larger lattices than test_search_algorithms.py (up to 4 attributes of 4 levels), the algorithm auto-chosen."""
    frame, hierarchies = table
    name, column = model
    encoded = encode_table(frame, hierarchies)
    result = search(encoded, [KAnonymity(k)], make_quality_model(name, encoded), limit)
    losses = [r[1][column] for r in pandas_exhaustive(frame, hierarchies, k, limit).values() if r is not None]
    assert result.optimal
    if not losses:
        assert result.best is None
    else:
        assert result.best is not None
        assert result.best.loss == pytest.approx(min(losses), abs=1e-9)


@pytest.mark.parametrize("algorithm,limit", [("flash", 0.0), ("flash2p", 0.1), ("bnb", 0.1)])
def test_time_limit_ends_the_search_unproven(algorithm, limit):
    frame = pd.DataFrame({"a": ["a0", "a1"] * 10, "b": ["b0", "b1", "b2", "b3"] * 5, "c": ["c0"] * 20})
    hierarchies = {"a": make_hierarchy("a", 2, 2, 2), "b": make_hierarchy("b", 4, 3, 2), "c": make_hierarchy("c", 1, 2, 2)}
    encoded = encode_table(frame, hierarchies)
    result = search(encoded, [KAnonymity(6)], make_quality_model("loss", encoded), limit, algorithm=algorithm,
                    time_limit=0.0)
    assert result.algorithm == algorithm
    assert not result.optimal
