"""Full-domain generalization with record suppression: one entry point, optimal algorithms and heuristics.

`search` picks the algorithm from what the configuration makes monotone (engine.privacy.configuration), the way ARX
does, unless the caller names one:

* `flash`: privacy and quality both monotone (e.g. k-anonymity without suppression);
* `flash2p`: a monotone privacy property under suppression (k-anonymity with a limit, or any combination implying a
  minimal class size) with a quality model that is not monotone;
* `bnb`: no monotone privacy property (population uniqueness alone), where the quality bound does all the pruning
  and the optimum usually sits near the bottom.

Every optimal algorithm returns the same optimum under the same tie-breaking (engine.search.common).

Lattices of many quasi-identifiers are beyond any optimal search, so under a time limit `auto` first estimates
whether the optimal algorithm can finish in time (`auto_choice`: the lattice size, the share of it the optimal
algorithm checks on the benchmark tables, and the cost of a check measured on a few transformations, unless a
pessimistic bound of Flash's time already fits the limit: `optimal_seconds_bound`) and otherwise
runs a heuristic (`choose_heuristic`), Meurers et al. 2021: the bottom-up greedy best-first search `lightning`
(engine.search.lightning) when the bottom nearly is a solution, the genetic algorithm `genetic`
(engine.search.genetic, until the time limit) for k-anonymity-like configurations and under risk-based models
given at least RISK_GENETIC_SECONDS, else the top-down search `topdown` (engine.search.topdown). A heuristic returns the best solution found when a limit ends it,
`optimal=False` unless it provably exhausted the lattice.

Limits: a time limit and a memory bound (the class cache gets a quarter of it, and the search ends once the process
has grown by the bound: engine.search.common.Deadline), and for the heuristics a check limit. Reaching one ends the
search with the best solution found so far, `optimal=False` and `stopped` saying which limit; `safeshare deid` always
runs with both (the policy's `search.time_limit_seconds`, default 600 s, and `search.memory_mb`, default 1024 MB).
The heuristics check the top of the lattice first, so they end with a solution whenever the top is one.

Algorithms are registered in `RUNNERS` (name -> function of a `SearchContext`); `ALGORITHMS` and `HEURISTICS`
follow from it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .. import kernels
from ..classes import Evaluation
from ..encoding import EncodedTable
from ..lattice import Lattice
from ..privacy.base import PrivacyModel
from ..privacy.configuration import Monotonicity, PrivacyConfiguration
from ..quality.base import QualityModel
from .bnb import branch_and_bound
from .common import Deadline, Incumbent, Progress, SearchResult, host_objects_frozen
from .evaluator import Evaluator
from .flash import FlashSearch
from .genetic import GeneticParameters
from .islands import genetic_algorithm, workers_available
from .lightning import lightning
from .tags import EXPLICIT_LIMIT
from .topdown import top_down

Node = tuple[int, ...]
DEFAULT_CACHE_MB = 256     # the class cache's bound when the caller sets no memory bound
CACHE_SHARE = 0.25         # share of the memory bound the class cache may hold


@dataclass
class SearchContext:
    """Everything an algorithm runs with. `options` holds algorithm-specific settings by algorithm name (e.g. the
    genetic algorithm's parameters under "genetic"); `evaluated` the evaluations the automatic choice made, already
    offered to the incumbent."""

    evaluator: Evaluator
    lattice: Lattice
    incumbent: Incumbent
    deadline: Deadline
    progress: Progress
    explicit: bool | None = None
    check_limit: int | None = None
    options: dict = field(default_factory=dict)
    evaluated: dict[Node, Evaluation] = field(default_factory=dict)


def _flash(two_phase: bool) -> Callable[[SearchContext], dict]:
    return lambda c: FlashSearch(c.evaluator, c.lattice, c.incumbent, c.deadline, c.progress, explicit=c.explicit,
                                 two_phase=two_phase).run()


# name -> runner returning the counters dict (at least `complete`: the optimum is proven)
RUNNERS: dict[str, Callable[[SearchContext], dict]] = {
    "flash": _flash(False),
    "flash2p": _flash(True),
    "bnb": lambda c: branch_and_bound(c.evaluator, c.lattice, c.incumbent, c.deadline, c.progress),
    "lightning": lambda c: lightning(c.evaluator, c.lattice, c.incumbent, c.deadline, c.progress, c.check_limit,
                                     c.evaluated),
    "topdown": lambda c: top_down(c.evaluator, c.lattice, c.incumbent, c.deadline, c.progress, c.check_limit,
                                  c.evaluated),
    # a heuristic: options["genetic"] holds its parameters (default: the paper's Table 2)
    "genetic": lambda c: genetic_algorithm(c.evaluator, c.lattice, c.incumbent, c.deadline, c.progress,
                                           c.options.get("genetic"), c.check_limit, c.evaluated,
                                           tuple(c.options.get("islands", ()))),
}
OPTIMAL = ("flash", "flash2p", "bnb")
ROLLS_AHEAD = ("flash2p", "bnb")   # the algorithms that ask the class cache to roll up ahead (Evaluator.prefetch)
HEURISTICS = tuple(name for name in RUNNERS if name not in OPTIMAL)
ALGORITHMS = ("auto", *RUNNERS)

# Share of the lattice each optimal algorithm checks, at most, on the benchmark tables (ADULT, CUP, FARS with k = 5
# and population uniqueness 1 %, Loss and Non-Uniform Entropy): Flash2P up to about a quarter (FARS k = 5: 23 %),
# branch and bound under population uniqueness well under 1 % (FARS: 0.4 %; ARX's BFS on CUP: 1.7 %).
EXPECTED_SHARE = {"flash": 0.25, "flash2p": 0.25, "bnb": 0.05}
SAMPLE_CHECKS = 4          # transformations timed to measure the cost of a check (bottom, top, two in between)
SAMPLE_SEED = 13
NEAR_BOTTOM_SUPPRESSION = 0.1   # bottom suppressing at most this share of records: the optimum is near the bottom


def choose_algorithm(configuration: PrivacyConfiguration, quality: QualityModel, lattice_size: int = 0) -> str:
    """ARX's decision from the derived monotonicity. Lattices too large for Flash's level-by-level sweep (more than
    `EXPLICIT_LIMIT` transformations) go to branch and bound, which never enumerates the lattice."""
    privacy = configuration.privacy_monotonicity
    if privacy is Monotonicity.NONE or lattice_size > EXPLICIT_LIMIT:
        return "bnb"
    if privacy is Monotonicity.FULL and configuration.quality_monotonicity(quality) is Monotonicity.FULL:
        return "flash"
    return "flash2p"


# Under risk-based models the genetic algorithm overtakes the top-down search given this long (heuristics_bench at
# 100 s: creditcard PU 0.5314 against 0.5234, mach2019 PU 0.6703 against 0.6384; at 10 s top-down leads on
# creditcard PU, 0.5234 against 0.4668).
RISK_GENETIC_SECONDS = 100.0
AUTO_ISLANDS = 2   # the genetic algorithm `auto` runs uses up to this many cores (engine.search.islands)


def choose_heuristic(configuration: PrivacyConfiguration, quality: QualityModel, lattice: Lattice,
                     bottom: Evaluation | None, records: int, time_limit: float | None = None) -> str:
    """The heuristic `auto` runs when the optimal search cannot finish in time.

    * Bottom-up (`lightning`) when the bottom itself is a solution that suppresses few records: the optimum then
      lies near the bottom, where Lightning starts and where its bound pruning works.
    * The genetic algorithm when the privacy models are k-anonymity-like (a monotone property, no risk-based
      model): checks are cheap, and a population spread over the whole lattice finds better solutions than either
      greedy descent (benchmarks/heuristics_bench.py at 10 s: creditcard k = 5 0.368 against top-down's 0.342,
      mach2019 k = 5 0.462 against 0.454; ARX published 0.3387 and 0.4609). `search` runs it until the time limit
      (its iteration count is for a policy that names it); its memory grows only as fast as it checks.
    * Under a risk-based model (such as population uniqueness) every check solves the risk model, so checks are
      few: with less than RISK_GENETIC_SECONDS they are best spent top-down, from the top, where good solutions of
      many quasi-identifiers lie (Meurers et al. 2021; at 10 s: creditcard PU 0.5234 against bottom-up's 0.1415
      and the genetic algorithm's 0.4668); given longer (the default limit is 600 s) the genetic algorithm, whose
      risk-based suppression stops once a row cannot become elite, overtakes it."""
    if bottom is not None and bottom.solution and bottom.suppressed_records <= NEAR_BOTTOM_SUPPRESSION * records:
        return "lightning"
    if not configuration.risk_models and configuration.privacy_monotonicity is not Monotonicity.NONE:
        return "genetic"
    if configuration.risk_models and time_limit is not None and time_limit >= RISK_GENETIC_SECONDS:
        return "genetic"
    return "topdown"


def _sample_nodes(lattice: Lattice) -> list[Node]:
    """Bottom, top and transformations half-way up (random, seeded): the range of check costs a search meets."""
    rng = np.random.default_rng(SAMPLE_SEED)
    nodes = [lattice.bottom, lattice.top]
    for _ in range(SAMPLE_CHECKS - 2):
        node = tuple(int(lo + rng.integers(0, hi - lo + 1)) if hi > lo else lo
                     for lo, hi in zip(lattice.lower, lattice.upper))
        nodes.append(node)
    return list(dict.fromkeys(nodes))


# A sampled check this many times dearer than the median is a one-time cost, not a check's (see typical_check_seconds).
ONE_TIME_FACTOR = 20.0


def typical_check_seconds(costs: Sequence[float], compiled: Sequence[bool] | None = None) -> float:
    """The mean cost of the sampled checks, leaving out a check that paid a one-time cost: the first check of a
    process that runs the compiled path loads its kernels (0.3 s) or, on a machine that has not compiled them yet
    (a fresh clone, a new numba cache), compiles them (2 s and more). Counted as a check's cost, that once made ADULT
    k = 5 look like 2,300 s of optimal search and sent `auto` to the genetic algorithm for the whole 600 s limit.
    A check during which a kernel was compiled or loaded (`compiled`, from kernels.compiled_signatures) is such a
    cost, and so is a check ONE_TIME_FACTOR times dearer than the median of the others; the checks' own spread
    (bottom, top and between) stays well inside it. Several checks can compile (each kernel on its first use), which
    is why the median alone cannot tell them."""
    flags = list(compiled) if compiled is not None else [False] * len(costs)
    steady = [cost for cost, flag in zip(costs, flags) if not flag] or list(costs)
    median = float(np.median(steady))
    typical = [cost for cost in steady if cost <= ONE_TIME_FACTOR * median] or steady
    return float(np.mean(typical))


# A pessimistic bound on the optimal search's time, for `auto` to skip sampling when even the bound fits the limit
# (`optimal_seconds_bound`). Measured on this machine (2026-11, the numpy reference path, the slower one): the dearest
# check of ADULT (19,502 base classes x 9 attributes) 6.5 ms, of CUP (63,441 x 8) 8.5 ms, i.e. 17-37 ns per class and
# attribute, at most 0.4 ms of fixed cost; Flash's own work per transformation (tags, successors, queue) a few us.
# The constants are about three times those figures (a slow, loaded machine), and the bound charges every
# transformation of the lattice the dearest check there can be (a roll-up from the base classes), where Flash checks
# a few per cent of them (ADULT k = 3: 193 of 12,960).
BOUND_CHECK_SECONDS = 2e-3          # a check's fixed cost
BOUND_CELL_SECONDS = 1e-7           # per class and attribute (or sensitive value) of the finest classes
BOUND_TRANSFORMATION_SECONDS = 1e-4   # Flash's own work per transformation of the lattice
BOUND_ONE_TIME_SECONDS = 30.0       # loading or compiling the compiled kernels on the first check of a process
BOUND_MARGIN = 2.0                  # the bound must fit the limit this many times over


def optimal_seconds_bound(evaluator: Evaluator, lattice: Lattice, configuration: PrivacyConfiguration,
                          optimal: str) -> float | None:
    """An upper bound on the optimal search's seconds, on either path and on a slow machine, or None where no bound
    is safe or where skipping the sampled checks would change the search itself.

    Bounded only when every check is bounded by the table's size: no risk-based model (each check solves an
    estimator, Pitman's possibly for long) and no model matching classes against a population table (a second
    table per check). Distribution-based models (l-diversity, t-closeness, delta-disclosure, beta-likeness) read a
    histogram of sensitive values per class: with sensitive attributes every record may be its own class on the
    reference path, so the cells counted are records x (attributes + sensitive attributes + their values).
    Then a check costs at most BOUND_CHECK_SECONDS + BOUND_CELL_SECONDS x cells, and the search at most every
    transformation checked once at that cost, plus Flash's own work per transformation and a one-time allowance.

    Only for Flash (privacy and quality both monotone): it never prunes by the bound, so the sampled solutions that
    `auto_choice` offers to the incumbent never change which transformations it checks. Flash2P and branch and bound
    prune against the incumbent, and sampled solutions change their course (measured: ADULT k = 10 with a 5 % limit
    784 checks sampled, 865 not; CUP k = 2 with 2 %, 261 and 204), so they keep the sampling."""
    if optimal != "flash" or configuration.risk_models:
        return None
    if any(getattr(model, "uses_population_table", False) for model in configuration.class_models):
        return None
    table = evaluator.table
    sensitive = tuple(getattr(table, "sensitive", ()))
    classes = table.n if sensitive else int(evaluator.cache.base[2].size)
    cells = classes * (len(table.attributes) + len(sensitive) + sum(int(s.cardinality) for s in sensitive))
    per_check = BOUND_CHECK_SECONDS + BOUND_CELL_SECONDS * cells
    return BOUND_ONE_TIME_SECONDS + lattice.size * (per_check + BOUND_TRANSFORMATION_SECONDS)


def auto_choice(context: SearchContext, configuration: PrivacyConfiguration, quality: QualityModel,
                time_limit: float | None) -> tuple[str, dict]:
    """`auto`: the optimal algorithm when it can be expected to finish within the time limit, else a heuristic.

    Expected time = lattice size x the share of it the optimal algorithm checks (`EXPECTED_SHARE`) x the cost of a
    check, measured by evaluating a few transformations (kept in `context.evaluated` for the search). Without a
    time limit the optimal algorithm always runs; so it does, without the sampled checks, when a pessimistic bound
    of its time (`optimal_seconds_bound`) fits the limit BOUND_MARGIN times over: no estimate could choose
    otherwise. Returns the algorithm and what the choice was based on."""
    lattice = context.lattice
    optimal = choose_algorithm(configuration, quality, lattice.size)
    if time_limit is None:
        return optimal, {"requested": "auto", "optimal_algorithm": optimal, "reason": "no time limit"}
    bound = optimal_seconds_bound(context.evaluator, lattice, configuration, optimal)
    if bound is not None and BOUND_MARGIN * bound <= time_limit:
        # The estimate could not change the decision: no sampled checks (ADULT k = 3: 3 checks and 2 ms of 19 ms)
        return optimal, {"requested": "auto", "optimal_algorithm": optimal,
                         "bound_optimal_seconds": float(f"{bound:.4g}"), "time_limit_seconds": time_limit,
                         "reason": "the optimal search is bound to finish within the time limit, so no checks "
                                   f"were sampled: checking all {lattice.size} transformations at a pessimistic "
                                   f"cost each would take at most {bound:.4g} s, within 1/{BOUND_MARGIN:g} of the "
                                   "limit"}
    costs, compiled = [], []
    for node in _sample_nodes(lattice):
        signatures = kernels.compiled_signatures()
        started = time.perf_counter()
        evaluation = context.evaluator.evaluate(node)
        costs.append(time.perf_counter() - started)
        compiled.append(kernels.compiled_signatures() != signatures)
        context.progress.update(1)
        context.incumbent.offer(evaluation)
        context.evaluated[node] = evaluation
    per_check = typical_check_seconds(costs, compiled)
    expected = lattice.size * EXPECTED_SHARE[optimal] * per_check
    details = {"requested": "auto", "optimal_algorithm": optimal, "seconds_per_check": round(per_check, 6),
               "estimated_optimal_seconds": float(f"{expected:.4g}"), "time_limit_seconds": time_limit}
    if expected <= time_limit:
        return optimal, {**details, "reason": "the optimal search is expected to finish within the time limit"}
    chosen = choose_heuristic(configuration, quality, lattice, context.evaluated.get(lattice.bottom),
                              context.evaluator.table.n, time_limit)
    return chosen, {**details, "reason": "the optimal search is not expected to finish within the time limit"}


def resolve_algorithm(configuration: PrivacyConfiguration, quality: QualityModel, algorithm: str = "auto",
                      lattice_size: int = 0) -> str:
    """The algorithm that will run (for `auto`: the optimal one, before `auto_choice` weighs it against the time
    limit); ValueError when the named one cannot be exact under this configuration. Heuristics run under any."""
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
           memory_mb: float | None = None, genetic: GeneticParameters | None = None, check_limit: int | None = None,
           options: dict | None = None) -> SearchResult:
    """Find the transformation of least loss that satisfies every privacy model within the suppression limit.

    Returns the proven optimum when the search completes (`optimal=True`), or the best solution found when the time
    limit, the memory bound or (heuristics) the check limit ends it first. `best` is None when no transformation is
    a solution. `explicit` chooses the tag representation of Flash (None: by lattice size). Without `memory_mb`
    only the class cache is bounded (`DEFAULT_CACHE_MB`). `algorithm="auto"` with a time limit may choose a
    heuristic (`auto_choice`); `result.choice` says why. `options` holds settings per algorithm name; `genetic` is
    the genetic algorithm's (same as options["genetic"]).
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
    # Only Flash2P's floor sweep and the branch and bound roll up ahead, and only when asked for
    # (kernels.roll_ahead_allowed); Flash and the heuristics `auto` may pick instead never do, so they start no
    # worker thread (ADULT k = 3: a thread start and join, 0.3-1 ms of 15 ms).
    # With a research subset every check also counts the population (engine.subset): its records are work too
    population = getattr(table, "population", None)
    records = table.n + (population.records if population is not None else 0)
    evaluator = Evaluator(table, configuration, quality, cache_bytes=int(cache_mb * (1 << 20)),
                          compiled=kernels.for_search(lattice.size, records),
                          parallel=kernels.roll_ahead_allowed() and chosen in ROLLS_AHEAD)
    incumbent = Incumbent(quality, started=deadline.started)
    bar = Progress(lattice.size, progress, "transformations")
    options = dict(options or {})
    if genetic is not None:
        options["genetic"] = genetic
    context = SearchContext(evaluator, lattice, incumbent, deadline, bar, explicit, check_limit, options)
    evaluations_before = configuration.risk_evaluations
    choice = None
    with host_objects_frozen():   # a full collection of the host's objects would overrun short limits
        try:
            if algorithm == "auto":
                chosen, choice = auto_choice(context, configuration, quality, time_limit)
                islands = min(AUTO_ISLANDS, workers_available()) if kernels.threads_allowed() else 1
                if chosen == "topdown" and islands > 1 and check_limit is None:
                    # Under a risk-based model with a short limit: top-down on one core, the genetic algorithm on
                    # the other (heuristics_bench at 10 s: top-down wins on creditcard PU, the genetic algorithm on
                    # mach2019)
                    chosen, options["islands"] = "genetic", ("topdown",)
                    choice = {**choice, "islands": ["genetic", "topdown"]}
                if chosen == "genetic":   # chosen for the time limit, it runs until then (its iteration count is for
                    # a policy that names it); on both cores when the machine has them (engine.search.islands)
                    options["genetic"] = replace(options.get("genetic") or GeneticParameters(), iterations=None,
                                                 islands=islands)
            counters = RUNNERS[chosen](context)
        finally:
            bar.close()
            evaluator.close()
    limits = {"time_limit_seconds": time_limit, "memory_mb": memory_mb, "class_cache_mb": cache_mb,
              "memory_growth_mb": round(deadline.peak_growth / (1 << 20), 1) if memory_mb is not None else None}
    if check_limit is not None:
        limits["check_limit"] = check_limit
    complete = bool(counters["complete"])
    stopped = None if complete else counters.get("stopped") or deadline.reason or "stopped early"
    return SearchResult(incumbent.best, evaluator.checked, complete, deadline.elapsed(), lattice.size,
                        chosen, counters.get("pruned_by_bound", 0), counters.get("pruned_by_privacy", 0),
                        configuration.risk_evaluations - evaluations_before, counters.get("phases"),
                        stopped, limits, incumbent.trace, choice)


__all__ = ["ALGORITHMS", "Evaluator", "GeneticParameters", "HEURISTICS", "OPTIMAL", "RUNNERS", "SearchContext",
           "SearchResult", "auto_choice", "choose_algorithm", "choose_heuristic", "optimal_seconds_bound",
           "resolve_algorithm", "search"]
