"""A research subset's population counts, compiled (engine._population_numba) against the numpy reference.

delta-presence and k-map with a research subset count the population per class at every check; the compiled count
must give the reference's class sizes exactly, and the unmatched population classes (ARX's entries with count 0)
with the same sizes in the same order, on every transformation, with labels the subset never shows, and in searches
whose optimum, transformation and checks are the reference's."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.privacy.configuration import PrivacyConfiguration
from engine.privacy.kmap import DeltaPresenceModel, KMapModel
from engine.quality import make_quality_model
from engine.search import search
from engine.subset import PopulationTable
from tests.engine.lattice_tables import make_hierarchy


def population_table(seed: int, d: int = 3, records: int = 400, share: float = 0.15):
    """A random population over `d` attributes (6-12 values, hierarchies of 3-4 levels, skewed so that some values
    are rare), and a random research subset of about `share` of it: some labels then occur in the population only."""
    rng = np.random.default_rng(seed)
    hierarchies, columns = {}, {}
    for i in range(d):
        name = f"q{i}"
        size = int(rng.integers(6, 13))
        hierarchies[name] = make_hierarchy(name, size, int(rng.integers(3, 5)), 2)
        weights = rng.dirichlet(np.full(size, 0.6))
        columns[name] = [f"{name}{v}" for v in rng.choice(size, records, p=weights)]
    population = pd.DataFrame(columns)
    rows = np.sort(rng.choice(records, max(1, int(share * records)), replace=False))
    subset = population.iloc[rows].reset_index(drop=True)
    table = encode_table(subset, hierarchies)
    return dataclasses.replace(table, population=PopulationTable(table, population, hierarchies))


def every_node(table):
    return itertools.product(*[range(a.min_level, a.max_level + 1) for a in table.attributes])


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_count_is_the_reference_on_every_transformation(seed, monkeypatch):
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    table = population_table(seed)
    population = table.population
    cache = ClassCache(table)
    unmatched_seen = 0
    for node in every_node(table):
        view = cache.view(node)
        assert population.places(node) is not None
        compiled = population.counts_for(node, view)
        reference = population.reference_counts_for(node, view)
        assert compiled.sizes.dtype == np.int64
        np.testing.assert_array_equal(compiled.sizes, reference.sizes)
        np.testing.assert_array_equal(compiled.unmatched_sizes, reference.unmatched_sizes)   # same order
        assert int(compiled.sizes.sum() + compiled.unmatched_sizes.sum()) == population.records
        unmatched_seen += compiled.unmatched_sizes.size
    assert unmatched_seen > 0   # the subset misses some labels: the unmatched side was exercised


def test_without_numba_loaded_the_count_is_the_reference(monkeypatch):
    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    table = population_table(3)
    calls = []
    reference = table.population.reference_counts_for
    monkeypatch.setattr(table.population, "reference_counts_for", lambda *a: calls.append(a) or reference(*a))
    view = ClassCache(table).view((0, 0, 0))
    table.population.counts_for((0, 0, 0), view)
    assert len(calls) == 1


def test_a_key_too_wide_for_int64_takes_the_reference(monkeypatch):
    table = population_table(5)
    population = table.population
    monkeypatch.setattr(population, "widths", [[1 << 21] * 4 for _ in population.widths])   # (2^21)^3 = 2^63
    assert population.places((0, 0, 0)) is None
    population.widths = [[1 << 20] * 4 for _ in range(3)]   # 2^60 fits
    assert list(population.places((0, 0, 0))) == [1 << 40, 1 << 20, 1]


def test_unmatched_sizes_are_grouped_only_when_read(monkeypatch):
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    import engine._population_numba as compiled

    table = population_table(1)
    calls = []
    grouped = compiled.unmatched_sizes
    monkeypatch.setattr(compiled, "unmatched_sizes", lambda *a: calls.append(1) or grouped(*a))
    view = ClassCache(table).view((0, 0, 0))
    counts = table.population.counts_for((0, 0, 0), view)
    assert calls == [] and counts.sizes.size == view.class_count
    first = counts.unmatched_sizes
    assert counts.unmatched_sizes is first and calls == [1]   # computed once, then kept


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("model", [DeltaPresenceModel(0.0, 0.3), DeltaPresenceModel(0.05, 0.5), KMapModel(3)],
                         ids=["delta-max", "delta-min-max", "k-map"])
def test_searches_find_the_reference_optimum(seed, model, monkeypatch):
    table = population_table(seed, d=4, records=600)
    configuration = lambda: PrivacyConfiguration([model], 0.1)   # noqa: E731 - one per search (it counts)
    quality = lambda: make_quality_model("loss", table)          # noqa: E731
    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    reference = search(table, configuration(), quality(), algorithm="bnb")
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH")
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    compiled = search(table, configuration(), quality(), algorithm="bnb")
    assert (compiled.best is None) == (reference.best is None)
    if reference.best is not None:
        assert compiled.best.levels == reference.best.levels
        assert compiled.best.loss == reference.best.loss
        assert compiled.best.suppressed_records == reference.best.suppressed_records
    assert compiled.checked == reference.checked and compiled.optimal and reference.optimal
