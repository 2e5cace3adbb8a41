"""The genetic algorithm (engine/search/genetic.py; digest P1.5): the triangle, each operator on fixed seeds, whole
runs (reproducible, reaching the exhaustive optimum on small lattices, honouring limits), and its policy block."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity
from engine.privacy.configuration import PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search.common import Deadline, Incumbent, Progress
from engine.search.evaluator import Evaluator
from engine.search.genetic import (GeneticParameters, GeneticSearch, crossover, immigrate, initial_population, mutate,
                                   select_parents, sort_by_fitness, triangle)
from tests.engine.lattice_tables import make_hierarchy, pandas_exhaustive, seeded_table, wide_table


# --- initialization ------------------------------------------------------------------------------------------------

def test_triangle_is_the_digest_worked_example():
    """Fig. 5: highest levels [3, 1, 5, 3, 1], lowest 0."""
    rows = triangle(np.zeros(5, dtype=np.int64), np.array([3, 1, 5, 3, 1]))
    assert rows.tolist() == [[3, 0, 0, 0, 0],
                             [3, 1, 0, 0, 0],
                             [3, 1, 5, 0, 0],
                             [3, 1, 5, 3, 0],
                             [3, 1, 5, 3, 1]]


def test_triangle_uses_the_lowest_levels_allowed():
    rows = triangle(np.array([1, 0, 2]), np.array([3, 1, 4]))
    assert rows.tolist() == [[3, 0, 2], [3, 1, 2], [3, 1, 4]]


def test_first_subpopulation_starts_with_the_triangle_then_random_levels_in_range():
    lower, upper = np.array([0, 1, 0, 0, 0]), np.array([3, 1, 5, 3, 1])
    population = initial_population(lower, upper, 50, np.random.default_rng(7), with_triangle=True)
    assert population.shape == (50, 5)
    assert population[:5].tolist() == triangle(lower, upper).tolist()
    rest = population[5:]
    assert (rest >= lower).all() and (rest <= upper).all()
    # Uniform levels: every level of the six-level attribute appears among 45 random rows.
    assert set(rest[:, 2].tolist()) == set(range(6))
    second = initial_population(lower, upper, 50, np.random.default_rng(7), with_triangle=False)
    assert second[:5].tolist() != triangle(lower, upper).tolist()
    assert (second >= lower).all() and (second <= upper).all()


def test_triangle_larger_than_the_subpopulation_keeps_evenly_spaced_rows_and_the_top():
    lower, upper = np.zeros(10, dtype=np.int64), np.full(10, 2)
    population = initial_population(lower, upper, 4, np.random.default_rng(0), with_triangle=True)
    # Rows 0, 3, 6, 9 of the ten-row triangle: 1, 4, 7 and 10 attributes at the top.
    assert (population == 2).sum(axis=1).tolist() == [1, 4, 7, 10]
    assert population[-1].tolist() == [2] * 10


# --- operators on fixed seeds ----------------------------------------------------------------------------------------

def test_selection_weights_follow_scaled_fitness():
    """Weights 1 - (loss - min) / (max - min): losses [0.1, 0.2, 0.3] weigh 1, 0.5, 0 -> probabilities 2/3, 1/3, 0."""
    picks = select_parents(np.array([0.1, 0.2, 0.3]), 30_000, np.random.default_rng(1))
    assert picks.shape == (2, 30_000)
    counts = np.bincount(picks.ravel(), minlength=3) / picks.size
    assert counts[2] == 0
    assert counts[0] == pytest.approx(2 / 3, abs=0.01)
    assert counts[1] == pytest.approx(1 / 3, abs=0.01)


def test_selection_with_equal_losses_is_uniform_and_reproducible():
    first = select_parents(np.full(4, 0.5), 20_000, np.random.default_rng(3))
    assert np.bincount(first.ravel(), minlength=4) / first.size == pytest.approx([0.25] * 4, abs=0.01)
    again = select_parents(np.full(4, 0.5), 20_000, np.random.default_rng(3))
    assert (first == again).all()
    # The two parent arrays are independent draws, not one draw twice.
    assert not (first[0] == first[1]).all()


def test_selection_of_a_single_parent():
    assert select_parents(np.array([0.7]), 5, np.random.default_rng(0)).tolist() == [[0] * 5, [0] * 5]


def test_uniform_crossover_takes_each_gene_from_one_parent():
    rng = np.random.default_rng(11)
    first, second = np.zeros((200, 8), dtype=np.int64), np.ones((200, 8), dtype=np.int64)
    children = crossover(first, second, rng)
    # The mask is exactly the generator's next uniforms below 1/2.
    mask = np.random.default_rng(11).random((200, 8)) < 0.5
    assert (children == np.where(mask, 0, 1)).all()
    assert children.mean() == pytest.approx(0.5, abs=0.03)
    # Genes both parents share are inherited unchanged.
    same = crossover(np.array([[2, 5, 1]]), np.array([[2, 0, 1]]), np.random.default_rng(0))
    assert same[0, 0] == 2 and same[0, 2] == 1 and same[0, 1] in (0, 5)


def test_mutation_changes_between_one_and_the_bound_of_genes_to_other_levels():
    lower, upper = np.zeros(40, dtype=np.int64), np.full(40, 3)
    upper[5] = 0          # a fixed attribute: never mutated
    parents = np.random.default_rng(0).integers(lower, upper + 1, size=(2000, 40))
    mutants = mutate(parents, lower, upper, 0.05, np.random.default_rng(5))
    changed = (mutants != parents).sum(axis=1)
    bound = math.ceil(0.05 * 39)   # 39 genes can change
    assert bound == 2
    assert changed.min() == 1 and changed.max() == bound      # never an unchanged copy (the paper, not ARX)
    assert set(np.bincount(changed)[1:].nonzero()[0] + 1) == {1, 2}
    assert (mutants[:, 5] == 0).all()
    assert (mutants >= lower).all() and (mutants <= upper).all()
    # The new level is uniform over the three other levels.
    moved = mutants[mutants != parents] - parents[mutants != parents]
    assert set(((moved % 4) + 4) % 4) == {1, 2, 3}
    again = mutate(parents, lower, upper, 0.05, np.random.default_rng(5))
    assert (mutants == again).all()


def test_mutation_of_a_two_level_gene_flips_it():
    lower, upper = np.zeros(3, dtype=np.int64), np.array([1, 0, 0])
    mutants = mutate(np.array([[0, 0, 0], [1, 0, 0]]), lower, upper, 0.05, np.random.default_rng(2))
    assert mutants.tolist() == [[1, 0, 0], [0, 0, 0]]


def test_mutation_probability_one_may_change_every_gene():
    lower, upper = np.zeros(4, dtype=np.int64), np.full(4, 1)
    parents = np.zeros((500, 4), dtype=np.int64)
    changed = (mutate(parents, lower, upper, 1.0, np.random.default_rng(9)) != 0).sum(axis=1)
    assert set(changed.tolist()) == {1, 2, 3, 4}


def test_immigration_swaps_the_fittest():
    first = np.array([[0, 0], [1, 1], [2, 2], [3, 3]])
    second = np.array([[9, 9], [8, 8], [7, 7], [6, 6]])
    first_losses, second_losses = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.5, 0.6, 0.7, 0.8])
    immigrate(first, first_losses, second, second_losses, 2)
    assert first.tolist() == [[9, 9], [8, 8], [2, 2], [3, 3]]
    assert second.tolist() == [[0, 0], [1, 1], [7, 7], [6, 6]]
    assert first_losses.tolist() == [0.5, 0.6, 0.3, 0.4]
    assert second_losses.tolist() == [0.1, 0.2, 0.7, 0.8]


def test_immigration_count_comes_from_the_fraction_unlike_arx():
    """ARX's `(int) fraction * k` is 0 for 0.2; the paper's 20 % of 50 is 10."""
    assert GeneticParameters().counts() == (10, 20, 10, 10)
    assert GeneticParameters(subpopulation_size=7).counts() == (2, 3, 2, 2)
    # Children never replace the elite: 0.5 + 0.5 of 3 rounds up to 2 + 2, capped at 2 + 1.
    assert GeneticParameters(subpopulation_size=3, elite_fraction=0.5, crossover_fraction=0.5).counts()[:2] == (2, 1)
    assert GeneticParameters(production_fraction=0.0).counts()[2] == 1


def test_sort_by_fitness_least_loss_then_fewest_steps():
    levels, losses = sort_by_fitness(np.array([[2, 2], [0, 1], [1, 1], [0, 0]]), np.array([0.3, 0.1, 0.1, 0.5]))
    assert levels.tolist() == [[0, 1], [1, 1], [2, 2], [0, 0]]
    assert losses.tolist() == [0.1, 0.1, 0.3, 0.5]


# --- whole runs -----------------------------------------------------------------------------------------------------

def _run(frame, hierarchies, k, limit, parameters, model="loss", aggregation=None, time_limit=None, models=None):
    encoded = encode_table(frame, hierarchies)
    configuration = PrivacyConfiguration(models or [KAnonymity(k)], limit)
    quality = (make_quality_model(model, encoded) if aggregation is None
               else make_quality_model(model, encoded, aggregation))
    lattice = Lattice(tuple(a.min_level for a in encoded.attributes), tuple(a.max_level for a in encoded.attributes))
    evaluator = Evaluator(encoded, configuration, quality)
    incumbent = Incumbent(quality)
    counters = GeneticSearch(evaluator, lattice, incumbent, Deadline(time_limit), Progress(lattice.size, False, ""),
                             parameters).run()
    return incumbent, counters, evaluator, lattice


def test_same_seed_same_result_other_seed_other_path():
    frame, hierarchies = wide_table()
    parameters = GeneticParameters(iterations=8, subpopulation_size=12, seed=42)
    first, first_counters, first_eval, _ = _run(frame, hierarchies, 3, 0.2, parameters)
    again, again_counters, again_eval, _ = _run(frame, hierarchies, 3, 0.2, parameters)
    assert first.best is not None
    assert first.best.levels == again.best.levels and first.best.loss == again.best.loss
    assert first_eval.seen == again_eval.seen
    assert first_counters == again_counters
    assert first_counters["iterations"] == 8 and first_counters["immigrations"] == 0
    assert first_counters["complete"] is False
    _, _, other_eval, _ = _run(frame, hierarchies, 3, 0.2, GeneticParameters(iterations=8, subpopulation_size=12,
                                                                             seed=43))
    assert other_eval.seen != first_eval.seen


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit", [0.0, 0.1, 1.0])
def test_reaches_the_exhaustive_optimum_on_small_lattices(seed, limit):
    frame, hierarchies = seeded_table(seed)
    reference = pandas_exhaustive(frame, hierarchies, 3, limit)
    losses = [r[1]["loss-arithmetic"] for r in reference.values() if r is not None]
    incumbent, counters, _, _ = _run(frame, hierarchies, 3, limit,
                                     GeneticParameters(iterations=200, subpopulation_size=10, seed=seed),
                                     aggregation="arithmetic_mean")
    if not losses:
        assert incumbent.best is None
    else:
        assert incumbent.best is not None
        assert incumbent.best.loss == pytest.approx(min(losses), abs=1e-9)
        assert incumbent.best.solution


def test_reaches_the_optimum_on_a_larger_lattice_and_stops_when_it_has_seen_everything():
    """6 attributes of 4 levels (4,096 transformations): the GA does not see them all, but finds the optimum
    branch and bound proves."""
    from engine.search import search

    frame, hierarchies = wide_table(seed=3, n=200, d=6)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    optimum = search(encoded, [KAnonymity(2)], quality, 1.0, algorithm="bnb")
    assert optimum.optimal
    incumbent, counters, _, lattice = _run(frame, hierarchies, 2, 1.0, GeneticParameters(iterations=300))
    assert not counters["complete"] and counters["evaluated"] < lattice.size
    assert incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)


def test_a_lattice_evaluated_completely_is_proven():
    frame = pd.DataFrame({"a": ["a0", "a1", "a2", "a3"] * 5, "b": ["b0", "b1"] * 10})
    hierarchies = {"a": make_hierarchy("a", 4, 3, 2), "b": make_hierarchy("b", 2, 2, 2)}
    incumbent, counters, evaluator, lattice = _run(frame, hierarchies, 5, 0.0, GeneticParameters(iterations=None),
                                                   time_limit=30)
    assert counters["complete"] and counters["stopped"] is None
    assert evaluator.checked == lattice.size == 6
    assert incumbent.best is not None


def test_non_solutions_are_ranked_by_their_loss():
    """With no suppression allowed the bottom is no solution, yet it gets a fitness (the loss of suppressing what
    violates k) and is never offered to the incumbent."""
    frame, hierarchies = wide_table(seed=1, n=60, d=3)
    incumbent, _, evaluator, lattice = _run(frame, hierarchies, 5, 0.0, GeneticParameters(iterations=3,
                                                                                          subpopulation_size=6))
    search = GeneticSearch(evaluator, lattice, incumbent, Deadline(None), Progress(1, False, ""),
                           GeneticParameters(iterations=1))
    losses = search._evaluate(np.array([lattice.bottom, lattice.top]))
    assert 0 < losses[0] <= 1 and losses[1] == pytest.approx(1.0)
    assert incumbent.best is not None and incumbent.best.levels != lattice.bottom


def test_deadline_ends_the_run_unproven():
    frame, hierarchies = wide_table()
    incumbent, counters, evaluator, _ = _run(frame, hierarchies, 3, 1.0, GeneticParameters(iterations=None),
                                             time_limit=0.0)
    assert not counters["complete"]
    assert counters["stopped"].startswith("time limit")
    assert evaluator.checked == 0 and incumbent.best is None


def test_unbounded_iterations_need_a_time_limit():
    frame, hierarchies = wide_table(n=20, d=2)
    with pytest.raises(ValueError, match="iterations, a time limit or a check limit"):
        _run(frame, hierarchies, 2, 1.0, GeneticParameters(iterations=None))


def test_check_limit_ends_the_run():
    from engine.search import search

    frame, hierarchies = wide_table()
    encoded = encode_table(frame, hierarchies)
    result = search(encoded, [KAnonymity(3)], make_quality_model("loss", encoded), 1.0, algorithm="genetic",
                    check_limit=37, genetic=GeneticParameters(iterations=None))
    assert result.algorithm == "genetic" and not result.optimal
    assert result.checked == 37 and result.stopped == "check limit of 37 transformations reached"
    assert result.best is not None and result.quality_over_time
    assert result.quality_over_time[-1][1] == pytest.approx(1 - result.best.loss)


def test_evaluations_made_before_the_run_are_reused():
    """`auto` hands over the transformations it timed: the GA ranks them without evaluating them again."""
    frame, hierarchies = wide_table(n=100, d=4)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    configuration = PrivacyConfiguration([KAnonymity(3)], 1.0)
    lattice = Lattice((0,) * 4, (3,) * 4)
    first = Evaluator(encoded, configuration, quality)
    top = first.evaluate(lattice.top)
    evaluator = Evaluator(encoded, configuration, quality)
    search = GeneticSearch(evaluator, lattice, Incumbent(quality), Deadline(None), Progress(1, False, ""),
                           GeneticParameters(iterations=1), evaluated={lattice.top: top})
    losses = search._evaluate(np.array([lattice.top, lattice.bottom]))
    assert evaluator.seen == {lattice.bottom}
    assert losses[0] == top.loss


def test_population_uniqueness_reaches_the_optimum():
    """A risk-based model (no monotone privacy property): the GA finds the optimum branch and bound proves."""
    from engine.privacy.population import PopulationUniquenessModel
    from engine.search import search

    frame, hierarchies = wide_table(seed=2, n=400, d=5)
    models = [PopulationUniquenessModel(0.01, 20_000, "pitman")]
    encoded = encode_table(frame, hierarchies)
    optimum = search(encoded, models, make_quality_model("loss", encoded), 0.05, algorithm="bnb")
    assert optimum.optimal and optimum.best is not None
    incumbent, counters, _, _ = _run(frame, hierarchies, None, 0.05, GeneticParameters(iterations=40),
                                     models=[PopulationUniquenessModel(0.01, 20_000, "pitman")])
    assert incumbent.best.solution and incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)
    assert incumbent.best.details


def test_checks_stopped_early_only_skip_rows_that_cannot_rank():
    """Under a risk-based model the GA lets suppression stop once a row's loss exceeds the worst elite's: the row
    cannot be elite, parent or immigrant next time. Its remembered loss is then a lower bound of the real one; every
    other remembered loss is exact, and the GA still finds the optimum branch and bound proves."""
    from engine.privacy.population import PopulationUniquenessModel
    from engine.search import search

    frame, hierarchies = wide_table(seed=2, n=400, d=5)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    configuration = PrivacyConfiguration([PopulationUniquenessModel(0.01, 20_000, "pitman")], 1.0)
    lattice = Lattice((0,) * 5, tuple(a.max_level for a in encoded.attributes))
    incumbent = Incumbent(quality)
    genetic = GeneticSearch(Evaluator(encoded, configuration, quality), lattice, incumbent, Deadline(None),
                            Progress(lattice.size, False, ""), GeneticParameters(iterations=40))
    counters = genetic.run()
    assert counters["abandoned"] > 0
    full = Evaluator(encoded, configuration, quality)
    for node, (loss, _, abandoned) in genetic.fitness.items():
        finished = full.evaluate(node)
        real = finished.loss if finished.loss is not None else quality.loss(node, finished.codes, finished.sizes,
                                                                              finished.suppressed)
        if abandoned:
            assert loss <= real + 1e-12
        else:
            assert loss == pytest.approx(real, abs=1e-12)
    optimum = search(encoded, configuration, quality, algorithm="bnb")
    assert incumbent.best.loss == pytest.approx(optimum.best.loss, abs=1e-12)


@pytest.mark.parametrize("model", ["non_uniform_entropy", "discernibility", "aecs", "precision"])
def test_every_quality_model(model):
    frame, hierarchies = seeded_table(4)
    incumbent, _, _, _ = _run(frame, hierarchies, 2, 0.1, GeneticParameters(iterations=100, subpopulation_size=8),
                              model=model)
    column = {"non_uniform_entropy": "entropy"}.get(model, model)
    losses = [r[1][column] for r in pandas_exhaustive(frame, hierarchies, 2, 0.1).values() if r is not None]
    assert incumbent.best.loss == pytest.approx(min(losses), abs=1e-9)


# --- parameters -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value,message", [
    ("elite_fraction", 1.5, "elite_fraction"),
    ("crossover_fraction", -0.1, "crossover_fraction"),
    ("mutation_probability", float("nan"), "mutation_probability"),
    ("subpopulation_size", 1, "subpopulation_size"),
    ("immigration_interval", 2.5, "immigration_interval"),
    ("iterations", True, "iterations"),
    ("seed", -1, "seed"),
])
def test_bad_parameters_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        GeneticParameters(**{field: value})


def test_elite_and_crossover_cannot_exceed_the_population():
    with pytest.raises(ValueError, match="elite_fraction \\+ crossover_fraction"):
        GeneticParameters(elite_fraction=0.7, crossover_fraction=0.4)


# --- the policy's `search.genetic` block -----------------------------------------------------------------------------

POLICY = """\
dataset: tiny
input: {path: data.csv}
attributes:
  A: {type: quasi_identifying, hierarchy: {file: h.csv}}
  B: {type: quasi_identifying, hierarchy: {file: g.csv}}
