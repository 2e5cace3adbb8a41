"""The compiled tables of Flash's flat sweep (engine._flash_numba.successor_table: each flat index's direct
generalizations sorted by strategy rank, and its level vector) equal what the sweep builds itself without them, and
a search reading them checks the same transformations in the same order with the same hints and counters."""
from __future__ import annotations

import numpy as np
import pytest

import engine.search.flash as flash_module
from engine.encoding import encode_table
from tests.engine.lattice_tables import random_encoded_table, wide_table
from tests.engine.test_flash_lean_sweep import CONFIGURATIONS, summary, traced_search

numba_module = pytest.importorskip("numba")


def expected_rows(ranks: np.ndarray) -> tuple[list[list[int]], list[tuple[int, ...]]]:
    """Per flat index, its successors sorted by rank and its levels, worked out with numpy's own index helpers."""
    shape = ranks.shape
    flat = ranks.reshape(-1)
    successors, levels = [], []
    for index in range(flat.size):
        node = tuple(int(v) for v in np.unravel_index(index, shape))
        found = [int(np.ravel_multi_index(node[:a] + (node[a] + 1,) + node[a + 1:], shape))
                 for a in range(len(shape)) if node[a] + 1 < shape[a]]
        successors.append(sorted(found, key=lambda i: flat[i]))
        levels.append(node)
    return successors, levels


@pytest.mark.parametrize("shape", [(1,), (4,), (2, 3), (3, 1, 4), (2, 2, 2, 2), (5, 3, 2, 4, 1)])
@pytest.mark.parametrize("seed", range(3))
def test_the_table_rows_are_the_rank_sorted_successors_and_levels(shape, seed):
    from engine import _flash_numba

    rng = np.random.default_rng(seed)
    ranks = rng.permutation(int(np.prod(shape))).astype(np.int64).reshape(shape)   # any unique ranks
    table, levels = _flash_numba.successor_table(ranks.reshape(-1), np.asarray(shape, dtype=np.int64))
    successors, nodes = expected_rows(ranks)
    assert table.shape == (ranks.size, len(shape) + 1) and levels.shape == (ranks.size, len(shape))
    for index in range(ranks.size):
        row = table[index].tolist()
        assert row[1:row[0] + 1] == successors[index]
        assert all(v == -1 for v in row[row[0] + 1:])
        assert tuple(levels[index].tolist()) == nodes[index]


def test_a_two_by_two_lattice_by_hand():
    from engine import _flash_numba

    # ranks 0 1 / 3 2: index 0 = (0, 0) has successors 1 = (0, 1) (rank 1) and 2 = (1, 0) (rank 3)
    ranks = np.array([0, 1, 3, 2], dtype=np.int64)
    table, levels = _flash_numba.successor_table(ranks, np.array([2, 2], dtype=np.int64))
    assert table.tolist() == [[2, 1, 2], [1, 3, -1], [1, 3, -1], [0, -1, -1]]
    assert levels.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]


def with_and_without_tables(monkeypatch, encoded, k, limit, quality, algorithm):
    runs, used = [], []
    real = flash_module.FlashSearch._flat_tables
    for tables in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(flash_module.FlashSearch, "_flat_tables",
                          (lambda self: (lambda t: (used.append(t is not None), t)[1])(real(self)))
                          if tables else (lambda self: None))
            result, trace, flat = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, True, True)
        assert flat
        runs.append((trace, summary(result)))
    return runs, used


@pytest.fixture
def compiled_path(monkeypatch):
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH", raising=False)
    monkeypatch.delenv("SAFESHARE_NO_NUMBA", raising=False)


@pytest.mark.parametrize("seed", range(9))
def test_the_sweep_with_the_tables_checks_what_it_checks_without(seed, monkeypatch, compiled_path):
    encoded = random_encoded_table(900 + seed, d=3 + seed % 4, records=(30, 300))
    for k, limit, quality, algorithm in CONFIGURATIONS[seed % 3::3]:
        (with_tables, without), used = with_and_without_tables(monkeypatch, encoded, k, limit, quality, algorithm)
        assert used and all(used), (k, limit, quality, algorithm)   # the compiled tables were read
        assert with_tables == without, (k, limit, quality, algorithm)


@pytest.mark.parametrize("seed,k,limit,quality", [(0, 5, 0.0, "loss"), (2, 2, 0.1, "non_uniform_entropy"),
                                                  (3, 10, 0.02, "loss")])
def test_on_wide_lattices(seed, k, limit, quality, monkeypatch, compiled_path):
    frame, hierarchies = wide_table(seed, n=400, d=6)
    encoded = encode_table(frame, hierarchies)
    algorithm = "flash" if limit == 0.0 else "flash2p"
    (with_tables, without), used = with_and_without_tables(monkeypatch, encoded, k, limit, quality, algorithm)
    assert used and all(used) and len(with_tables[0]) > 20
    assert with_tables == without


def test_no_tables_above_the_limit(monkeypatch, compiled_path):
    """A lattice whose tables would exceed TABLE_LIMIT entries is swept without them, with the same checks."""
    encoded = random_encoded_table(905, d=5, records=(100, 200))
    (with_tables, without), used = with_and_without_tables(monkeypatch, encoded, 2, 0.1, "loss", "flash2p")
    monkeypatch.setattr(flash_module, "TABLE_LIMIT", 1)
    (limited, _), limited_used = with_and_without_tables(monkeypatch, encoded, 2, 0.1, "loss", "flash2p")
    assert all(used) and not any(limited_used)
    assert limited == with_tables == without
