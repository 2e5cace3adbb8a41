"""The compiled per-check path (engine.kernels) against the numpy reference, bit for bit.

Both paths run in one process: the reference is forced by SAFESHARE_REFERENCE_PATH while the objects are built
(the class cache, the evaluator and the quality models decide their path when they are constructed). Compared on
every transformation of random tables, visited in random orders so that roll-ups start from varying cached
specializations, and on ADULT: the classes (codes, sizes, keys and their order), the minimal-class-size decision,
the suppression, the solution and the loss to the last bit; then whole searches (optimum, checks counted).
"""
from __future__ import annotations

import os
import subprocess
import threading
import sys

import numpy as np
import pytest

from engine import kernels, load_policy
from engine.classes import ClassCache
from engine.deid import encode_policy_table
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import Evaluator, search
from engine.table import load_input
from tests.engine.conftest import EXAMPLES, REPO
from tests.engine.lattice_tables import seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")

QUALITIES = [("loss", "geometric_mean"), ("loss", "arithmetic_mean"), ("loss", "sum"),
             ("non_uniform_entropy", "geometric_mean"), ("discernibility", "geometric_mean"),
             ("precision", "geometric_mean")]


def both_paths(monkeypatch, build):
    """`build()` once with the compiled path (even for small searches) and once with the reference path forced."""
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fast = build()
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    reference = build()
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    return fast, reference


def lattice_of(table) -> Lattice:
    return Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))


def assert_same_evaluation(fast, reference) -> None:
    assert fast.levels == reference.levels
    assert np.array_equal(fast.codes, reference.codes) and fast.codes.dtype == reference.codes.dtype
    assert np.array_equal(fast.sizes, reference.sizes) and fast.sizes.dtype == reference.sizes.dtype
    assert np.array_equal(fast.suppressed, reference.suppressed)
    assert fast.suppressed_records == reference.suppressed_records
    assert fast.solution == reference.solution
    if reference.loss is None:
        assert fast.loss is None
    else:
        assert fast.loss == reference.loss, (fast.levels, fast.loss - reference.loss)   # the same bits


def test_environment_variable_forces_the_reference_path(monkeypatch):
    frame, hierarchies = seeded_table(1)
    table = encode_table(frame, hierarchies)
    fast, reference = both_paths(monkeypatch, lambda: Evaluator(table, PrivacyConfiguration([KAnonymity(2)], 0.1),
                                                                 make_quality_model("loss", table)))
    assert fast.kernels is not None and not fast.quality._reference
    assert reference.kernels is None and reference.cache.kernels is None and reference.quality._reference
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    assert kernels.for_search(10 ** 6, 10 ** 6) is None and kernels.loaded() is None
    monkeypatch.setenv(kernels.REFERENCE_ENV, "0")   # "0" means: not forced
    assert kernels.enabled() and kernels.for_search(10 ** 6, 10 ** 6) is not None


