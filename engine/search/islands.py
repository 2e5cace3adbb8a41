"""The genetic algorithm on both cores: independent islands, one per worker process (issue 28).

A search runs in one Python process, and a check is mostly Python and numpy work that holds the interpreter lock, so a
second core only helps when it runs a second search. Island 0 is the ordinary run with the caller's seed, in this
process; island j (1 <= j < workers) is the same algorithm with seed + j, in a process forked from this one (it shares
the encoded table and the class cache built so far without copying them, and never writes to this process). The
islands do not talk: each one is exactly the sequential run of its seed, so the result of a given seed is
reproducible, and it is never worse than the sequential run of that seed whenever no limit cuts a run short.

When the workers are done (their deadline is this search's, or their iterations ran out), this process checks the
best transformation each worker found again with its own evaluator and offers it to the incumbent: what is released
was checked here, with the same models and the same semantics, and the documented tie-breaking picks among islands
as among transformations. The transformations the workers checked count as checked (a set: one checked by two
islands counts once), and their improvements join the quality-over-time trace.

A worker that fails or overruns its deadline by more than GRACE_SECONDS is ended and ignored (the result is then
island 0's, still valid). An island may also run the top-down search instead (`companions`). Without `fork` (not Linux), or with a check limit (it counts the checks of all islands
together, which independent islands cannot honour), or in a daemonic process (a Dask worker may not start
processes), the search runs sequentially; a worker that cannot be started is left out.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import replace

from ..classes import Evaluation
from ..lattice import Lattice
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator
from .genetic import GeneticParameters, GeneticSearch

Node = tuple[int, ...]
GRACE_SECONDS = 2.0   # how long after the deadline a worker may take to hand over its result
COMPANIONS = ("genetic", "topdown")   # what an island other than the first may run


def island_seed(seed: int, island: int) -> int:
    """The seed of island `island` (0 is the caller's own run)."""
    return seed + island


def _worker(connection, evaluator: Evaluator, lattice: Lattice, quality, started: float, deadline: Deadline,
            parameters: GeneticParameters, evaluated: dict[Node, Evaluation], algorithm: str) -> None:
    """Run one island in the forked process and send (best levels, trace, checked transformations, counters)."""
    try:
        incumbent = Incumbent(quality, started=started)
        progress = Progress(lattice.size, False, "")
        if algorithm == "topdown":
            from .topdown import TopDownSearch

            counters = TopDownSearch(evaluator, lattice, incumbent, deadline, progress, None, evaluated).run()
        else:
            counters = GeneticSearch(evaluator, lattice, incumbent, deadline, progress, parameters, None,
                                     evaluated).run()
        best = None if incumbent.best is None else tuple(int(v) for v in incumbent.best.levels)
        connection.send(("ok", best, incumbent.trace, list(evaluator.seen), counters))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which then ignores this island
        try:
            connection.send(("failed", repr(error), [], [], {}))
        except Exception:   # noqa: BLE001
            pass
    finally:
        connection.close()
        os._exit(0)   # never run the parent's atexit handlers or thread shutdowns in the fork


def workers_available() -> int:
    """How many islands the machine can run at once: the cores this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def genetic_islands(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                    progress: Progress, parameters: GeneticParameters, check_limit: int | None = None,
                    evaluated: dict[Node, Evaluation] | None = None, workers: int = 2,
                    companions: Sequence[str] = ()) -> dict:
    """Run `workers` islands of the genetic algorithm (see the module docstring); the best solution of all ends up
    in `incumbent`. Returns island 0's counters with `islands` (how many ran to the end) added.

    `companions[j - 1]` may name another heuristic island j runs instead (`topdown`: under a risk-based model with a
    short limit the top-down search and the genetic algorithm each win on some tables, so the two cores run one
    each); the others run the genetic algorithm with their own seed."""
    unknown = [name for name in companions if name not in COMPANIONS]
    if unknown:
        raise ValueError(f"an island runs one of {', '.join(COMPANIONS)}, got {', '.join(unknown)}")
    evaluated = dict(evaluated or {})
    if (workers <= 1 or check_limit is not None or "fork" not in multiprocessing.get_all_start_methods()
            or multiprocessing.current_process().daemon):   # a daemonic process (a Dask worker) may not fork workers
        counters = GeneticSearch(evaluator, lattice, incumbent, deadline, progress, parameters, check_limit,
                                 evaluated).run()
        counters["islands"] = 1
        return counters
    context = multiprocessing.get_context("fork")
    children = []
    for island in range(1, workers):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_worker, daemon=True,
            args=(send, evaluator, lattice, evaluator.quality, incumbent.started, deadline,
                  replace(parameters, seed=island_seed(parameters.seed, island)), dict(evaluated),
                  companions[island - 1] if island - 1 < len(companions) else "genetic"))
        try:
            process.start()
        except (OSError, AssertionError):   # no process to be had (limits, a daemon): fewer islands
            send.close()
            receive.close()
            break
        send.close()
        children.append((process, receive))
    try:
        counters = GeneticSearch(evaluator, lattice, incumbent, deadline, progress, parameters, None,
                                 evaluated).run()
    finally:
        results = [_collect(process, receive, deadline) for process, receive in children]
    counters["islands"] = 1
    counters["island_counters"] = []
    trace = list(incumbent.trace)
    for result in results:
        if result is None or result[0] != "ok":
            counters.setdefault("islands_failed", []).append(None if result is None else result[1])
            continue
        _, best, island_trace, seen, island_counters = result
        counters["islands"] += 1
        counters["island_counters"].append(island_counters)
        evaluator.seen.update(tuple(node) for node in seen)
        trace += [list(point) for point in island_trace]
        if best is not None:
            incumbent.offer(evaluator.evaluate(best))   # checked again here: what is released was checked here
    incumbent.trace = _merged(trace, incumbent)
    return counters


def _collect(process, receive, deadline: Deadline):
    """The worker's result, or None when it failed or overran (it is then ended)."""
    try:
        wait = None if deadline.end is None else max(0.0, deadline.end - time.perf_counter()) + GRACE_SECONDS
        if receive.poll(wait):
            return receive.recv()
        return None
    except (EOFError, OSError):
        return None
    finally:
        receive.close()
        process.join(timeout=0.5)
        if process.is_alive():
            process.kill()
            process.join()


def _merged(trace: list[list[float]], incumbent: Incumbent) -> list[list[float]]:
    """One quality-over-time curve from the islands' improvements: each point where the best of all improved, ending
    on the incumbent's quality."""
    merged: list[list[float]] = []
    for seconds, quality in sorted(trace):
        if not merged or quality > merged[-1][1]:
            merged.append([seconds, quality])
    if incumbent.best is not None:
        final = min(1.0, max(0.0, 1.0 - float(incumbent.best.loss)))
        merged = [point for point in merged if point[1] <= final]
        if not merged or merged[-1][1] != final:
            merged.append([round(time.perf_counter() - incumbent.started, 4), final])
    return merged


def genetic_algorithm(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                      progress: Progress, parameters: GeneticParameters | None = None, check_limit: int | None = None,
                      evaluated: dict[Node, Evaluation] | None = None, companions: tuple[str, ...] = ()) -> dict:
    """Run the genetic algorithm (on `parameters.islands` processes, `companions` naming what the other islands run);
    the best solution ends up in `incumbent`. Returns the counters. It lives here, not in engine.search.genetic, so
    that the islands import the algorithm and never the other way round (tests/test_engine_import_graph.py)."""
    parameters = parameters or GeneticParameters()
    if parameters.islands > 1:
        return genetic_islands(evaluator, lattice, incumbent, deadline, progress, parameters, check_limit, evaluated,
                               parameters.islands, companions)
    return GeneticSearch(evaluator, lattice, incumbent, deadline, progress, parameters, check_limit, evaluated).run()


__all__ = ["GRACE_SECONDS", "genetic_algorithm", "genetic_islands", "island_seed", "workers_available"]
