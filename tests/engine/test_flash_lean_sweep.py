"""Flash's first phase on flat indices (engine.search.flash.FlashSearch._sweep, used where the tags are explicit and
the strategy's ranks exist) checks the very transformations, in the very order and with the very roll-up hints, that
the per-tuple sweep (`unclassified_at_rank`, `binary_search`, `find_path`, `check_path`, `skip`) checks: that sweep
stays in the module for the implicit tags and for shifted or large lattices, so it is the oracle here, run with
`FAST_SWEEP` off on explicit tags and on the implicit (antichain) tags. The results, counters and phases agree too.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.search.flash as flash_module
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import search
from engine.search.evaluator import Evaluator
from engine.search.tags import ExplicitTags
from tests.engine.lattice_tables import random_encoded_table, wide_table


def traced_search(monkeypatch, encoded, k: int, limit: float, quality: str, algorithm: str, fast: bool,
                  explicit: bool | None, progress: bool = False):
    """The search's result and every check it asked for, in order: (kind, transformation, roll-up hint)."""
    trace: list[tuple] = []
    evaluate, m_anonymous = Evaluator.evaluate, Evaluator.m_anonymous

    def traced_evaluate(self, node, hint=None, cannot_win=None):
        trace.append(("evaluate", tuple(node), None if hint is None else tuple(hint)))
        return evaluate(self, node, hint, cannot_win)

    def traced_m_anonymous(self, node, hint=None):
        trace.append(("m_anonymous", tuple(node), None if hint is None else tuple(hint)))
        return m_anonymous(self, node, hint)

    with monkeypatch.context() as patch:
        patch.setattr(Evaluator, "evaluate", traced_evaluate)
        patch.setattr(Evaluator, "m_anonymous", traced_m_anonymous)
        patch.setattr(flash_module, "FAST_SWEEP", fast)
        used = []
        sweep = flash_module.FlashSearch._sweep
        patch.setattr(flash_module.FlashSearch, "_sweep", lambda self: (used.append(True), sweep(self))[1])
        second = flash_module.FlashSearch._second_phase
        patch.setattr(flash_module.FlashSearch, "_second_phase",
                      lambda self, explicit: (trace.append(("second phase",)), second(self, explicit))[1])
        result = search(encoded, [KAnonymity(k)], make_quality_model(quality, encoded), limit, algorithm=algorithm,
                        explicit=explicit, progress=progress)
    return result, trace, bool(used)


def summary(result) -> tuple:
    best = result.best
    return (None if best is None else (tuple(best.levels), best.loss, best.suppressed_records),
            result.checked, result.optimal, result.pruned_by_bound, result.phases)


CONFIGURATIONS = [   # (k, limit, quality, algorithm)
    (2, 0.0, "loss", "flash"),
    (3, 0.0, "non_uniform_entropy", "flash"),
    (4, 0.0, "discernibility", "flash"),
    (2, 0.05, "loss", "flash2p"),
    (3, 0.1, "non_uniform_entropy", "flash2p"),
    (5, 1.0, "loss", "flash2p"),
    (2, 0.2, "non_uniform_entropy", "flash2p"),
    (3, 0.1, "precision", "flash2p"),
    (2, 0.05, "aecs", "flash2p"),
]


@pytest.mark.parametrize("seed", range(12))
def test_the_flat_sweep_checks_what_the_tuple_sweep_checks(seed, monkeypatch):
    encoded = random_encoded_table(500 + seed, d=3 + seed % 4, records=(30, 300))
    for k, limit, quality, algorithm in CONFIGURATIONS[seed % 3::3]:
        new, new_trace, used = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, True, True)
        assert used   # the flat sweep ran
        old, old_trace, old_used = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, False, True)
        assert not old_used
        implicit, implicit_trace, _ = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, True, False)
        assert new_trace == old_trace, (k, limit, quality, algorithm)
        assert summary(new) == summary(old), (k, limit, quality, algorithm)
        # the implicit tags have no floor sweep (Flash2P's second phase is the branch and bound there): the first
        # phase and the optimum agree
        first = new_trace.index(("second phase",))
        assert implicit_trace[:first + 1] == new_trace[:first + 1], (k, limit, quality, algorithm)
        assert summary(implicit)[0][:2] == summary(new)[0][:2] if new.best else implicit.best is None
        assert len({entry[1] for entry in new_trace if len(entry) == 3}) == new.checked


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed,k,limit,quality", [(0, 5, 0.0, "loss"), (1, 3, 0.05, "loss"),
                                                  (2, 2, 0.1, "non_uniform_entropy"), (3, 10, 0.02, "loss")])
