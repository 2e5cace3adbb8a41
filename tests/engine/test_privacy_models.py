"""Every formula of the privacy models beyond k-anonymity, on tables small enough to work out by hand.

Each expected value is written out as arithmetic in the test (entropies, distances, ratios, the k' loop), never
computed by engine code; the engine's numbers are then compared with it. The models follow ARX's semantics as their
module docstrings state them (engine/privacy/*.py).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import digamma
from scipy.stats import poisson

from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.errors import InputError
from engine.hierarchy import Hierarchy
from engine.policy import parse_policy
from engine.privacy.configuration import PrivacyConfiguration
from engine.privacy.disclosure import BetaLikenessModel, DeltaDisclosureModel
from engine.privacy.kmap import DeltaPresenceModel, KMapModel, derived_k
from engine.privacy.ldiversity import LDiversityModel
from engine.privacy.sample_risk import AverageRiskModel, SampleUniquenessModel
from engine.privacy.tcloseness import TClosenessModel
from engine.quality import make_quality_model
from engine.search import search
from engine.search.evaluator import Evaluator
from engine.subset import PopulationTable
from tests.engine.lattice_tables import make_hierarchy

LN2 = math.log(2.0)


def log2(x: float) -> float:
    return math.log(x) / LN2


def hierarchy(name: str, rows: list[list[str]]) -> Hierarchy:
    return Hierarchy(np.array(rows, dtype=object), name=name)


def view_of(frame: pd.DataFrame, hierarchies: dict, levels: tuple[int, ...], sensitive: dict | None = None):
    table = encode_table(frame, hierarchies, sensitive=sensitive if sensitive is not None else {"s": None})
    return table, ClassCache(table).view(levels)


def by_class(view) -> list[dict[str, int]]:
    """Per class (view order), {sensitive value: count}: what the hand computations below assume."""
    distribution = view.distribution("s")
    values = view.sensitive_attribute("s").values
    out = [dict() for _ in range(view.class_count)]
    for c, v, n in zip(distribution.classes, distribution.values, distribution.counts):
        out[c][str(values[v])] = int(n)
    return out


# --- the l-diversity table -----------------------------------------------------------------------------------------
# A: a0, a1 under g0, a2, a3 under g1, root *. Records in class order a0, a1, a2, a3 (classes are numbered by first
# appearance): a0 = {x, x, y}, a1 = {x, y, z, z}, a2 = {z}, a3 = {x, y}. Table: x 4, y 3, z 3 of 10.
A_HIERARCHY = make_hierarchy("a", 4, 3, 2)
L_FRAME = pd.DataFrame({
    "a": ["a0"] * 3 + ["a1"] * 4 + ["a2"] + ["a3"] * 2,
    "s": ["x", "x", "y", "x", "y", "z", "z", "z", "x", "y"],
})


@pytest.fixture(scope="module")
def l_view():
    _, view = view_of(L_FRAME, {"a": A_HIERARCHY}, (0,))
    assert by_class(view) == [{"x": 2, "y": 1}, {"x": 1, "y": 1, "z": 2}, {"z": 1}, {"x": 1, "y": 1}]
    assert list(view.sizes) == [3, 4, 1, 2]
    return view


def test_distinct_l_diversity(l_view):
    assert list(LDiversityModel("s", 2).violating(l_view)) == [False, False, True, False]
    assert list(LDiversityModel("s", 3).violating(l_view)) == [True, False, True, True]
    _, top_groups = view_of(L_FRAME, {"a": A_HIERARCHY}, (1,))   # g0 = {x 3, y 2, z 2}, g1 = {x, y, z}
    assert list(LDiversityModel("s", 3).violating(top_groups)) == [False, False]
    assert LDiversityModel("s", 3).minimal_class_size == 3


def test_entropy_l_diversity_shannon(l_view):
    expected = [
        -(2 / 3 * log2(2 / 3) + 1 / 3 * log2(1 / 3)),            # 0.918
        -(1 / 4 * log2(1 / 4) + 1 / 4 * log2(1 / 4) + 1 / 2 * log2(1 / 2)),   # 1.5
        0.0,
        -(1 / 2 * log2(1 / 2) + 1 / 2 * log2(1 / 2)),            # 1.0
    ]
    model = LDiversityModel("s", 2, "entropy")
    assert model.entropy(l_view) == pytest.approx(expected, abs=1e-12)
    assert model.threshold == 1.0
    # 0.918 < 1 fails, 1.5 passes, a single value fails, exactly 1 bit passes (entropy >= log2 l).
    assert list(model.violating(l_view)) == [True, False, True, False]
    # l = 1.5: log2 1.5 = 0.585; only the class of one value fails.
    assert list(LDiversityModel("s", 1.5, "entropy").violating(l_view)) == [False, False, True, False]
    assert LDiversityModel("s", 1.5, "entropy").minimal_class_size == 1


def test_entropy_of_a_balanced_class_follows_arx_arithmetic():
    """ARX computes -(sum n log2 n / N - log2 N), each log2 as ln x / ln 2; for {x 3, y 3} that is
    0.9999999999999998 bits, not 1, so a perfectly balanced class of six records fails entropy 2-diversity in ARX, and
    here too (which is why entropy l-diversity declares no monotonicity: {x 1, y 1} has exactly 1 bit)."""
    frame = pd.DataFrame({"a": ["a0"] * 6, "s": ["x", "y"] * 3})
    _, view = view_of(frame, {"a": A_HIERARCHY}, (0,))
    model = LDiversityModel("s", 2, "entropy")
    arx = -((3 * (math.log(3) / math.log(2)) * 2) / 6 - math.log(6) / math.log(2))
    assert arx == 0.9999999999999998
    assert model.entropy(view)[0] == arx
    assert model.violating(view)[0]


def grassberger_bits(counts: list[int]) -> float:
    """H = ln N - 1/N sum n_i G(n_i), G(n) = psi(n) + 1/2 (-1)^n (psi((n+1)/2) - psi(n/2)), in bits."""
    total = sum(counts)
    weighted = 0.0
    for n in counts:
        g = digamma(n) + 0.5 * (-1) ** n * (digamma((n + 1) / 2) - digamma(n / 2))
        weighted += n * g
    return (math.log(total) - weighted / total) / LN2


def test_entropy_l_diversity_grassberger(l_view):
    expected = [grassberger_bits([2, 1]), grassberger_bits([1, 1, 2]), grassberger_bits([1]),
                grassberger_bits([1, 1])]
    # Known values: one record alone is worth 1.83 bits under the bias correction.
    assert expected == pytest.approx([1.4941152901, 2.3900511364, 1.8327461773, 2.8327461773], abs=1e-9)
    model = LDiversityModel("s", 2.9, "entropy", "grassberger")
    assert model.entropy(l_view) == pytest.approx(expected, abs=1e-12)
    assert model.threshold == pytest.approx(log2(2.9))   # 1.536
    # a0: 1.494 < 1.536 fails on entropy; a2 has 1.83 bits but one value, fewer than floor(2.9) = 2: fails first.
    assert list(model.violating(l_view)) == [True, False, True, False]
    assert not model.monotone_without_suppression and not model.monotone_with_suppression
    # Two records of one value: the estimate is negative.
    assert grassberger_bits([2]) < 0


# Recursive (c,l): B's classes, in order: b0 = {x 1, y 3, z 2} (sorted 3, 2, 1), b1 = {x 4, y 2}, b2 = {x 5},
# b3 = {y 2, z 2}.
R_FRAME = pd.DataFrame({
    "a": ["a0"] * 6 + ["a1"] * 6 + ["a2"] * 5 + ["a3"] * 4,
    "s": ["x", "y", "y", "y", "z", "z"] + ["x"] * 4 + ["y"] * 2 + ["x"] * 5 + ["y", "y", "z", "z"],
})


def test_recursive_l_diversity():
    _, view = view_of(R_FRAME, {"a": A_HIERARCHY}, (0,))
    assert by_class(view) == [{"x": 1, "y": 3, "z": 2}, {"x": 4, "y": 2}, {"x": 5}, {"y": 2, "z": 2}]
    # l = 2, c = 2: r1 < 2 (r2 + ... + rn)
    expected = [
        not (3 < 2 * (2 + 1)),   # 3 < 6 holds
        not (4 < 2 * 2),         # 4 < 4 is false: exactly equal FAILS
        True,                    # one value: fewer than l
        not (2 < 2 * 2),         # 2 < 4 holds
    ]
    assert list(LDiversityModel("s", 2, "recursive", c=2).violating(view)) == expected == [False, True, True, False]
    # c = 2.5 lets b1 pass: 4 < 5.
    assert list(LDiversityModel("s", 2, "recursive", c=2.5).violating(view)) == [False, False, True, False]
    # c = 1.5: b1 4 < 3 fails, b3 2 < 3 holds, b0 3 < 4.5 holds.
    assert list(LDiversityModel("s", 2, "recursive", c=1.5).violating(view)) == [False, True, True, False]
    # l = 3: the tail starts at the third largest count. b0: 3 < c * 1; b1 and b3 have two values only.
    assert list(LDiversityModel("s", 3, "recursive", c=3).violating(view)) == [True, True, True, True]   # 3 < 3
    assert list(LDiversityModel("s", 3, "recursive", c=3.5).violating(view)) == [False, True, True, True]


# --- t-closeness ---------------------------------------------------------------------------------------------------
Q_L = {"x": 4 / 10, "y": 3 / 10, "z": 3 / 10}   # the L table's distribution over every record


def test_t_closeness_equal_distance(l_view):
    p = [{"x": 2 / 3, "y": 1 / 3, "z": 0.0}, {"x": 1 / 4, "y": 1 / 4, "z": 1 / 2}, {"x": 0.0, "y": 0.0, "z": 1.0},
         {"x": 1 / 2, "y": 1 / 2, "z": 0.0}]
    expected = [0.5 * sum(abs(pc[v] - Q_L[v]) for v in Q_L) for pc in p]
    assert expected == pytest.approx([0.3, 0.2, 0.7, 0.3])
    model = TClosenessModel("s", 0.25)
    sensitive = l_view.sensitive_attribute("s")
    assert list(sensitive.distribution) == pytest.approx([0.4, 0.3, 0.3])   # values sorted x, y, z
    assert model.distances(l_view, sensitive) == pytest.approx(expected, abs=1e-12)
    assert list(model.violating(l_view)) == [True, False, True, True]
    assert list(TClosenessModel("s", 0.5).violating(l_view)) == [False, False, True, False]


def test_t_closeness_reference_is_every_record_even_when_a_class_is_suppressed():
    # With 10 % suppression, a2 (z alone, distance 0.7) is suppressed; the classes that stay are still measured
    # against x 0.4, y 0.3, z 0.3 (the whole table), not against the released records' distribution.
    table = encode_table(L_FRAME, {"a": A_HIERARCHY}, sensitive={"s": None})
    evaluator = Evaluator(table, PrivacyConfiguration([TClosenessModel("s", 0.35)], 0.1),
                          make_quality_model("loss", table))
    evaluation = evaluator.evaluate((0,))
    assert evaluation.solution and list(evaluation.suppressed) == [False, False, True, False]
    # t = 0.25: against the whole table a0 and a3 are at 0.3 and go with a2; a1 (0.2) stays. Against the records
    # a1 and a3 would release, a0 would be at 2/9 and a1 at 0.28: the other way round.
    released_q = {"x": 4 / 9, "y": 3 / 9, "z": 2 / 9}
    a0, a1 = {"x": 2 / 3, "y": 1 / 3, "z": 0.0}, {"x": 1 / 4, "y": 1 / 4, "z": 1 / 2}
    assert 0.5 * sum(abs(a0[v] - released_q[v]) for v in a0) == pytest.approx(2 / 9)
    assert 0.5 * sum(abs(a1[v] - released_q[v]) for v in a1) == pytest.approx(5 / 18)
    evaluation = Evaluator(table, PrivacyConfiguration([TClosenessModel("s", 0.25)], 1.0),
                           make_quality_model("loss", table)).evaluate((0,))
    assert list(evaluation.suppressed) == [True, False, True, True]


def ordered_distance(p: list[float], q: list[float]) -> float:
    """sum_i |sum_(j<=i) (p_j - q_j)|, p and q listed in the order (not divided by m - 1)."""
    total, running = 0.0, 0.0
    for pi, qi in zip(p, q):
        running += pi - qi
        total += abs(running)
    return total


def test_t_closeness_ordered_distance_with_an_explicit_order(l_view):
    order = ["y", "z", "x"]
    q = [Q_L[v] for v in order]
    p = [[1 / 3, 0.0, 2 / 3], [1 / 4, 1 / 2, 1 / 4], [0.0, 1.0, 0.0], [1 / 2, 0.0, 1 / 2]]   # y, z, x per class
    expected = [ordered_distance(pc, q) for pc in p]
    # a0: |1/3 - 0.3| + |1/30 - 0.3| + |0| = 0.3; a2: |-0.3| + |0.4| + 0 = 0.7
    assert expected == pytest.approx([0.3, 0.2, 0.7, 0.3 + 0.0])
    model = TClosenessModel("s", 0.12, "ordered", order=order)
    assert model.distances(l_view, l_view.sensitive_attribute("s")) == pytest.approx(expected, abs=1e-12)
    # Compared with t (m - 1) = 0.12 x 2 = 0.24.
    assert list(model.violating(l_view)) == [True, False, True, True]
    assert list(TClosenessModel("s", 0.3, "ordered", order=order).violating(l_view)) == [False, False, True, False]
    # The order matters: x, y, z gives a2 |-0.4| + |-0.7| + 0 = 1.1.
    natural = TClosenessModel("s", 0.5, "ordered").distances(l_view, l_view.sensitive_attribute("s"))
    assert natural[2] == pytest.approx(ordered_distance([0.0, 0.0, 1.0], [0.4, 0.3, 0.3])) == pytest.approx(1.1)


def test_t_closeness_ordered_distance_orders_numbers_numerically():
    # Values 9, 10, 100 (text order would be 10, 100, 9). Table: 9, 10, 100, 100 -> q = 1/4, 1/4, 1/2.
    frame = pd.DataFrame({"a": ["a0", "a0", "a1", "a1"], "s": ["9", "10", "100", "100"]})
    _, view = view_of(frame, {"a": A_HIERARCHY}, (0,))
    q = [1 / 4, 1 / 4, 1 / 2]                      # 9, 10, 100
    numeric = [ordered_distance([1 / 2, 1 / 2, 0.0], q), ordered_distance([0.0, 0.0, 1.0], q)]
    assert numeric == pytest.approx([0.75, 0.75])   # 0.25 + 0.5 + 0 each
    as_text = ordered_distance([1 / 2, 0.0, 1 / 2], [1 / 4, 1 / 2, 1 / 4])   # 10, 100, 9 for class a0
    assert as_text == pytest.approx(0.5)
    model = TClosenessModel("s", 0.4, "ordered")
    assert model.distances(view, view.sensitive_attribute("s")) == pytest.approx(numeric, abs=1e-12)
    assert list(model.violating(view)) == [False, False]                          # 0.75 <= 0.8
    assert list(TClosenessModel("s", 0.3, "ordered").violating(view)) == [True, True]   # 0.75 > 0.6


S_TREE = hierarchy("s", [["a", "X", "*"], ["b", "X", "*"], ["c", "Y", "*"]])
# k0 = {a, a}, k1 = {b, c}, k2 = {c, c, b, a}: table a 3, b 2, c 3 of 8.
H_FRAME = pd.DataFrame({"a": ["a0"] * 2 + ["a1"] * 2 + ["a2"] * 4, "s": ["a", "a", "b", "c", "c", "c", "b", "a"]})


def hierarchical_emd(p: dict, q: dict) -> float:
    """Li et al.: leaves' extra p - q; node X (a, b) and Y (c) at level 1 of H = 2 cost 1/2 min(pos, neg) of their
    children's extras; the root at level 2 costs 2/2 min(pos, neg) of X's and Y's extras."""
    extra = {v: p[v] - q[v] for v in q}

    def pos_neg(values):
        return sum(e for e in values if e > 0), -sum(e for e in values if e < 0)

    cost = 0.0
    node_extra = {}
    for node, children in (("X", ["a", "b"]), ("Y", ["c"])):
        pos, neg = pos_neg([extra[c] for c in children])
        cost += (1 / 2) * min(pos, neg)
        node_extra[node] = pos - neg
    pos, neg = pos_neg(node_extra.values())
    cost += (2 / 2) * min(pos, neg)
    return cost


