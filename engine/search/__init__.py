"""Globally optimal full-domain generalization with record suppression: one entry point, three algorithms.

`search` picks the algorithm from what the configuration makes monotone (engine.privacy.configuration), the way ARX
does, unless the caller names one:

* `flash`: privacy and quality both monotone (e.g. k-anonymity without suppression);
* `flash2p`: a monotone privacy property under suppression (k-anonymity with a limit, or any combination implying a
  minimal class size) with a quality model that is not monotone;
* `bnb`: no monotone privacy property (population uniqueness alone), where the quality bound does all the pruning
  and the optimum usually sits near the bottom.

Every algorithm returns the same optimum under the same tie-breaking (engine.search.common).

Limits: a time limit and a memory bound (the class cache gets a quarter of it, and the search ends once the process
has grown by the bound: engine.search.common.Deadline). Reaching one ends the search with the best solution found so
far, `optimal=False` and `stopped` saying which limit; `safeshare deid` always runs with both (the policy's
`search.time_limit_seconds`, default 600 s, and `search.memory_mb`, default 1024 MB). There is no heuristic fallback
yet: a search stopped before any solution is found finds none.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..encoding import EncodedTable
from ..lattice import Lattice
from ..privacy.base import PrivacyModel
from ..privacy.configuration import Monotonicity, PrivacyConfiguration
from ..quality.base import QualityModel
from .bnb import branch_and_bound
from .common import Deadline, Incumbent, Progress, SearchResult
from .evaluator import Evaluator
from .flash import FlashSearch
from .tags import EXPLICIT_LIMIT

ALGORITHMS = ("auto", "flash", "flash2p", "bnb")
DEFAULT_CACHE_MB = 256     # the class cache's bound when the caller sets no memory bound
CACHE_SHARE = 0.25         # share of the memory bound the class cache may hold


def choose_algorithm(configuration: PrivacyConfiguration, quality: QualityModel, lattice_size: int = 0) -> str:
    """ARX's decision from the derived monotonicity. Lattices too large for Flash's level-by-level sweep (more than
    `EXPLICIT_LIMIT` transformations) go to branch and bound, which never enumerates the lattice."""
    privacy = configuration.privacy_monotonicity
    if privacy is Monotonicity.NONE or lattice_size > EXPLICIT_LIMIT:
        return "bnb"
    if privacy is Monotonicity.FULL and configuration.quality_monotonicity(quality) is Monotonicity.FULL:
        return "flash"
    return "flash2p"


def resolve_algorithm(configuration: PrivacyConfiguration, quality: QualityModel, algorithm: str = "auto",
                      lattice_size: int = 0) -> str:
    """The algorithm that will run; ValueError when the named one cannot be exact under this configuration."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown search algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    if algorithm == "auto":
        return choose_algorithm(configuration, quality, lattice_size)
    privacy = configuration.privacy_monotonicity
    if algorithm in ("flash", "flash2p") and privacy is Monotonicity.NONE:
        raise ValueError(f"{algorithm} needs a monotone privacy property (k-anonymity, or a model implying a "
                         "minimal class size); this configuration has none: use bnb or auto")
    if algorithm == "flash" and choose_algorithm(configuration, quality) != "flash":
        raise ValueError("flash needs privacy and quality both monotone, which suppression breaks here: use "
                         "flash2p or auto")
    return algorithm


def search(table: EncodedTable, models: Sequence[PrivacyModel] | PrivacyConfiguration, quality: QualityModel,
           suppression_limit: float | None = None, *, algorithm: str = "auto", lattice: Lattice | None = None,
           time_limit: float | None = None, progress: bool | None = False, explicit: bool | None = None,
           memory_mb: float | None = None) -> SearchResult:
    """Find the transformation of least loss that satisfies every privacy model within the suppression limit.

    Returns the proven optimum when the search completes (`optimal=True`), or the best solution found when the time
    limit or the memory bound ends it first. `best` is None when no transformation is a solution. `explicit` chooses
    the tag representation of Flash (None: by lattice size). Without `memory_mb` only the class cache is bounded
    (`DEFAULT_CACHE_MB`).
    """
    if isinstance(models, PrivacyConfiguration):
        configuration = models
    else:
        if suppression_limit is None:
            raise TypeError("a suppression limit is needed with a list of privacy models")
        configuration = PrivacyConfiguration(models, suppression_limit)
    if lattice is None:
        lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    chosen = resolve_algorithm(configuration, quality, algorithm, lattice.size)
    deadline = Deadline(time_limit, memory_mb)
    cache_mb = DEFAULT_CACHE_MB if memory_mb is None else memory_mb * CACHE_SHARE
    evaluator = Evaluator(table, configuration, quality, cache_bytes=int(cache_mb * (1 << 20)))
    incumbent = Incumbent(quality)
    bar = Progress(lattice.size, progress, "transformations")
    evaluations_before = configuration.risk_evaluations
    try:
        if chosen == "bnb":
            counters = branch_and_bound(evaluator, lattice, incumbent, deadline, bar)
        else:
            flash = FlashSearch(evaluator, lattice, incumbent, deadline, bar, explicit=explicit,
                                two_phase=chosen == "flash2p")
            counters = flash.run()
    finally:
        bar.close()
    limits = {"time_limit_seconds": time_limit, "memory_mb": memory_mb, "class_cache_mb": cache_mb,
              "memory_growth_mb": round(deadline.peak_growth / (1 << 20), 1) if memory_mb is not None else None}
    complete = bool(counters["complete"])
    return SearchResult(incumbent.best, evaluator.checked, complete, deadline.elapsed(), lattice.size,
                        chosen, counters.get("pruned_by_bound", 0), counters.get("pruned_by_privacy", 0),
                        configuration.risk_evaluations - evaluations_before, counters.get("phases"),
                        None if complete else deadline.reason or "stopped early", limits)


__all__ = ["ALGORITHMS", "Evaluator", "SearchResult", "choose_algorithm", "resolve_algorithm", "search"]
