"""The dense path of the distribution-based models (engine._distribution_numba.project_dense and the *_dense
decisions of engine/privacy/_distribution_kernels.py): one sensitive attribute's counts as a (values, classes)
matrix built with the projection, and every variant decided on it, bit for bit the sparse kernels and the numpy
reference.

The dense sums add each class's terms value by value, as the sparse entries are ordered, plus +0.0 for each value a
class lacks; these tests are what says that the two agree to the last bit, on random tables (skewed values, so
distances and entropies vary), on ADULT, and on the edges: a sensitive attribute with one value, every record in one
class, and a histogram too large to build dense (the sparse path then serves).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from engine import kernels
from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.privacy.ldiversity import LDiversityModel
from engine.privacy.tcloseness import TClosenessModel
from tests.engine.test_distribution_kernels import adult_table, caches, lattice_of, models_for, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def without_dense(view):
    """The same view on the sparse path: its histogram built by the sparse kernel from the joint classes, or, for a
    view of the class cache's dense form (no joint classes), read off the matrix (engine.classes)."""
    if view.joint_class is None:
        name = view.sensitive_names[0]
        sparse = dataclasses.replace(view, _distributions={}).distribution(name)
        return dataclasses.replace(view, dense_values=None, counts_by_class=None, _dense=None, _dense_built=True,
                                   _distributions={name: sparse})
    return dataclasses.replace(view, dense_values=None, _dense=None, _dense_built=False, _distributions={})


def assert_dense_equals_sparse(model, view, reference_view) -> None:
    assert view.dense_counts(model.attribute) is not None
    dense_statistic, dense_violating = model.compiled(view)
    sparse_statistic, sparse_violating = model.compiled(without_dense(view))
    assert dense_statistic.tobytes() == sparse_statistic.tobytes(), model.describe()
    assert np.array_equal(dense_violating, sparse_violating), model.describe()
    assert np.array_equal(dense_violating, model.violating(reference_view)), model.describe()


def assert_dense_matches_histogram(view) -> None:
    """The dense matrix holds exactly the sparse histogram's entries."""
    dense = view.dense_counts(view.sensitive_names[0])
    distribution = without_dense(view).distribution(view.sensitive_names[0])
    expected = np.zeros_like(dense)
    expected[distribution.values, distribution.classes] = distribution.counts
    # int32 from the joint classes (dense_histogram); the class cache's dense form keeps cell_dtype's cells
    assert np.array_equal(dense, expected) and dense.dtype in (np.int16, np.int32)
    assert np.array_equal(dense.sum(axis=0), view.sizes)


@pytest.mark.parametrize("seed", [0, 2, 4, 6, 8, 10])
def test_dense_decisions_equal_sparse_and_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    fast, reference = caches(monkeypatch, table)
    for node in lattice_of(table):
        node = tuple(node)
        view, reference_view = fast.view(node), reference.view(node)
        assert_dense_matches_histogram(view)
        for model in models_for(table.sensitive[0].name):
            assert_dense_equals_sparse(model, view, reference_view)


def test_dense_decisions_on_adult(monkeypatch):
    table = adult_table("adult-tcloseness-hierarchical-02.yaml")
    fast, reference = caches(monkeypatch, table, budget=64 << 20)
    nodes = list(lattice_of(table))
    models = [LDiversityModel("occupation", 3, v, e, c) for v, e, c in
              [("distinct", "shannon", None), ("entropy", "shannon", None), ("entropy", "grassberger", None),
               ("recursive", "shannon", 4.0)]]
    models += [TClosenessModel("occupation", t, d) for t in (0.1, 0.2) for d in ("equal", "ordered", "hierarchical")]
    built = 0
    for index in np.random.default_rng(5).choice(len(nodes), 60, replace=False):
        node = tuple(nodes[int(index)])
        view, reference_view = fast.view(node), reference.view(node)
        if view.dense_counts("occupation") is None:
            continue
        built += 1
        assert_dense_matches_histogram(view)
        for model in models:
            assert_dense_equals_sparse(model, view, reference_view)
    assert built >= 50


def test_one_value_and_one_class(monkeypatch):
    """A sensitive attribute with a single value (every class at distance 0, entropy 0), then every record in one
    class at the top of the lattice."""
    frame = pd.DataFrame({"x": [f"x{i % 3}" for i in range(12)], "s": ["a"] * 12})
    hierarchies = {"x": Hierarchy(np.array([["x0", "*"], ["x1", "*"], ["x2", "*"]], dtype=object), name="x")}
    table = encode_table(frame, hierarchies, sensitive={"s": Hierarchy(np.array([["a", "*"]], dtype=object), name="s")})
    fast, reference = caches(monkeypatch, table)
    for node in [(0,), (1,)]:
        view, reference_view = fast.view(node), reference.view(node)
        assert view.dense_counts("s").shape == (1, view.class_count)
        for model in [LDiversityModel("s", 1, "entropy"), LDiversityModel("s", 2, "distinct"),
                      LDiversityModel("s", 1, "recursive", c=1.0), TClosenessModel("s", 0.0, "equal"),
                      TClosenessModel("s", 0.0, "ordered"), TClosenessModel("s", 0.0, "hierarchical")]:
            assert_dense_equals_sparse(model, view, reference_view)
        distance, violating = TClosenessModel("s", 0.0, "equal").compiled(view)
        assert distance.tolist() == [0.0] * view.class_count and not violating.any()


