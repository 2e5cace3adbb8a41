"""Lazy class tables (engine.classes.LazyCodes, `ClassCache.enable_lazy`): a rolled-up table keeps one base class per
class (its origin) instead of its codes. Against the eager compiled cache and the numpy reference: the same keys,
sizes and order, and the gathered codes equal bit for bit, whatever the source (base with or without kept key
updates, cached tables, warmed tables, the worker thread, evictions); the evaluator's checks and searches are those
of eager tables."""
from __future__ import annotations

import os

import numpy as np
import pytest

from engine import classes, kernels
from engine.classes import ClassCache, Evaluation, LazyCodes, codes_of
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import Evaluator, search
from tests.engine.lattice_tables import assert_same_search, seeded_table, size_only_case

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def nodes_of(table) -> list[tuple[int, ...]]:
    return list(Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes)))


def lazy_cache(table, budget_bytes: int = ClassCache.DEFAULT_BUDGET_BYTES, **options) -> ClassCache:
    """A compiled cache with lazy tables, its budget set after (the level rows are capped by a quarter of it)."""
    cache = ClassCache(table, compiled=kernels.load(), **options)
    assert cache.enable_lazy()
    cache.budget = budget_bytes
    return cache


def assert_same_table(lazy: ClassCache, eager: ClassCache, reference: ClassCache, node) -> None:
    """Keys, sizes and order of the lazy entry equal the eager one's; codes gathered equal both paths'."""
    entry = lazy._entry(node)
    expected = eager._entry(node)
    if node != lazy.base[0]:
        assert isinstance(entry[0], LazyCodes)
        assert entry[0].origin.dtype == np.int32 and entry[0].origin.size == entry[1].size
    assert np.array_equal(entry[1], expected[1]) and entry[1].dtype == expected[1].dtype
    assert np.array_equal(entry[2], expected[2])   # keys, for later roll-ups
    codes = codes_of(entry[0])
    assert codes.dtype == expected[0].dtype and np.array_equal(codes, expected[0])
    reference_codes, reference_sizes = reference.classes(node)
    assert np.array_equal(codes, reference_codes) and np.array_equal(entry[1], reference_sizes)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("budget", [ClassCache.DEFAULT_BUDGET_BYTES, 1 << 12])
