"""The class cache's worker thread (engine.ahead): the contract the roll-ups ahead rely on.

A job not yet started can be cancelled and then never runs (the search computes it itself); a started one cannot,
and its result is waited for; an exception in a job reaches the caller; `close` drops queued jobs and joins the
thread; a cache dropped without `close` still stops its thread.
"""
from __future__ import annotations

import gc
import threading
import time

import pytest

from engine import kernels
from engine.ahead import Worker
from engine.classes import ClassCache
from tests.engine.test_distribution_kernels import random_table


def rollup_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("safeshare-rollup")]


def test_results_in_order_and_cancel_only_before_start():
    worker = Worker("safeshare-rollup-test")
    started, release = threading.Event(), threading.Event()
    ran = []

    def blocking():
        started.set()
        release.wait(10)
        ran.append("blocking")
        return "first"

    def quick(value):
        ran.append(value)
        return value * 2

    try:
        first = worker.submit(blocking)
        assert started.wait(10)
        queued = worker.submit(quick, 1)
        kept = worker.submit(quick, 2)
        assert not first.cancel()   # running: cannot be cancelled
        assert queued.cancel() and queued.cancel()   # not started: cancelled, and stays so
        release.set()
        assert first.result() == "first" and kept.result() == 4
        assert ran == ["blocking", 2]   # the cancelled job never ran
        with pytest.raises(RuntimeError):
            queued.result()
    finally:
        release.set()
        worker.close()
    assert not [t for t in threading.enumerate() if t.name == "safeshare-rollup-test"]


def test_an_exception_reaches_the_caller():
    worker = Worker("safeshare-rollup-test")
    try:
        job = worker.submit(lambda: 1 // 0)
        with pytest.raises(ZeroDivisionError):
            job.result()
        assert worker.submit(lambda: "still running").result() == "still running"
    finally:
        worker.close()


def test_close_drops_queued_jobs_and_joins():
    worker = Worker("safeshare-rollup-test")
    release = threading.Event()
    ran = []
    first = worker.submit(lambda: release.wait(10))
    later = [worker.submit(ran.append, i) for i in range(5)]
    time.sleep(0.05)
    threading.Timer(0.1, release.set).start()
    worker.close()
    assert first.result() is True
    assert ran == [] and all(job.cancel() for job in later)
    assert not [t for t in threading.enumerate() if t.name == "safeshare-rollup-test"]


@pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")
def test_a_dropped_cache_stops_its_thread(monkeypatch):
    import os

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    before = len(rollup_threads())
    cache = ClassCache(random_table(3, 1), prefetch=True)
    assert cache._worker is not None and len(rollup_threads()) == before + 1
    cache.prefetch((1,) * len(cache.table.attributes))
    del cache
    gc.collect()
    deadline = time.monotonic() + 10
    while len(rollup_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(rollup_threads()) == before