def test_small_searches_do_not_import_numba(tmp_path):
    """A command whose search is small, or that builds one class table for a report, never pays for importing
    numba; a big search, or the variable, loads it."""
    script = (
        "import sys\n"
        "from engine.encoding import encode_table\n"
        "from engine.privacy import KAnonymity\n"
        "from engine.quality import make_quality_model\n"
        "from engine.search import search\n"
        "from engine import kernels\n"
        "from tests.engine.lattice_tables import seeded_table\n"
        "table = encode_table(*seeded_table(3))\n"
        "search(table, [KAnonymity(2)], make_quality_model('loss', table), 0.1)\n"
        "from engine.classes import ClassCache\n"
        "ClassCache(table, budget_bytes=0).view((1,) * len(table.attributes))\n"
        "print('numba' in sys.modules, kernels.for_search(12960, 30162) is not None, 'numba' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in (kernels.REFERENCE_ENV, kernels.COMPILED_ENV)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=300)
    assert out.stdout.split() == ["False", "True", "True"], out.stderr[-2000:]
    env[kernels.COMPILED_ENV] = "1"
    script = script.replace("kernels.for_search(12960, 30162)", "kernels.for_search(1, 1)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=300)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr[-2000:]


@pytest.mark.parametrize("seed", range(20))
def test_levels_only_losses_equal_the_class_computation(seed):
    """The per-level tables behind Loss's bound and unsuppressed loss give what the classes give, bit for bit."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=None)
    for aggregation in ("geometric_mean", "arithmetic_mean", "sum"):
        for gs_factor in (0.5, 0.3, 0.8):
            quality = make_quality_model("loss", table, aggregation, gs_factor)
            for node in lattice_of(table):
                codes, sizes = cache.classes(node)
                nothing = np.zeros(sizes.size, dtype=bool)
                assert quality.loss_without_suppression(node) == quality.loss(node, codes, sizes, nothing)
                sums = np.array([s[lv] for s, lv in zip(quality._generalized_sum, node)]) * quality._bound_weight
                assert quality.lower_bound(node) == quality.aggregate(quality._normalize(sums))
                assert quality.bound(node) == quality.lower_bound(node)


@pytest.mark.parametrize("seed", range(40))
def test_roll_ups_equal_the_reference_on_random_tables(monkeypatch, seed):
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    fast, reference = both_paths(monkeypatch, lambda: ClassCache(table, budget_bytes=1 << 12))
    nodes = list(lattice_of(table))
    rng = np.random.default_rng(seed)
    for _ in range(2):
        rng.shuffle(nodes)
        for position, node in enumerate(nodes):
            hint = nodes[position - 1] if position else None
            codes, sizes = fast.classes(node, hint)
            expected_codes, expected_sizes = reference.classes(node, hint)
            assert np.array_equal(codes, expected_codes) and codes.dtype == expected_codes.dtype
            assert np.array_equal(sizes, expected_sizes) and sizes.dtype == expected_sizes.dtype
            assert np.array_equal(fast._cache[node][2], reference._cache[node][2])   # keys, for later roll-ups


@pytest.mark.parametrize("seed", range(40))
def test_checks_equal_the_reference_on_random_tables(monkeypatch, seed):
    rng = np.random.default_rng(500 + seed)
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    k = int(rng.integers(2, 5))
    limit = float(rng.choice([0.0, 0.05, 0.2, 1.0]))
    model, aggregation = QUALITIES[seed % len(QUALITIES)]
    fast, reference = both_paths(monkeypatch, lambda: Evaluator(
        table, PrivacyConfiguration([KAnonymity(k)], limit), make_quality_model(model, table, aggregation)))
    nodes = list(lattice_of(table))
    rng.shuffle(nodes)
    for node in nodes:
        assert fast.m_anonymous(node) == reference.m_anonymous(node)
        assert_same_evaluation(fast.evaluate(node), reference.evaluate(node))
        suppressed = rng.random(fast.cache.classes(node)[1].size) < 0.5   # any suppression, not only k's
        codes, sizes = fast.cache.classes(node)
        assert fast.quality.loss(node, codes, sizes, suppressed) == \
            reference.quality.loss(node, codes, sizes, suppressed)
    assert fast.checked == reference.checked


def adult_table():
    policy = load_policy(EXAMPLES / "adult-k5.yaml")
    table, _, _ = encode_policy_table(policy, load_input(policy))
    return table


@pytest.mark.parametrize("model", ["loss", "non_uniform_entropy"])
def test_checks_equal_the_reference_on_adult(monkeypatch, model):
    table = adult_table()
    configuration = PrivacyConfiguration([KAnonymity(5)], 0.05)
    fast, reference = both_paths(monkeypatch, lambda: Evaluator(table, configuration,
                                                                 make_quality_model(model, table)))
    nodes = list(lattice_of(table))
    rng = np.random.default_rng(7)
    for index in rng.choice(len(nodes), 300, replace=False):
        node = nodes[int(index)]
        assert fast.m_anonymous(node) == reference.m_anonymous(node)
        assert_same_evaluation(fast.evaluate(node), reference.evaluate(node))


@pytest.mark.parametrize("k,limit,model", [(3, 0.0, "loss"), (5, 1.0, "loss"), (10, 0.05, "loss"),
                                           (2, 0.02, "non_uniform_entropy")])
def test_searches_equal_the_reference_on_adult(monkeypatch, k, limit, model):
    table = adult_table()

    def run():
        return search(table, [KAnonymity(k)], make_quality_model(model, table), limit)

    fast, reference = both_paths(monkeypatch, run)
    assert fast.optimal and reference.optimal
    assert fast.best.levels == reference.best.levels
    assert fast.best.loss == reference.best.loss
    assert fast.best.suppressed_records == reference.best.suppressed_records
    assert fast.checked == reference.checked and fast.phases == reference.phases


@pytest.mark.parametrize("k,limit,model", [(3, 0.0, "loss"), (5, 1.0, "loss"), (10, 0.05, "loss"),
                                           (2, 0.1, "non_uniform_entropy")])
def test_rolling_up_ahead_on_a_worker_thread_changes_nothing(monkeypatch, k, limit, model):
    """Branch and bound (Flash2P's second phase) hands the likely next check to the worker thread: the same
    optimum, tie break, checks and phases as the sequential run, and no thread is left behind."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    table = adult_table()
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    runs = {}
    for threads in ("", "1"):
        monkeypatch.setenv(kernels.THREADS_ENV, threads)
        monkeypatch.setenv(kernels.ROLL_AHEAD_ENV, "1")
        runs[threads] = search(table, [KAnonymity(k)], make_quality_model(model, table), limit)
    parallel, sequential = runs[""], runs["1"]
    assert parallel.best.levels == sequential.best.levels and parallel.best.loss == sequential.best.loss
    assert parallel.best.suppressed_records == sequential.best.suppressed_records
    assert parallel.checked == sequential.checked and parallel.phases == sequential.phases
    assert parallel.pruned_by_bound == sequential.pruned_by_bound
    assert not [t for t in threading.enumerate() if t.name.startswith("safeshare-rollup")]


def test_prefetched_roll_ups_are_the_tables_asked_for(monkeypatch):
    """Roll-ups started ahead (some asked for, some dropped unasked) leave the cache as computing on demand does."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    frame, hierarchies = seeded_table(11)
    table = encode_table(frame, hierarchies)
    ahead = ClassCache(table, compiled=kernels.load(), prefetch=True)
    plain = ClassCache(table, compiled=None)
    nodes = list(lattice_of(table))
    rng = np.random.default_rng(3)
    try:
        for node in rng.permutation(len(nodes)):
            for other in rng.choice(len(nodes), 3):
                ahead.prefetch(nodes[int(other)])
            node = nodes[int(node)]
            codes, sizes = ahead.classes(node)
            expected_codes, expected_sizes = plain.classes(node)
            assert np.array_equal(codes, expected_codes) and np.array_equal(sizes, expected_sizes)
        assert len(ahead._pending) <= 4 and set(ahead._cache) == set(plain._cache)
    finally:
        ahead.close()