def test_lazy_tables_equal_eager_ones_in_any_order(seed: int, budget: int) -> None:
    """Random order, random hints; a small budget evicts, so roll-ups start from the base too."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    lazy = lazy_cache(table, budget_bytes=budget)
    eager = ClassCache(table, budget_bytes=budget, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    nodes = nodes_of(table)
    rng = np.random.default_rng(seed)
    for index in rng.permutation(len(nodes)):
        node = nodes[int(index)]
        hint = nodes[int(rng.integers(len(nodes)))] if rng.random() < 0.5 else None
        lazy.classes(node, hint)
        assert_same_table(lazy, eager, reference, node)
    assert lazy.nbytes <= lazy.budget


@pytest.mark.parametrize("seed", range(6))
def test_lazy_roll_ups_from_the_base_without_kept_updates(monkeypatch, seed: int) -> None:
    """Above the kept key updates' cap the base is rolled up through its origins (the base classes themselves)."""
    monkeypatch.setattr(classes, "BASE_DELTA_BYTES", 0)
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    lazy = lazy_cache(table, budget_bytes=0)   # nothing cached: every roll-up from the base
    assert lazy._base_deltas() is None
    eager = ClassCache(table, budget_bytes=0, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    for node in nodes_of(table):
        assert_same_table(lazy, eager, reference, node)


@pytest.mark.parametrize("seed", range(6))
def test_lazy_roll_ups_from_warmed_tables(seed: int) -> None:
    """Warmed tables keep their codes (their kept key updates are filled from them); tables rolled up from them
    (nothing else cached: `_compute` stores nothing) are lazy and equal the eager ones."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    lazy = lazy_cache(table)
    eager = ClassCache(table, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    assert_rolled_from_warmed_equal(lazy, eager, nodes_of(table), np.random.default_rng(seed), reference)
    assert lazy._hub_deltas and lazy.hub_nbytes == sum(lazy._hub_size(hub) for hub in lazy._hubs)
    assert lazy.hub_nbytes == eager.hub_nbytes + sum(lazy._hubs[h][0].origin.nbytes for h in lazy._hubs
                                                     if isinstance(lazy._hubs[h][0], LazyCodes))


def assert_rolled_from_warmed_equal(lazy: ClassCache, eager: ClassCache, nodes: list, rng,
                                    reference: ClassCache | None = None) -> None:
    """Up to three random nodes warmed in both caches (a lazy cache's warmed table keeps its codes, or their kept
    key updates); then every node computed twice in random order (the second pass reads the key updates the first
    filled) equals the eager one: every field and dtype, and the codes gathered (and the reference's codes)."""
    for index in rng.choice(len(nodes), min(3, len(nodes)), replace=False):
        hub = nodes[int(index)]
        assert lazy.warm(hub) == eager.warm(hub)
        held = lazy._hubs[hub][0]
        assert not isinstance(held, LazyCodes) or held.kept is not None
    for _ in range(2):
        for index in rng.permutation(len(nodes)):
            node = nodes[int(index)]
            got, expected = lazy._compute(node, None), eager._compute(node, None)
            for a, b in zip(got[1:], expected[1:]):
                assert np.array_equal(a, b) and a.dtype == b.dtype
            assert np.array_equal(codes_of(got[0]), expected[0])
            if reference is not None:
                assert np.array_equal(codes_of(got[0]), reference.classes(node)[0])


def test_lazy_tables_rolled_up_ahead_on_the_worker_thread() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    frame, hierarchies = seeded_table(11)
    table = encode_table(frame, hierarchies)
    lazy = lazy_cache(table, prefetch=True)
    eager = ClassCache(table, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    nodes = nodes_of(table)
    rng = np.random.default_rng(5)
    try:
        for index in rng.permutation(len(nodes)):
            for other in rng.choice(len(nodes), 3):
                lazy.prefetch(nodes[int(other)])
            assert_same_table(lazy, eager, reference, nodes[int(index)])
    finally:
        lazy.close()


def test_lazy_is_refused_where_readers_need_codes() -> None:
    """Not once tables are cached (they would mix), nor with the level rows over their cap, nor on the numpy
    path."""
    frame, hierarchies = seeded_table(3)
    table = encode_table(frame, hierarchies)
    busy = ClassCache(table, compiled=kernels.load())
    busy.classes(nodes_of(table)[-1])
    assert not busy.enable_lazy() and busy._lazy is None
    assert not ClassCache(table, budget_bytes=0, compiled=kernels.load()).enable_lazy()   # a quarter of 0 bytes
    assert not ClassCache(table, compiled=None).enable_lazy()


def test_evaluation_codes_are_gathered_once() -> None:
    frame, hierarchies = seeded_table(2)
    table = encode_table(frame, hierarchies)
    lazy = lazy_cache(table)
    node = nodes_of(table)[-1]
    codes, sizes, _ = lazy._entry(node)
    evaluation = Evaluation(node, codes, sizes, np.zeros(sizes.size, bool), 0, True)
    first = evaluation.codes
    assert isinstance(first, np.ndarray) and first is evaluation.codes
    assert np.array_equal(first, ClassCache(table, compiled=None).classes(node)[0])


def test_loss_terms_through_origins_equal_the_eager_kernel() -> None:
    frame, hierarchies = seeded_table(4)
    table = encode_table(frame, hierarchies)
    compiled = kernels.load()
    lazy = lazy_cache(table)
    quality = make_quality_model("loss", table)
    for node in nodes_of(table):
        codes, sizes, _ = lazy._entry(node)
        if not isinstance(codes, LazyCodes):
            continue
        arguments = quality.compiled_loss_arguments(node)
        for minimal in (2, 3, 5):
            for limit in (0, 5, table.n):
                got = compiled.suppress_and_loss_terms_lazy(codes.rows, codes.picked, codes.origin, sizes, minimal,
                                                            limit, *arguments)
                expected = compiled.suppress_and_loss_terms(codes.array(), sizes, minimal, limit, *arguments)
                assert np.array_equal(got[0], expected[0]) and got[1] == expected[1]
                assert got[2].tobytes() == expected[2].tobytes()


def eager_evaluator(monkeypatch):
    """Evaluators built inside this context keep eager tables."""
    monkeypatch.setattr(ClassCache, "enable_lazy", lambda self: False)


@pytest.mark.parametrize("seed", range(16))
def test_checks_with_lazy_tables_equal_eager_ones(monkeypatch, seed: int) -> None:
    rng = np.random.default_rng(900 + seed)
    table, configuration, model = size_only_case(seed, rng)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fast = Evaluator(table, configuration, make_quality_model(model, table))
    assert (fast.cache._lazy is not None) == (fast.max_suppressed > 0)   # no suppression: eager tables
    with monkeypatch.context() as m:
        eager_evaluator(m)
        eager = Evaluator(table, configuration, make_quality_model(model, table))
    assert eager.cache._lazy is None
    nodes = nodes_of(table)
    rng.shuffle(nodes)
    for node in nodes:
        assert fast.m_anonymous(node) == eager.m_anonymous(node)
        a, b = fast.evaluate(node), eager.evaluate(node)
        assert a.levels == b.levels and a.solution == b.solution and a.suppressed_records == b.suppressed_records
        assert np.array_equal(a.sizes, b.sizes) and np.array_equal(a.suppressed, b.suppressed)
        assert a.codes.dtype == b.codes.dtype and np.array_equal(a.codes, b.codes)
        assert a.loss == b.loss
    assert fast.checked == eager.checked


@pytest.mark.parametrize("seed", range(10))
def test_searches_with_lazy_tables_equal_eager_ones(monkeypatch, seed: int) -> None:
    rng = np.random.default_rng(77 + seed)
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    k = int(rng.integers(2, 6))
    limit = float(rng.choice([0.02, 0.1, 1.0]))
    model = ["loss", "non_uniform_entropy"][seed % 2]
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    runs = {}
    enabled = []
    original = ClassCache.enable_lazy
    for lazy in (True, False):
        with monkeypatch.context() as m:
            m.setattr(ClassCache, "enable_lazy",
                      (lambda self: enabled.append(original(self)) or enabled[-1]) if lazy else (lambda self: False))
            runs[lazy] = search(table, [KAnonymity(k)], make_quality_model(model, table), limit)
    if PrivacyConfiguration([KAnonymity(k)], limit).max_suppressed(table.n) > 0:
        assert any(enabled)   # lazy tables were used (not without suppression: `Evaluator._lazy`)
    assert_same_search(runs[True], runs[False])
