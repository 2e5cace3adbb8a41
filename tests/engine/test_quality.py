"""Quality models against values worked out by hand on a six-record table (see the comments)."""
import math

import numpy as np
import pandas as pd
import pytest

from engine.encoding import encode_table
from engine.hierarchy import Hierarchy
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search import Evaluator, search

# A: a1, a2 -> *            (2 rows, 2 levels)
# B: b1, b2 -> x; b3, b4 -> y; -> *  (4 rows, 3 levels)
# Records: (a1,b1) x2, (a1,b2), (a2,b3) x2, (a2,b4); k = 2.
A = Hierarchy(np.array([["a1", "*"], ["a2", "*"]], dtype=object), name="A")
B = Hierarchy(np.array([["b1", "x", "*"], ["b2", "x", "*"], ["b3", "y", "*"], ["b4", "y", "*"]], dtype=object),
              name="B")
FRAME = pd.DataFrame({"A": ["a1", "a1", "a1", "a2", "a2", "a2"], "B": ["b1", "b1", "b2", "b3", "b3", "b4"]})


@pytest.fixture()
def table():
    return encode_table(FRAME, {"A": A, "B": B})


def evaluate(table, model, levels, **kw):
    quality = make_quality_model(model, table, **kw)
    ev = Evaluator(table, PrivacyConfiguration([KAnonymity(2)], 1.0), quality).evaluate(levels)
    return ev, quality


# (0,0): (a1,b2) and (a2,b4) are suppressed.  (0,1): classes (a1,x) x3 and (a2,y) x3, nothing suppressed.
@pytest.mark.parametrize("levels, expected", [
    # S_A = 4 * 1/2 + 2 = 4 -> (4-3)/(6-3) = 1/3; S_B = 4 * 1/4 + 2 = 3 -> (3-1.5)/(6-1.5) = 1/3;
    # geometric mean: sqrt(4/3 * 4/3) - 1 = 1/3
    ((0, 0), 1 / 3),
    # S_A = 3 -> 0; S_B = 6 * 2/4 = 3 -> 1/3; sqrt(1 * 4/3) - 1
    ((0, 1), math.sqrt(4 / 3) - 1),
    # B = *: IL_A = 0, IL_B = 1; sqrt(2) - 1
    ((0, 2), math.sqrt(2) - 1),
])
def test_loss_geometric(table, levels, expected):
    ev, quality = evaluate(table, "loss", levels)
    assert ev.loss == pytest.approx(expected, abs=1e-12)
    assert quality.quality(levels, ev.codes, ev.sizes, ev.suppressed) == pytest.approx(1 - expected, abs=1e-12)


def test_loss_arithmetic_and_sum(table):
    ev, _ = evaluate(table, "loss", (0, 1), aggregation="arithmetic_mean")
    assert ev.loss == pytest.approx((0 + 1 / 3) / 2)
    ev, _ = evaluate(table, "loss", (0, 1), aggregation="sum")
    assert ev.loss == pytest.approx(1 / 3)


def test_loss_gs_factor_weights_suppression(table):
    # gs = 1: suppression weighs 0 -> S_A = 4 * 1/2 = 2 -> clipped at the floor 3 -> 0; S_B = 1 -> 0.
    ev, _ = evaluate(table, "loss", (0, 0), gs_factor=1.0)
    assert ev.loss == pytest.approx(0.0)


def test_non_uniform_entropy(table):
    max_a = 6.0                                        # 3 log2 2 + 3 log2 2
    max_b = 4 * math.log2(3) + 2 * math.log2(6)        # counts 2, 1, 2, 1 of 6
    # (0,0): no generalization; suppressed A values a1, a2 (1 each of S = 2) -> 2 bits; B values b2, b4 -> 2 bits.
    ev, _ = evaluate(table, "non_uniform_entropy", (0, 0))
    assert ev.loss == pytest.approx((2 / max_a + 2 / max_b) / 2, abs=1e-12)
    # (0,1): B's b1 (2 of 6) -> x (3 of 6): log2(3/2) for each of 2 records; b2 (1) -> x: log2 3; same for y.
    gen_b = 4 * math.log2(1.5) + 2 * math.log2(3)
    ev, _ = evaluate(table, "non_uniform_entropy", (0, 1))
    assert ev.loss == pytest.approx((0 + gen_b / max_b) / 2, abs=1e-12)


def test_discernibility_aecs_precision(table):
    ev, _ = evaluate(table, "discernibility", (0, 0))
    assert ev.loss == pytest.approx((2 * 2 + 2 * 2 + 2 * 6 - 6) / (36 - 6))
    ev, _ = evaluate(table, "discernibility", (0, 1))
    assert ev.loss == pytest.approx((9 + 9 - 6) / 30)
    ev, _ = evaluate(table, "aecs", (0, 0))                # 2 kept classes + 1 suppressed class -> 6 / 3 = 2
    assert ev.loss == pytest.approx((2 - 1) / 5)
    ev, _ = evaluate(table, "aecs", (0, 1))
    assert ev.loss == pytest.approx((3 - 1) / 5)
    ev, _ = evaluate(table, "precision", (0, 0))           # each attribute: 2 of 6 suppressed
    assert ev.loss == pytest.approx(1 / 3)
    ev, _ = evaluate(table, "precision", (0, 1))           # B at level 1 of 2
    assert ev.loss == pytest.approx(0.25)


@pytest.mark.parametrize("model", ["loss", "non_uniform_entropy", "discernibility", "aecs", "precision"])
def test_lower_bound_never_exceeds_loss(table, model):
    for levels in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]:
        ev, quality = evaluate(table, model, levels)
        assert quality.lower_bound(levels) <= ev.loss + 1e-12
        assert quality.lower_bound_from_classes(ev.sizes) <= ev.loss + 1e-12


def test_search_finds_hand_optimum(table):
    result = search(table, [KAnonymity(2)], make_quality_model("loss", table), 1.0)
    assert result.optimal and result.best.levels == (0, 1)
    assert result.best.loss == pytest.approx(math.sqrt(4 / 3) - 1)
