"""Issue 13: the bottom-up (Lightning) and top-down greedy best-first searches, the automatic choice between an optimal
search and a heuristic, the time and check limits, and what the manifest records about the search.

Left to run out, a greedy search checks (or rules out by its bound) every transformation, so on small lattices it must
return the exhaustive optimum under the documented tie-breaking and say it proved it. Limits are asserted on what the
search reports, never by timing the test."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PopulationUniquenessModel, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import ALGORITHMS, HEURISTICS, OPTIMAL, RUNNERS, Evaluator, auto_choice, search
from engine.search.common import Deadline, Incumbent, Progress
from engine.search.lightning import LightningSearch
from engine.search.topdown import predecessors
from tests.engine.lattice_tables import make_hierarchy, pandas_exhaustive, seeded_table

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
GREEDY = ("lightning", "topdown")
QUALITIES = (("loss", "geometric_mean"), ("loss", "arithmetic_mean"), ("non_uniform_entropy", "geometric_mean"),
             ("discernibility", "geometric_mean"), ("aecs", "geometric_mean"), ("precision", "geometric_mean"))


@pytest.fixture(autouse=True)
def no_site(tmp_path, monkeypatch):
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))


def exhaustive(encoded, configuration, quality):
    """The optimum over every transformation under the documented tie-breaking (loss, level bound, rank, levels)."""
    evaluator = Evaluator(encoded, configuration, quality)
    lattice = Lattice(tuple(a.min_level for a in encoded.attributes), tuple(a.max_level for a in encoded.attributes))
    solutions = [e for e in (evaluator.evaluate(node) for node in lattice) if e.solution]
    return min(solutions, key=lambda e: (e.loss, quality.lower_bound(e.levels), sum(e.levels), tuple(e.levels)),
               default=None)


# --- registration -------------------------------------------------------------------------------------------------
def test_greedy_searches_are_registered_heuristics():
    assert set(GREEDY) <= set(HEURISTICS) and not set(HEURISTICS) & set(OPTIMAL)
    assert ALGORITHMS[0] == "auto" and set(ALGORITHMS[1:]) == set(RUNNERS)


# --- left to run out, the greedy searches find the exhaustive optimum -------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("algorithm", GREEDY)
def test_greedy_search_reaches_the_pandas_exhaustive_optimum(algorithm, seed):
    frame, hierarchies = seeded_table(2000 + seed)
    encoded = encode_table(frame, hierarchies)
    for k, limit in itertools.product((2, 3), (0.0, 0.1, 1.0)):
        reference = pandas_exhaustive(frame, hierarchies, k, limit)
        losses = [outcome[1]["loss-geometric"] for outcome in reference.values() if outcome is not None]
        result = search(encoded, [KAnonymity(k)], make_quality_model("loss", encoded), limit, algorithm=algorithm)
        assert result.algorithm == algorithm and result.optimal and result.stopped is None
        if not losses:
            assert result.best is None
            continue
        assert result.best.loss == pytest.approx(min(losses), abs=1e-9), (k, limit)
        levels = tuple(int(v) for v in result.best.levels)
        assert reference[levels] is not None and reference[levels][0] == result.best.suppressed_records


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("algorithm", GREEDY)
def test_greedy_search_reaches_the_tie_broken_optimum_under_every_model(algorithm, seed):
    """Every quality model, k-anonymity, population uniqueness and both together: the same transformation as the
    exhaustive search, ties included."""
    frame, hierarchies = seeded_table(3000 + seed)
    encoded = encode_table(frame, hierarchies)
    population = 20 * len(frame)
    privacy = {"k": [KAnonymity(3)], "pu": [PopulationUniquenessModel(0.05, population, "zayatz")],
               "k+pu": [KAnonymity(2), PopulationUniquenessModel(0.05, population, "pitman")]}
    for (name, aggregation), (label, models), limit in itertools.product(QUALITIES, privacy.items(), (0.1, 1.0)):
        quality = make_quality_model(name, encoded, aggregation)
        configuration = PrivacyConfiguration(models, limit)
        expected = exhaustive(encoded, configuration, quality)
        result = search(encoded, configuration, quality, algorithm=algorithm)
        assert result.optimal, (name, label, limit)
        assert (result.best is None) == (expected is None), (name, label, limit)
        if expected is not None:
            assert tuple(result.best.levels) == tuple(expected.levels), (name, label, limit)
            assert result.best.loss == expected.loss and result.best.suppressed_records == expected.suppressed_records


def test_lightning_prunes_by_the_bound_and_still_proves_the_optimum():
    """A table where the bottom is already the optimum: every other transformation is ruled out by its bound, so
    Lightning checks little of the lattice and still proves the optimum; top-down has no bound and checks it all."""
    frame = pd.DataFrame({"a": [f"a{i % 3}" for i in range(60)], "b": [f"b{i % 2}" for i in range(60)],
                          "c": [f"c{i % 4}" for i in range(60)]})
    hierarchies = {"a": make_hierarchy("a", 3, 3, 2), "b": make_hierarchy("b", 2, 3, 2), "c": make_hierarchy("c", 4, 4, 2)}
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    bottom_up = search(encoded, [KAnonymity(2)], quality, 0.0, algorithm="lightning")
    top_down = search(encoded, [KAnonymity(2)], quality, 0.0, algorithm="topdown")
    assert bottom_up.optimal and top_down.optimal
    assert bottom_up.best.levels == top_down.best.levels == (0, 0, 0)
    assert bottom_up.pruned_by_bound > 0
    assert bottom_up.checked < top_down.checked == bottom_up.lattice_size


def test_predecessors_stay_within_the_lowest_allowed_levels():
    lattice = Lattice((0, 1, 0), (2, 3, 0))
    assert list(predecessors(lattice, (2, 1, 0))) == [(1, 1, 0)]
    assert list(predecessors(lattice, (1, 3, 0))) == [(0, 3, 0), (1, 2, 0)]
    assert list(predecessors(lattice, lattice.bottom)) == []


def test_lightning_dives_every_rank_of_the_top_expansions():
    """ARX's stepping: the greedy dive runs on expansion number rank(top), 2 x rank(top), ...; a dive expands a
    whole path upwards, so after the first dive the top's neighbourhood has been expanded."""
    frame, hierarchies = seeded_table(7)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    evaluator = Evaluator(encoded, PrivacyConfiguration([KAnonymity(2)], 1.0), quality)
    lattice = Lattice(tuple(0 for _ in encoded.attributes), tuple(a.max_level for a in encoded.attributes))
    dives = []

    class Recording(LightningSearch):
        def dive(self, node):
            dives.append(len(self.expanded))
            super().dive(node)

    searcher = Recording(evaluator, lattice, Incumbent(quality), Deadline(None), Progress(lattice.size, False, ""))
    assert searcher.stepping == sum(lattice.top)
    counters = searcher.run()
    assert counters["complete"]
    # The first dive comes on the stepping-th expansion of the main loop (the expansions before it all came from it).
    if dives:
        assert dives[0] == searcher.stepping - 1


