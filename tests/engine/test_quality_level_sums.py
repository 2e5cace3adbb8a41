"""The level bounds and the loss without suppression in Python floats (engine.quality.sums) equal numpy's to the last
bit: add_reduce against np.add.reduce (numpy's pairwise order, 1 to 128 values, mixed signs and magnitudes), the
geometric mean against numpy's prod and power, and Loss's and Non-Uniform Entropy's level-only values against the
numpy formulas they replaced on every transformation of random tables of 1 to 10 attributes, each aggregation; a
numpy whose order differed would make the models use numpy itself (forced here), with the same values."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.quality import sums
from engine.quality.entropy import NonUniformEntropy
from engine.quality.loss import Loss
from tests.engine.lattice_tables import random_encoded_table


@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 9, 15, 16, 17, 23, 64, 127, 128])
def test_add_reduce_is_numpys_pairwise_sum(length: int) -> None:
    rng = np.random.default_rng(length)
    for _ in range(300):
        values = rng.standard_normal(length) * 10.0 ** rng.integers(-8, 9, length)
        assert sums.add_reduce(values.tolist()) == float(np.add.reduce(values))
    # a case where the order matters: a left-to-right sum of these differs from numpy's
    if length >= 9:
        values = np.array([1e16] + [1.0] * (length - 2) + [-1e16])
        assert sums.add_reduce(values.tolist()) == float(np.add.reduce(values))


@pytest.mark.parametrize("length", [1, 2, 5, 8, 9, 16, 33])
def test_geometric_mean_is_numpys(length: int) -> None:
    rng = np.random.default_rng(100 + length)
    power = 1.0 / length
    for _ in range(300):
        values = 1.0 + rng.random(length)
        assert sums.multiply_reduce(values.tolist()) ** power - 1.0 == float(np.prod(values) ** power - 1.0)


def test_numpy_order_is_checked_once_per_length_and_refuses_long_vectors() -> None:
    assert sums.numpy_order("add", 9) and sums.numpy_order("geometric", 9)
    assert ("add", 9) in sums._checked
    assert not sums.numpy_order("add", sums.PAIRWISE_BLOCK + 1)
    assert not sums.numpy_order("add", 0)


def numpy_aggregate(model: Loss, per_attribute: np.ndarray) -> float:
    """Loss.aggregate as numpy computes it (the formula the Python floats replaced)."""
    if model.aggregation == "geometric_mean":
        return float(np.prod(per_attribute + 1.0) ** (1.0 / per_attribute.size) - 1.0)
    if model.aggregation == "arithmetic_mean":
        return float(per_attribute.mean())
    return float(per_attribute.sum())


def numpy_normalize(model: Loss, sums: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.where(model._span > 0, (sums - model._floor) / model._span, 0.0)
    return np.clip(loss, 0.0, 1.0)


def numpy_loss_values(model: Loss, levels) -> tuple[float, float]:
    """The numpy formulas the Python floats replaced: aggregate over an array of the level terms."""
    unsuppressed = model._level_terms(model.generalization_weight, 0.0)
    bound = model._level_terms(model._bound_weight)
    return (numpy_aggregate(model, np.array([t[lv] for t, lv in zip(bound, levels)])),
            numpy_aggregate(model, np.array([t[lv] for t, lv in zip(unsuppressed, levels)])))


@pytest.mark.parametrize("aggregation", ["geometric_mean", "arithmetic_mean", "sum"])
def test_aggregate_and_normalize_are_numpys(aggregation: str) -> None:
    table = random_encoded_table(5, 9)
    model = Loss(table, aggregation=aggregation)
    rng = np.random.default_rng(9)
    for size in (1, 2, 8, 9, 17):
        for _ in range(200):
            values = rng.random(size) * rng.choice([1e-9, 1e-3, 1.0])
            assert model.aggregate(values) == numpy_aggregate(model, values)
    for _ in range(500):
        sums = rng.random(model.d) * table.n * 1.2
        assert np.array_equal(model._normalize(sums), numpy_normalize(model, sums))


@pytest.mark.parametrize("aggregation", ["geometric_mean", "arithmetic_mean", "sum"])
@pytest.mark.parametrize("d", [1, 4, 8, 10])
def test_loss_level_values_bit_for_bit(aggregation: str, d: int) -> None:
    table = random_encoded_table(7 * d + len(aggregation), d)
    for gs in (0.5, 0.2):
        model = Loss(table, aggregation=aggregation, gs_factor=gs)
        for levels in itertools.product(*(range(a.min_level, a.max_level + 1) for a in table.attributes)):
            bound, unsuppressed = numpy_loss_values(model, levels)
            assert model.lower_bound(levels) == bound
            assert model.loss_without_suppression(levels) == unsuppressed


def test_loss_without_suppression_equals_the_loss_of_the_classes() -> None:
    """The level-only loss must equal loss() with nothing suppressed, to the last bit (the search uses either)."""
    table = random_encoded_table(3, 6)
    model = Loss(table)
    for levels in itertools.product(*(range(a.min_level, a.max_level + 1) for a in table.attributes)):
        keys = np.zeros(table.n, dtype=np.int64)
        for a, lv in zip(table.attributes, levels):
            keys = keys * (int(a.cardinality(lv)) + 1) + a.to_level[lv][a.records]
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        sizes = np.bincount(inverse.ravel()).astype(np.int64)
        codes = np.array([a.to_level[lv][a.records][first] for a, lv in zip(table.attributes, levels)],
                         dtype=np.int32)
        assert model.loss_without_suppression(levels) == model.loss(levels, codes, sizes,
                                                                    np.zeros(sizes.size, dtype=bool))


def test_fallback_to_numpy_gives_the_same_values(monkeypatch) -> None:
    table = random_encoded_table(11, 9)
    fast_loss, fast_entropy = Loss(table), NonUniformEntropy(table)
    bottom = tuple(a.min_level for a in table.attributes)
    fast_loss.lower_bound(bottom), fast_loss.loss_without_suppression(bottom), fast_entropy.lower_bound(bottom)
    monkeypatch.setattr(sums, "_checked", {})
    monkeypatch.setattr(sums, "_check", lambda operation, length: False)
    slow_loss, slow_entropy = Loss(table), NonUniformEntropy(table)
    nodes = list(itertools.product(*(range(a.min_level, a.max_level + 1) for a in table.attributes)))
    for levels in nodes[:: max(1, len(nodes) // 500)]:
        assert fast_loss.lower_bound(levels) == slow_loss.lower_bound(levels)
        assert fast_loss.loss_without_suppression(levels) == slow_loss.loss_without_suppression(levels)
        assert fast_entropy.lower_bound(levels) == slow_entropy.lower_bound(levels)
    assert slow_loss._bound_plus_one is None and not slow_entropy._python_sum
    assert fast_loss._bound_plus_one is not None and fast_entropy._python_sum


@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 10, 17])
def test_add_reduce_columns_is_add_reduce_per_vector(d: int) -> None:
    rng = np.random.default_rng(200 + d)
    shape = tuple(int(rng.integers(1, 4)) for _ in range(d))
    terms = [rng.standard_normal(h) * 10.0 ** rng.integers(-6, 7, h) for h in shape]
    columns = [t.reshape([h if a == i else 1 for a in range(d)]) for i, (t, h) in enumerate(zip(terms, shape))]
    every = np.broadcast_to(sums.add_reduce_columns(columns), shape)
    for node in itertools.product(*(range(h) for h in shape)):
        values = np.array([terms[i][level] for i, level in enumerate(node)])
        assert every[node] == float(np.add.reduce(values))


@pytest.mark.parametrize("d", [1, 5, 8, 9])
def test_entropy_level_bounds_are_every_lower_bound(d: int) -> None:
    table = random_encoded_table(40 + d, d)
    model = NonUniformEntropy(table)
    upper = tuple(a.max_level for a in table.attributes)
    bounds = model.level_bounds(upper)
    assert bounds is not None and bounds.shape == tuple(u + 1 for u in upper)
    for levels in itertools.product(*(range(u + 1) for u in upper)):
        assert bounds[levels] == model.lower_bound(levels)


@pytest.mark.parametrize("model_class", [Loss, NonUniformEntropy])
@pytest.mark.parametrize("d", [1, 6, 9])
def test_level_bound_reader_is_the_bound(model_class, d: int) -> None:
    table = random_encoded_table(60 + d, d)
    model = model_class(table)
    upper = tuple(a.max_level for a in table.attributes)
    read = model.level_bound_reader(upper)
    assert read is not None
    for levels in itertools.product(*(range(u + 1) for u in upper)):
        assert read(levels) == model.lower_bound(levels) == model.bound(levels)
    for aggregation in ("arithmetic_mean", "sum"):   # no reader: the search asks `bound`
        assert Loss(table, aggregation=aggregation).level_bound_reader(upper) is None


@pytest.mark.parametrize("aggregation", ["arithmetic_mean", "sum"])
def test_additive_aggregations_take_the_python_path_and_fall_back(monkeypatch, aggregation: str) -> None:
    """The arithmetic mean and the sum of level terms run in Python floats (checked to be numpy's bits above) and
    fall back to numpy when the emulation is refused, with the same values."""
    table = random_encoded_table(13, 9)
    fast = Loss(table, aggregation=aggregation)
    nodes = list(itertools.product(*(range(a.min_level, a.max_level + 1) for a in table.attributes)))
    fast.lower_bound(nodes[0]), fast.loss_without_suppression(nodes[0])
    assert fast._bound_lists is not None and fast._unsuppressed_lists is not None
    monkeypatch.setattr(sums, "_checked", {})
    monkeypatch.setattr(sums, "_check", lambda operation, length: False)
    slow = Loss(table, aggregation=aggregation)
    for levels in nodes[:: max(1, len(nodes) // 500)]:
        assert fast.lower_bound(levels) == slow.lower_bound(levels)
        assert fast.loss_without_suppression(levels) == slow.loss_without_suppression(levels)
    assert slow._bound_lists is None and slow._unsuppressed_lists is None


@pytest.mark.parametrize("length", [1, 3, 7, 8, 9, 16, 17, 31, 64, 128])
def test_mean_is_numpys(length: int) -> None:
    rng = np.random.default_rng(length)
    for _ in range(300):
        row = rng.random(length) * 10.0 ** rng.integers(-6, 6, length)
        assert sums.add_reduce(row.tolist()) / length == float(row.mean())
    assert sums.numpy_order("mean", length)
