"""What every search algorithm shares: the best solution so far with the documented tie-breaking, the result, the
budget (time limit and memory bound) and the progress bar.

Tie-breaking (the same for every algorithm, so the algorithm never changes the answer): among transformations of
equal loss, the one with the smaller lower bound wins, then the one with fewer generalization steps (sum of levels),
then the lexicographically smaller level vector.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..classes import Evaluation

Node = tuple[int, ...]


@dataclass
class SearchResult:
    best: Evaluation | None
    checked: int
    optimal: bool
    seconds: float
    lattice_size: int
    algorithm: str
    pruned_by_bound: int = 0
    pruned_by_privacy: int = 0
    risk_evaluations: int = 0   # calls of a risk model (population uniqueness), for benchmarks
    phases: dict | None = None  # per phase of a multi-phase search: transformations checked
    stopped: str | None = None  # why the search ended before proving the optimum (a limit), None when it did not
    limits: dict | None = None  # the limits it ran under, and the most memory it was seen to add
    # [seconds since the search started, quality] each time the best solution improved: the curve of a report
    quality_over_time: list[list[float]] = field(default_factory=list)
    choice: dict | None = None  # how `auto` chose the algorithm (estimate of the optimal search against the limit)


class Incumbent:
    """The best solution so far, and whether a transformation's bound rules out it and all its generalizations.

    Every improvement is also recorded in `trace` as [seconds since `started`, quality], so that a heuristic's (or
    a stopped search's) quality over time can be reported and compared (Meurers et al. 2021, Fig. 7)."""

    def __init__(self, quality, started: float | None = None) -> None:
        self.quality = quality
        self.best: Evaluation | None = None
        self.key: tuple | None = None
        self.started = time.perf_counter() if started is None else started
        self.trace: list[list[float]] = []

    @property
    def loss(self) -> float:
        return self.best.loss if self.best is not None else float("inf")

    def _key(self, evaluation: Evaluation) -> tuple:
        levels = tuple(evaluation.levels)
        return (evaluation.loss, self.quality.bound(levels), sum(levels), levels)

    def offer(self, evaluation: Evaluation) -> bool:
        if not evaluation.solution or evaluation.loss is None:
            return False
        if self.key is not None and evaluation.loss > self.key[0]:
            return False   # a greater loss never wins the tie-break below: no key to build
        key = self._key(evaluation)
        if self.key is None or key < self.key:
            self.best, self.key = evaluation, key
            quality = min(1.0, max(0.0, 1.0 - float(evaluation.loss)))   # QualityModel.quality, without recomputing
            if not self.trace or quality != self.trace[-1][1]:
                self.trace.append([round(time.perf_counter() - self.started, 4), quality])
            return True
        return False

    def rules_out(self, node: Node, bound: float) -> bool:
        """True when neither `node` nor any generalization can beat the incumbent, given a lower bound of their loss
        (ties lost under the tie-breaking above)."""
        if self.key is None:
            return False
        loss, best_bound, best_rank, best_levels = self.key
        if bound != loss:
            return bound > loss
        # A generalization y can only tie: loss(y) = loss, and its level bound and rank are at least node's.
        level_bound = self.quality.bound(node)
        if best_bound != level_bound:
            return best_bound < level_bound
        rank = sum(node)
        return best_rank < rank or (best_rank == rank and best_levels <= tuple(node))


def resident_bytes() -> int | None:
    """Memory the process holds now (Linux: /proc/self/statm), else its peak so far (getrusage), else None."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * (1 if sys.platform == "darwin" else 1024)
    except (ImportError, OSError, ValueError):
        return None


_frozen_lock = threading.Lock()
_frozen_searches = 0


@contextmanager
def host_objects_frozen() -> Iterator[None]:
    """Keep the host process's objects out of the collector's full passes while a search runs.

    A full (generation 2) collection walks every object of the process. In a long-lived host (the analytics app, a
    Dask worker, a test run) that is 0.2-0.4 s for 300,000-460,000 objects, measured in this project's own test run:
    one such pause near the end overran a 2 s time limit by more than 10 %. The objects that exist when the search
    starts are not the search's, so they are frozen (`gc.freeze`) until the last running search ends; the passes
    during the search walk only what the search made. Frozen objects that become garbage meanwhile are collected
    after it. Searches in several threads share one freeze (a counter), so none unfreezes another's objects early."""
    global _frozen_searches
    if not gc.isenabled():
        yield
        return
    with _frozen_lock:
        if _frozen_searches == 0:
            gc.freeze()
        _frozen_searches += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_searches -= 1
            if _frozen_searches == 0:
                gc.unfreeze()


class Deadline:
    """The search's budget: a time limit and a bound on the memory the search adds to the process.

    The memory is measured, not estimated: resident memory now minus resident memory when the search started, read
    at most every `MEMORY_CHECK_SECONDS`, so it covers everything that grows with the search (class cache, tags,
    queues, visited sets) at the cost of a small overshoot between two readings. `passed()` stays true once a limit
    was reached, and `reason` says which."""

    MEMORY_CHECK_SECONDS = 0.05

    def __init__(self, seconds: float | None, memory_mb: float | None = None) -> None:
        self.started = time.perf_counter()
        self.seconds = seconds
        self.end = None if seconds is None else self.started + seconds
        self.memory_mb = memory_mb
        self.memory_limit = None if memory_mb is None else int(memory_mb * (1 << 20))
        self.baseline = resident_bytes() if self.memory_limit is not None else None
        self.peak_growth = 0
        self._next_memory_check = self.started
        self.reason: str | None = None

    def passed(self) -> bool:
        if self.reason is not None:
            return True
        now = time.perf_counter()
        if self.end is not None and now > self.end:
            self.reason = f"time limit of {self.seconds:g} s reached"
            return True
        if self.memory_limit is not None and self.baseline is not None and now >= self._next_memory_check:
            self._next_memory_check = now + self.MEMORY_CHECK_SECONDS
            current = resident_bytes()
            if current is not None:
                self.peak_growth = max(self.peak_growth, current - self.baseline)
                if current - self.baseline > self.memory_limit:
                    self.reason = f"memory bound of {self.memory_mb:g} MB reached"
                    return True
        return False

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def stop_reason(self, checked: int, check_limit: int | None) -> str | None:
        """Why a heuristic must stop now: a limit of this budget, or its own check limit reached (transformations
        checked by the evaluator, as ARX counts them); None while it may go on."""
        if self.passed():
            return self.reason
        if check_limit is not None and checked >= check_limit:
            return f"check limit of {check_limit} transformations reached"
        return None


class Progress:
    """A tqdm bar over the lattice, shown only when asked for (and only on a terminal when `progress` is None)."""

    STATUS_SECONDS = 0.5   # the status text is redrawn at most this often

    def __init__(self, total: int, progress: bool | None, description: str) -> None:
        self.bar = None
        self._next_status = 0.0
        if progress is not False:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=description, unit="tr", disable=None if progress is None else False,
                            leave=False)

    def update(self, count: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(count)

    def status(self, incumbent: Incumbent, deadline: Deadline) -> None:
        """Show the best quality so far and the time left (a heuristic's bar cannot show how much is done: it ends
        at its time limit, not at the end of the lattice)."""
        if self.bar is None:
            return
        now = time.perf_counter()
        if now < self._next_status:
            return
        self._next_status = now + self.STATUS_SECONDS
        best = "none yet" if incumbent.best is None else f"{1.0 - incumbent.loss:.4f}"
        left = "" if deadline.end is None else f", {max(0.0, deadline.end - now):.0f} s left"
        self.bar.set_postfix_str(f"best quality {best}{left}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
