"""RiskEstimate.to_dict (issue 28): built without dataclasses.asdict's deep copy of every number, it must still give
asdict's result exactly (same keys, values, types and nesting; containers copied, not shared), for every estimator,
since the dict goes into manifest.json and the search's details."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from engine.risk.estimate import ESTIMATORS, RiskEstimate, population_uniqueness


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_to_dict_is_asdict(estimator):
    rng = np.random.default_rng(7)
    for _ in range(6):
        sizes = rng.integers(1, 6, size=int(rng.integers(5, 300)))
        estimate = population_uniqueness(sizes, 1e6, estimator=estimator)
        plain = estimate.to_dict()
        assert plain == asdict(estimate) and repr(plain) == repr(asdict(estimate))


def test_to_dict_copies_the_containers():
    estimate = RiskEstimate("pitman", "pitman", True, 1e6, 0.001, 1000, 10, 0.01, 5.0, 5e-6,
                            parameters={"start": (0.5, [1.0, 2.0]), "nested": {"a": [1, 2]}, "value": np.float64(2)})
    plain = estimate.to_dict()
    assert plain == asdict(estimate)
    assert plain["parameters"] is not estimate.parameters
    assert plain["parameters"]["nested"]["a"] is not estimate.parameters["nested"]["a"]
    assert plain["parameters"]["start"][1] is not estimate.parameters["start"][1]
    plain["parameters"]["nested"]["a"].append(3)
    assert estimate.parameters["nested"]["a"] == [1, 2]
