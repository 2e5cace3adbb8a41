"""Issue 28, round 3: t-closeness (equal distance) decided with the classes too small to pass suppressed unread
(engine.privacy._distribution_kernels.equal_smallest_read, t_closeness_equal_violating_bounded and
t_closeness_equal_suppression_bounded).

The bound: a class of N records holds at most N values, so its exact distance is at least 1 - (the N largest q
summed); `equal_smallest_read` is checked here against that sum in exact rational arithmetic, and the kernels against
the exact distance (t_closeness_equal_dense, the reference's bits) at the edges: t at a class's own distance and an
ulp either side, classes just below and at the smallest size read, t = 0 and 1, one value, values of q = 0, no
classes. The model, handed views of random tables and ADULT, suppresses what the numpy reference path does."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from engine import kernels
from engine.privacy.tcloseness import TClosenessModel
from tests.engine.test_dense_class_cache_decisions import edge_thresholds, exact
from tests.engine.test_distribution_kernels import adult_table, caches, lattice_of, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def exact_top(q: np.ndarray, n: int) -> Fraction:
    """The n largest q summed exactly (the floats' own values, no rounding)."""
    return sum((Fraction(float(x)) for x in sorted(q.tolist(), reverse=True)[:n]), Fraction(0))


def random_q(rng, card: int, zeros: bool) -> np.ndarray:
    q = rng.dirichlet(np.full(card, rng.uniform(0.3, 3.0)))
    if zeros and card > 2:
        q[rng.choice(card, card // 3, replace=False)] = 0.0
        q /= q.sum()
    return q


@pytest.mark.parametrize("seed", range(12))
def test_smallest_read_is_the_exact_bound_less_the_margin(seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(900 + seed)
    card = int(rng.integers(1, 30))
    q = random_q(rng, card, seed % 2 == 1)
    for t in [0.0, 1.0, float(rng.uniform(0, 0.5)), float(rng.uniform(0, 1))]:
        smallest = compiled.equal_smallest_read(q, t)
        assert 1 <= smallest <= card + 1
        margin = Fraction((compiled.EQUAL_MARGIN_ULPS * card + compiled.EQUAL_MARGIN_ULPS) * 2.0 ** -53)
        for n in range(1, smallest):
            # every class of n records: distance >= 1 - top(n) > t by more than the kernels' margin
            assert 1 - exact_top(q, n) > Fraction(t) + margin, (n, t)
        if smallest <= card:
            # not over-cautious: the size read is one the bound cannot settle (within a few units of the margin)
            assert 1 - exact_top(q, smallest) <= Fraction(t) + margin + Fraction(8 * smallest + 16, 2 ** 53)


def test_smallest_read_on_adult_occupation():
    """ADULT's occupation at t = 0.2: the seven largest shares are needed to come within 0.2 (worked out here from
    the shares themselves), so classes of up to six records violate unread."""
    from engine.privacy import _distribution_kernels as compiled

    table = adult_table("adult-tcloseness-equal-02.yaml")
    q = table.sensitive[0].distribution
    shares = np.sort(q)[::-1]
    needed = int(np.argmax(1.0 - np.cumsum(shares) <= 0.2)) + 1
    assert needed == 7 and compiled.equal_smallest_read(q, 0.2) == needed


def classes_around(rng, q: np.ndarray, smallest: int, count: int) -> np.ndarray:
    """(values, classes) counts: classes of every size from 1 to a little past `smallest`, shaped like q (the
    classes that come nearest to passing) or skewed, plus classes that match q closely; no empty class."""
    card = q.size
    columns = []
    for _ in range(count):
        size = int(rng.integers(1, smallest + 4)) if rng.random() < 0.7 else int(rng.integers(1, 400))
        if rng.random() < 0.5:
            column = rng.multinomial(size, q)
        else:
            column = rng.multinomial(size, rng.dirichlet(np.full(card, 0.4)))
        columns.append(column)
    top = np.argsort(q)[::-1]
    for size in range(1, min(smallest, card) + 2):   # one record on each of the `size` largest shares
        column = np.zeros(card, dtype=np.int64)
        column[top[:min(size, card)]] = 1
        column[top[0]] += size - min(size, card)
        columns.append(column)
    return np.array(columns, dtype=np.int32).T.copy()


@pytest.mark.parametrize("seed", range(16))
def test_bounded_kernels_equal_the_exact_distance_at_the_edges(seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(300 + seed)
    card = int(rng.integers(1, 25)) if seed else 1   # seed 0: one value (every distance 0)
    q = random_q(rng, card, seed % 3 == 2)
    base_t = float(rng.uniform(0.02, 0.6))
    dense = classes_around(rng, q, compiled.equal_smallest_read(q, base_t), int(rng.integers(1, 300)))
    by_class = np.ascontiguousarray(dense.T)
    sizes = dense.sum(axis=0).astype(np.int64)
    distance, _ = exact(dense, sizes, q, 0.5)
    ts = [0.0, 1.0, base_t] + edge_thresholds(distance, rng)
    decided_unread = 0
    for t in ts:
        smallest = compiled.equal_smallest_read(q, t)
        expected = exact(dense, sizes, q, t)[1]
        assert np.array_equal(compiled.t_closeness_equal_violating_bounded(by_class, sizes, q, t, smallest),
                              expected), t
        for minimal in (1, 2, 5):
            chosen, total = compiled.t_closeness_equal_suppression_bounded(by_class, sizes, q, t, minimal, smallest)
            assert chosen.dtype == np.bool_ and np.array_equal(chosen, expected | (sizes < minimal)), (t, minimal)
            assert int(total) == int(sizes[chosen].sum())
        decided_unread += int(np.sum(sizes < smallest))
    if card > 3:
        assert decided_unread > 0   # the bound decided some classes


def test_bounded_kernels_with_no_classes_and_every_class_unread():
    from engine.privacy import _distribution_kernels as compiled

    q = np.array([0.5, 0.3, 0.2])
    empty = np.zeros((0, 3), dtype=np.int32)
    sizes = np.zeros(0, dtype=np.int64)
    assert compiled.t_closeness_equal_violating_bounded(empty, sizes, q, 0.1, 2).size == 0
    chosen, total = compiled.t_closeness_equal_suppression_bounded(empty, sizes, q, 0.1, 1, 2)
    assert chosen.size == 0 and int(total) == 0
    # t = 0 with every share positive: only a class holding every value can pass, so size 3 is the first read
    assert compiled.equal_smallest_read(q, 0.0) == 3
    counts = np.array([[1, 0, 0], [1, 1, 0], [5, 3, 2]], dtype=np.int32)
    sizes = counts.sum(axis=1).astype(np.int64)
    assert compiled.t_closeness_equal_violating_bounded(counts, sizes, q, 0.0, 3).tolist() == [True, True, False]
    chosen, total = compiled.t_closeness_equal_suppression_bounded(counts, sizes, q, 0.0, 11, 3)
    assert chosen.tolist() == [True, True, True] and int(total) == 13   # all below the smallest class size


def assert_model_suppresses_as_the_reference(model, view, reference_view, minimal):
    expected = (reference_view.sizes < minimal) | model.violating(reference_view)
    for built in (False, True):   # class-major only, then with the value-major copy made too
        if built:
            view.dense_counts(model.attribute)
        suppressed, count = model.suppression(view, minimal)
        assert np.array_equal(suppressed, expected) and count == int(reference_view.sizes[expected].sum())
        assert np.array_equal(model.violating(view), model.violating(reference_view))


@pytest.mark.parametrize("seed", [0, 4, 8])
def test_model_equals_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    fast, reference = caches(monkeypatch, table)
    name = table.sensitive[0].name
    for node in lattice_of(table):
        node = tuple(node)
        reference_view = reference.view(node)
        distances = TClosenessModel(name, 0.2).distances(reference_view, reference_view.sensitive_attribute(name))
        for t in [0.0, 0.05, 0.2, 0.45, 1.0] + [float(d) for d in distances[:3]]:
            model = TClosenessModel(name, min(max(t, 0.0), 1.0))
            for minimal in (1, 3):
                view = fast.view(node)
                view._dense, view._dense_built = None, False
                assert_model_suppresses_as_the_reference(model, view, reference_view, minimal)


def test_model_equals_the_reference_on_adult(monkeypatch):
    table = adult_table("adult-tcloseness-equal-02.yaml")
    fast, reference = caches(monkeypatch, table, budget=64 << 20)
    nodes = list(lattice_of(table))
    for index in np.random.default_rng(29).choice(len(nodes), 30, replace=False):
        node = tuple(nodes[int(index)])
        reference_view = reference.view(node)
        for t in (0.05, 0.2, 0.5):
            view = fast.view(node)
            view._dense, view._dense_built = None, False
            assert_model_suppresses_as_the_reference(TClosenessModel("occupation", t), view, reference_view, 2)
