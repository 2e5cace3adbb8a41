"""The branch and bound on node numbers (engine.search.bnb._flat_loop: explicit tags indexed by the levels, flags
read by number, level bounds from the quality model's reader, ruled-out up-sets tagged by number, compiled where the
kernels are loaded) checks the very transformations, in the very order and with the very roll-up hints, that the
loop on tuples checks (the oracle: `_flat` forced to None), with the same result, counters and tags; alone
("bnb") and as Flash2P's second phase, on the numpy reference path and the compiled one."""
from __future__ import annotations

import numpy as np
import pytest

import engine.search.bnb as bnb_module
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import search
from engine.search.evaluator import Evaluator
from engine.search.tags import ExplicitTags
from tests.engine.lattice_tables import random_encoded_table


def traced(monkeypatch, encoded, k: int, limit: float, quality: str, algorithm: str, flat: bool) -> tuple:
    """The result's summary, every check asked for in order (transformation, hint), whether the loop on numbers
    ran, and the final flags of every explicit tag array made by the branch and bound."""
    trace: list[tuple] = []
    evaluate = Evaluator.evaluate
    used: list[bool] = []
    tags: list[ExplicitTags] = []

    def traced_evaluate(self, node, hint=None, cannot_win=None):
        trace.append((tuple(node), None if hint is None else tuple(hint)))
        return evaluate(self, node, hint, cannot_win)

    make_flat, make_tags = bnb_module._flat, bnb_module.make_tags

    def chosen(*args):
        found = make_flat(*args) if flat else None
        used.append(found is not None)
        return found

    def kept_tags(*args, **kwargs):
        made = make_tags(*args, **kwargs)
        tags.append(made)
        return made

    with monkeypatch.context() as patch:
        patch.setattr(Evaluator, "evaluate", traced_evaluate)
        patch.setattr(bnb_module, "_flat", chosen)
        patch.setattr(bnb_module, "make_tags", kept_tags)
        result = search(encoded, [KAnonymity(k)], make_quality_model(quality, encoded), limit, algorithm=algorithm)
    best = result.best
    summary = (None if best is None else (tuple(best.levels), best.loss, best.suppressed_records),
               result.checked, result.optimal, result.pruned_by_bound, result.pruned_by_privacy, result.phases)
    flags = [t.flags.copy() for t in tags if isinstance(t, ExplicitTags)]
    return summary, trace, any(used), flags


CONFIGURATIONS = [   # (k, limit, quality, algorithm)
    (2, 0.05, "loss", "bnb"),
    (3, 0.1, "non_uniform_entropy", "bnb"),
    (2, 0.0, "loss", "bnb"),
    (5, 1.0, "loss", "flash2p"),
    (3, 0.1, "non_uniform_entropy", "flash2p"),
    (2, 0.2, "loss", "flash2p"),
    (4, 0.3, "discernibility", "bnb"),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_the_loop_on_numbers_checks_what_the_loop_on_tuples_checks(seed, compiled, monkeypatch):
    if compiled:
        pytest.importorskip("numba")
        monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    else:
        monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    encoded = random_encoded_table(900 + seed, d=3 + seed % 3, records=(40, 300))
    for k, limit, quality, algorithm in CONFIGURATIONS[seed % 2::2]:
        new, new_trace, used, new_flags = traced(monkeypatch, encoded, k, limit, quality, algorithm, True)
        old, old_trace, old_used, old_flags = traced(monkeypatch, encoded, k, limit, quality, algorithm, False)
        assert not old_used
        assert new == old and new_trace == old_trace, (k, limit, quality, algorithm)
        assert len(new_flags) == len(old_flags)
        for a, b in zip(new_flags, old_flags):
            assert np.array_equal(a, b)
        if algorithm == "bnb" and quality != "discernibility":
            assert used   # the loop on numbers ran (explicit tags, a level bound reader)


def test_a_tag_by_number_sets_the_up_set_the_slices_set():
    pytest.importorskip("numba")
    from engine.lattice import Lattice

    rng = np.random.default_rng(7)
    for _ in range(20):
        d = int(rng.integers(1, 5))
        upper = tuple(int(x) for x in rng.integers(0, 4, d))
        lattice = Lattice(tuple(0 for _ in upper), upper)
        by_slices, by_number = ExplicitTags(lattice, upward=True), ExplicitTags(lattice, upward=True)
        evaluator = type("E", (), {"kernels": object(), "quality": None})()
        flat = bnb_module._flat(evaluator, lattice, by_number, ExplicitTags(lattice, upward=False), None, None,
                                lambda index: 0.0)
        strides = bnb_module._strides(upper)
        for _ in range(3):
            node = tuple(int(rng.integers(0, u + 1)) for u in upper)
            raised = [axis for axis in range(d) if node[axis] < upper[axis]]
            if not raised:
                continue
            axis = raised[int(rng.integers(0, len(raised)))]
            successor = node[:axis] + (node[axis] + 1,) + node[axis + 1:]
            by_slices.tag(successor)
            flat.tag_ruled_out(sum(a * b for a, b in zip(successor, strides)), node, axis)
        assert np.array_equal(by_slices.flags, by_number.flags)
