"""The branch-and-bound optimum equals an exhaustive search written independently with pandas."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.privacy import KAnonymity
from engine.quality import make_quality_model
from engine.search import search


def make_hierarchy(name: str, size: int, levels: int, factor: int) -> Hierarchy:
    rows = []
    for i in range(size):
        row = [f"{name}{i}"] + [f"{name}L{lv}_{i // factor ** lv}" for lv in range(1, levels - 1)] + ["*"]
        rows.append(row[:levels] if levels > 1 else [f"{name}{i}"])
    return Hierarchy(np.array(rows, dtype=object), name=name)


def brute_force(frame: pd.DataFrame, hierarchies: dict[str, Hierarchy], k: int, limit: float, model: str):
    """Every transformation, evaluated straight from the definitions."""
    names = list(hierarchies)
    n = len(frame)
    max_suppressed = math.floor(limit * n + 1e-9)
    best = None
    for levels in itertools.product(*(range(h.levels) for h in hierarchies.values())):
        generalized = pd.DataFrame({
            a: frame[a].map(dict(zip(h.labels[:, 0], h.labels[:, lv]))) for (a, h), lv in zip(hierarchies.items(), levels)
        })
        size = generalized.groupby(names)[names[0]].transform("size").to_numpy()
        suppressed = size < k
        if suppressed.sum() > max_suppressed:
            continue
        per_attribute = []
        for (a, h), lv in zip(hierarchies.items(), levels):
            if model == "loss":
                share = pd.Series(h.labels[:, lv]).value_counts() / len(h)
                s = np.where(suppressed, 1.0, generalized[a].map(share).to_numpy()).sum()
                floor = n / len(h)
                per_attribute.append(0.0 if n == floor else (s - floor) / (n - floor))
            else:
                original = frame[a].map(frame[a].value_counts()).to_numpy()
                general = generalized[a].map(generalized[a].value_counts()).to_numpy()
                term = -np.log2(original / general).sum()
                if suppressed.any():
                    s_w = generalized[a][suppressed].value_counts().to_numpy()
                    term += -(s_w * np.log2(s_w / suppressed.sum())).sum()
                counts = frame[a].value_counts().to_numpy()
                maximum = -(counts * np.log2(counts / n)).sum()
                per_attribute.append(term / maximum if maximum > 0 else 0.0)
        per_attribute = np.array(per_attribute)
        loss = (np.prod(per_attribute + 1) ** (1 / len(per_attribute)) - 1) if model == "loss" else per_attribute.mean()
        if best is None or loss < best[0]:
            best = (loss, levels)
    return best


@st.composite
def tables(draw):
    d = draw(st.integers(3, 4))
    hierarchies = {}
    columns = {}
    n = draw(st.integers(4, 40))
    for i in range(d):
        name = "abcd"[i]
        size = draw(st.integers(2, 6))
        levels = draw(st.integers(2, 4))
        hierarchies[name] = make_hierarchy(name, size, levels, draw(st.integers(2, 3)))
        columns[name] = [f"{name}{v}" for v in draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n))]
    return pd.DataFrame(columns), hierarchies


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.integers(2, 4), st.sampled_from([0.0, 0.05, 1.0]), st.sampled_from(["loss", "non_uniform_entropy"]))
def test_optimum_matches_exhaustive_search(table, k, limit, model):
    frame, hierarchies = table
    encoded = encode_table(frame, hierarchies)
    result = search(encoded, [KAnonymity(k)], make_quality_model(model, encoded), limit)
    expected = brute_force(frame, hierarchies, k, limit, model)
    assert result.optimal
    if expected is None:
        assert result.best is None
    else:
        assert result.best is not None
        assert result.best.loss == pytest.approx(expected[0], abs=1e-9)


@pytest.mark.parametrize("algorithm,limit", [("flash", 0.0), ("flash2p", 0.1), ("bnb", 0.1)])
def test_time_limit_ends_the_search_unproven(algorithm, limit):
    frame = pd.DataFrame({"a": ["a0", "a1"] * 10, "b": ["b0", "b1", "b2", "b3"] * 5, "c": ["c0"] * 20})
    hierarchies = {"a": make_hierarchy("a", 2, 2, 2), "b": make_hierarchy("b", 4, 3, 2), "c": make_hierarchy("c", 1, 2, 2)}
    encoded = encode_table(frame, hierarchies)
    result = search(encoded, [KAnonymity(6)], make_quality_model("loss", encoded), limit, algorithm=algorithm,
                    time_limit=0.0)
    assert result.algorithm == algorithm
    assert not result.optimal
