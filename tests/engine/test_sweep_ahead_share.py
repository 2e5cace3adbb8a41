"""The floor sweep's shared roll-ups (engine.search.floor._Ahead.share): while the worker thread rolls up the
transformation about to be checked, the search's thread rolls up the next one handed to the worker that it has not
started, instead of waiting.

What must hold: the job taken over is cancelled (the worker never runs it) and its table, stored in the cache,
equals the table computed without any worker bit for bit; nothing is taken over when the transformation checked
is not being rolled up (queued, done or not handed over at all); no check is counted; and a whole sweep with
roll-ups ahead checks the same transformations in the same order with the same result as one without.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from engine import kernels
from engine.ahead import _CANCELLED, _QUEUED, _RUNNING
from engine.classes import ClassCache
from engine.privacy import KAnonymity
from engine.privacy.configuration import PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import evaluator as evaluator_module
from engine.search import floor as floor_module
from engine.search import search
from engine.search.evaluator import Evaluator
from tests.engine.lattice_tables import random_encoded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def make_evaluator(monkeypatch, table) -> Evaluator:
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    configuration = PrivacyConfiguration([KAnonymity(2)], 1.0)
    return Evaluator(table, configuration, make_quality_model("non_uniform_entropy", table), parallel=True)


def blocked_worker(cache: ClassCache) -> threading.Event:
    """Keep the cache's worker busy until the returned event is set, so that jobs handed to it stay queued."""
    release = threading.Event()
    started = threading.Event()

    def hold():
        started.set()
        release.wait(10)

    cache._worker.submit(hold)
    assert started.wait(10)
    return release


def fresh_table(table, node):
    """`node`'s table from a cache without a worker (the compiled path)."""
    return ClassCache(table, budget_bytes=64 << 20, compiled=kernels.load)._entry(node)


@pytest.mark.parametrize("seed", range(3))
def test_the_next_queued_roll_up_is_taken_over_with_the_same_table(monkeypatch, seed):
    table = random_encoded_table(40 + seed, d=4, records=(800, 1500), values=(5, 15))
    evaluator = make_evaluator(monkeypatch, table)
    cache = evaluator.cache
    try:
        assert cache.prefetches
        release = blocked_worker(cache)
        top = tuple(a.max_level for a in table.attributes)
        current, following = (1, 0, 0, 0), (0, 1, 1, 0)
        for node in (current, following, top):
            evaluator.prefetch(node)
        jobs = dict(cache._pending)
        ahead = floor_module._Ahead(evaluator, None)
        ahead.share(current)   # the current one still queued: nothing taken over
        assert following in cache._pending and jobs[following]._state == _QUEUED
        jobs[current]._state = _RUNNING   # as if the worker had claimed it
        ahead.share(current)
        jobs[current]._state = _QUEUED   # back, so that it can be cancelled below
        assert following not in cache._pending and jobs[following]._state == _CANCELLED
        assert top in cache._pending and jobs[top]._state == _QUEUED   # only the next one
        stored = cache._cache[following]
        expected = fresh_table(table, following)
        for got, want in zip(stored, expected):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert evaluator.checked == 0
        ahead.share((0, 0, 1, 1))   # never handed over: nothing happens
        assert top in cache._pending
        release.set()
    finally:
        evaluator.close()


def sweep(monkeypatch, table, k: int, limit: float, ahead: bool) -> tuple:
    evaluated = []
    original = evaluator_module.Evaluator.evaluate

    def recording(self, node, hint=None, cannot_win=None):
        evaluation = original(self, node, hint, cannot_win)
        evaluated.append((tuple(node), evaluation.sizes.size, evaluation.suppressed_records, evaluation.loss))
        return evaluation

    shared = []
    share = floor_module._Ahead.share
    with monkeypatch.context() as patch:
        patch.delenv(kernels.REFERENCE_ENV, raising=False)
        patch.setenv(kernels.COMPILED_ENV, "1")
        patch.setattr(evaluator_module.Evaluator, "evaluate", recording)
        patch.setattr(floor_module._Ahead, "share", lambda self, node: shared.append(node) or share(self, node))
        patch.setattr(floor_module, "PREFETCH_MIN_CLASSES", 0 if ahead else 1 << 62)
        patch.setenv(kernels.THREADS_ENV, "2" if ahead else "1")
        quality = make_quality_model("non_uniform_entropy", table)
        result = search(table, [KAnonymity(k)], quality, limit, algorithm="flash2p")
    best = result.best
    return (evaluated, result.checked, result.pruned_by_bound, best.levels, best.loss, best.suppressed_records,
            best.suppressed.tolist()), shared


@pytest.mark.parametrize("seed", range(4))
def test_a_sweep_with_shared_roll_ups_checks_the_same(monkeypatch, seed):
    table = random_encoded_table(600 + seed, d=6, records=(1500, 3000), values=(4, 20))
    k, limit = 2 + seed % 4, (1.0, 0.5)[seed % 2]
    plain, none = sweep(monkeypatch, table, k, limit, ahead=False)
    assert not none
    got, shared = sweep(monkeypatch, table, k, limit, ahead=True)
    assert got == plain
    if (os.cpu_count() or 1) > 1:   # a worker thread exists: every check of the sweep asked to share
        assert shared
