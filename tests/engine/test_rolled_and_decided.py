"""A size-only check that misses the class cache, in one step (engine.classes.ClassCache.rolled_from and, on lazy
tables, engine._kernels_numba.roll_up_decide_lazy): the roll-up from the evaluator's remembered source and Loss's
decision in one compiled call. Against the two kernels it replaces (bit for bit), the cache's miss path (the same
tables, stored) and the numpy reference (codes, sizes), and, in the evaluator, against the same checks with the one
step switched off."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.classes import ClassCache, LazyCodes, codes_of
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import Evaluator, search
from tests.engine.lattice_tables import assert_same_search, seeded_table, size_only_case

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def nodes_of(table) -> list[tuple[int, ...]]:
    return list(Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes)))


def direct_specializations(node: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [node[:i] + (level - 1,) + node[i + 1:] for i, level in enumerate(node) if level > 0]


@pytest.mark.parametrize("seed", range(8))
def test_rolled_and_decided_equals_the_two_kernels(seed: int) -> None:
    """roll_up_decide_lazy's table and decision are roll_up_levels_lazy's and suppress_and_loss_terms_lazy's, bit
    for bit, for limits that suppress nothing, some, and too much."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    compiled = kernels.load()
    cache = ClassCache(table, compiled=compiled)
    assert cache.enable_lazy()
    quality = make_quality_model("loss", table)
    rows, select = cache._lazy[0], cache._lazy[1]
    cache._flat_maps()
    decided = 0
    for node in nodes_of(table):
        for source in direct_specializations(node):
            codes, sizes, key = cache._entry(source)
            origin = codes.origin if isinstance(codes, LazyCodes) else cache._lazy[2]
            levels = np.array(source + node, dtype=np.int64)
            common = (rows, select, origin, sizes, key, levels, cache._starts3, cache._flat[0], cache.radix,
                      cache._cards2)
            arguments = quality.compiled_loss_arguments(node)
            for minimal in (2, 3, 5):
                for limit in (0, 5, table.n):
                    got = compiled.roll_up_decide_lazy(*common, minimal, limit, *arguments)
                    table_ = compiled.roll_up_levels_lazy(*common, minimal)
                    picked = select[np.arange(len(node)), node]
                    decision = compiled.suppress_and_loss_terms_lazy(rows, picked, table_[0], table_[1], minimal,
                                                                     limit, *arguments)
                    for a, b in zip(got, table_[:3] + decision):
                        assert np.asarray(a).dtype == np.asarray(b).dtype
                        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
                    decided += bool(got[5].size)
    assert decided   # some checks had Loss's terms


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("lazy", [True, False])
def test_rolled_from_stores_the_table_the_miss_path_would(seed: int, lazy: bool) -> None:
    """From every cached direct specialization with fewer classes than the base: the table `_missed` computes (the
    eager compiled cache's, the numpy reference's codes and sizes), stored; None where the miss path must run."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load())
    assert not lazy or cache.enable_lazy()
    eager = ClassCache(table, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    base = cache.base[0]
    rolled = 0
    for node in sorted(nodes_of(table), key=sum):
        if node == base:
            cache._entry(node)
            continue
        sources = direct_specializations(node)
        source = sources[seed % len(sources)]
        if source not in cache._cache:
            cache._entry(source)
        new = cache.rolled_from(node, source) if node not in cache._cache else None
        if new is None:
            new = cache._entry(node)
        else:
            rolled += 1
            assert cache._cache[node] is new and cache._entry(node) is new
            assert len(new) == 3 and isinstance(new[0], LazyCodes) == lazy
        expected = eager._entry(node)
        assert np.array_equal(new[1], expected[1]) and np.array_equal(new[2], expected[2])
        assert np.array_equal(codes_of(new[0]), expected[0]) and codes_of(new[0]).dtype == expected[0].dtype
        reference_codes, reference_sizes = reference.classes(node)
        assert np.array_equal(codes_of(new[0]), reference_codes) and np.array_equal(new[1], reference_sizes)
    assert rolled
    assert cache.rolled_from(base[:-1] + (base[-1] + 1,), base) is None   # the base: its kept key updates
    assert ClassCache(table, compiled=kernels.load()).rolled_from(nodes_of(table)[-1], base) is None   # not cached


@pytest.mark.parametrize("seed", range(12))
def test_checks_decided_with_the_roll_up_equal_separate_ones(monkeypatch, seed: int) -> None:
    """The evaluator's checks (first evaluated, so they miss the cache) with the one step equal those without it:
    suppression, records, solution, loss's bits, codes and the checks counted."""
    rng = np.random.default_rng(300 + seed)
    table, configuration, model = size_only_case(seed, rng)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fast = Evaluator(table, configuration, make_quality_model(model, table))
    with monkeypatch.context() as m:
        m.setattr(ClassCache, "rolled_from", lambda self, node, source, decision=None: None)
        plain = Evaluator(table, configuration, make_quality_model(model, table))
    calls = []
    original = ClassCache.rolled_from
    monkeypatch.setattr(ClassCache, "rolled_from",
                        lambda self, *a: calls.append(a) or original(self, *a) if self is fast.cache else None)
    nodes = nodes_of(table)
    rng.shuffle(nodes)
    for node in nodes:
        a, b = fast.evaluate(node), plain.evaluate(node)
        assert a.solution == b.solution and a.suppressed_records == b.suppressed_records
        assert np.array_equal(a.sizes, b.sizes) and np.array_equal(a.suppressed, b.suppressed)
        assert np.array_equal(a.codes, b.codes) and a.loss == b.loss
        assert fast.m_anonymous(node) == plain.m_anonymous(node)
    assert fast.checked == plain.checked == len(nodes)
    assert calls
    if model == "loss" and fast._lazy:
        assert any(len(call) == 3 and call[2] is not None for call in calls)   # decided in the roll-up's call


@pytest.mark.parametrize("seed", range(8))
def test_searches_with_the_one_step_equal_those_without(monkeypatch, seed: int) -> None:
    rng = np.random.default_rng(55 + seed)
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    k = int(rng.integers(2, 6))
    limit = float(rng.choice([0.0, 0.02, 0.1, 1.0]))
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    runs = {}
    for one_step in (True, False):
        with monkeypatch.context() as m:
            if not one_step:
                m.setattr(ClassCache, "rolled_from", lambda self, node, source, decision=None: None)
            runs[one_step] = search(table, [KAnonymity(k)], make_quality_model("loss", table), limit)
    assert_same_search(runs[True], runs[False])
