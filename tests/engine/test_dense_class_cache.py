"""The class cache's dense form (engine.classes.ClassCache with one sensitive attribute on the compiled path): the
quasi-identifier classes cached and rolled up with their dense (values, classes) histogram
(engine._distribution_numba.group_dense, roll_up_dense, roll_up_dense_base), instead of the joint classes projected
per check.

What must hold: the same classes, sizes, order and counts as the joint form and as the numpy reference, whatever
the roll-up source (hint, direct specialization, the base with its kept key updates, the worker thread's roll-ups
ahead); the sparse distribution read off the matrix equal to the one built from joint classes; every model's
decision and statistic equal to the reference's; and the joint form kept where the dense one does not pay (several
sensitive attributes, a large domain, the cap, the reference path).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from engine import _distribution_numba, classes, kernels
from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.privacy.disclosure import BetaLikenessModel, DeltaDisclosureModel
from tests.engine.test_distribution_kernels import (adult_table, assert_same_decision, assert_same_view, lattice_of,
                                                    models_for, random_table)

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def three_caches(monkeypatch, table, budget: int = 1 << 12, prefetch: bool = False):
    """The dense form, the joint form (the dense one capped away) and the reference, of one table."""
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    dense = ClassCache(table, budget_bytes=budget, prefetch=prefetch)
    with monkeypatch.context() as patch:
        patch.setattr(classes, "DENSE_BASE_BYTES", 0)
        joint = ClassCache(table, budget_bytes=budget)
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    reference = ClassCache(table, budget_bytes=budget)
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    assert dense.dense is not None and joint.dense is None and reference.dense is None
    assert joint.kernels is not None and reference.kernels is None
    return dense, joint, reference


def assert_same_tables(dense_view, joint_view, reference_view, name: str) -> None:
    assert_same_view(dense_view, reference_view)
    assert_same_view(joint_view, reference_view)
    matrix = dense_view.dense_counts(name)
    cells = _distribution_numba.cell_dtype(int(dense_view.sizes.sum()))   # the table's records decide the cells
    assert matrix is not None and matrix.dtype == cells and matrix.shape == (matrix.shape[0], dense_view.class_count)
    distribution = reference_view.distribution(name)
    expected = np.zeros_like(matrix)
    expected[distribution.values, distribution.classes] = distribution.counts
    assert np.array_equal(matrix, expected)
    assert np.array_equal(matrix.sum(axis=0), dense_view.sizes)
    assert dense_view.counts_by_class.dtype == cells and np.array_equal(dense_view.counts_by_class, matrix.T)
    joint_matrix = joint_view.dense_counts(name)
    assert joint_matrix is None or np.array_equal(joint_matrix, matrix)


def disclosure_models(name: str) -> list:
    return [DeltaDisclosureModel(name, 1.2), DeltaDisclosureModel(name, 2.0), BetaLikenessModel(name, 1.0),
            BetaLikenessModel(name, 0.5, "basic")]


def twice_shuffled_with_hints(nodes: list, rng):
    """(node, hint): every node twice over, in two shuffled orders, each with the node before it as hint (a small
    budget evicts, so the sources vary: the hint, a direct specialization, the base)."""
    for _ in range(2):
        rng.shuffle(nodes)
        for position, node in enumerate(nodes):
            yield node, nodes[position - 1] if position else None


@pytest.mark.parametrize("seed", range(10))
def test_dense_form_equals_joint_form_and_reference(monkeypatch, seed):
    """Every node of random tables, twice over in shuffled orders with the previous node as hint (a small budget
    evicts, so sources vary: hint, direct specialization, base)."""
    table = random_table(seed, 1)
    name = table.sensitive[0].name
    dense, joint, reference = three_caches(monkeypatch, table)
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(seed)
    for node, hint in twice_shuffled_with_hints(nodes, rng):
        if rng.random() < 0.5:   # the classes alone first (the first phase of Flash2P asks for sizes only)
            codes, sizes = dense.classes(node, hint)
            expected_codes, expected_sizes = reference.classes(node, hint)
            assert np.array_equal(codes, expected_codes) and codes.dtype == expected_codes.dtype
            assert np.array_equal(sizes, expected_sizes) and sizes.dtype == expected_sizes.dtype
        views = dense.view(node, hint), joint.view(node, hint), reference.view(node, hint)
        assert_same_tables(*views, name)
        for model in models_for(name):
            assert_same_decision(model, views[0], views[2])
        for model in disclosure_models(name):
            assert np.array_equal(model.violating(views[0]), model.violating(views[2])), model.describe()
        assert dense.nbytes <= dense.budget


def test_dense_form_on_adult(monkeypatch):
    """ADULT with occupation (14 values): the dense form is chosen and equals the joint form on random nodes, from
    the base (its kept key updates) and from cached specializations."""
    table = adult_table("adult-tcloseness-hierarchical-02.yaml")
    dense, joint, reference = three_caches(monkeypatch, table, budget=16 << 20)
    assert dense.base[2].size < joint.base[2].size   # fewer quasi-identifier classes than joint ones
    assert dense._base_deltas() is not None
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(4)
    for index in rng.choice(len(nodes), 80, replace=False):
        node = nodes[int(index)]
        views = dense.view(node), joint.view(node), reference.view(node)
        assert_same_tables(*views, "occupation")
        for model in models_for("occupation")[::3]:
            assert_same_decision(model, views[0], views[2])
    assert dense._deltas[1].any()   # some roll-ups started from the base with kept key updates


@pytest.mark.parametrize("seed", range(4))
def test_every_node_from_the_base(monkeypatch, seed):
    """Nothing cached (budget 0 after the start): every roll-up starts from the base with the kept key updates
    (roll_up_dense_base), and equals the reference."""
    table = random_table(seed, 1)
    dense, _, reference = three_caches(monkeypatch, table, budget=1 << 16)
    assert dense._base_deltas() is not None
    dense.budget = 0
    for node in lattice_of(table):
        node = tuple(node)
        dense._last_view = None
        assert_same_view(dense.view(node), reference.view(node))
    assert len(dense) == 0 and (dense._deltas[1].all() or len(lattice_of(table)) == 1)


def prefetched_in_turn(cache, nodes: list, rng):
    """Every node once in random order, each after the worker was asked to roll three random nodes up ahead (some
    still pending, some done, some the node itself)."""
    for index in rng.permutation(len(nodes)):
        for other in rng.choice(len(nodes), 3):
            cache.prefetch(nodes[int(other)])
        yield nodes[int(index)]


def test_roll_up_dense_base_equals_roll_up_dense(monkeypatch):
    from engine import _distribution_numba as compiled

    table = random_table(5, 1)
    dense, _, _ = three_caches(monkeypatch, table, budget=1 << 16)
    _, codes, sizes, key = dense.base
    histogram = dense._base_dense
    deltas = dense._base_deltas()
    for node in [tuple(node) for node in lattice_of(table)][1:]:
        changed, where = dense._changes(dense.base[0], node)
        rows = np.array([dense._delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
        plain = compiled.roll_up_dense(codes, sizes, key, histogram, changed, where, dense._flat[0], dense._places)
        based = compiled.roll_up_dense_base(codes, sizes, key, histogram, changed, where, dense._flat[0],
                                            dense._places, deltas[0], deltas[1], rows)
        for a, b in zip(plain, based):
            assert np.array_equal(a, b) and a.dtype == b.dtype


def test_prefetched_dense_roll_ups_are_the_tables_asked_for(monkeypatch):
    """Roll-ups started ahead on the worker thread (some asked for, some dropped) roll the histogram up too and
    leave the cache as computing on demand does."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    table = random_table(6, 1)
    name = table.sensitive[0].name
    ahead, joint, reference = three_caches(monkeypatch, table, budget=1 << 20, prefetch=True)
    plain = ClassCache(table, budget_bytes=1 << 20)
    assert plain.dense is not None
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(8)
    try:
        for node in prefetched_in_turn(ahead, nodes, rng):
            assert_same_tables(ahead.view(node), joint.view(node), reference.view(node), name)
            plain.view(node)
        assert len(ahead._pending) <= 4 and set(ahead._cache) == set(plain._cache)
    finally:
        ahead.close()


