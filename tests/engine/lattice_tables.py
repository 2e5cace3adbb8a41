"""Small generated tables with hierarchies, and the exhaustive pandas reference the search tests compare against."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from hypothesis import strategies as st

from engine.encoding import EncodedTable, encode_table
from engine.hierarchy import Hierarchy
from engine.lattice import Lattice
from engine.privacy import KAnonymity
from engine.privacy.configuration import PrivacyConfiguration
from engine.quality import make_quality_model


def make_hierarchy(name: str, size: int, levels: int, factor: int) -> Hierarchy:
    rows = []
    for i in range(size):
        row = [f"{name}{i}"] + [f"{name}L{lv}_{i // factor ** lv}" for lv in range(1, levels - 1)] + ["*"]
        rows.append(row[:levels] if levels > 1 else [f"{name}{i}"])
    return Hierarchy(np.array(rows, dtype=object), name=name)


def wide_table(seed: int = 0, n: int = 300, d: int = 8) -> tuple[pd.DataFrame, dict[str, Hierarchy]]:
    """`d` attributes of 8 values each (hierarchies of 4 levels, fan-in 2), `n` uniform random records: a lattice
    wide enough that the heuristics have work to do."""
    rng = np.random.default_rng(seed)
    hierarchies, columns = {}, {}
    for i in range(d):
        name = f"q{i}"
        hierarchies[name] = make_hierarchy(name, 8, 4, 2)
        columns[name] = [f"{name}{v}" for v in rng.integers(0, 8, n)]
    return pd.DataFrame(columns), hierarchies


def random_encoded_table(seed: int, d: int, records: tuple[int, int] = (20, 200), values: tuple[int, int] = (1, 9)
                         ) -> EncodedTable:
    """`d` attributes of a random number of values (drawn from `values`, upper bound exclusive) with hierarchies of
    2-3 levels, a random number of records (from `records`), encoded: the quality models' bit-for-bit tests walk
    every transformation of such tables."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(*records))
    hierarchies, columns = {}, {}
    for i in range(d):
        name = f"a{i}"
        size = int(rng.integers(*values))
        hierarchies[name] = make_hierarchy(name, size, int(rng.integers(2, 4)), 2)
        columns[name] = [f"{name}{v}" for v in rng.integers(0, size, n)]
    return encode_table(pd.DataFrame(columns), hierarchies)


def wide_search_setup(models, limit: float = 1.0, seed: int = 0, n: int = 300, d: int = 6
                      ) -> tuple[EncodedTable, object, PrivacyConfiguration, Lattice]:
    """A `wide_table` encoded, with Loss, the privacy configuration of `models` under a suppression limit and the
    whole lattice: what the heuristics' tests hand to a search."""
    frame, hierarchies = wide_table(seed, n, d)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    configuration = PrivacyConfiguration(models, limit)
    lattice = Lattice(tuple(a.min_level for a in encoded.attributes), tuple(a.max_level for a in encoded.attributes))
    return encoded, quality, configuration, lattice


@st.composite
def tables(draw, attributes=(2, 4), records=(10, 60), levels=(2, 3)):
    """2-4 attributes of 2-3 levels (lattices of at most 81 transformations), 10-60 records by default."""
    d = draw(st.integers(*attributes))
    n = draw(st.integers(*records))
    hierarchies, columns = {}, {}
    for name in "abcd"[:d]:
        size = draw(st.integers(2, 6))
        hierarchies[name] = make_hierarchy(name, size, draw(st.integers(*levels)), draw(st.integers(2, 3)))
        columns[name] = [f"{name}{v}" for v in draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n))]
    return pd.DataFrame(columns), hierarchies


