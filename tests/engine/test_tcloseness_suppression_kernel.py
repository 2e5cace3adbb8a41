"""Issue 28, one compiled call per check: with t-closeness (equal distance) as the only class model, the evaluator
takes the classes to suppress and the records they hold from one call (ClassModel.suppression,
engine.privacy._distribution_kernels.t_closeness_equal_suppression) instead of a size mask, the decision, an or
and a sum. The same classes and count as the reference's (sizes < minimal) | violating on every transformation of
random tables and of ADULT (with t at the edge of some classes' distances), and whole searches equal the
reference path's."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.privacy.ldiversity import LDiversityModel
from engine.privacy.tcloseness import TClosenessModel
from engine.quality import make_quality_model
from engine.search import Evaluator, search
from tests.engine.test_distribution_kernels import adult_table, caches, lattice_of, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def assert_fused_equals_reference(model, view, reference_view, minimal: int) -> None:
    fused = model.suppression(view, minimal)
    assert fused is not None
    suppressed, count = fused
    expected = (reference_view.sizes < minimal) | model.violating(reference_view)
    assert suppressed.dtype == np.bool_ and np.array_equal(suppressed, expected)
    assert isinstance(count, int) and count == int(reference_view.sizes[expected].sum())


@pytest.mark.parametrize("seed", [0, 3, 6, 9])
def test_fused_suppression_equals_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    fast, reference = caches(monkeypatch, table)
    name = table.sensitive[0].name
    for node in lattice_of(table):
        node = tuple(node)
        view, reference_view = fast.view(node), reference.view(node)
        # t at each class's own distance (and the ulp either side): the margin's exact re-sum decides those
        distances = TClosenessModel(name, 0.2).distances(reference_view, reference_view.sensitive_attribute(name))
        ts = [0.0, 0.2, 0.45, 1.0] + [float(d) for d in distances[:3]]
        ts += [float(np.nextafter(d, 2.0)) for d in distances[:2]] + [float(np.nextafter(d, -1.0))
                                                                       for d in distances[:2] if d > 0]
        for t in ts:
            model = TClosenessModel(name, min(max(t, 0.0), 1.0))
            for minimal in (1, 2, 4):
                assert_fused_equals_reference(model, view, reference_view, minimal)


def test_fused_suppression_on_adult(monkeypatch):
    table = adult_table("adult-tcloseness-equal-02.yaml")
    fast, reference = caches(monkeypatch, table, budget=64 << 20)
    nodes = list(lattice_of(table))
    for index in np.random.default_rng(7).choice(len(nodes), 40, replace=False):
        node = tuple(nodes[int(index)])
        view, reference_view = fast.view(node), reference.view(node)
        for t in (0.1, 0.2, 0.35):
            for minimal in (1, 5):
                assert_fused_equals_reference(TClosenessModel("occupation", t), view, reference_view, minimal)


def test_models_without_a_fused_call_say_so(monkeypatch):
    """Other distances, other models and the reference path answer None: the evaluator combines `violating`."""
    table = random_table(1, 1)
    fast, reference = caches(monkeypatch, table)
    node = tuple(next(iter(lattice_of(table))))
    name = table.sensitive[0].name
    assert TClosenessModel(name, 0.2, "ordered").suppression(fast.view(node), 1) is None
    assert LDiversityModel(name, 2, "distinct").suppression(fast.view(node), 1) is None   # entropy's has one
    assert LDiversityModel(name, 2, "recursive", c=2.0).suppression(fast.view(node), 1) is None
    assert LDiversityModel(name, 2, "entropy").suppression(reference.view(node), 1) is None
    assert KAnonymity(3).suppression(fast.view(node), 3) is None
    assert TClosenessModel(name, 0.2).suppression(reference.view(node), 1) is None


@pytest.mark.parametrize("seed", [2, 5])
@pytest.mark.parametrize("extra", [False, True])
def test_evaluations_and_searches_equal_the_reference(monkeypatch, seed, extra):
    """Evaluations of every transformation (the fused call alone, and with k-anonymity beside it, which takes the
    general path) and whole searches on both paths."""
    table = random_table(seed, 1)
    name = table.sensitive[0].name
    models = [TClosenessModel(name, 0.25)] + ([KAnonymity(2)] if extra else [])
    configuration = PrivacyConfiguration(models, 0.2)
    built = {}
    for label, flags in (("fast", {kernels.COMPILED_ENV: "1"}), ("reference", {kernels.REFERENCE_ENV: "1"})):
        monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
        for key, value in flags.items():
            monkeypatch.setenv(key, value)
        built[label] = (Evaluator(table, configuration, make_quality_model("loss", table)),
                        search(table, models, make_quality_model("loss", table), 0.2, algorithm="bnb"))
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    (fast, fast_result), (reference, reference_result) = built["fast"], built["reference"]
    assert fast.kernels is not None and reference.kernels is None
    for node in lattice_of(table):
        node = tuple(node)
        a, b = fast.evaluate(node), reference.evaluate(node)
        assert np.array_equal(a.suppressed, b.suppressed) and a.suppressed_records == b.suppressed_records
        assert a.solution == b.solution and a.loss == b.loss
    assert fast_result.best.levels == reference_result.best.levels
    assert fast_result.best.loss == reference_result.best.loss and fast_result.checked == reference_result.checked
    fast.close()
    reference.close()