def test_too_large_a_histogram_stays_sparse(monkeypatch):
    """Many values, each class holding one: values x classes exceeds the dense limit, so the view has no dense
    matrix, and the decisions (sparse) still equal the reference."""
    from engine import _distribution_numba

    size = 400
    frame = pd.DataFrame({"x": [f"x{i}" for i in range(size)], "s": [f"s{i:03d}" for i in range(size)]})
    hierarchies = {"x": Hierarchy(np.array([[f"x{i}", "*"] for i in range(size)], dtype=object), name="x")}
    table = encode_table(frame, hierarchies, sensitive={"s": None})
    fast, reference = caches(monkeypatch, table, budget=1 << 20)
    view, reference_view = fast.view((0,)), reference.view((0,))
    assert view.class_count * size > _distribution_numba.DENSE_CELLS_PER_JOINT_CLASS * size + 4096
    assert view.dense_counts("s") is None and view.kernels is not None and view.dense_values is not None
    for model in [LDiversityModel("s", 1, "entropy"), TClosenessModel("s", 0.5, "equal"),
                  TClosenessModel("s", 0.5, "ordered")]:
        statistic, violating = model.compiled(view)
        assert np.array_equal(violating, model.violating(reference_view))
    top = fast.view((1,))   # one class of 400 values: small enough
    assert top.dense_counts("s").shape == (size, 1)


def test_project_dense_and_dense_histogram_equal_project_keyed_and_histogram():
    """On random joint tables (codes, sizes, keys in a fixed radix with the sensitive row lowest)."""
    from engine import _distribution_numba as compiled

    rng = np.random.default_rng(3)
    grew = False
    for trial in range(60):
        attributes = int(rng.integers(1, 4))
        # Later trials: wide quasi-identifiers, nearly every joint class its own class (the hash table grows).
        cards = rng.integers(1, 6 if trial < 40 else 60, attributes + 1)
        m = int(rng.integers(1, 300 if trial < 40 else 5000))
        codes = np.stack([rng.integers(0, c, m) for c in cards]).astype(np.int32)
        key = np.zeros(m, dtype=np.int64)
        for row, card in zip(codes, cards):
            key = key * int(card) + row
        key, first = np.unique(key, return_index=True)   # joint classes are distinct
        order = np.argsort(first)
        key, codes = key[order], codes[:, first[order]]
        sizes = rng.integers(1, 9, key.size).astype(np.int64)
        span = int(cards[-1])
        codes_d, sizes_d, inverse_d, values_d = compiled.project_dense(codes, sizes, key, attributes, span)
        codes_k, sizes_k, inverse_k = compiled.project_keyed(codes, sizes, key, attributes, span)
        assert np.array_equal(codes_d, codes_k) and codes_d.dtype == codes_k.dtype
        assert np.array_equal(sizes_d, sizes_k) and np.array_equal(inverse_d, inverse_k)
        assert np.array_equal(values_d, codes[attributes]) and values_d.dtype == np.int64
        dense = compiled.dense_histogram(inverse_d, values_d, sizes, sizes_d.size, span)
        assert dense.dtype == np.int32
        classes, values, counts = compiled.histogram(inverse_k, codes[attributes].astype(np.int64), sizes,
                                                     sizes_k.size, span)
        expected = np.zeros((span, sizes_k.size), dtype=np.int64)
        expected[values, classes] = counts
        if sizes_k.size * span > compiled.DENSE_CELLS_PER_JOINT_CLASS * key.size + 4096:
            assert dense.shape == (span, 0), trial   # too large: left to the sparse histogram
        else:
            assert np.array_equal(dense, expected), trial
        grew = grew or sizes_k.size > (m + 1) // 2 + 1
    assert grew


def test_division_by_reciprocal_is_exact():
    """project_dense's quotient and remainder (float reciprocal, two corrections) equal Python's // and % for keys
    up to the class cache's key limit (2^62), spans from 1 to 2^40 and keys at multiples of the span and one off."""
    import numba

    from engine import _distribution_numba as compiled
    from engine.grouping import _KEY_LIMIT

    @numba.njit
    def divide_all(keys, span):
        quotients = np.empty(keys.size, np.int64)
        remainders = np.empty(keys.size, np.int64)
        reciprocal = 1.0 / span
        for j in range(keys.size):
            quotients[j], remainders[j] = compiled._divide(keys[j], span, reciprocal)
        return quotients, remainders

    rng = np.random.default_rng(9)
    for span in [1, 2, 3, 7, 10, 14, 255, 1 << 20, (1 << 31) - 1, (1 << 40) + 1]:
        top = _KEY_LIMIT - 1
        multiples = np.array([0, span, top // span * span], dtype=np.int64)
        keys = np.concatenate([rng.integers(0, _KEY_LIMIT, 20_000, dtype=np.int64),
                               rng.integers(0, 1 << 24, 2_000, dtype=np.int64), multiples, multiples + 1,
                               np.maximum(multiples - 1, 0), np.array([top, top - 1], dtype=np.int64)])
        keys = keys[keys < _KEY_LIMIT]
        quotients, remainders = divide_all(keys, span)
        np.testing.assert_array_equal(quotients, keys // span, err_msg=str(span))
        np.testing.assert_array_equal(remainders, keys % span, err_msg=str(span))
