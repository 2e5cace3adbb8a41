"""A search keeps the host's objects out of the collector's full passes (engine.search.common.host_objects_frozen).

A full collection in a test run of 300,000-460,000 objects took 0.2-0.4 s and made a 2 s time limit end 0.23 s
late; frozen host objects leave a collection during the search only the search's own objects to walk."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pandas as pd

from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import RUNNERS, search
from engine.search.common import host_objects_frozen


def small_table():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({f"q{i}": [f"v{v}" for v in rng.integers(0, 3, 60)] for i in range(4)})
    labels = np.array([["v0", "x", "*"], ["v1", "x", "*"], ["v2", "y", "*"]], dtype=object)
    return encode_table(frame, {name: Hierarchy(labels, name=name) for name in frame.columns})


def test_the_host_objects_are_frozen_during_a_search_and_only_then(monkeypatch):
    ballast = [[i] for i in range(50_000)]   # host objects that exist before the search
    seen: list[int] = []
    runner = RUNNERS["lightning"]

    def recording(context):
        seen.append(gc.get_freeze_count())
        return runner(context)

    monkeypatch.setitem(RUNNERS, "lightning", recording)
    before = gc.get_freeze_count()
    encoded = small_table()
    result = search(encoded, [KAnonymity(2)], make_quality_model("loss", encoded), 0.1, algorithm="lightning",
                    time_limit=5.0)
    assert result.best is not None
    assert seen and seen[0] >= before + len(ballast)
    assert gc.get_freeze_count() == before


def test_a_search_that_fails_still_unfreezes(monkeypatch):
    def failing(context):
        raise RuntimeError("runner failed")

    monkeypatch.setitem(RUNNERS, "lightning", failing)
    before = gc.get_freeze_count()
    encoded = small_table()
    try:
        search(encoded, [KAnonymity(2)], make_quality_model("loss", encoded), 0.1, algorithm="lightning")
    except RuntimeError as error:
        assert str(error) == "runner failed"
    else:
        raise AssertionError("the runner's error was swallowed")
    assert gc.get_freeze_count() == before


def test_searches_in_two_threads_share_one_freeze():
    """The first search to end must not unfreeze while the other still runs."""
    first_inside, first_may_leave = threading.Event(), threading.Event()
    counts: dict[str, int] = {}

    def first():
        with host_objects_frozen():
            first_inside.set()
            first_may_leave.wait(10)

    before = gc.get_freeze_count()
    thread = threading.Thread(target=first)
    thread.start()
    assert first_inside.wait(10)
    with host_objects_frozen():
        counts["both"] = gc.get_freeze_count()
        first_may_leave.set()
        thread.join(10)
        counts["second_alone"] = gc.get_freeze_count()
    assert counts["both"] > before
    assert counts["second_alone"] > before        # still frozen: the second search has not ended
    assert gc.get_freeze_count() == before        # both ended: nothing stays frozen


def test_nothing_is_frozen_when_the_collector_is_off():
    before = gc.get_freeze_count()
    gc.disable()
    try:
        with host_objects_frozen():
            assert gc.get_freeze_count() == before
    finally:
        gc.enable()
