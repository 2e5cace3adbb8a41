"""Roll-ups from the base classes with their key updates kept (engine._kernels_numba.roll_up_base, used by the class
cache's compiled path) against the incremental compiled roll-up and the numpy reference, bit for bit; the bottom's
classes are the base classes themselves; above the memory cap the plain roll-up runs. Edge cases: one class, every
record its own class, every class below k (all suppressed), k larger than the table."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import classes, kernels
from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import Evaluator
from tests.engine.lattice_tables import make_hierarchy, seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def nodes_of(table) -> list[tuple[int, ...]]:
    return list(Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes)))


def assert_same(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("seed", range(5))
def test_every_node_from_the_base_equals_the_reference(seed: int) -> None:
    """One cache that rolls every node up from the base (no hint, nothing cached near: the cache keeps nothing),
    so the kept key updates are reused across nodes; the classes equal the numpy reference's, node by node."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    fast = ClassCache(table, budget_bytes=1 << 16, compiled=kernels.load())
    assert fast._base_deltas() is not None
    fast.budget = 0   # from now on nothing is cached: every roll-up starts from the base
    reference = ClassCache(table, compiled=None)
    order = np.random.default_rng(seed).permutation(len(nodes_of(table)))
    nodes = nodes_of(table)
    for index in order:
        node = nodes[index]
        assert_same(fast.classes(node), reference.classes(node))
    assert fast._deltas[1].all() or len(nodes) == 1   # every key update was filled once and reused


def test_kernel_equals_the_incremental_roll_up() -> None:
    frame, hierarchies = seeded_table(7)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load())
    compiled = kernels.load()
    _, codes, sizes, key = cache.base
    deltas = cache._base_deltas()
    for node in nodes_of(table)[1:]:
        changed, where = cache._changes(cache.base[0], node)
        rows = np.array([cache._delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
        for minimal in (0, 2, 10 ** 6):
            plain = compiled.roll_up(codes, sizes, key, changed, where, cache._flat[0], cache.radix, minimal)
            based = compiled.roll_up_base(codes, sizes, key, changed, where, cache._flat[0], cache.radix, minimal,
                                          deltas[0], deltas[1], rows)
            assert_same(plain[:3], based[:3])
            assert plain[3] == based[3]


def test_the_bottom_is_the_base_and_the_cap_falls_back(monkeypatch) -> None:
    frame, hierarchies = seeded_table(3)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load())
    bottom = nodes_of(table)[0]
    codes, sizes = cache.classes(bottom)
    assert codes is cache.base[1] and sizes is cache.base[2]
    monkeypatch.setattr(classes, "BASE_DELTA_BYTES", 0)
    capped = ClassCache(table, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    for node in nodes_of(table)[1:]:
        assert_same(capped.classes(node), reference.classes(node))
    assert capped._deltas is False


def single_table(values: dict[str, list[str]]):
    frame = pd.DataFrame(values)
    hierarchies = {name: make_hierarchy(name, len(set(column)), 2, 2) for name, column in values.items()}
    frame = frame.replace({name: {v: f"{name}{i}" for i, v in enumerate(sorted(set(column)))}
                           for name, column in values.items()})
    return encode_table(frame, hierarchies)


@pytest.mark.parametrize("k", [2, 5, 1000])
@pytest.mark.parametrize("shape", ["one class", "all distinct"])
def test_evaluations_equal_the_reference_at_the_edges(monkeypatch, k: int, shape: str) -> None:
    n = 12
    values = {"a": ["x"] * n, "b": ["y"] * n} if shape == "one class" else \
        {"a": [f"x{i}" for i in range(n)], "b": [f"y{i % 3}" for i in range(n)]}
    table = single_table(values)
    configuration = PrivacyConfiguration([KAnonymity(k)], 1.0)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fast = Evaluator(table, configuration, make_quality_model("loss", table))
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    reference = Evaluator(table, configuration, make_quality_model("loss", table))
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    assert fast.kernels is not None and reference.kernels is None
    for node in nodes_of(table):
        a, b = fast.evaluate(node), reference.evaluate(node)
        assert np.array_equal(a.codes, b.codes) and np.array_equal(a.sizes, b.sizes)
        assert np.array_equal(a.suppressed, b.suppressed) and a.suppressed_records == b.suppressed_records
        assert a.solution == b.solution and a.loss == b.loss
        if k > n:
            assert a.suppressed.all() and a.suppressed_records == n
    fast.close()
    reference.close()
