"""Non-Uniform Entropy's compiled terms on lazy class tables (engine.classes.LazyCodes): the kernels read the counted
classes' codes through their origins (`suppressed_values_lazy`, `entropy_terms_lazy`) instead of a (d, u) codes array
gathered per check. Against the eager kernels on the gathered codes and the numpy counts: the same counts, values,
bounds and terms, bit for bit, whichever side (suppressed or kept classes) is counted; the model on a lazy table
against the numpy reference on the gathered codes; and a search hands the model its lazy tables without gathering
them for the checks."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.classes import ClassCache, Evaluation, LazyCodes
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity
from engine.quality import entropy
from engine.quality.entropy import NonUniformEntropy
from engine.search import search
from tests.engine.lattice_tables import seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")
numba_entropy = pytest.importorskip("engine._entropy_numba")


def lazy_tables(seed: int):
    """(table, [(node, LazyCodes, sizes)]) of every rolled-up transformation of a seeded table."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load())
    assert cache.enable_lazy()
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    entries = []
    for node in lattice:
        codes, sizes, _ = cache._entry(node)
        if isinstance(codes, LazyCodes):
            entries.append((node, codes, sizes))
    assert entries
    return table, entries


def masks(sizes: np.ndarray, rng) -> list[np.ndarray]:
    """Nothing, everything, the small classes, and random minorities and majorities of the classes suppressed:
    both sides of `_value_counts` (the suppressed classes, or the totals minus the kept ones)."""
    u = sizes.size
    return [np.zeros(u, bool), np.ones(u, bool), sizes < 3, rng.random(u) < 0.3, rng.random(u) < 0.8]


def model_tables(model: NonUniformEntropy):
    """The kernels' per-model arguments (cardinalities, totals, starts, generalization) as the model lays them out."""
    fast = model._load_fast()
    assert fast is not False
    _, cardinalities, generalization, totals, starts = fast
    return cardinalities, generalization, totals, starts


