"""t-closeness's decision alone on the dense form (engine.privacy._distribution_kernels.t_closeness_equal_violating):
a first sum with the class's reciprocal instead of a division per value, and an exact sum for classes whose first
distance lies within the margin of t. It must decide exactly as the exact distance does, above all at the edges:
t equal to a class's distance (to the last bit), and one ulp either side of it.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.privacy.tcloseness import TClosenessModel
from tests.engine.test_dense_class_cache import three_caches
from tests.engine.test_distribution_kernels import adult_table, lattice_of, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def exact(dense, sizes, q, t):
    from engine.privacy import _distribution_kernels as compiled

    return compiled.t_closeness_equal_dense(dense, sizes, q, t)


def edge_thresholds(distance: np.ndarray, rng) -> list[float]:
    """Each of a few classes' exact distances, and the floats just below and above them."""
    picks = rng.choice(distance.size, min(distance.size, 12), replace=False)
    out = []
    for d in distance[picks]:
        if 0.0 <= d <= 1.0:
            out += [float(d), float(np.nextafter(d, -1.0)), float(np.nextafter(d, 2.0))]
    return [t for t in out if 0.0 <= t <= 1.0]


@pytest.mark.parametrize("seed", range(8))
def test_decision_equals_the_exact_distance_at_the_edges(seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(seed)
    card = int(rng.integers(1, 40))
    classes = int(rng.integers(1, 400))
    q = rng.dirichlet(np.full(card, 0.5))
    # Sparse, skewed classes (sizes from 1 to thousands): shares like the tables'.
    dense = (rng.random((card, classes)) < rng.uniform(0.1, 0.9)) * rng.geometric(0.05, (card, classes))
    dense[rng.integers(0, card, classes), np.arange(classes)] += 1   # no empty class
    dense = dense.astype(np.int32)
    sizes = dense.sum(axis=0).astype(np.int64)
    distance, _ = exact(dense, sizes, q, 0.5)
    thresholds = edge_thresholds(distance, rng) + list(rng.uniform(0, 1, 5)) + [0.0, 1.0]
    near = 0
    for t in thresholds:
        expected = exact(dense, sizes, q, t)[1]
        assert np.array_equal(compiled.t_closeness_equal_violating(dense, sizes, q, t), expected), t
        near += int(np.sum(np.abs(distance - t) < 1e-12))
    assert near > 0   # the exact fallback ran


def test_shares_exactly_representable_and_not():
    """Sizes 3, 7, 10 (shares that are not binary fractions) and 4 (that are), with t at the exact distance."""
    from engine.privacy import _distribution_kernels as compiled

    q = np.array([0.1, 0.2, 0.3, 0.4])
    dense = np.array([[1, 0, 5, 1], [1, 2, 1, 1], [0, 4, 2, 1], [1, 1, 2, 1]], dtype=np.int32)
    sizes = dense.sum(axis=0).astype(np.int64)
    assert sizes.tolist() == [3, 7, 10, 4]
    distance, _ = exact(dense, sizes, q, 0.5)
    # Hand-computed: class 3 holds 1/4 each: (|.25-.1| + |.25-.2| + |.25-.3| + |.25-.4|) / 2 = 0.2.
    assert abs(distance[3] - 0.2) < 1e-15
    for d in distance:
        for t in (float(d), float(np.nextafter(d, 0.0)), float(np.nextafter(d, 1.0))):
            assert np.array_equal(compiled.t_closeness_equal_violating(dense, sizes, q, t),
                                  exact(dense, sizes, q, t)[1]), t


@pytest.mark.parametrize("seed", range(4))
def test_model_decides_as_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    name = table.sensitive[0].name
    dense, _, reference = three_caches(monkeypatch, table)
    rng = np.random.default_rng(seed)
    for node in lattice_of(table):
        view, reference_view = dense.view(tuple(node)), reference.view(tuple(node))
        model = TClosenessModel(name, 0.2, "equal")
        distance = model.distances(reference_view, reference_view.sensitive_attribute(name))
        for t in edge_thresholds(distance, rng) + [0.1, 0.3]:
            model = TClosenessModel(name, t, "equal")
            assert np.array_equal(model.violating(view), model.violating(reference_view)), t


def test_model_decides_as_the_reference_on_adult(monkeypatch):
    table = adult_table("adult-tcloseness-hierarchical-02.yaml")
    dense, _, reference = three_caches(monkeypatch, table, budget=16 << 20)
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(2)
    for index in rng.choice(len(nodes), 25, replace=False):
        view, reference_view = dense.view(nodes[int(index)]), reference.view(nodes[int(index)])
        distance = TClosenessModel("occupation", 0.2).distances(reference_view,
                                                                reference_view.sensitive_attribute("occupation"))
        for t in edge_thresholds(distance, rng) + [0.15, 0.2]:
            model = TClosenessModel("occupation", t, "equal")
            assert np.array_equal(model.violating(view), model.violating(reference_view)), t


def entry_values(view, name: str):
    """Per sparse entry of the reference view: p / q and (p - q) / q, with numpy (the reference's floats)."""
    distribution = view.distribution(name)
    q = view.sensitive_attribute(name).distribution[distribution.values]
    p = distribution.counts / view.sizes[distribution.classes].astype(np.float64)
    return np.abs(np.log(p / q) / np.log(2.0)), (p - q) / q


def edge_parameters(values: np.ndarray, rng) -> list[float]:
    """Some entries' exact values and the floats either side (positive only)."""
    picks = values[rng.choice(values.size, min(values.size, 6), replace=False)] if values.size else values
    out = []
    for x in picks:
        out += [float(x), float(np.nextafter(x, 0.0)), float(np.nextafter(x, np.inf))]
    return [x for x in out if x > 0]


@pytest.mark.parametrize("seed", range(6))
def test_delta_disclosure_and_beta_likeness_decide_as_the_reference(monkeypatch, seed):
    """Compiled on the dense form against the numpy reference on every node, with delta and beta set to entries'
    own values and one ulp either side (delta-disclosure: the cells numpy decides again; beta-likeness: the strict
    comparison)."""
    from engine.privacy.disclosure import BetaLikenessModel, DeltaDisclosureModel

    table = random_table(seed, 1)
    name = table.sensitive[0].name
    dense, _, reference = three_caches(monkeypatch, table)
    rng = np.random.default_rng(seed)
    near = 0
    for node in lattice_of(table):
        view, reference_view = dense.view(tuple(node)), reference.view(tuple(node))
        assert view.dense_counts(name) is not None
        disclosure, likeness = entry_values(reference_view, name)
        for delta in edge_parameters(disclosure, rng) + [0.5, 1.2, 3.0]:
            model = DeltaDisclosureModel(name, delta)
            assert np.array_equal(model.violating(view), model.violating(reference_view)), delta
            near += int(np.sum(np.abs(disclosure - delta) <= 1e-12 * delta))
        for beta in edge_parameters(likeness, rng) + [0.5, 1.0, 4.0]:
            for variant in ("basic", "enhanced"):
                model = BetaLikenessModel(name, beta, variant)
                assert np.array_equal(model.violating(view), model.violating(reference_view)), (beta, variant)
    assert near > 0   # some cells were decided again with numpy


def test_delta_disclosure_returns_the_cells_near_delta():
    """Class 0 holds {a: 1, b: 1} of a table with q = (1/4, 3/4): |log2((1/2) / (1/4))| = 1 exactly; with delta 1
    the cell of a is returned for numpy to decide (and the model decides violating: 1 >= 1); b's |log2(2/3)| = 0.58
    is surely below."""
    from engine.privacy import _distribution_kernels as compiled
    from engine.privacy.disclosure import delta_bounds

    dense = np.array([[1], [1]], dtype=np.int32)
    sizes = np.array([2], dtype=np.int64)
    q = np.array([0.25, 0.75])
    violating, values, classes = compiled.delta_disclosure_dense(dense, sizes, q, delta_bounds(1.0))
    assert values.tolist() == [0] and classes.tolist() == [0] and not violating[0]
    violating, values, _ = compiled.delta_disclosure_dense(dense, sizes, q, delta_bounds(0.5))
    assert violating[0] and values.size == 0
    violating, values, _ = compiled.delta_disclosure_dense(dense, sizes, q, delta_bounds(2.0))
    assert not violating[0] and values.size == 0
    bounds = delta_bounds(1.0)
    assert bounds[0] > 2.0 > bounds[1] > 1.0 > bounds[2] > 0.5 > bounds[3]


@pytest.mark.parametrize("delta", [1e-16, 1e-9, 0.3, 1.0, 7.5, 60.0])
def test_delta_bounds_hold_on_random_ratios(delta):
    """Ratios around 2^(+-delta), one ulp apart: a ratio the bounds call surely violating has numpy's |log2 r| >=
    delta, one they call surely not has it below; the zones never overlap."""
    bounds = __import__("engine.privacy.disclosure", fromlist=["delta_bounds"]).delta_bounds(delta)
    assert bounds[0] >= bounds[1] and bounds[2] >= bounds[3]
    rng = np.random.default_rng(int(delta * 1000) % 97)
    for centre in (2.0 ** delta, 2.0 ** -delta):
        r = centre * (1 + rng.uniform(-1e-9, 1e-9, 20000))
        r = np.concatenate([r, [centre], np.nextafter(centre, 0.0) * np.ones(1), np.nextafter(centre, 3.0) * np.ones(1)])
        value = np.abs(np.log(r) / np.log(2.0))
        surely = (r >= bounds[0]) | (r <= bounds[3])
        surely_not = (r > bounds[2]) & (r < bounds[1])
        assert not np.any(surely & surely_not)
        assert np.all(value[surely] >= delta) and np.all(value[surely_not] < delta)