def test_t_closeness_hierarchical_distance():
    table, view = view_of(H_FRAME, {"a": A_HIERARCHY}, (0,), sensitive={"s": S_TREE})
    assert by_class(view) == [{"a": 2}, {"b": 1, "c": 1}, {"a": 1, "b": 1, "c": 2}]
    q = {"a": 3 / 8, "b": 2 / 8, "c": 3 / 8}
    p = [{"a": 1.0, "b": 0.0, "c": 0.0}, {"a": 0.0, "b": 0.5, "c": 0.5}, {"a": 0.25, "b": 0.25, "c": 0.5}]
    expected = [hierarchical_emd(pc, q) for pc in p]
    # k0: extras a 5/8, b -2/8, c -3/8: X costs 1/2 x 2/8, then X +3/8 against Y -3/8 at the root: 1/8 + 3/8.
    # k1: extras a -3/8, b 2/8, c 1/8: X 1/2 x 2/8 = 1/8, root min(1/8, 1/8) = 1/8.  k2: a -1/8, c 1/8: root 1/8.
    assert expected == pytest.approx([1 / 2, 1 / 4, 1 / 8])
    model = TClosenessModel("s", 0.3, "hierarchical")
    assert model.distances(view, table.sensitive_attribute("s")) == pytest.approx(expected, abs=1e-12)
    assert list(model.violating(view)) == [True, False, False]
    assert list(TClosenessModel("s", 0.2, "hierarchical").violating(view)) == [True, True, False]
    # One class at A's top level: p = q, distance 0.
    _, top = view_of(H_FRAME, {"a": A_HIERARCHY}, (2,), sensitive={"s": S_TREE})
    assert TClosenessModel("s", 0.0, "hierarchical").distances(top, table.sensitive_attribute("s")) == \
        pytest.approx([0.0], abs=1e-12)


