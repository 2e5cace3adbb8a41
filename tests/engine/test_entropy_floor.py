"""The suppression floor of Non-Uniform Entropy (engine.quality.entropy.suppression_terms) and Flash2P's top-down
second phase that prunes with it (engine.search.floor).

The floor must be a valid bound (never above a specialization's real suppression term, so the true optimum is never
pruned): checked pair by pair on random small tables against the pandas reference of the definitions. The sweep must
find the exhaustive optimum, and the very transformation the branch and bound finds (same tie-break).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import engine.search.flash as flash_module
from engine.classes import Evaluation
from engine.encoding import encode_table
from engine.privacy import KAnonymity
from engine.privacy.configuration import PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import search
from engine.search.evaluator import Evaluator
from engine.search.floor import applies
from tests.engine.lattice_tables import pandas_exhaustive, seeded_table


def evaluations(encoded, k: int) -> dict[tuple[int, ...], Evaluation]:
    """Every transformation, evaluated with suppression of the classes below k (limit 1: all kept as solutions)."""
    configuration = PrivacyConfiguration([KAnonymity(k)], 1.0)
    evaluator = Evaluator(encoded, configuration, make_quality_model("non_uniform_entropy", encoded))
    levels = [range(a.min_level, a.max_level + 1) for a in encoded.attributes]
    return {node: evaluator.evaluate(node) for node in itertools.product(*levels)}


@pytest.mark.parametrize("seed", range(8))
def test_the_floor_never_exceeds_a_specializations_suppression_term_or_loss(seed):
    frame, hierarchies = seeded_table(seed)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("non_uniform_entropy", encoded)
    k = 2 + seed % 3
    evaluated = evaluations(encoded, k)
    reference = pandas_exhaustive(frame, hierarchies, k, 1.0)
    terms = {node: quality.suppression_terms(node, e.codes, e.sizes, e.suppressed) for node, e in evaluated.items()}
    compared = 0
    for upper, lower in itertools.product(evaluated, repeat=2):
        if upper == lower or not all(x <= y for x, y in zip(lower, upper)):
            continue
        assert np.all(terms[lower] >= terms[upper] - 1e-12), (lower, upper)
        bound = float((quality.generalization_terms(lower) + terms[upper]).mean())
        assert bound <= reference[lower][1]["entropy"] + 1e-12        # the loss from the definitions
        compared += 1
    assert compared > 0


@pytest.mark.parametrize("seed", range(6))
def test_generalization_and_suppression_terms_add_up_to_the_loss(seed):
    frame, hierarchies = seeded_table(100 + seed)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("non_uniform_entropy", encoded)
    for node, e in evaluations(encoded, 3).items():
        parts = quality.generalization_terms(node) + quality.suppression_terms(node, e.codes, e.sizes, e.suppressed)
        assert float(parts.mean()) == pytest.approx(e.loss, abs=1e-12)
        assert float(quality.generalization_terms(node).mean()) == pytest.approx(quality.lower_bound(node), abs=1e-15)


def optimum_by_definition(frame, hierarchies, encoded, quality, k: int, limit: float):
    """The documented tie-break (engine.search.common) over every solution of the pandas reference."""
    solutions = [(r[1]["entropy"], quality.lower_bound(levels), sum(levels), levels)
                 for levels, r in pandas_exhaustive(frame, hierarchies, k, limit).items() if r is not None]
    return min(solutions) if solutions else None


@pytest.mark.parametrize("seed", range(24))
def test_the_sweep_finds_the_exhaustive_optimum_and_the_branch_and_bounds(seed, monkeypatch):
    frame, hierarchies = seeded_table(1000 + seed)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("non_uniform_entropy", encoded)
    k, limit = 2 + seed % 3, (0.05, 0.2, 1.0)[seed % 3]
    sweep = search(encoded, [KAnonymity(k)], quality, limit, algorithm="flash2p")
    expected = optimum_by_definition(frame, hierarchies, encoded, quality, k, limit)
    assert sweep.optimal
    if expected is None:
        assert sweep.best is None
        return
    assert sweep.best.loss == pytest.approx(expected[0], abs=1e-9)
    monkeypatch.setattr(flash_module, "floor_applies", lambda *args: False)
    branch = search(encoded, [KAnonymity(k)], make_quality_model("non_uniform_entropy", encoded), limit,
                    algorithm="flash2p")
    assert sweep.best.levels == branch.best.levels and sweep.best.loss == branch.best.loss


def test_the_sweep_runs_only_where_suppression_only_falls():
    frame, hierarchies = seeded_table(7)
    encoded = encode_table(frame, hierarchies)
    flags = np.ones([a.max_level - a.min_level + 1 for a in encoded.attributes], dtype=bool)

    def evaluator(models, quality="non_uniform_entropy"):
        return Evaluator(encoded, PrivacyConfiguration(models, 1.0), make_quality_model(quality, encoded))

    assert applies(evaluator([KAnonymity(3)]), flags)
    assert not applies(evaluator([KAnonymity(3)]), None)                    # implicit lattice: branch and bound
    assert not applies(evaluator([KAnonymity(3)], "loss"), flags)           # no suppression terms

    class Diversity(KAnonymity):                                             # a class model not decided by size
        size_only = False

    assert not applies(evaluator([Diversity(3)]), flags)