def seeded_table(seed: int) -> tuple[pd.DataFrame, dict[str, Hierarchy]]:
    """The same family of tables as `tables`, from a numpy seed."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 5))
    n = int(rng.integers(10, 61))
    hierarchies, columns = {}, {}
    for name in "abcd"[:d]:
        size = int(rng.integers(2, 7))
        hierarchies[name] = make_hierarchy(name, size, int(rng.integers(2, 4)), int(rng.integers(2, 4)))
        columns[name] = [f"{name}{v}" for v in rng.integers(0, size, n)]
    return pd.DataFrame(columns), hierarchies


def size_only_case(seed: int, rng: np.random.Generator) -> tuple[EncodedTable, PrivacyConfiguration, str]:
    """A random size-only check configuration on `seeded_table(seed)`: k-anonymity with k in 2..4, a suppression
    limit of 0, 5, 20 or 100 %, and a quality model by the seed (Loss, Non-Uniform Entropy, Discernibility), the
    three kinds of reader of a check's classes."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    k = int(rng.integers(2, 5))
    limit = float(rng.choice([0.0, 0.05, 0.2, 1.0]))
    model = ["loss", "non_uniform_entropy", "discernibility"][seed % 3]
    return table, PrivacyConfiguration([KAnonymity(k)], limit), model


def assert_same_search(a, b) -> None:
    """Two search results (engine.search.search) agree: optimum, loss's bits, suppression, classes and the checks
    of each phase."""
    assert a.best.levels == b.best.levels and a.best.loss == b.best.loss
    assert a.best.suppressed_records == b.best.suppressed_records
    assert np.array_equal(a.best.codes, b.best.codes) and np.array_equal(a.best.sizes, b.best.sizes)
    assert np.array_equal(a.best.suppressed, b.best.suppressed)
    assert a.checked == b.checked and a.phases == b.phases


def pandas_exhaustive(frame: pd.DataFrame, hierarchies: dict[str, Hierarchy], k: int, limit: float) -> dict:
    """k-anonymity alone: every transformation evaluated straight from the definitions, written with pandas.

    Returns {levels: None (no solution) or (suppressed records, {quality id: loss})}.
    """
    names = list(hierarchies)
    n = len(frame)
    max_suppressed = math.floor(limit * n + 1e-9)
    results = {}
    for levels in itertools.product(*(range(h.levels) for h in hierarchies.values())):
        generalized = pd.DataFrame({
            a: frame[a].map(dict(zip(h.labels[:, 0], h.labels[:, lv])))
            for (a, h), lv in zip(hierarchies.items(), levels)
        })
        size = generalized.groupby(names)[names[0]].transform("size").to_numpy()
        suppressed = size < k
        if suppressed.sum() > max_suppressed:
            results[levels] = None
            continue
        loss_terms, entropy_terms, precision_terms = [], [], []
        for (a, h), lv in zip(hierarchies.items(), levels):
            # Loss: share = hierarchy rows under the label / rows; a suppressed value costs 1.
            share = pd.Series(h.labels[:, lv]).value_counts() / len(h)
            s = np.where(suppressed, 1.0, generalized[a].map(share).to_numpy()).sum()
            floor = n / len(h)
            loss_terms.append((s - floor) / (n - floor))
            # Non-uniform entropy, with the suppressed records grouped by their generalized value.
            original = frame[a].map(frame[a].value_counts()).to_numpy()
            general = generalized[a].map(generalized[a].value_counts()).to_numpy()
            term = -np.log2(original / general).sum()
            if suppressed.any():
                s_w = generalized[a][suppressed].value_counts().to_numpy()
                term += -(s_w * np.log2(s_w / suppressed.sum())).sum()
            counts = frame[a].value_counts().to_numpy()
            maximum = -(counts * np.log2(counts / n)).sum()
            entropy_terms.append(term / maximum if maximum > 0 else 0.0)
            # Precision: level / height per value, 1 for a suppressed value.
            precision_terms.append(np.where(suppressed, 1.0, lv / max(h.levels - 1, 1)).mean())
        loss_terms = np.array(loss_terms)
        kept_classes = generalized[~suppressed].drop_duplicates().shape[0]
        classes = kept_classes + (1 if suppressed.any() else 0)
        discernibility = size[~suppressed].sum() + suppressed.sum() * n
        results[levels] = (int(suppressed.sum()), {
            "loss-geometric": float(np.prod(loss_terms + 1) ** (1 / len(loss_terms)) - 1),
            "loss-arithmetic": float(loss_terms.mean()),
            "entropy": float(np.mean(entropy_terms)),
            "discernibility": float((discernibility - n) / (n * n - n)),
            "aecs": float((n / classes - 1) / (n - 1)),
            "precision": float(np.mean(precision_terms)),
        })
    return results
