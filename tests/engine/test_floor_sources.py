"""Where the top-down floor sweep's roll-ups come from (engine.search.floor: hubs and roll-ups ahead) and the class
cache's warmed tables (engine.classes.ClassCache.warm).

What must hold: a table rolled up from a warmed hub equals the one rolled up from the base bit for bit (codes,
sizes, order, and the dense form's histogram), on the compiled and on the reference path; the cache really takes
the hub as the source; warmed tables stay within their byte cap; the floor bounds computed a rank at a time are the
per-transformation Python sum's bits; and the sweep checks exactly the same transformations, in the same order,
with the same optimum, with or without hubs and roll-ups ahead.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine import classes, kernels
from engine.classes import ClassCache, codes_of
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import evaluator as evaluator_module
from engine.search import floor as floor_module
from engine.search import search
from tests.engine.lattice_tables import random_encoded_table
from tests.engine.test_distribution_kernels import random_table

compiled_only = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def every_node(table) -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(a.min_level, a.max_level + 1) for a in table.attributes]))


def make_cache(monkeypatch, table, reference: bool, prefetch: bool = False) -> ClassCache:
    if reference:
        monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    else:
        monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
        monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    cache = ClassCache(table, budget_bytes=64 << 20, prefetch=prefetch)
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    return cache


def assert_same_entry(got: tuple, expected: tuple) -> None:
    assert len(got) == len(expected)
    for part, other in zip(got, expected):
        part, other = codes_of(part), codes_of(other)   # a lazy table's codes gathered (the dense form's too)
        if other is None:
            assert part is None
            continue
        assert part.dtype == other.dtype and part.shape == other.shape
        assert np.array_equal(part, other)


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_tables_rolled_up_from_a_hub_equal_those_from_the_base(monkeypatch, seed, reference):
    if not reference and not kernels.enabled():
        pytest.skip("numba is missing or the reference path is forced")
    table = random_encoded_table(500 + seed, d=4, records=(200, 600))
    nodes = every_node(table)
    rng = np.random.default_rng(seed)
    plain = make_cache(monkeypatch, table, reference)
    expected = {node: plain._compute(node, None) for node in nodes}   # every table straight from the base
    for hub in [nodes[i] for i in rng.choice(len(nodes), size=min(6, len(nodes)), replace=False)]:
        cache = make_cache(monkeypatch, table, reference)
        count = cache.warm(hub)
        assert count == expected[hub][1].size and cache.holds(hub)
        assert_same_entry(cache._entry(hub), expected[hub])
        for node in nodes:
            if node == hub or not all(h <= v for h, v in zip(hub, node)):
                continue
            _, entry = cache._source(node, None)
            # the hub, or a cached specialization with even fewer classes: never the base when the hub has fewer
            assert entry[1].size <= min(expected[hub][1].size, cache.base[2].size)
            assert_same_entry(cache._entry(node), expected[node])
        cache.close()
        assert not cache.holds(hub) or hub in cache._cache


@compiled_only
@pytest.mark.parametrize("seed", range(4))
def test_the_dense_form_rolls_up_the_same_classes_and_histogram_from_a_hub(monkeypatch, seed):
    table = random_table(seed, sensitive_count=1)
    plain = make_cache(monkeypatch, table, reference=False)
    assert plain.dense is not None
    nodes = every_node(table)
    expected = {node: plain._compute(node, None) for node in nodes}
    hub = nodes[len(nodes) // 3]
    cache = make_cache(monkeypatch, table, reference=False)
    cache.warm(hub)
    for node in nodes:
        if all(h <= v for h, v in zip(hub, node)):
            entry = cache._entry(node)
            assert len(entry) == 4   # codes, sizes, key and the (classes, values) histogram
            assert_same_entry(entry, expected[node])
            assert_same_entry(tuple(cache.view(node).dense_counts(table.sensitive[0].name)[None]),
                              tuple(plain.view(node).dense_counts(table.sensitive[0].name)[None]))


@compiled_only
def test_warmed_tables_stay_within_their_cap_least_recently_used_first(monkeypatch):
    table = random_encoded_table(77, d=4, records=(400, 600))
    cache = make_cache(monkeypatch, table, reference=False)
    nodes = [n for n in every_node(table) if any(n)][:12]
    sizes = {}
    for node in nodes:   # what each warmed table holds (its classes and key updates), alone
        alone = make_cache(monkeypatch, table, reference=False)
        alone.warm(node)
        sizes[node] = alone.hub_nbytes
    cap = max(sizes.values()) * 3
    monkeypatch.setattr(classes, "HUB_BYTES", cap)
    for node in nodes:
        cache.warm(node)
        assert cache.hub_nbytes <= cap
        assert cache.hub_nbytes == sum(cache._hub_size(h) for h in cache._hubs)
        assert node in cache._hubs   # the newest is kept
    assert nodes[0] not in cache._hubs and len(cache._hubs) < len(nodes)
    # roll-ups from the hubs fill their rows of key updates: counted within the same cap, tables unchanged
    plain = make_cache(monkeypatch, table, reference=False)
    for node in every_node(table):
        assert_same_entry(cache._entry(node), plain._compute(node, None))
        assert cache.hub_nbytes <= cap
        assert cache.hub_nbytes == sum(cache._hub_size(h) for h in cache._hubs)
    assert any(deltas is not None and deltas[1].any() for deltas in cache._hub_deltas.values())
    cache.release_hubs()
    assert cache.hub_nbytes == 0 and not cache._hubs


def test_the_floor_bounds_of_a_rank_are_the_per_transformation_sums_bits():
    rng = np.random.default_rng(5)
    shape = (3, 4, 2, 5, 3)
    per_attribute = [rng.random(h) * rng.choice([1e-3, 1.0, 7.0]) for h in shape]
    floor = rng.random(shape + (len(shape),)) * 0.3
    floor[rng.random(shape) < 0.3] = 0.0
    points = np.argwhere(np.ones(shape, dtype=bool))
    got = floor_module._floor_bounds(per_attribute, floor, points)
    for point, value in zip(points.tolist(), got.tolist()):
        row = floor[tuple(point)]
        expected = sum(float(per_attribute[axis][v] + row[axis]) for axis, v in enumerate(point)) / len(shape)
        expected -= floor_module.MARGIN * (1.0 + abs(expected))
        assert value == expected


def sweep(monkeypatch, table, k: int, limit: float, hubs: bool, ahead: bool) -> tuple:
    """The transformations the sweep evaluates, in order, with the result, under the given sources."""
    evaluated = []
    original = evaluator_module.Evaluator.evaluate

    def recording(self, node, hint=None, cannot_win=None):
        evaluation = original(self, node, hint, cannot_win)
        evaluated.append((tuple(node), evaluation.sizes.size, evaluation.suppressed_records, evaluation.loss))
        return evaluation

    warmed = []
    warm = ClassCache.warm
    with monkeypatch.context() as patch:
        patch.setattr(evaluator_module.Evaluator, "evaluate", recording)
        patch.setattr(ClassCache, "warm", lambda self, node: warmed.append(node) or warm(self, node))
        patch.setattr(floor_module, "HUBS", hubs)
        patch.setattr(floor_module, "HUB_MIN_CANDIDATES", 0)
        patch.setattr(floor_module, "HUB_USEFUL", 1.0)   # every attribute may order hubs
        patch.setattr(floor_module, "HUB_MIN_SHARE", 2)
        patch.setattr(floor_module, "PREFETCH_MIN_CLASSES", 0 if ahead else 1 << 62)
        patch.setenv(kernels.THREADS_ENV, "2" if ahead else "1")
        patch.setenv(kernels.ROLL_AHEAD_ENV, "1" if ahead else "0")
        quality = make_quality_model("non_uniform_entropy", table)
        result = search(table, [KAnonymity(k)], quality, limit, algorithm="flash2p")
    best = result.best
    return (evaluated, result.checked, result.pruned_by_bound, best.levels, best.loss, best.suppressed_records,
            best.suppressed.tolist()), warmed


@compiled_only
@pytest.mark.parametrize("seed", range(8))
def test_the_sweep_checks_the_same_with_and_without_hubs_and_roll_ups_ahead(monkeypatch, seed):
    # lattices of 216-486 transformations, all admissible (limit 100 %) on even seeds: sweeps of 40-70 checks
    table = random_encoded_table(900 + seed, d=6, records=(1500, 3000), values=(4, 20))
    k, limit = 2 + seed % 5, (1.0, 0.5)[seed % 2]
    plain, warmed = sweep(monkeypatch, table, k, limit, hubs=False, ahead=False)
    assert not warmed
    for hubs, ahead in [(True, False), (False, True), (True, True)]:
        got, warmed = sweep(monkeypatch, table, k, limit, hubs, ahead)
        assert got == plain
        if hubs and seed % 2 == 0:
            assert warmed   # hubs of the ranks


def one_by_one_sweep(evaluator, lattice, incumbent, deadline, progress, admissible) -> dict:
    """The sweep as it was before its ranks were vectorized: every transformation of a rank looked at one by one,
    its floor bound summed in Python. The reference the rank-at-a-time sweep must equal, counters included."""
    quality = evaluator.quality
    lower = np.asarray(lattice.lower)
    shape = admissible.shape
    floor = np.zeros(shape + (len(shape),))
    points = np.argwhere(admissible)
    counters = {"pruned_by_bound": 0, "pruned_by_floor": 0, "complete": True}
    if not points.size:
        return counters
    per_attribute = floor_module._generalization_table(quality, lattice)
    d = len(shape)
    level_bounds = sum(per_attribute[axis][points[:, axis]] for axis in range(d)) / d
    level_bounds = level_bounds - floor_module.MARGIN * (1.0 + np.abs(level_bounds))
    ranks = points.sum(axis=1)
    order = np.lexsort((level_bounds, -ranks))
    for chunk in np.split(order, np.flatnonzero(np.diff(ranks[order])) + 1):
        if incumbent.best is not None:
            above = level_bounds[chunk] > incumbent.loss
            counters["pruned_by_bound"] += int(np.count_nonzero(above))
            chunk = chunk[~above]
        for position in chunk:
            point = tuple(int(v) for v in points[position])
            node = tuple(v + int(lo) for v, lo in zip(point, lower))
            level_bound = float(level_bounds[position])
            if incumbent.rules_out(node, level_bound):
                counters["pruned_by_bound"] += 1
                continue
            row = floor[point]
            floor_bound = sum(float(per_attribute[axis][v] + row[axis]) for axis, v in enumerate(point)) / d
            floor_bound -= floor_module.MARGIN * (1.0 + abs(floor_bound))
            if floor_bound > level_bound and incumbent.rules_out(node, floor_bound):
                counters["pruned_by_floor"] += 1
                continue
            before = evaluator.checked
            evaluation = evaluator.evaluate(node, None, incumbent.rules_out)
            progress.update(evaluator.checked - before)
            incumbent.offer(evaluation)
            if evaluation.suppressed_records:
                terms = quality.suppression_terms(node, evaluation.codes, evaluation.sizes, evaluation.suppressed)
                below = tuple(slice(0, v + 1) for v in point)
                np.maximum(floor[below], terms, out=floor[below])
    counters["pruned_by_bound"] += counters["pruned_by_floor"]
    return counters


@pytest.mark.parametrize("seed", range(8))
def test_the_rank_at_a_time_sweep_equals_the_one_by_one_sweep(monkeypatch, seed):
    import engine.search.flash as flash_module

    table = random_encoded_table(900 + seed, d=6, records=(1500, 3000), values=(4, 20))
    k, limit = 2 + seed % 5, (1.0, 0.5)[seed % 2]
    counters = []
    sweep_function = flash_module.floor_sweep

    def counted(function):
        return lambda *args: counters.append(function(*args)) or counters[-1]

    monkeypatch.setattr(flash_module, "floor_sweep", counted(sweep_function))
    got, _ = sweep(monkeypatch, table, k, limit, hubs=True, ahead=False)
    monkeypatch.setattr(flash_module, "floor_sweep", counted(one_by_one_sweep))
    expected, _ = sweep(monkeypatch, table, k, limit, hubs=False, ahead=False)
    assert got == expected
    if counters:
        assert len(counters) == 2 and counters[0] == counters[1]


@compiled_only
@pytest.mark.parametrize("seed", range(4))
def test_the_merged_share_estimate_is_exact_when_every_base_class_is_sampled(monkeypatch, seed):
    table = random_encoded_table(300 + seed, d=4, records=(300, 900))
    cache = make_cache(monkeypatch, table, reference=False)
    m = cache.base[2].size
    bottom = tuple(0 for _ in table.attributes)
    for axis, attribute in enumerate(table.attributes):
        for level in range(1, attribute.max_level + 1):
            node = bottom[:axis] + (level,) + bottom[axis + 1:]
            exact = 1.0 - cache._compute(node, None)[1].size / m
            assert cache.merged_share(axis, level, sample=m) == pytest.approx(exact, abs=1e-12)
            estimate = cache.merged_share(axis, level, sample=max(1, m // 3))   # a third: pairs scale as a third
            assert 0.0 <= estimate
