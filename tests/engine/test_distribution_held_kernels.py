"""Issue 28, round 3: the GIL-holding twins of the distribution models' per-check decisions
(engine.privacy._distribution_kernels, `*_held`) hold the GIL, their kernels release it, and each twin decides what
its kernel decides, bit for bit, on random class-major histograms at the edges the kernels' own tests use; the models
call the twins on the search's common path.

Why: the search's thread calls these once a check while the class cache's worker thread rolls up ahead; a `nogil`
call hands the GIL to the worker and the search's thread waits to take it back (tests/engine/test_gil_held_kernels.py
has the same for the size kernels)."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.privacy.ldiversity import LDiversityModel
from tests.engine.test_distribution_ldiversity_bounded import arguments, small_classes
from tests.engine.test_distribution_tcloseness_bounded import random_q

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")

TWINS = ["t_closeness_equal_suppression_bounded", "t_closeness_equal_violating_bounded",
         "l_diversity_entropy_suppression_bounded", "l_diversity_entropy_violating_bounded"]


@pytest.mark.parametrize("name", TWINS)
def test_twin_holds_the_gil_and_kernel_releases_it(name):
    from engine.privacy import _distribution_kernels as compiled

    assert getattr(compiled, name + "_held").targetoptions.get("nogil", False) is False
    assert getattr(compiled, name).targetoptions.get("nogil") is True


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(6))
def test_equal_twins_decide_as_their_kernels(seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(1300 + seed)
    dense = small_classes(rng)
    by_class = np.ascontiguousarray(dense.T)
    sizes = dense.sum(axis=0).astype(np.int64)
    q = random_q(rng, dense.shape[0], seed % 2 == 1)
    distances = compiled.t_closeness_equal_dense(dense, sizes, q, 0.5)[0]
    for t in [0.0, 1.0, float(rng.uniform(0, 1))] + [float(d) for d in distances[:5]] + \
            [float(np.nextafter(d, 2.0)) for d in distances[:3]]:
        smallest_read = compiled.equal_smallest_read(q, t)
        for read in (smallest_read, 1):
            expected = compiled.t_closeness_equal_violating_bounded(by_class, sizes, q, t, read)
            assert _same(compiled.t_closeness_equal_violating_bounded_held(by_class, sizes, q, t, read), expected)
            for minimal in (1, 3, 9):
                expected = compiled.t_closeness_equal_suppression_bounded(by_class, sizes, q, t, minimal, read)
                got = compiled.t_closeness_equal_suppression_bounded_held(by_class, sizes, q, t, minimal, read)
                assert _same(got, expected), (t, read, minimal)


@pytest.mark.parametrize("estimator", ["shannon", "grassberger"])
@pytest.mark.parametrize("seed", range(4))
def test_entropy_twins_decide_as_their_kernels(estimator, seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(1400 + seed)
    dense = small_classes(rng)
    by_class = np.ascontiguousarray(dense.T)
    sizes = dense.sum(axis=0).astype(np.int64)
    for l in (1, 2, 3, 4.5):
        model = LDiversityModel("s", l, "entropy", estimator)
        for records in (None, 1):   # tables covering the records, then too short (both refuse alike)
            args = arguments(model, dense, records)
            assert _same(compiled.l_diversity_entropy_violating_bounded_held(by_class, sizes, *args),
                         compiled.l_diversity_entropy_violating_bounded(by_class, sizes, *args))
            for smallest in (1, 2, 5):
                assert _same(compiled.l_diversity_entropy_suppression_bounded_held(by_class, sizes, smallest, *args),
                             compiled.l_diversity_entropy_suppression_bounded(by_class, sizes, smallest, *args))


def test_models_call_the_twins_on_the_search_path(monkeypatch):
    """The t-closeness model's prepared kernels and the l-diversity model's class-major kernel are the twins, and
    they suppress there what the kernels that release the GIL suppress."""
    from engine.privacy import _distribution_kernels as compiled
    from engine.privacy.tcloseness import TClosenessModel
    from tests.engine.test_distribution_kernels import caches, lattice_of, random_table

    table = random_table(3, 1)
    fast, _ = caches(monkeypatch, table, budget=64 << 20)
    assert fast.dense is not None
    view = fast.view(lattice_of(table).bottom)
    assert view.counts_by_class is not None
    t_model = TClosenessModel("s0", 0.3)
    suppressed, count = t_model.suppression(view, 2)
    assert t_model._equal[4] is compiled.t_closeness_equal_suppression_bounded_held
    assert t_model._equal[3] is compiled.t_closeness_equal_violating_bounded_held
    q, read = t_model._equal[1], t_model._equal[2]
    expected = compiled.t_closeness_equal_suppression_bounded(view.counts_by_class, view.sizes, q, 0.3, 2, read)
    assert np.array_equal(suppressed, expected[0]) and count == int(expected[1])
    l_model = LDiversityModel("s0", 2, "entropy")
    l_model.suppression(view, 2)
    assert l_model._fast[1] is compiled.l_diversity_entropy_suppression_bounded_held