# --- limits -------------------------------------------------------------------------------------------------------
def wide(records: int = 200, width: int = 40, seed: int = 5):
    """`width` quasi-identifiers of three values (v0, v1 -> x; v2 -> y; then *): 3^width transformations."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({f"q{i}": [f"v{v}" for v in rng.integers(0, 3, records)] for i in range(width)})
    from engine.hierarchy import Hierarchy

    labels = np.array([["v0", "x", "*"], ["v1", "x", "*"], ["v2", "y", "*"]], dtype=object)
    return encode_table(frame, {name: Hierarchy(labels, name=name) for name in frame.columns})


@pytest.mark.parametrize("algorithm", GREEDY + ("genetic",))
def test_time_limit_is_respected_within_ten_percent(algorithm):
    """Every heuristic, the genetic algorithm with no iteration count (as `auto` runs it), ends within 10 % after
    its time limit."""
    from engine.search.genetic import GeneticParameters

    encoded = wide()
    result = search(encoded, [KAnonymity(3)], make_quality_model("loss", encoded), 1.0, algorithm=algorithm,
                    time_limit=2.0, genetic=GeneticParameters(iterations=None))
    assert not result.optimal and result.stopped == "time limit of 2 s reached"
    assert 2.0 <= result.seconds <= 2.2
    assert result.best is not None and result.best.solution
    assert result.limits["time_limit_seconds"] == 2.0


@pytest.mark.parametrize("algorithm", GREEDY)
def test_check_limit_ends_the_search(algorithm):
    encoded = wide()
    result = search(encoded, [KAnonymity(3)], make_quality_model("loss", encoded), 1.0, algorithm=algorithm,
                    check_limit=50)
    assert not result.optimal and result.stopped == "check limit of 50 transformations reached"
    assert result.checked == 50 and result.limits["check_limit"] == 50
    assert result.best is not None


@pytest.mark.parametrize("algorithm", GREEDY)
def test_a_search_out_of_time_still_ends_with_the_top(algorithm):
    """No time at all and a bottom that is no solution (no suppression allowed): the top, checked first, is the
    answer, never nothing."""
    encoded = wide()
    result = search(encoded, [KAnonymity(3)], make_quality_model("loss", encoded), 0.0, algorithm=algorithm,
                    time_limit=0.0)
    assert not result.optimal and result.stopped == "time limit of 0 s reached"
    assert result.best is not None and tuple(result.best.levels) == (2,) * 40
    assert result.quality_over_time and result.quality_over_time[0][1] == pytest.approx(1.0 - result.best.loss)


@pytest.mark.parametrize("algorithm", GREEDY)
def test_quality_over_time_records_each_improvement(algorithm):
    encoded = wide(records=300, width=8)
    result = search(encoded, [KAnonymity(3)], make_quality_model("loss", encoded), 1.0, algorithm=algorithm,
                    check_limit=300)
    trace = result.quality_over_time
    assert len(trace) >= 2
    seconds = [point[0] for point in trace]
    qualities = [point[1] for point in trace]
    assert seconds == sorted(seconds) and all(0 <= s <= result.seconds for s in seconds)
    assert all(later > earlier for earlier, later in zip(qualities, qualities[1:]))
    assert qualities[-1] == pytest.approx(1.0 - result.best.loss)


# --- the automatic choice ---------------------------------------------------------------------------------------------
def test_auto_without_a_time_limit_keeps_the_optimal_search():
    frame, hierarchies = seeded_table(11)
    encoded = encode_table(frame, hierarchies)
    result = search(encoded, [KAnonymity(2)], make_quality_model("loss", encoded), 1.0)
    assert result.algorithm == "flash2p" and result.optimal
    assert result.choice == {"requested": "auto", "optimal_algorithm": "flash2p", "reason": "no time limit"}


def test_auto_runs_a_heuristic_when_the_optimal_search_cannot_finish():
    encoded = wide()
    result = search(encoded, [KAnonymity(3)], make_quality_model("loss", encoded), 1.0, time_limit=1.0)
    assert result.algorithm == "genetic" and not result.optimal   # k-anonymity, bottom all suppressed
    assert result.stopped == "time limit of 1 s reached"   # chosen by auto, it runs until the time limit
    choice = result.choice
    assert choice["optimal_algorithm"] == "bnb" and choice["time_limit_seconds"] == 1.0
    assert choice["estimated_optimal_seconds"] > 1.0 and choice["seconds_per_check"] > 0
    assert result.best is not None


def test_auto_picks_a_heuristic_for_creditcard(data_dir):
    from engine.deid import deidentify

    result = deidentify(EXAMPLES / "creditcard-k5.yaml", time_limit=3)
    assert result.table.attributes.__len__() == 24
    assert result.search.algorithm == "genetic" and result.search.optimal is False
    assert result.search.choice["estimated_optimal_seconds"] > 600
    assert result.search.stopped is not None
    assert result.best is not None and result.best.solution
    assert min(result.best.sizes[~result.best.suppressed], default=5) >= 5


def test_auto_picks_the_optimal_search_for_adult(demo_dir):
    from engine.deid import deidentify

    result = deidentify(EXAMPLES / "adult-k5.yaml")
    assert result.search.algorithm == "flash2p" and result.search.optimal
    choice = result.search.choice
    assert choice["optimal_algorithm"] == "flash2p" and choice["estimated_optimal_seconds"] <= 600
    assert result.best.levels == (0, 3, 0, 0, 2, 1, 1, 1, 0)   # the published optimum (test_benchmark_tables)


def test_heuristic_chosen_by_the_configuration():
    from types import SimpleNamespace

    from engine.search import choose_heuristic

    encoded = wide()
    quality = make_quality_model("loss", encoded)
    lattice = Lattice((0,) * 40, (2,) * 40)
    k = PrivacyConfiguration([KAnonymity(3)], 1.0)
    pu = PrivacyConfiguration([PopulationUniquenessModel(0.01, 10**6, "pitman")], 1.0)
    all_suppressed = SimpleNamespace(solution=True, suppressed_records=200)
    few_suppressed = SimpleNamespace(solution=True, suppressed_records=20)
    assert choose_heuristic(k, quality, lattice, all_suppressed, 200) == "genetic"
    assert choose_heuristic(k, quality, lattice, None, 200) == "genetic"
    assert choose_heuristic(k, quality, lattice, few_suppressed, 200) == "lightning"
    k_and_pu = PrivacyConfiguration([KAnonymity(3), PopulationUniquenessModel(0.01, 10**6, "pitman")], 1.0)
    assert choose_heuristic(k_and_pu, quality, lattice, all_suppressed, 200) == "topdown"   # risk-based: top-down
    assert choose_heuristic(pu, quality, lattice, all_suppressed, 200) == "topdown"
    assert choose_heuristic(pu, quality, lattice, None, 200) == "topdown"
    # given long enough, the genetic algorithm overtakes top-down under risk-based models (heuristics_bench)
    assert choose_heuristic(pu, quality, lattice, None, 200, time_limit=10.0) == "topdown"
    assert choose_heuristic(pu, quality, lattice, all_suppressed, 200, time_limit=600.0) == "genetic"
    assert choose_heuristic(k_and_pu, quality, lattice, None, 200, time_limit=100.0) == "genetic"
    assert choose_heuristic(pu, quality, lattice, few_suppressed, 200) == "lightning"


def test_auto_choice_measures_a_few_checks_and_reuses_them():
    from engine.search import SearchContext

    encoded = wide()
    configuration = PrivacyConfiguration([KAnonymity(3)], 1.0)
    quality = make_quality_model("loss", encoded)
    evaluator = Evaluator(encoded, configuration, quality)
    lattice = Lattice((0,) * 40, (2,) * 40)
    context = SearchContext(evaluator, lattice, Incumbent(quality), Deadline(10.0), Progress(lattice.size, False, ""))
    chosen, details = auto_choice(context, configuration, quality, 10.0)
    assert chosen in HEURISTICS and details["reason"].startswith("the optimal search is not expected")
    assert lattice.bottom in context.evaluated and lattice.top in context.evaluated
    assert evaluator.checked == len(context.evaluated) <= 4
    assert context.incumbent.best is not None


# --- the policy and the manifest ------------------------------------------------------------------------------------
def small_policy(folder: Path, search_block: str) -> Path:
    rng = np.random.default_rng(3)
    names = [f"q{i}" for i in range(6)]
    rows = rng.integers(0, 3, size=(120, 6))
    (folder / "data.csv").write_text(";".join(names) + "\n" + "".join(";".join(f"v{v}" for v in row) + "\n"
                                                                       for row in rows))
    (folder / "h.csv").write_text("v0;x;*\nv1;x;*\nv2;y;*\n")
    attributes = "".join(f"  {n}: {{type: quasi_identifying, hierarchy: {{file: h.csv}}}}\n" for n in names)
    policy = folder / "policy.yaml"
    policy.write_text(f"dataset: small\ninput: {{path: data.csv}}\nattributes:\n{attributes}"
                      f"privacy:\n  - {{model: k_anonymity, k: 3}}\nsuppression_limit: 1.0\n{search_block}")
    return policy


@pytest.mark.parametrize("algorithm", GREEDY)
def test_manifest_records_algorithm_limits_optimality_and_quality_over_time(tmp_path, algorithm):
    from safeshare.cli import main

    policy = small_policy(tmp_path, f"search: {{algorithm: {algorithm}, time_limit_seconds: 30}}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["algorithm"] == algorithm
    assert manifest["search_limits"]["time_limit_seconds"] == 30
    assert manifest["optimal"] is True   # 729 transformations: run out, so proven
    curve = manifest["quality_over_time"]
    assert curve and all(len(point) == 2 for point in curve)
    assert curve[-1][1] == pytest.approx(manifest["quality"]["loss"], abs=1e-9)
    assert manifest["algorithm_choice"] is None   # named, not chosen


def test_manifest_of_an_automatic_choice(tmp_path):
    from engine.deid import build_manifest, deidentify

    result = deidentify(small_policy(tmp_path, "search: {time_limit_seconds: 30}\n"))
    manifest = build_manifest(result, "0" * 64, {})
    assert manifest.algorithm == "flash2p" and manifest.optimal is True
    assert manifest.algorithm_choice["requested"] == "auto"
    assert manifest.algorithm_choice["reason"] == "the optimal search is expected to finish within the time limit"


def test_policy_check_limit_is_strict(tmp_path, capsys):
    from safeshare.cli import main

    policy = small_policy(tmp_path, "search: {algorithm: topdown, check_limit: 0}\n")
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert f"{policy}: search.check_limit: " in capsys.readouterr().err
    policy = small_policy(tmp_path, "search: {algorithm: lightning, check_limit: 20}\n")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["optimal"] is False and manifest["checked_transformations"] == 20
    assert manifest["search_stopped"] == "check limit of 20 transformations reached"


@pytest.mark.parametrize("name", ["creditcard-k5.yaml", "creditcard-pu1.yaml", "mach2019-k5.yaml",
                                  "mach2019-pu1.yaml", "census-income-kdd-k5.yaml"])
def test_many_attribute_example_policies_load(data_dir, name):
    from engine.policy import load_policy

    policy = load_policy(EXAMPLES / name)
    assert len(policy.quasi_identifiers) >= 16
    assert policy.search.algorithm == "auto"
    if name.startswith(("creditcard", "mach2019")):
        assert policy.suppression_limit == 1.0
        assert (policy.quality.model, policy.quality.aggregation, policy.quality.gs_factor) == (
            "loss", "arithmetic_mean", 0.5)
    if name.endswith("pu1.yaml"):
        spec = policy.privacy[0]
        # ARX's Region.USA, as the benchmark of Meurers et al. 2021 (AbstractBenchmark) used
        assert (spec.model, spec.estimator, spec.population, spec.threshold) == (
            "population_uniqueness", "pitman", 317238626, 0.01)
    if name.startswith("census"):
        assert len(policy.quasi_identifiers) >= 20


@pytest.mark.slow
def test_census_income_kdd_example_hierarchies_cover_the_data(data_dir):
    from engine.policy import load_policy
    from engine.table import load_input

    policy = load_policy(EXAMPLES / "census-income-kdd-k5.yaml")
    loaded = load_input(policy)
    encoded = encode_table(loaded.frame, loaded.hierarchies, policy.source)
    assert len(encoded.attributes) == 24 and encoded.n == 299285
    lattice = Lattice(tuple(0 for _ in encoded.attributes), tuple(a.max_level for a in encoded.attributes))
    assert lattice.size > 10**9
