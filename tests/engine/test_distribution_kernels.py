"""The compiled decision of the distribution-based models (engine/_distribution_numba.py,
engine/privacy/_distribution_kernels.py) against the numpy reference, bit for bit.

Compared on every transformation of random tables with one or two sensitive attributes and on ADULT (occupation):
the projection onto quasi-identifier classes (codes, sizes, their order), each sensitive attribute's per-class
histogram, every variant's statistic (entropy in bits, t-closeness distance) to the last bit and the classes it
suppresses; then whole searches with either path forced (optimum, loss, suppressed records, checks).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import kernels, load_policy
from engine.classes import ClassCache
from engine.deid import encode_policy_table
from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.lattice import Lattice
from engine.privacy import KAnonymity
from engine.privacy.ldiversity import LDiversityModel
from engine.privacy.tcloseness import TClosenessModel
from engine.quality import make_quality_model
from engine.search import search
from engine.table import load_input
from tests.engine.conftest import EXAMPLES
from tests.engine.lattice_tables import seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def models_for(sensitive: str) -> list:
    """Every variant, with thresholds that make some classes pass and some fail."""
    return [
        LDiversityModel(sensitive, 2, "distinct"),
        LDiversityModel(sensitive, 3, "distinct"),
        LDiversityModel(sensitive, 1.5, "entropy"),
        LDiversityModel(sensitive, 2, "entropy"),
        LDiversityModel(sensitive, 2.5, "entropy", "grassberger"),
        LDiversityModel(sensitive, 2, "recursive", c=1.0),
        LDiversityModel(sensitive, 3, "recursive", c=2.5),
        # l = 1 leaves no count out of the tail; l = 4, 5 keep three and four largest counts (ties among them)
        LDiversityModel(sensitive, 1, "recursive", c=0.5),
        LDiversityModel(sensitive, 4, "recursive", c=0.7),
        LDiversityModel(sensitive, 5, "recursive", c=3.0),
        TClosenessModel(sensitive, 0.2, "equal"),
        TClosenessModel(sensitive, 0.45, "equal"),
        TClosenessModel(sensitive, 0.15, "ordered"),
        TClosenessModel(sensitive, 0.3, "hierarchical"),
    ]


def sensitive_hierarchy(name: str, size: int) -> Hierarchy:
    rows = [[f"{name}{i}", f"{name}h{i // 2}", f"{name}q{i // 4}", "*"] for i in range(size)]
    return Hierarchy(np.array(rows, dtype=object), name=name)


def random_table(seed: int, sensitive_count: int):
    frame, hierarchies = seeded_table(seed)
    rng = np.random.default_rng(1000 + seed)
    sensitive = {}
    for index in range(sensitive_count):
        name = f"s{index}"
        size = int(rng.integers(2, 9))
        # Skewed values, so that distributions differ from the table's.
        frame[name] = [f"{name}{v}" for v in np.minimum(rng.geometric(0.45, len(frame)) - 1, size - 1)]
        sensitive[name] = sensitive_hierarchy(name, size)
    return encode_table(frame, hierarchies, sensitive=sensitive)


def lattice_of(table) -> Lattice:
    return Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))


def caches(monkeypatch, table, budget: int = 1 << 12) -> tuple[ClassCache, ClassCache]:
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    fast = ClassCache(table, budget_bytes=budget)
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    reference = ClassCache(table, budget_bytes=budget)
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    assert fast.kernels is not None and reference.kernels is None
    return fast, reference


def reference_statistic(model, view) -> np.ndarray:
    if isinstance(model, TClosenessModel):
        return model.distances(view, view.sensitive_attribute(model.attribute))
    return model.entropy(view)


def assert_same_view(fast, reference) -> None:
    assert fast.kernels is not None and getattr(reference, "kernels", None) is None
    assert np.array_equal(fast.codes, reference.codes) and fast.codes.dtype == reference.codes.dtype
    assert np.array_equal(fast.sizes, reference.sizes) and fast.sizes.dtype == reference.sizes.dtype
    for name in reference.sensitive_names:
        a, b = fast.distribution(name), reference.distribution(name)
        for field in ("classes", "values", "counts"):
            x, y = getattr(a, field), getattr(b, field)
            assert np.array_equal(x, y) and x.dtype == y.dtype, (name, field)


def assert_same_decision(model, fast_view, reference_view) -> None:
    statistic, violating = model.compiled(fast_view)
    expected = model.violating(reference_view)
    assert np.array_equal(violating, expected), model.describe()
    assert np.array_equal(model.violating(fast_view), expected)
    if isinstance(model, TClosenessModel) or model.variant == "entropy":
        reference = reference_statistic(model, reference_view)
        assert statistic.tobytes() == reference.tobytes(), (model.describe(), statistic - reference)


@pytest.mark.parametrize("seed", range(12))
def test_decisions_equal_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1 + seed % 2)
    fast, reference = caches(monkeypatch, table)
    nodes = list(lattice_of(table))
    np.random.default_rng(seed).shuffle(nodes)
    for node in nodes:
        fast_view, reference_view = fast.view(tuple(node)), reference.view(tuple(node))
        assert_same_view(fast_view, reference_view)
        for name in table_sensitive_names(table):
            for model in models_for(name):
                assert_same_decision(model, fast_view, reference_view)


def table_sensitive_names(table) -> list[str]:
    return [s.name for s in table.sensitive]


def test_hand_computed_histogram_and_distance(monkeypatch):
    """Two classes {a: 4} and {a: 1, b: 1} of a table with q = (5/6, 1/6): equal distances (|1 - 5/6| + |0 - 1/6|) / 2
    = 1/6 and (|1/2 - 5/6| + |1/2 - 1/6|) / 2 = 1/3; entropies 0 and 1 bit."""
    frame = pd.DataFrame({"x": ["x0"] * 4 + ["x1"] * 2, "s": ["a", "a", "a", "a", "a", "b"]})
    hierarchies = {"x": Hierarchy(np.array([["x0", "*"], ["x1", "*"]], dtype=object), name="x")}
    table = encode_table(frame, hierarchies, sensitive={"s": None})
    fast, _ = caches(monkeypatch, table)
    view = fast.view((0,))
    distribution = view.distribution("s")
    assert distribution.classes.tolist() == [0, 1, 1]
    assert distribution.values.tolist() == [0, 0, 1] and distribution.counts.tolist() == [4, 1, 1]
    distance, violating = TClosenessModel("s", 0.2, "equal").compiled(view)
    assert np.allclose(distance, [1 / 6, 1 / 3], rtol=0, atol=1e-15)
    assert violating.tolist() == [False, True]
    entropy, violating = LDiversityModel("s", 1.5, "entropy").compiled(view)
    assert abs(entropy[0]) < 1e-15 and abs(entropy[1] - 1.0) < 1e-15
    assert violating.tolist() == [True, False]   # log2(1.5) = 0.585 bits


def adult_table(sensitive_policy: str):
    policy = load_policy(EXAMPLES / sensitive_policy)
    table, _, _ = encode_policy_table(policy, load_input(policy))
    return table


@pytest.mark.parametrize("policy", ["adult-tcloseness-hierarchical-02.yaml"])
def test_decisions_equal_the_reference_on_adult(monkeypatch, policy):
    table = adult_table(policy)
    fast, reference = caches(monkeypatch, table, budget=64 << 20)
    nodes = list(lattice_of(table))
    rng = np.random.default_rng(11)
    models = [LDiversityModel("occupation", 3, v, e, c) for v, e, c in
              [("distinct", "shannon", None), ("entropy", "shannon", None), ("entropy", "grassberger", None),
               ("recursive", "shannon", 4.0)]]
    models += [TClosenessModel("occupation", t, d) for t in (0.1, 0.2) for d in ("equal", "ordered", "hierarchical")]
    for index in rng.choice(len(nodes), 120, replace=False):
        node = tuple(nodes[int(index)])
        fast_view, reference_view = fast.view(node), reference.view(node)
        assert_same_view(fast_view, reference_view)
        for model in models:
            assert_same_decision(model, fast_view, reference_view)


@pytest.mark.parametrize("model", [
    TClosenessModel("occupation", 0.2, "equal"),
    TClosenessModel("occupation", 0.2, "hierarchical"),
    LDiversityModel("occupation", 3, "entropy"),
    LDiversityModel("occupation", 3, "recursive", c=4.0),
])
def test_searches_equal_the_reference_on_adult(monkeypatch, model):
    table = adult_table("adult-tcloseness-hierarchical-02.yaml")
    runs = {}
    for forced in ("compiled", "reference"):
        monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
        monkeypatch.setenv(kernels.COMPILED_ENV, "1")
        if forced == "reference":
            monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
        runs[forced] = search(table, [KAnonymity(2), model], make_quality_model("loss", table), 0.05)
    fast, reference = runs["compiled"], runs["reference"]
    assert fast.best.levels == reference.best.levels and fast.best.loss == reference.best.loss
    assert fast.best.suppressed_records == reference.best.suppressed_records
    assert np.array_equal(fast.best.suppressed, reference.best.suppressed)
    assert fast.checked == reference.checked