def test_t_closeness_hierarchical_distance_three_levels():
    # H = 3: leaves a, b under X, c under Y; X and Y under Z; d under W; root *. Table a, b, c, d once each.
    tree = hierarchy("s", [["a", "X", "Z", "*"], ["b", "X", "Z", "*"], ["c", "Y", "Z", "*"], ["d", "W", "V", "*"]])
    frame = pd.DataFrame({"a": ["a0", "a0", "a1", "a1"], "s": ["a", "c", "b", "d"]})
    table, view = view_of(frame, {"a": A_HIERARCHY}, (0,), sensitive={"s": tree})
    # class a0 = {a, c}: extras a +1/4, b -1/4, c +1/4, d -1/4. Level 1: X min(1/4, 1/4) x 1/3; Y, W nothing.
    # Level 2: Z gets X 0 and Y +1/4 -> nothing to move; V gets W -1/4. Root: Z +1/4 against V -1/4, x 3/3.
    a0 = (1 / 3) * (1 / 4) + (3 / 3) * (1 / 4)
    # class a1 = {b, d}: extras a -1/4, b +1/4, c -1/4, d +1/4: the same by symmetry.
    model = TClosenessModel("s", 0.5, "hierarchical")
    assert model.distances(view, table.sensitive_attribute("s")) == pytest.approx([a0, a0], abs=1e-12)


