"""Issue 28, cheaper checks: the compiled path rolls a transformation up from the remembered specialization with the
fewest classes (engine.search.evaluator), and the results stay those of the numpy reference.

The choice of source changes only the cost: classes are numbered in order of first appearance in the input whatever
specialization they come from. These tests check the choice itself against a plain Python search over the
remembered transformations, and that checks and whole searches made with it equal the reference path's.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import Evaluator, search
from tests.engine.lattice_tables import seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def python_best_source(levels: np.ndarray, counts: np.ndarray, n: int, node: tuple[int, ...]) -> int:
    """The first row (of the first n) that is a proper specialization of `node` with the fewest classes, or -1."""
    best, fewest = -1, None
    for row in range(n):
        candidate = tuple(int(v) for v in levels[row])
        if candidate != node and all(c <= x for c, x in zip(candidate, node)):
            if fewest is None or counts[row] < fewest:
                best, fewest = row, counts[row]
    return best


@pytest.mark.parametrize("seed", range(6))
def test_best_source_is_the_smallest_remembered_specialization(seed):
    compiled = kernels.load()
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 6))
    levels = rng.integers(0, 4, size=(200, d)).astype(np.int64)
    counts = rng.integers(1, 50, size=200).astype(np.int64)    # ties on purpose: the first row of the fewest wins
    for n in (0, 1, 37, 200):
        for _ in range(30):
            node = tuple(int(v) for v in rng.integers(0, 4, size=d))
            expected = python_best_source(levels, counts, n, node)
            assert compiled.best_source(levels, counts, n, np.asarray(node, dtype=np.int64)) == expected


def test_a_node_is_never_its_own_source_and_the_base_has_none():
    compiled = kernels.load()
    levels = np.array([[1, 1], [0, 0], [2, 1]], dtype=np.int64)
    counts = np.array([5, 9, 1], dtype=np.int64)
    assert compiled.best_source(levels, counts, 3, np.array([1, 1], dtype=np.int64)) == 1   # (0, 0), not itself
    assert compiled.best_source(levels, counts, 3, np.array([2, 1], dtype=np.int64)) == 0   # (1, 1): 5 classes
    assert compiled.best_source(levels, counts, 3, np.array([0, 0], dtype=np.int64)) == -1


def evaluators(monkeypatch, table, configuration, quality_name):
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fast = Evaluator(table, configuration, make_quality_model(quality_name, table))
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    reference = Evaluator(table, configuration, make_quality_model(quality_name, table))
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    return fast, reference


@pytest.mark.parametrize("seed", range(4))
def test_checks_from_the_chosen_sources_equal_the_reference(monkeypatch, seed):
    """Every transformation in a random order, so that sources vary (base, hint, far specializations), on a cache
    small enough to evict: the classes, suppression and loss are the reference's; the source chosen is a
    remembered proper specialization with the fewest classes."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    configuration = PrivacyConfiguration([KAnonymity(3)], 0.1)
    fast, reference = evaluators(monkeypatch, table, configuration, "loss")
    fast.cache.budget = 1 << 12
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    nodes = list(lattice)
    order = np.random.default_rng(seed).permutation(len(nodes))
    counts: dict[tuple[int, ...], int] = {}
    for index in order:
        node = nodes[index]
        source = fast._best_source(node, None)
        below = [(c, n) for n, c in counts.items() if n != node and all(a <= b for a, b in zip(n, node))]
        if below:
            assert source is not None and counts[source] == min(below)[0]
        else:
            assert source is None
        a, b = fast.evaluate(node), reference.evaluate(node)
        assert np.array_equal(a.codes, b.codes) and np.array_equal(a.sizes, b.sizes)
        assert np.array_equal(a.suppressed, b.suppressed) and a.solution == b.solution and a.loss == b.loss
        counts[node] = int(a.sizes.size)
    assert fast.checked == reference.checked == len(nodes)
    fast.close()
    reference.close()


@pytest.mark.parametrize("algorithm,quality_name", [("flash", "loss"), ("flash2p", "non_uniform_entropy"),
                                                    ("flash2p", "loss"), ("bnb", "loss")])
def test_searches_equal_the_reference(monkeypatch, algorithm, quality_name):
    frame, hierarchies = seeded_table(11)
    table = encode_table(frame, hierarchies)
    limit = 0.0 if algorithm == "flash" else 0.05
    results = []
    for reference in (False, True):
        monkeypatch.setenv(kernels.COMPILED_ENV, "1")
        if reference:
            monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
        else:
            monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
        quality = make_quality_model(quality_name, table)
        results.append(search(table, [KAnonymity(2)], quality, limit, algorithm=algorithm))
    fast, slow = results
    assert fast.best.levels == slow.best.levels and fast.best.loss == slow.best.loss
    assert fast.best.suppressed_records == slow.best.suppressed_records
    assert fast.checked == slow.checked and fast.optimal and slow.optimal
