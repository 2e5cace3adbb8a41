"""Hierarchy validation counts (label, parent) pairs on integer codes: it must refuse exactly the hierarchies the
row-wise check of string pairs refused, with the same message, and read files with blank lines as before."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.hierarchy import Hierarchy


def string_pairs_verdict(labels: np.ndarray) -> str | None:
    """The previous check, written out: the first level whose label has several parents, as the message names it."""
    for level in range(labels.shape[1] - 1):
        pairs = np.unique(np.stack([labels[:, level].astype(str), labels[:, level + 1].astype(str)], axis=1), axis=0)
        names, counts = np.unique(pairs[:, 0], return_counts=True)
        if (counts > 1).any():
            bad = str(names[counts > 1][0])
            parents = sorted(pairs[pairs[:, 0] == bad][:, 1].tolist())
            return (f"hierarchy is not monotone: level-{level} label {bad!r} generalizes to several level-"
                    f"{level + 1} labels {parents[:5]}")
    return None


def random_labels(seed: int) -> np.ndarray:
    """A monotone hierarchy of 1-4 generalizing levels over 5-60 values, then, for some seeds, a few labels above
    level 0 reassigned to another parent (which may or may not break monotonicity)."""
    rng = np.random.default_rng(seed)
    values = int(rng.integers(5, 60))
    columns = [np.array([f"v{i}" for i in range(values)], dtype=object)]
    group = np.arange(values)
    for level in range(1, int(rng.integers(2, 6))):
        group = group // int(rng.integers(1, 4))
        columns.append(np.array([f"l{level}_{g}" for g in group], dtype=object))
    labels = np.stack(columns, axis=1)
    if seed % 2 and labels.shape[1] > 2:
        for _ in range(int(rng.integers(1, 4))):
            row, level = int(rng.integers(0, values)), int(rng.integers(2, labels.shape[1]))
            labels[row, level] = labels[int(rng.integers(0, values)), level]
    return labels


@pytest.mark.parametrize("seed", range(40))
def test_the_integer_check_refuses_what_the_string_pairs_refused(seed):
    labels = random_labels(seed)
    expected = string_pairs_verdict(labels)
    if expected is None:
        Hierarchy(labels, name="x").validate()
        return
    with pytest.raises(InputError) as refused:
        Hierarchy(labels, name="x").validate()
    assert expected in str(refused.value)


def test_duplicate_values_are_named_as_text():
    with pytest.raises(InputError) as refused:
        Hierarchy(np.array([["a", "*"], ["b", "*"], ["a", "*"]], dtype=object), name="x").validate()
    assert "original values are not unique: 'a'" in str(refused.value)


def test_some_random_hierarchies_are_refused_and_some_pass():
    verdicts = [string_pairs_verdict(random_labels(seed)) for seed in range(40)]
    assert any(v is None for v in verdicts) and any(v is not None for v in verdicts)


def test_a_label_with_two_parents_is_named(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("a1;g1;*\n\na2;g2;*\n;;\nb1;g1;x\n")   # blank lines and a line of empty cells are skipped
    with pytest.raises(InputError) as refused:
        Hierarchy.from_csv(path, name="A")
    assert "level-1 label 'g1' generalizes to several level-2 labels ['*', 'x']" in str(refused.value)
    path.write_text("a1;g1;*\n\na2;g2;*\n;;\nb1;g1;*\n")
    assert Hierarchy.from_csv(path, name="A").labels.shape == (3, 3)
