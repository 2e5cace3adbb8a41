"""Issue 28, heuristics: the genetic algorithm's cheaper generations (rows that cannot take a ranked place are ranked
by a bound instead of checked), its hill climb from the best solution, its islands on several processes, and the
top-down search's early stop under risk-based models. Results must stay valid, reproducible for a seed, and reach
the proven optimum on small lattices; speed is measured by benchmarks/heuristics_bench.py, never here."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.privacy import KAnonymity, PopulationUniquenessModel
from engine.search import search
from engine.search.common import Deadline, Incumbent, Progress
from engine.search.evaluator import Evaluator
from engine.search.genetic import GeneticParameters, GeneticSearch
from engine.search.islands import _merged, genetic_algorithm, genetic_islands, island_seed
from engine.search.topdown import TopDownSearch
from tests.engine.lattice_tables import wide_search_setup


def _genetic(encoded, quality, configuration, lattice, parameters):
    evaluator = Evaluator(encoded, configuration, quality)
    incumbent = Incumbent(quality)
    search_ = GeneticSearch(evaluator, lattice, incumbent, Deadline(None), Progress(lattice.size, False, ""),
                            parameters)
    return search_, search_.run(), incumbent, evaluator


def _real_loss(evaluator, quality, node):
    finished = evaluator.evaluate(node)
    return finished.loss if finished.loss is not None else quality.loss(node, finished.codes, finished.sizes,
                                                                        finished.suppressed)


# --- rows ranked by a bound ---------------------------------------------------------------------------------------
def test_rows_ranked_by_their_bound_are_not_checked_and_the_optimum_is_still_found():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.05, seed=3)
    bounded: list[tuple] = []

    class Recording(GeneticSearch):
        def _loss(self, node, row, threshold):
            before = self.counters_bounded
            loss, exact = super()._loss(node, row, threshold)
            if self.counters_bounded > before:
                bounded.append((node, loss, threshold, self.evaluator.checked))
            return loss, exact

    evaluator = Evaluator(encoded, configuration, quality)
    incumbent = Incumbent(quality)
    counters = Recording(evaluator, lattice, incumbent, Deadline(None), Progress(lattice.size, False, ""),
                         GeneticParameters(iterations=60, subpopulation_size=20, climb=False)).run()
    assert counters["bounded"] == len(bounded) > 0
    full = Evaluator(encoded, configuration, quality)
    for node, loss, threshold, _ in bounded:
        assert loss == quality.bound(node) and loss > threshold   # it could not take a ranked place
        assert _real_loss(full, quality, node) >= loss - 1e-12    # its rank is a lower bound of its loss
    never_checked = {node for node, *_ in bounded} - evaluator.seen
    assert never_checked   # ranked without being checked
    optimum = search(encoded, configuration, quality, algorithm="flash2p")
    assert incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)


def test_a_row_that_could_beat_the_best_solution_is_always_checked():
    """The threshold may come from non-solutions (suppressing beyond the limit), whose loss no solution reaches:
    a row is only left unchecked when it cannot beat the best solution either. With a suppression limit of 0 most
    rows are non-solutions; the search must still find the optimum."""
    for seed in range(4):
        encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(4)], 0.0, seed=seed, n=200, d=4)
        optimum = search(encoded, configuration, quality, algorithm="flash")
        _, _, incumbent, _ = _genetic(encoded, quality, configuration, lattice,
                                      GeneticParameters(iterations=100, subpopulation_size=10, seed=seed))
        assert incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)


# --- hill climb -----------------------------------------------------------------------------------------------------
def test_neighbours_are_single_steps_and_one_up_one_down_within_the_levels():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(2)], 1.0, d=4)
    search_ = GeneticSearch(Evaluator(encoded, configuration, quality), lattice, Incumbent(quality),
                            Deadline(None), Progress(1, False, ""), GeneticParameters(iterations=1))
    lower, upper = np.array(lattice.lower), np.array(lattice.upper)
    node = tuple(int(v) for v in np.minimum(upper, 1))   # level 1 everywhere: every move exists
    moves = search_._neighbours(node)
    diffs = moves - np.array(node)
    assert np.all((moves >= lower) & (moves <= upper))
    singles = [d for d in diffs if np.abs(d).sum() == 1]
    pairs = [d for d in diffs if np.abs(d).sum() == 2]
    m = len(node)
    assert len(singles) == 2 * m and len(pairs) == m * (m - 1) and len(moves) == len(singles) + len(pairs)
    assert all(d.sum() == 0 and d.max() == 1 for d in pairs)
    assert len({tuple(r) for r in moves}) == len(moves)


def test_the_climb_ends_on_a_local_optimum():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.1, seed=5, n=400, d=6)
    search_, counters, incumbent, _ = _genetic(encoded, quality, configuration, lattice,
                                               GeneticParameters(iterations=5, subpopulation_size=10))
    assert counters["climbs"] >= 1
    best = tuple(incumbent.best.levels)
    full = Evaluator(encoded, configuration, quality)
    for row in search_._neighbours(best):
        evaluation = full.evaluate(tuple(int(v) for v in row))
        assert not evaluation.solution or evaluation.loss >= incumbent.best.loss - 1e-12


def test_same_seed_same_run_with_the_climb():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.2, seed=1)
    parameters = GeneticParameters(iterations=10, subpopulation_size=12, seed=9)
    first = _genetic(encoded, quality, configuration, lattice, parameters)
    again = _genetic(encoded, quality, configuration, lattice, parameters)
    assert first[1] == again[1] and first[3].seen == again[3].seen
    assert tuple(first[2].best.levels) == tuple(again[2].best.levels) and first[2].best.loss == again[2].best.loss


def test_climb_under_population_uniqueness_reaches_the_optimum():
    pu = PopulationUniquenessModel(0.01, 20_000, "pitman")
    encoded, quality, configuration, lattice = wide_search_setup([pu], 0.05, seed=2, n=400, d=5)
    optimum = search(encoded, configuration, quality, algorithm="bnb")
    _, counters, incumbent, _ = _genetic(encoded, quality, configuration, lattice, GeneticParameters(iterations=20))
    assert counters["climbs"] >= 1
    assert incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)


@pytest.mark.parametrize("field, value", [("climb", 1), ("islands", 0)])
def test_bad_new_parameters_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        GeneticParameters(**{field: value})


# --- islands ----------------------------------------------------------------------------------------------------------
def _islands(encoded, quality, configuration, lattice, parameters, workers):
    evaluator = Evaluator(encoded, configuration, quality)
    incumbent = Incumbent(quality)
    counters = genetic_islands(evaluator, lattice, incumbent, Deadline(None), Progress(lattice.size, False, ""),
                               parameters, None, None, workers)
    evaluator.close()
    return counters, incumbent, evaluator


def test_islands_are_the_sequential_runs_of_their_seeds_and_keep_the_best():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.1, seed=4, n=300, d=6)
    parameters = GeneticParameters(iterations=4, subpopulation_size=8, seed=11, climb=False)
    counters, incumbent, evaluator = _islands(encoded, quality, configuration, lattice, parameters, 2)
    assert counters["islands"] == 2
    runs = [_genetic(encoded, quality, configuration, lattice,
                     GeneticParameters(iterations=4, subpopulation_size=8, seed=island_seed(11, j), climb=False))
            for j in range(2)]
    # island 0 is the sequential run of the seed, island 1 the run of seed + 1; the result is the better of them
    assert {k: v for k, v in counters.items() if k not in ("islands", "island_counters")} == runs[0][1]
    assert counters["island_counters"] == [runs[1][1]]
    best = min((r[2] for r in runs), key=lambda inc: inc.key)
    assert tuple(incumbent.best.levels) == tuple(best.best.levels) and incumbent.best.loss == best.best.loss
    assert evaluator.seen == runs[0][3].seen | runs[1][3].seen
    assert incumbent.trace[-1][1] == pytest.approx(1 - incumbent.best.loss)
    again = _islands(encoded, quality, configuration, lattice, parameters, 2)
    assert tuple(again[1].best.levels) == tuple(incumbent.best.levels) and again[2].seen == evaluator.seen


def test_the_result_of_islands_is_checked_in_this_process():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.1, seed=6)
    counters, incumbent, _ = _islands(encoded, quality, configuration, lattice,
                                      GeneticParameters(iterations=3, subpopulation_size=8, seed=1), 2)
    best = incumbent.best
    assert best.solution and best.codes.shape[1] == best.sizes.size
    again = Evaluator(encoded, configuration, quality).evaluate(tuple(best.levels))
    assert again.solution and again.loss == best.loss and again.suppressed_records == best.suppressed_records


def test_a_check_limit_runs_one_island():
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.1)
    evaluator = Evaluator(encoded, configuration, quality)
    counters = genetic_algorithm(evaluator, lattice, Incumbent(quality), Deadline(None), Progress(1, False, ""),
                                 GeneticParameters(iterations=50, islands=2), check_limit=30)
    assert counters["islands"] == 1 and evaluator.checked <= 30 + 20


def test_merged_trace_is_increasing_and_ends_on_the_best():
    class Best:
        loss = 0.3

    class Fake:
        best = Best()
        started = 0.0

    merged = _merged([[0.5, 0.2], [0.1, 0.1], [0.3, 0.7], [0.4, 0.6]], Fake())
    assert merged == [[0.1, 0.1], [0.3, 0.7]]


# --- top-down early stop ------------------------------------------------------------------------------------------
def test_top_down_early_stop_keeps_the_proven_optimum_and_saves_risk_estimates():
    pu = PopulationUniquenessModel(0.01, 20_000, "pitman")
    encoded, quality, configuration, lattice = wide_search_setup([pu], 1.0, seed=2, n=400, d=4)
    optimum = search(encoded, configuration, quality, algorithm="bnb")

    def run(early: bool):
        class Search(TopDownSearch):
            def check(self, node, hint=None, early_stop=False):
                return super().check(node, hint, early_stop and early)

        before = configuration.risk_evaluations
        incumbent = Incumbent(quality)
        counters = Search(Evaluator(encoded, configuration, quality), lattice, incumbent, Deadline(None),
                          Progress(lattice.size, False, "")).run()
        return counters, incumbent, configuration.risk_evaluations - before

    early, plain = run(True), run(False)
    assert early[0]["complete"] and plain[0]["complete"]
    for counters, incumbent, _ in (early, plain):
        assert incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)
        assert tuple(incumbent.best.levels) == tuple(optimum.best.levels)
    assert early[2] < plain[2]


def test_a_daemonic_process_runs_one_island(monkeypatch):
    """A Dask worker is a daemonic process, which may not start processes: the islands then run sequentially."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True, raising=False)
    encoded, quality, configuration, lattice = wide_search_setup([KAnonymity(3)], 0.1)
    counters, incumbent, _ = _islands(encoded, quality, configuration, lattice,
                                      GeneticParameters(iterations=2, subpopulation_size=6), 2)
    assert counters["islands"] == 1 and incumbent.best is not None