def numpy_counts(table, levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> list[np.ndarray]:
    """Per attribute, the suppressed records per value (np.bincount), the reference's counts."""
    return [np.bincount(codes[i, suppressed], weights=sizes[suppressed], minlength=a.cardinality(lv))
            for i, (a, lv) in enumerate(zip(table.attributes, levels))]


@pytest.mark.parametrize("seed", range(8))
def test_lazy_counts_equal_the_gathered_codes_and_numpy(seed: int) -> None:
    table, entries = lazy_tables(seed)
    cardinalities, _, totals, starts = model_tables(NonUniformEntropy(table))
    rng = np.random.default_rng(seed)
    for node, codes, sizes in entries:
        levels = np.array(node, dtype=np.int64)
        gathered = codes.array()
        for suppressed in masks(sizes, rng):
            removed, values, bounds = numba_entropy.suppressed_values_lazy(
                codes.rows, codes.select, codes.origin, sizes, suppressed, levels, cardinalities, totals, starts)
            expected = numba_entropy.suppressed_values(gathered, sizes, suppressed, levels, cardinalities, totals,
                                                       starts)
            assert removed == expected[0] == int(sizes[suppressed].sum())
            assert values.tobytes() == expected[1].tobytes() and np.array_equal(bounds, expected[2])
            if removed:
                counted = numpy_counts(table, node, gathered, sizes, suppressed)
                for i, counts in enumerate(counted):
                    assert np.array_equal(values[bounds[i]:bounds[i + 1]], counts[counts > 0])


@pytest.mark.parametrize("seed", range(8))
def test_lazy_single_pass_terms_equal_the_eager_kernel(seed: int) -> None:
    """The single pass (engine._entropy_numba.entropy_terms) on a lazy table: the eager kernel's every output, bit
    for bit, whether or not it replays numpy on this machine (the counts are what the lazy form changes)."""
    table, entries = lazy_tables(seed)
    model = NonUniformEntropy(table)
    cardinalities, generalization, totals, starts = model_tables(model)
    rng = np.random.default_rng(100 + seed)
    for node, codes, sizes in entries:
        levels = np.array(node, dtype=np.int64)
        gathered = codes.array()
        for suppressed in masks(sizes, rng):
            got = numba_entropy.entropy_terms_lazy(codes.rows, codes.select, codes.origin, sizes, suppressed, levels,
                                                   cardinalities, generalization, model._maximum, totals, starts)
            expected = numba_entropy.entropy_terms(gathered, sizes, suppressed, levels, cardinalities,
                                                   generalization, model._maximum, totals, starts)
            assert len(got) == len(expected)
            for a, b in zip(got, expected):
                assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def reference_model(monkeypatch, table) -> NonUniformEntropy:
    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    reference = NonUniformEntropy(table)
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH")
    return reference


@pytest.mark.parametrize("seed", range(8))
def test_model_on_lazy_tables_equals_the_reference(monkeypatch, seed: int) -> None:
    """The model as a search runs it here (its compiled path, lazy tables read through their origins) against the
    numpy reference on the gathered codes, and the reference itself given the lazy table (it gathers)."""
    table, entries = lazy_tables(seed)
    reference = reference_model(monkeypatch, table)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    kernels.load()
    fast = NonUniformEntropy(table)
    if fast._compiled() is None or fast._load_fast() is False:
        pytest.skip("Non-Uniform Entropy's compiled terms do not apply in this process")
    rng = np.random.default_rng(200 + seed)
    for node, codes, sizes in entries:
        gathered = codes.array()
        for suppressed in masks(sizes, rng):
            loss = reference.loss(node, gathered, sizes, suppressed)
            assert fast.loss(node, codes, sizes, suppressed) == loss
            assert reference.loss(node, codes, sizes, suppressed) == loss
            assert fast.attribute_losses(node, codes, sizes, suppressed) == \
                reference.attribute_losses(node, gathered, sizes, suppressed)
            fresh = suppressed.copy()   # not the classes of the loss just computed: computed again
            expected = reference.suppression_terms(node, gathered, sizes, fresh)
            assert fast.suppression_terms(node, codes, sizes, fresh).tobytes() == expected.tobytes()
            assert fast.suppression_terms(node, codes, sizes, suppressed).tobytes() == expected.tobytes()


def test_codes_to_read_hands_over_the_table_as_held() -> None:
    """Non-Uniform Entropy takes an evaluation's lazy table as it is; other models get the gathered array."""
    table, entries = lazy_tables(3)
    node, codes, sizes = entries[-1]
    evaluation = Evaluation(node, codes, sizes, np.zeros(sizes.size, bool), 0, True)
    assert NonUniformEntropy(table).codes_to_read(evaluation) is codes
    from engine.quality import make_quality_model
    gathered = make_quality_model("loss", table).codes_to_read(evaluation)
    assert isinstance(gathered, np.ndarray) and np.array_equal(gathered, codes.array())
    assert evaluation.held_codes is gathered   # gathered once, kept


@pytest.mark.parametrize("seed", range(6))
def test_searches_hand_lazy_tables_to_the_model_ungathered(monkeypatch, seed: int) -> None:
    """With suppression allowed, a search's checks give the model their lazy tables, and gather codes only for
    what else reads them (the result): fewer gathers than lazy tables the model read."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    read, gathered = [], []
    for name in ("loss", "suppression_terms"):
        original = getattr(NonUniformEntropy, name)
        monkeypatch.setattr(NonUniformEntropy, name, lambda self, levels, codes, *rest, _o=original:
                            read.append(isinstance(codes, LazyCodes)) or _o(self, levels, codes, *rest))
    original_array = LazyCodes.array
    monkeypatch.setattr(LazyCodes, "array", lambda self: gathered.append(1) or original_array(self))
    model = NonUniformEntropy(table)
    result = search(table, [KAnonymity(3)], model, 0.3)
    assert result.best is not None
    if model._fast is False:
        pytest.skip("Non-Uniform Entropy's compiled terms do not apply in this process")
    assert any(read)
    assert len(gathered) < sum(read)


def test_reference_path_on_a_lazy_table(monkeypatch) -> None:
    """Where the compiled terms do not apply (`_fast` False), the model gathers the lazy table's codes itself."""
    table, entries = lazy_tables(5)
    reference = reference_model(monkeypatch, table)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fallback = NonUniformEntropy(table)
    monkeypatch.setattr(entropy.NonUniformEntropy, "_load_fast", lambda self: False)
    rng = np.random.default_rng(5)
    for node, codes, sizes in entries:
        for suppressed in masks(sizes, rng):
            assert fallback.loss(node, codes, sizes, suppressed) == reference.loss(node, codes.array(), sizes,
                                                                                    suppressed)