# --- delta-disclosure and beta-likeness ----------------------------------------------------------------------------
def test_delta_disclosure_checks_only_the_values_a_class_holds():
    # e0 = {x, y}, e1 = {x, z}: q = x 1/2, y 1/4, z 1/4. e0: |log2(0.5/0.5)| = 0, |log2(0.5/0.25)| = 1 (z absent).
    frame = pd.DataFrame({"a": ["a0", "a0", "a1", "a1"], "s": ["x", "y", "x", "z"]})
    _, view = view_of(frame, {"a": A_HIERARCHY}, (0,))
    expected = [max(abs(log2(0.5 / 0.5)), abs(log2(0.5 / 0.25))), max(abs(log2(0.5 / 0.5)), abs(log2(0.5 / 0.25)))]
    assert DeltaDisclosureModel("s", 1.0).disclosure(view) == pytest.approx(expected, abs=1e-12)
    assert list(DeltaDisclosureModel("s", 1.0).violating(view)) == [True, True]      # |log2 2| = 1 >= 1 fails
    # Just above: both pass although each lacks a value (p = 0 would be an infinite disclosure if it were checked).
    assert list(DeltaDisclosureModel("s", 1.0 + 1e-9).violating(view)) == [False, False]


def test_delta_disclosure_uses_the_absolute_log_ratio(l_view):
    p = [{"x": 2 / 3, "y": 1 / 3}, {"x": 1 / 4, "y": 1 / 4, "z": 1 / 2}, {"z": 1.0}, {"x": 1 / 2, "y": 1 / 2}]
    expected = [max(abs(log2(pv / Q_L[v])) for v, pv in pc.items()) for pc in p]
    # a1: x at 0.25 against 0.4 is |log2 0.625| = 0.678, but z at 0.5 against 0.3 is 0.737; a2: log2(1/0.3) = 1.737
    assert expected == pytest.approx([log2(2 / 3 / 0.4), log2(0.5 / 0.3), log2(1 / 0.3), log2(0.5 / 0.3)])
    model = DeltaDisclosureModel("s", 0.8)
    assert model.disclosure(l_view) == pytest.approx(expected, abs=1e-12)
    assert list(model.violating(l_view)) == [False, False, True, False]
    # Below: a class of one record x (p 1 > q 0.4) and the shrink of x in a1 both count.
    assert list(DeltaDisclosureModel("s", 0.7).violating(l_view)) == [True, True, True, True]


