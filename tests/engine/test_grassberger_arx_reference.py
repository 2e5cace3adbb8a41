"""Grassberger's entropy estimator, checked against values computed independently of scipy's digamma, and the
reason our entropy l-diversity does not reproduce ARX's suppression exactly (the xfail of EL0/EL3 in
test_arx_reference_models.py).

G(n) = psi(n) + 1/2 (-1)^n (psi((n+1)/2) - psi(n/2)) has the closed form (Grassberger 2003)
G(1) = -gamma - ln 2, G(2m) = G(2m+1) = -gamma - ln 2 + sum_{k=1..m} 2/(2k-1),
which the test sums directly; ARX's source publishes the same numbers in a table (G_2, G_10, G_100 below).

ARX's check (EntropyLDiversity.isAnonymous, 2018) sums n G(n) over the class's values in the order of its
Distribution's hash buckets and fails the class as soon as a partial sum exceeds N (G(N) - ln l). Since G(1) < 0 the
partial sums are not monotone, so ARX's verdict depends on the order of the value codes in its hash table (and so on
ARX's value dictionary, the table's capacity and the search's snapshot history); ours is taken on the complete sum and
depends on the counts only. The last test shows a class where the two differ, with ARX's rule written out here.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from engine.privacy.ldiversity import LDiversityModel, grassberger_g
from tests.engine.test_privacy_models import A_HIERARCHY, by_class, view_of

EULER_GAMMA = 0.5772156649015329


def closed_form_g(n: int) -> float:
    """G(n) by Grassberger's closed form, a plain sum (no digamma)."""
    if n == 1:
        return -EULER_GAMMA - math.log(2.0)
    m = n // 2
    return -EULER_GAMMA - math.log(2.0) + sum(2.0 / (2 * k - 1) for k in range(1, m + 1))


def test_grassberger_g_matches_the_closed_form():
    n = np.arange(1, 401)
    expected = np.array([closed_form_g(int(x)) for x in n])
    assert grassberger_g(n) == pytest.approx(expected, rel=1e-13, abs=1e-13)
    # odd counts above 1 share their even neighbour's value
    assert grassberger_g(np.array([7]))[0] == pytest.approx(grassberger_g(np.array([6]))[0], rel=1e-14)
    # ARX's published table (EntropyLDiversity.G_PRECOMPUTED): G_1, G_2, G_10, G_100
    assert grassberger_g(np.array([1, 2, 10, 100])) == pytest.approx(
        [-1.2703628454614782, 0.7296371545385218, 2.3042403291416966, 4.605186851488337], rel=1e-13)


def _arx_partial_sum_rule(counts_in_bucket_order: list[int], l: float) -> bool:
    """ARX's verdict written out: True (anonymous) unless a partial sum of n G(n) exceeds N (G(N) - ln l)."""
    total = sum(counts_in_bucket_order)
    bound = total * (closed_form_g(total) - math.log(l))
    partial = 0.0
    for n in counts_in_bucket_order:
        partial += n * closed_form_g(n)
        if bound < partial:
            return False
    return True


@pytest.mark.parametrize("frequent", ["a", "z"])
def test_our_verdict_depends_on_the_counts_only_where_arx_depends_on_the_order(frequent):
    # one class: a value 3 times and five values once (N = 8, 6 distinct values), l = 6.5
    others = [v for v in "abcdefz" if v != frequent][:5]
    frame = pd.DataFrame({"a": ["a0"] * 8, "s": [frequent] * 3 + others})
    _, view = view_of(frame, {"a": A_HIERARCHY}, (0,))
    assert sorted(by_class(view)[0].values()) == [1, 1, 1, 1, 1, 3]
    model = LDiversityModel("s", 6.5, "entropy", "grassberger")
    # ours: (ln 8 - (3 G(3) + 5 G(1)) / 8) / ln 2 = 3.75 bits >= log2 6.5 = 2.70: the class passes, whatever the labels
    weighted = 3 * closed_form_g(3) + 5 * closed_form_g(1)
    expected_bits = (math.log(8) - weighted / 8) / math.log(2)
    assert model.entropy(view)[0] == pytest.approx(expected_bits, abs=1e-12)
    assert expected_bits == pytest.approx(3.7508, abs=1e-4)
    assert list(model.violating(view)) == [False]
    # ARX: the complete sum (-4.16) is below 8 (G(8) - ln 6.5) = 1.68, but the frequent value's term alone (2.19) is
    # above it, so the class fails when that value's bucket comes first and passes when it comes last.
    assert _arx_partial_sum_rule([1, 1, 1, 1, 1, 3], 6.5)
    assert not _arx_partial_sum_rule([3, 1, 1, 1, 1, 1], 6.5)
