"""Loss's per-class keys for risk-based suppression, compiled (engine._suppression_numba) against numpy.

The keys order classes of one size for suppression, so a key one ulp off could swap two classes and change which
records a risk model suppresses: the compiled keys must be numpy's to the bit, for every aggregation, on every
transformation, and a risk-based search must keep the reference's optimum, suppression and checks."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine import kernels
from engine.classes import ClassCache
from engine.privacy.configuration import PrivacyConfiguration
from engine.privacy.sample_risk import AverageRiskModel
from engine.quality import make_quality_model
from engine.search import search
from tests.engine.lattice_tables import random_encoded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")

AGGREGATIONS = ("geometric_mean", "arithmetic_mean", "sum")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(6))
def test_compiled_keys_are_numpys_bits_on_every_transformation(seed, aggregation):
    table = random_encoded_table(seed, (3, 5, 6)[seed % 3], records=(60, 400), values=(2, 12))   # d not 2^k: / d rounds
    quality = make_quality_model("loss", table, aggregation=aggregation)
    assert quality._compiled() is not None
    cache = ClassCache(table)
    rng = np.random.default_rng(seed)
    for node in itertools.product(*[range(a.min_level, a.max_level + 1) for a in table.attributes]):
        view = cache.view(node)
        codes, sizes = view.codes, view.sizes
        index = np.flatnonzero(rng.random(sizes.size) < 0.7)   # some classes are candidates, some are not
        compiled = quality.suppression_keys(node, codes, sizes, index)
        reference = quality.suppression_keys(node, codes[:, index], sizes[index])   # numpy: the gathered classes
        assert compiled.tobytes() == reference.tobytes(), (node, aggregation)


def test_no_index_is_the_numpy_path_on_the_classes_given():
    table = random_encoded_table(1, 3, records=(100, 101))
    quality = make_quality_model("loss", table, aggregation="arithmetic_mean")
    view = ClassCache(table).view((0, 0, 0))
    everything = quality.suppression_keys((0, 0, 0), view.codes, view.sizes)
    assert everything.size == view.class_count
    index = np.arange(view.class_count)
    assert quality.suppression_keys((0, 0, 0), view.codes, view.sizes, index).tobytes() == everything.tobytes()


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(3))
def test_risk_based_searches_keep_the_reference_result(seed, aggregation, monkeypatch):
    table = random_encoded_table(10 + seed, 4, records=(300, 500), values=(3, 10))

    def run():
        configuration = PrivacyConfiguration([AverageRiskModel(0.1)], 0.5)
        return search(table, configuration, make_quality_model("loss", table, aggregation=aggregation),
                      algorithm="bnb")

    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    reference = run()
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH")
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    compiled = run()
    assert reference.best is not None and compiled.best is not None
    assert compiled.best.levels == reference.best.levels
    assert compiled.best.loss == reference.best.loss
    assert np.array_equal(compiled.best.suppressed, reference.best.suppressed)
    assert compiled.checked == reference.checked