def test_on_wide_lattices_with_many_checks(seed, k, limit, quality, compiled, monkeypatch):
    """Six attributes of four levels (4,096 transformations), hundreds of checks and bound prunes; on the numpy
    reference path and on the compiled one (whose strategy ranks come from engine._flash_numba)."""
    if compiled:
        pytest.importorskip("numba")
        monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
        monkeypatch.delenv("SAFESHARE_REFERENCE_PATH", raising=False)
        monkeypatch.delenv("SAFESHARE_NO_NUMBA", raising=False)
    frame, hierarchies = wide_table(seed, n=400, d=6)
    encoded = encode_table(frame, hierarchies)
    algorithm = "flash" if limit == 0.0 else "flash2p"
    new, new_trace, used = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, True, True)
    old, old_trace, _ = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, False, True)
    assert used and len(new_trace) > 20
    assert new_trace == old_trace
    assert summary(new) == summary(old)
    if compiled:
        strategies = []
        init = flash_module.Strategy.__init__
        monkeypatch.setattr(flash_module.Strategy, "__init__",
                            lambda self, *args: (init(self, *args), strategies.append(self))[0])
        again, again_trace, _ = traced_search(monkeypatch, encoded, k, limit, quality, algorithm, True, True)
        assert strategies and all(strategy.compiled for strategy in strategies)
        assert again_trace == new_trace and summary(again) == summary(new)


def test_with_a_progress_bar(monkeypatch):
    """The bar counts each check as it happens (the flat sweep reads the checked count only when there is one)."""
    encoded = random_encoded_table(77, d=4, records=(100, 200))
    new, new_trace, used = traced_search(monkeypatch, encoded, 2, 0.1, "loss", "flash2p", True, True, progress=True)
    old, old_trace, _ = traced_search(monkeypatch, encoded, 2, 0.1, "loss", "flash2p", False, True, progress=True)
    assert used and new_trace == old_trace and summary(new) == summary(old)


def test_the_tag_buffer_is_the_flags_array():
    """`ExplicitTags.buffer[i]` reads the flag of the transformation whose flat (C-order) index is i."""
    lattice = Lattice((0, 0, 0), (2, 1, 3))
    for upward in (True, False):
        tags = ExplicitTags(lattice, upward)
        tags.tag((1, 0, 2))
        flat = tags.flags.reshape(-1)
        assert [tags.buffer[i] for i in range(flat.size)] == flat.astype(int).tolist()
        assert np.count_nonzero(flat) == (2 * 2 * 2 if upward else 2 * 1 * 3)


def test_the_rank_runs_hold_each_level_sum_in_key_order():
    """`Strategy.order` lists the transformations by rank and `rank_starts` cuts it by the sum of levels."""
    encoded = random_encoded_table(7, d=4)
    lattice = Lattice(tuple(a.min_level for a in encoded.attributes), tuple(a.max_level for a in encoded.attributes))

    class Holder:
        table = encoded

    strategy = flash_module.Strategy(Holder(), lattice)
    shape = strategy.ranks.shape
    flat_ranks = strategy.ranks.reshape(-1)
    assert flat_ranks[strategy.order].tolist() == list(range(flat_ranks.size))
    starts = strategy.rank_starts
    assert starts[0] == 0 and starts[-1] == flat_ranks.size
    for level_sum in range(len(starts) - 1):
        run = strategy.order[starts[level_sum]:starts[level_sum + 1]]
        assert all(sum(np.unravel_index(int(i), shape)) == level_sum for i in run)


def test_under_models_that_imply_only_a_class_size(monkeypatch):
    """Flash2P whose first phase classifies the minimal class size alone (`m_anonymous` checks, then the class
    bound from the cache) and models judged on the classes' sensitive values: both sweeps agree."""
    from engine.hierarchy import Hierarchy
    from engine.privacy import PrivacyConfiguration
    from engine.privacy.ldiversity import LDiversityModel
    from engine.privacy.tcloseness import TClosenessModel
    from tests.engine.lattice_tables import seeded_table

    sensitive = Hierarchy(np.array([["s0", "x", "*"], ["s1", "x", "*"], ["s2", "y", "*"], ["s3", "y", "*"]],
                                   dtype=object), name="s")
    kinds = set()
    for seed in range(10):
        rng = np.random.default_rng(2000 + seed)
        frame, hierarchies = seeded_table(300 + seed)
        frame["s"] = [f"s{v}" for v in rng.choice(4, size=len(frame), p=rng.dirichlet(np.ones(4)))]
        encoded = encode_table(frame, hierarchies, sensitive={"s": sensitive})
        models = [KAnonymity(2), TClosenessModel("s", 0.3, "equal") if seed % 2 else LDiversityModel("s", 2)]
        configuration = PrivacyConfiguration(models, (0.1, 0.3)[seed % 2])
        runs = []
        for fast in (True, False):
            trace: list[tuple] = []
            evaluate, m_anonymous = Evaluator.evaluate, Evaluator.m_anonymous
            with monkeypatch.context() as patch:
                patch.setattr(Evaluator, "evaluate", lambda self, node, hint=None, cannot_win=None, _f=evaluate: (
                    trace.append(("evaluate", tuple(node), hint)), _f(self, node, hint, cannot_win))[1])
                patch.setattr(Evaluator, "m_anonymous", lambda self, node, hint=None, _f=m_anonymous: (
                    trace.append(("m_anonymous", tuple(node), hint)), _f(self, node, hint))[1])
                patch.setattr(flash_module, "FAST_SWEEP", fast)
                quality = make_quality_model(("loss", "non_uniform_entropy")[seed % 2], encoded)
                result = search(encoded, configuration, quality, algorithm="flash2p")
            runs.append((trace, summary(result)))
            kinds.update(kind for kind, *_ in trace)
        assert runs[0] == runs[1], seed
    assert kinds == {"evaluate", "m_anonymous"}   # both kinds of check were compared