# d0 = {x, y}, d1 = {x, z}, d2 = {x, x}: q = x 4/6, y 1/6, z 1/6.
B_FRAME = pd.DataFrame({"a": ["a0", "a0", "a1", "a1", "a2", "a2"], "s": ["x", "y", "x", "z", "x", "x"]})


def test_beta_likeness_basic_and_enhanced():
    _, view = view_of(B_FRAME, {"a": A_HIERARCHY}, (0,))
    qx, qy, qz = 4 / 6, 1 / 6, 1 / 6
    # Relative increases (p - q) / q: d0 x -0.25 and y 2; d1 x -0.25 and z 2; d2 x 0.5.
    increases = [[(0.5 - qx) / qx, (0.5 - qy) / qy], [(0.5 - qx) / qx, (0.5 - qz) / qz], [(1.0 - qx) / qx]]
    assert increases == [pytest.approx([-0.25, 2.0]), pytest.approx([-0.25, 2.0]), pytest.approx([0.5])]
    assert list(BetaLikenessModel("s", 2.5, "basic").violating(view)) == [False, False, False]
    assert list(BetaLikenessModel("s", 1.5, "basic").violating(view)) == [True, True, False]
    assert list(BetaLikenessModel("s", 0.4, "basic").violating(view)) == [True, True, True]
    # Enhanced: bound min(beta, -ln q): x min(2.5, 0.405), y and z min(2.5, 1.79). 2 > 1.79 and 0.5 > 0.405.
    assert -math.log(qx) == pytest.approx(0.4055, abs=1e-4) and -math.log(qy) == pytest.approx(1.7918, abs=1e-4)
    assert list(BetaLikenessModel("s", 2.5, "enhanced").violating(view)) == [True, True, True]
    # beta 0.6 < 1.79 governs y, z; x keeps its bound 0.405 < 0.5.
    assert list(BetaLikenessModel("s", 0.6, "enhanced").violating(view)) == [True, True, True]
    # A decrease never fails: d0's x at -0.25.
    frame = pd.DataFrame({"a": ["a0", "a0", "a1", "a1"], "s": ["x", "x", "x", "y"]})   # q x 3/4, y 1/4
    _, view = view_of(frame, {"a": A_HIERARCHY}, (0,))
    # a0: x (1 - 3/4) / (3/4) = 1/3; a1: x -1/3, y (1/2 - 1/4) / (1/4) = 1.
    assert list(BetaLikenessModel("s", 0.5, "basic").violating(view)) == [False, True]
    assert list(BetaLikenessModel("s", 1.1, "basic").violating(view)) == [False, False]
    # Enhanced: x's bound -ln(3/4) = 0.288 < 1/3; y's min(1.1, ln 4 = 1.386) = 1.1 >= 1.
    assert list(BetaLikenessModel("s", 1.1, "enhanced").violating(view)) == [True, False]