def test_hand_computed_base_and_roll_up(monkeypatch):
    """Records (x, s): (a, u) (b, v) (a, v) (c, u) (b, v) (a, u); x's level 1 maps a, b to ab and c to c.
    Level 0: classes a, b, c (first appearance) of sizes 3, 2, 1 with counts u: 2, 0, 1 and v: 1, 2, 0; level 1:
    classes ab, c of sizes 5, 1 with u: 2, 1 and v: 3, 0. The sparse entries read off the matrix, by class then
    value: (0, u, 2) (0, v, 3) (1, u, 1)."""
    frame = pd.DataFrame({"x": ["a", "b", "a", "c", "b", "a"], "s": ["u", "v", "v", "u", "v", "u"]})
    hierarchies = {"x": Hierarchy(np.array([["a", "ab", "*"], ["b", "ab", "*"], ["c", "c", "*"]], dtype=object),
                                  name="x")}
    table = encode_table(frame, hierarchies, sensitive={"s": None})
    dense, _, _ = three_caches(monkeypatch, table)
    base = dense.view((0,))
    assert base.sizes.tolist() == [3, 2, 1]
    assert base.dense_counts("s").tolist() == [[2, 0, 1], [1, 2, 0]]
    up = dense.view((1,))
    assert up.sizes.tolist() == [5, 1] and up.dense_counts("s").tolist() == [[2, 1], [3, 0]]
    distribution = up.distribution("s")
    assert distribution.classes.tolist() == [0, 0, 1] and distribution.values.tolist() == [0, 1, 0]
    assert distribution.counts.tolist() == [2, 3, 1] and distribution.counts.dtype == np.int64
    top = dense.view((2,))
    assert top.sizes.tolist() == [6] and top.dense_counts("s").tolist() == [[3], [3]]


def test_the_joint_form_stays_where_dense_does_not_pay(monkeypatch):
    """Two sensitive attributes, a domain too large for the classes (each class one value of 400), or the cap at
    zero: the joint form, with the same results as the reference."""
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    two = ClassCache(random_table(1, 2))
    assert two.dense is None and two._tail == (0, 0)
    size = 400
    frame = pd.DataFrame({"x": [f"x{i}" for i in range(size)], "s": [f"s{i:03d}" for i in range(size)]})
    hierarchies = {"x": Hierarchy(np.array([[f"x{i}", "*"] for i in range(size)], dtype=object), name="x")}
    wide = ClassCache(encode_table(frame, hierarchies, sensitive={"s": None}))
    assert wide.dense is None and wide.view((0,)).joint_class is not None
    small = random_table(2, 1)
    assert ClassCache(small).dense is not None
    monkeypatch.setattr(classes, "DENSE_BASE_BYTES", 0)
    capped = ClassCache(small)
    assert capped.dense is None and capped._tail == (0,)
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    monkeypatch.setattr(classes, "DENSE_BASE_BYTES", 64 << 20)
    assert ClassCache(small).dense is None
