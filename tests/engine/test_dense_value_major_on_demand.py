"""The dense form's value-major copy made ahead on demand (engine.classes.ClassCache._by_value): the worker thread
makes it only once a view handed out without it was seen to have it built by its reader. Equal t-closeness and
entropy l-diversity read the class-major histogram, so for them the copy was work no one read.

What must hold either way: the classes and histograms a view hands out are the ones computed on the search's
thread, and the value-major copy, whoever made it, is the exact transpose of the class-major one."""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from engine import kernels
from engine.classes import ClassCache
from tests.engine.test_distribution_kernels import random_table

pytestmark = pytest.mark.skipif(not kernels.enabled() or (os.cpu_count() or 1) < 2,
                                reason="numba is missing, the reference path is forced, or one core (no worker)")


def _nodes(cache: ClassCache) -> list[tuple[int, ...]]:
    """Every transformation but the bottom, in lattice order."""
    top = [len(cards) - 1 for cards in cache.cards[:cache.attributes]]
    return [node for node in itertools.product(*(range(t + 1) for t in top)) if any(node)]


def _view_ahead(cache: ClassCache, node: tuple[int, ...]):
    cache.prefetch(node)
    job = cache._pending.get(node)
    if job is not None:
        job._done.acquire()   # wait until the worker is done with it, so the view takes the worker's table
        job._done.release()
    return cache.view(node)


def test_worker_makes_value_major_only_once_a_reader_built_one(monkeypatch):
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    table = random_table(4, 1)
    cache = ClassCache(table, prefetch=True)
    fresh = ClassCache(table)   # no worker: every table computed on the calling thread
    try:
        assert cache.dense is not None and cache.prefetches
        name = cache.sensitive[0].name
        nodes = _nodes(cache)
        assert len(nodes) >= 3
        first = _view_ahead(cache, nodes[0])
        assert not cache._by_value and not first._dense_built   # no copy made ahead while no one read one
        expected = fresh.view(nodes[0])
        assert np.array_equal(first.counts_by_class, expected.counts_by_class)
        built = first.dense_counts(name)   # the reader builds it: from the next view on the worker makes them
        assert np.array_equal(built, expected.counts_by_class.T)
        second = _view_ahead(cache, nodes[1])
        assert cache._by_value
        third = _view_ahead(cache, nodes[2])
        assert third._dense_built   # made on the worker thread
        reference = fresh.view(nodes[2])
        assert np.array_equal(third.sizes, reference.sizes) and np.array_equal(third.codes, reference.codes)
        assert np.array_equal(third.counts_by_class, reference.counts_by_class)
        assert np.array_equal(third.dense_counts(name), reference.counts_by_class.T)
        assert second.sizes.sum() == table.n
    finally:
        cache.close()


def test_views_never_read_stay_without_a_copy(monkeypatch):
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    table = random_table(6, 1)
    cache = ClassCache(table, prefetch=True)
    fresh = ClassCache(table)
    try:
        for node in _nodes(cache):
            view = _view_ahead(cache, node)
            assert not view._dense_built
            reference = fresh.view(node)
            assert np.array_equal(view.counts_by_class, reference.counts_by_class)
            assert np.array_equal(view.sizes, reference.sizes)
        assert not cache._by_value
    finally:
        cache.close()