# --- average risk and sample uniqueness ----------------------------------------------------------------------------
def test_average_risk_and_sample_uniqueness_measures():
    sizes = np.array([1, 1, 2, 4])
    assert AverageRiskModel.measure(sizes) == pytest.approx(1 / (8 / 4))
    assert AverageRiskModel(0.5).assess(sizes)[0]
    assert not AverageRiskModel(0.49).assess(sizes)[0]
    assert SampleUniquenessModel.measure(sizes) == pytest.approx(2 / 8)
    assert SampleUniquenessModel(0.25).assess(sizes)[0]
    assert not SampleUniquenessModel(0.2).assess(sizes)[0]
    assert SampleUniquenessModel(0.0).assess(np.array([2, 3]))[0]


# Classes at level 0: a0 1, a1 1, a2 2, a3 4 records; level 1: g0 2, g1 6; level 2: one class of 8.
RISK_FRAME = pd.DataFrame({"a": ["a0", "a1", "a2", "a2"] + ["a3"] * 4, "s": ["x"] * 8})


def risk_evaluator(model, limit: float) -> Evaluator:
    table = encode_table(RISK_FRAME, {"a": A_HIERARCHY})
    return Evaluator(table, PrivacyConfiguration([model], limit), make_quality_model("loss", table))


def test_average_risk_enforcement_suppresses_the_smallest_classes():
    # Level 0: 4/8 = 0.5 > 0.4; without a1: 3/7 = 0.43 > 0.4; without a0 and a1: 2/6 = 0.33 <= 0.4.
    assert 3 / 7 > 0.4 >= 2 / 6
    evaluation = risk_evaluator(AverageRiskModel(0.4), 0.25).evaluate((0,))   # 2 records may go
    assert evaluation.solution
    assert list(evaluation.suppressed) == [True, True, False, False]
    assert evaluation.suppressed_records == 2
    assert evaluation.details["average_risk"]["average_risk"] == pytest.approx(2 / 6)
    assert not risk_evaluator(AverageRiskModel(0.4), 0.125).evaluate((0,)).solution   # only 1 record may go
    # Level 1: 2/8 = 0.25, no suppression needed.
    level1 = risk_evaluator(AverageRiskModel(0.4), 0.0).evaluate((1,))
    assert level1.solution and level1.suppressed_records == 0
    assert not risk_evaluator(AverageRiskModel(0.4), 0.0).evaluate((0,)).solution
    # The top's one class is completely generalized ("*"): hidden from the risk model (ARX), so any threshold holds.
    top = risk_evaluator(AverageRiskModel(0.01), 0.0).evaluate((2,))
    assert top.solution and top.suppressed_records == 0


def test_sample_uniqueness_enforcement_suppresses_one_unique_first_by_input_order():
    # Level 0: 2/8 = 0.25 > 0.2; suppressing one unique: 1/7 = 0.14 <= 0.2. Ties (a0, a1: one record, same loss)
    # go in order of first record: a0.
    evaluation = risk_evaluator(SampleUniquenessModel(0.2), 0.125).evaluate((0,))
    assert evaluation.solution
    assert list(evaluation.suppressed) == [True, False, False, False]
    assert evaluation.suppressed_records == 1
    assert evaluation.details["sample_uniqueness"]["sample_uniqueness"] == pytest.approx(1 / 7)
    assert not risk_evaluator(SampleUniquenessModel(0.1), 0.125).evaluate((0,)).solution   # 0/6 needs 2 records
    assert risk_evaluator(SampleUniquenessModel(0.1), 0.25).evaluate((0,)).suppressed_records == 2


@pytest.mark.parametrize("model, limit, expected", [
    (AverageRiskModel(0.4), 0.0, ((1,), 0)),          # level 0 would need suppression
    (SampleUniquenessModel(0.2), 0.0, ((1,), 0)),
    (SampleUniquenessModel(0.2), 0.125, ((0,), 1)),   # one unique suppressed costs less than generalizing
    (AverageRiskModel(0.4), 0.25, ((0,), 2)),
])
def test_search_applies_risk_based_enforcement(model, limit, expected):
    table = encode_table(RISK_FRAME, {"a": A_HIERARCHY})
    quality = make_quality_model("loss", table)
    result = search(table, [model], quality, limit)
    assert result.best is not None and result.optimal
    # The optimum is the least loss among the transformations the evaluator accepts.
    evaluator = Evaluator(table, PrivacyConfiguration([model], limit), quality)
    losses = {node: e.loss for node in [(0,), (1,), (2,)] if (e := evaluator.evaluate(node)).solution}
    assert result.best.loss == pytest.approx(min(losses.values()))
    assert (result.best.levels, result.best.suppressed_records) == expected


# --- k-map ---------------------------------------------------------------------------------------------------------
def poisson_k(k: int, n: int, population: float, alpha: float) -> int:
    """k' = 1 + the first c >= 1 with P(X <= c - 1) >= 1 - alpha, lambda = n / N x k; the search stops at c = k;
    k' is capped by k and by n."""
    lam = n / population * k
    c = 1
    while poisson.cdf(c - 1, lam) < 1 - alpha and c < k:
        c += 1
    return min(k, c + 1, n)