privacy:
  - {model: k_anonymity, k: 2}
suppression_limit: 1
search:
  algorithm: genetic
"""


def _write_policy(tmp_path, genetic: str = "") -> str:
    (tmp_path / "h.csv").write_text("a1;*\na2;*\na3;*\n")
    (tmp_path / "g.csv").write_text("b1;b;*\nb2;b;*\n")
    (tmp_path / "data.csv").write_text("A;B\na1;b1\na2;b2\na1;b1\na2;b2\na3;b1\n")
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY + (f"  genetic: {genetic}\n" if genetic else ""))
    return str(policy)


BAD_GENETIC = [
    ("{elite_fraction: 1.5}", "search.genetic.elite_fraction", "less than or equal to 1"),
    ("{crossover_fraction: -0.2}", "search.genetic.crossover_fraction", "greater than or equal to 0"),
    ("{production_fraction: 2}", "search.genetic.production_fraction", "less than or equal to 1"),
    ("{mutation_probability: .nan}", "search.genetic.mutation_probability", "finite"),
    ("{immigration_fraction: 1.01}", "search.genetic.immigration_fraction", "less than or equal to 1"),
    ("{subpopulation_size: 1}", "search.genetic.subpopulation_size", "greater than or equal to 2"),
    ("{subpopulation_size: 50.5}", "search.genetic.subpopulation_size", "valid integer"),
    ("{immigration_interval: 2.0}", "search.genetic.immigration_interval", "valid integer"),
    ("{iterations: 0}", "search.genetic.iterations", "greater than or equal to 1"),
    ("{iterations: '50'}", "search.genetic.iterations", "got str '50'"),
    ("{seed: -3}", "search.genetic.seed", "greater than or equal to 0"),
    ("{seed: true}", "search.genetic.seed", "got a boolean"),
    ("{elite_fraction: 0.7, crossover_fraction: 0.4}", "search.genetic", "elite_fraction + crossover_fraction"),
    ("{elite: 0.2}", "search.genetic.elite", "unknown key"),
]


@pytest.mark.parametrize("genetic, field, words", BAD_GENETIC, ids=[c[0] for c in BAD_GENETIC])
def test_bad_genetic_parameters_exit_2_naming_the_field(tmp_path, capsys, monkeypatch, genetic, field, words):
    from safeshare.cli import main

    policy = _write_policy(tmp_path, genetic)
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))
    assert main(["deid", policy, "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "\n" not in err, err
    assert f"{policy}: {field}: " in err and words in err, err


def test_a_policy_runs_the_genetic_algorithm_with_its_parameters(tmp_path, monkeypatch):
    from engine.deid import deidentify
    from engine.policy import load_policy

    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))
    policy = load_policy(_write_policy(tmp_path, "{subpopulation_size: 4, iterations: 3, seed: 7}"))
    assert policy.search.genetic.seed == 7 and policy.search.genetic.elite_fraction == 0.2
    result = deidentify(policy)
    assert result.search.algorithm == "genetic"
    assert result.search.optimal == (result.search.checked == 6)   # proven only by seeing the whole lattice
    # The lattice has 6 transformations; the optimum under k = 2 with free suppression is (0, 0) (one record out).
    assert result.best.levels == (0, 0)


def test_immigration_runs_every_interval_iterations():
    frame, hierarchies = wide_table(n=100, d=4)
    _, counters, _, _ = _run(frame, hierarchies, 3, 1.0, GeneticParameters(iterations=12, subpopulation_size=6,
                                                                          immigration_interval=5))
    assert counters["iterations"] == 12 and counters["immigrations"] == 2   # after iterations 5 and 10
    _, counters, _, _ = _run(frame, hierarchies, 3, 1.0, GeneticParameters(iterations=12, subpopulation_size=6,
                                                                          immigration_fraction=0.0))
    assert counters["immigrations"] == 0
