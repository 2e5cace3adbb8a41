"""The floor sweep's suppression floor carried down rank by rank on the compiled path (engine.search.floor._Carried,
engine._flash_numba.rank_runs and floor_down) against the reference, which raises the whole down-set of every
evaluated transformation at once.

What must hold: `rank_runs` groups the flat indices by sum of levels (ascending within a sum); after every rank is
reached, the floor rows of that rank are the reference's bits, with rows raised at random ranks as the sweep raises
them (including the top, the bottom, lattices with an attribute of one level and one attribute alone); and the whole
sweep checks the same transformations in the same order with the same counters and optimum on both paths.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import evaluator as evaluator_module
from engine.search import floor as floor_module
from engine.search import search
from tests.engine.lattice_tables import random_encoded_table

numba_flash = pytest.importorskip("engine._flash_numba")


def level_sums(shape: tuple[int, ...]) -> np.ndarray:
    return np.indices(shape).reshape(len(shape), -1).sum(axis=0)


@pytest.mark.parametrize("shape", [(1,), (5,), (3, 1, 4), (2, 3, 2, 2), (1, 1), (4, 6)])
def test_rank_runs_group_the_flat_indices_by_sum_of_levels(shape):
    order, starts = numba_flash.rank_runs(np.asarray(shape, dtype=np.int64))
    sums = level_sums(shape)
    assert order.tolist() == np.argsort(sums, kind="stable").tolist()
    assert starts.tolist() == [0] + np.cumsum(np.bincount(sums, minlength=sum(shape) - len(shape) + 1)).tolist()


@pytest.mark.parametrize("shape", [(6,), (3, 1, 4), (2, 3, 2, 2), (4, 1), (3, 4, 5), (2, 2, 2, 2, 2)])
@pytest.mark.parametrize("seed", range(3))
def test_the_carried_floor_equals_the_down_set_updates_rank_by_rank(shape, seed):
    rng = np.random.default_rng(seed)
    d = len(shape)
    carried_floor = np.zeros(shape + (d,))
    reference = np.zeros(shape + (d,))
    carried = floor_module._Carried(carried_floor)
    sums = level_sums(shape)
    top = int(sums.max())
    for rank in range(top, -1, -1):
        if rng.random() < 0.25 and rank not in (0, top):
            continue   # a rank the sweep has nothing to look at: carried later, with the next one reached
        carried.reach(rank)
        here = np.flatnonzero(sums == rank)
        for index in here:
            point = np.unravel_index(index, shape)
            assert np.array_equal(carried_floor[point], reference[point]), (rank, point)
        for index in rng.choice(here, size=min(here.size, int(rng.integers(0, 3)) + (rank == top)), replace=False):
            point = np.unravel_index(index, shape)
            # terms with ties, zeros and values that differ in the last bit only
            terms = rng.choice([0.0, 0.25, 0.25 + 2 ** -54, 0.5, rng.random()], size=d)
            carried.raise_row(int(index), terms)
            below = tuple(slice(0, int(v) + 1) for v in point)
            np.maximum(reference[below], terms, out=reference[below])
    assert np.array_equal(carried_floor, reference)


def test_nothing_raised_carries_nothing():
    floor = np.zeros((3, 3, 2))
    carried = floor_module._Carried(floor)
    carried.reach(0)
    assert not floor.any() and carried.done == 0
    carried.raise_row(0, np.array([1.0, 2.0]))   # the bottom: its own row only
    assert floor[0, 0].tolist() == [1.0, 2.0] and np.count_nonzero(floor) == 2


def sweep(monkeypatch, table, k: int, limit: float, reference: bool) -> tuple:
    """The transformations evaluated, in order, and the result, on one path (reference or compiled)."""
    evaluated = []
    original = evaluator_module.Evaluator.evaluate

    def recording(self, node, hint=None, cannot_win=None):
        evaluation = original(self, node, hint, cannot_win)
        evaluated.append((tuple(node), evaluation.suppressed_records, evaluation.loss))
        return evaluation

    sweeps = []
    original_sweep = floor_module.floor_sweep
    with monkeypatch.context() as patch:
        if reference:
            patch.setenv(kernels.REFERENCE_ENV, "1")
        else:
            patch.delenv(kernels.REFERENCE_ENV, raising=False)
            patch.setenv(kernels.COMPILED_ENV, "1")
        patch.setattr(evaluator_module.Evaluator, "evaluate", recording)
        import engine.search.flash as flash_module

        patch.setattr(flash_module, "floor_sweep", lambda *a: sweeps.append(original_sweep(*a)) or sweeps[-1])
        quality = make_quality_model("non_uniform_entropy", table)
        result = search(table, [KAnonymity(k)], quality, limit, algorithm="flash2p")
    best = result.best
    return (evaluated, result.checked, result.pruned_by_bound, best.levels, best.loss, best.suppressed_records,
            best.suppressed.tolist(), sweeps)


@pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")
@pytest.mark.parametrize("seed", range(6))
def test_the_sweep_is_the_same_on_the_compiled_and_the_reference_path(monkeypatch, seed):
    table = random_encoded_table(700 + seed, d=5, records=(800, 2000), values=(3, 16))
    k, limit = 2 + seed % 4, (1.0, 0.3)[seed % 2]
    compiled = sweep(monkeypatch, table, k, limit, reference=False)
    assert compiled == sweep(monkeypatch, table, k, limit, reference=True)
    assert compiled[-1], "the floor sweep ran"