def truncated_poisson_k(k: int, n: int, population: float, alpha: float) -> int:
    """The first c >= 2 whose zero-truncated CDF up to c - 1 reaches 1 - alpha, the search stopping at c = k."""
    lam = n / population * k
    c = 2
    while sum(poisson.pmf(j, lam) for j in range(1, c)) / (1 - poisson.pmf(0, lam)) < 1 - alpha and c < k:
        c += 1
    return min(k, c, n)


@pytest.mark.parametrize("k, n, population, alpha", [
    (5, 10, 1000.0, 0.01),       # lambda 0.05
    (10, 100, 1000.0, 0.05),     # lambda 1
    (10, 100, 1000.0, 0.01),
    (3, 50, 100.0, 0.01),        # lambda 1.5: capped by k
    (20, 1000, 2000.0, 0.01),    # lambda 10
    (30, 600, 1000.0, 0.001),    # lambda 18
    (50, 5, 10.0, 0.01),         # capped by n = 5
    (1, 10, 100.0, 0.05),
    (2, 10, 1000.0, 0.01),
])
def test_derived_k_poisson_and_zero_truncated(k, n, population, alpha):
    assert derived_k(k, n, population, "poisson", alpha) == poisson_k(k, n, population, alpha)
    assert derived_k(k, n, population, "zero_truncated_poisson", alpha) == truncated_poisson_k(k, n, population, alpha)


def test_derived_k_spot_values():
    # lambda = 1, alpha 0.05: P(X <= 0) = 0.368, P(X <= 1) = 0.736, P(X <= 2) = 0.920, P(X <= 3) = 0.981 -> c = 4, 5.
    assert derived_k(10, 100, 1000.0, "poisson", 0.05) == 5
    # Truncated: P(1)/0.632 = 0.582, +P(2) = 0.873 (c = 3 covers 1..2), +P(3) = 0.970 (c = 4) -> k' = 4.
    cumulative = [sum(math.exp(-1) / math.factorial(j) for j in range(1, c)) / (1 - math.exp(-1)) for c in (3, 4)]
    assert cumulative[0] < 0.95 <= cumulative[1]
    assert derived_k(10, 100, 1000.0, "zero_truncated_poisson", 0.05) == 4
    # k-map with an estimator is k'-anonymity.
    model = KMapModel(10, 1000.0, "poisson", 0.05, 100)
    assert model.derived_k == model.minimal_class_size == 5


# A population of 12: a0 3, a1 2, a2 4, a3 1, a4 2 (a4 under a third group). The research subset takes rows
# 0 (a0), 3, 4 (a1 twice) and 5 (a2): classes a0 1, a1 2, a2 1; a3 and a4 hold no subset record.
POPULATION = pd.DataFrame({"a": ["a0"] * 3 + ["a1"] * 2 + ["a2"] * 4 + ["a3"] + ["a4"] * 2, "s": ["x"] * 12})
POPULATION_H = make_hierarchy("a", 6, 3, 2)   # a0, a1 -> aL1_0; a2, a3 -> aL1_1; a4, a5 -> aL1_2; *
SUBSET_ROWS = [0, 3, 4, 5]


def subset_table():
    subset = POPULATION.iloc[SUBSET_ROWS].reset_index(drop=True)
    table = encode_table(subset, {"a": POPULATION_H})
    return dataclasses.replace(table, population=PopulationTable(table, POPULATION, {"a": POPULATION_H}))


def test_population_counts_of_a_research_subset():
    cache = ClassCache(subset_table())
    level0 = cache.view((0,))
    assert list(level0.sizes) == [1, 2, 1]                                   # a0, a1, a2
    assert list(level0.population_counts().sizes) == [3, 2, 4]
    # a3 (1) and a4 (2) match no subset class: population classes of 1 and 2 records.
    assert sorted(level0.population_counts().unmatched_sizes) == [1, 2]
    level1 = cache.view((1,))
    assert list(level1.sizes) == [3, 1]                                      # aL1_0, aL1_1
    assert list(level1.population_counts().sizes) == [3 + 2, 4 + 1]
    assert list(level1.population_counts().unmatched_sizes) == [2]            # aL1_2: a4
    level2 = cache.view((2,))
    assert list(level2.population_counts().sizes) == [12]
    assert level2.population_counts().unmatched_sizes.size == 0


def test_unmatched_population_classes_are_reported_one_by_one():
    level0 = ClassCache(subset_table()).view((0,))
    assert sorted(level0.population_counts().unmatched_sizes) == [1, 2]   # as PopulationCounts documents them


def test_k_map_with_a_research_subset():
    cache = ClassCache(subset_table())
    assert list(KMapModel(3).violating(cache.view((0,)))) == [False, True, False]   # a1 matches 2 people
    assert list(KMapModel(5).violating(cache.view((0,)))) == [True, True, True]
    assert list(KMapModel(5).violating(cache.view((1,)))) == [False, False]
    assert list(KMapModel(6).violating(cache.view((1,)))) == [True, True]
    assert not KMapModel(3).blocks_release(cache.view((0,)))


def test_delta_presence_with_a_research_subset():
    cache = ClassCache(subset_table())
    level0, level1, level2 = cache.view((0,)), cache.view((1,)), cache.view((2,))
    assert DeltaPresenceModel(0.0, 0.5).presence(level0) == pytest.approx([1 / 3, 2 / 2, 1 / 4])
    assert DeltaPresenceModel(0.0, 0.5).presence(level1) == pytest.approx([3 / 5, 1 / 5])
    assert DeltaPresenceModel(0.0, 0.5).presence(level2) == pytest.approx([4 / 12])
    assert list(DeltaPresenceModel(0.0, 0.5).violating(level0)) == [False, True, False]
    assert list(DeltaPresenceModel(0.3, 0.5).violating(level0)) == [False, True, True]   # 1/4 < 0.3
    assert list(DeltaPresenceModel(0.2, 0.6).violating(level1)) == [False, False]
    assert list(DeltaPresenceModel(0.25, 0.6).violating(level1)) == [False, True]
    # delta_min 0: population classes without a subset record (delta 0) are allowed.
    assert not DeltaPresenceModel(0.0, 0.5).blocks_release(level0)
    # delta_min > 0: a3 and a4 (level 0) and aL1_2 (level 1) have delta 0 and cannot be suppressed.
    assert DeltaPresenceModel(0.1, 1.0).blocks_release(level0)
    assert DeltaPresenceModel(0.1, 1.0).blocks_release(level1)
    assert not DeltaPresenceModel(0.1, 1.0).blocks_release(level2)
    # Through the evaluator: blocked even when everything may be suppressed.
    table = subset_table()
    evaluator = Evaluator(table, PrivacyConfiguration([DeltaPresenceModel(0.1, 1.0)], 1.0),
                          make_quality_model("loss", table))
    assert [evaluator.evaluate((lv,)).solution for lv in range(3)] == [False, False, True]
    evaluator = Evaluator(table, PrivacyConfiguration([DeltaPresenceModel(0.0, 0.5)], 0.5),
                          make_quality_model("loss", table))
    level0_evaluation = evaluator.evaluate((0,))   # a1 (2 of 4 records) is suppressed, within 50 %
    assert level0_evaluation.solution and level0_evaluation.suppressed_records == 2


# --- policy validation ---------------------------------------------------------------------------------------------
def policy(privacy: list[dict], sensitive: dict | None = None) -> dict:
    return {
        "dataset": "tiny",
        "input": {"path": "data.csv"},
        "attributes": {
            "A": {"type": "quasi_identifying", "hierarchy": {"file": "a.csv"}},
            "S": sensitive if sensitive is not None else {"type": "sensitive"},
        },
        "privacy": privacy,
        "suppression_limit": 0.0,
    }


@pytest.mark.parametrize("privacy, sensitive, field, words", [
    ({"model": "l_diversity", "attribute": "A", "l": 2}, None, "privacy[0].attribute", "needs a sensitive attribute"),
    ({"model": "t_closeness", "attribute": "A", "t": 0.2}, None, "privacy[0].attribute", "needs a sensitive attribute"),
    ({"model": "beta_likeness", "attribute": "S", "beta": 1.0}, {"type": "insensitive"}, "privacy[0].attribute",
     "is insensitive"),
    ({"model": "delta_disclosure", "attribute": "Z", "delta": 1.0}, None, "privacy[0].attribute", "no attribute"),
    ({"model": "t_closeness", "attribute": "S", "t": 0.2, "distance": "hierarchical"}, None, "privacy[0].distance",
     "needs a hierarchy"),
    ({"model": "l_diversity", "attribute": "S", "l": 2, "variant": "recursive"}, None, "privacy[0]", "needs c"),
    ({"model": "l_diversity", "attribute": "S", "l": 2.5}, None, "privacy[0]", "whole number"),
    ({"model": "l_diversity", "attribute": "S", "l": 2.5, "variant": "recursive", "c": 2}, None, "privacy[0]",
     "whole number"),
])
def test_policy_refuses_bad_model_settings(privacy, sensitive, field, words):
    with pytest.raises(InputError) as error:
        parse_policy(policy([privacy], sensitive), source="policy.yaml")
    assert error.value.field == field
    assert words in error.value.problem
    assert error.value.file == "policy.yaml"


def test_policy_accepts_the_valid_spellings():
    parse_policy(policy([{"model": "l_diversity", "attribute": "S", "l": 2.5, "variant": "entropy"}]))
    parse_policy(policy([{"model": "l_diversity", "attribute": "S", "l": 2, "variant": "recursive", "c": 3}]))
    parse_policy(policy([{"model": "t_closeness", "attribute": "S", "t": 0.2, "distance": "hierarchical"}],
                        {"type": "sensitive", "hierarchy": {"file": "s.csv"}}))
