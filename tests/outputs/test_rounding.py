"""Rounding to a base (reference section (c), test 8) and the OpenSAFELY profile (redact 7 or fewer, then round to
the nearest 5)."""
from __future__ import annotations

import numpy as np

from outputs.checks import REVIEW, check_table
from outputs.remedies import opensafely, remedy_status, round_table, round_to_base
from outputs.rules import RuleSet
from tests.outputs.microdata import count_stats


def test_round_to_base_five():
    stats = count_stats([[25, 12, 3], [30, 9, 0]])
    remedied = round_table(stats.count, labels=stats.labels)
    assert remedied.cells.tolist() == [[25, 10, 5], [30, 10, 0]]
    assert remedied.row_totals.tolist() == [40, 40] and remedied.col_totals.tolist() == [55, 20, 5]
    assert remedied.grand_total == 80   # sums of rounded cells, rounded again (acro gives 80, the true total is 79)
    assert "rounded to nearest 5" in remedied.actions
    assert remedy_status(check_table(stats), remedied) == REVIEW and remedied.status == REVIEW


def test_round_base_comes_from_the_rules_and_halves_go_up():
    assert round_table(np.array([12, 13, 17]), RuleSet().with_values(safe_round_base=10)).cells.tolist() == [10, 10,
                                                                                                              20]
    assert round_to_base(np.array([15, 25, 5]), 10).tolist() == [20, 30, 10]


def test_opensafely_profile_redacts_then_rounds():
    stats = count_stats([[25, 12, 3], [30, 9, 0], [7, 8, 41]])
    remedied = opensafely(stats.count)
    cells = remedied.cells
    assert np.isnan(cells[0, 2]) and np.isnan(cells[1, 2]) and np.isnan(cells[2, 0])   # 3, 0 and 7 redacted
    assert cells[2, 1] == 10 and cells[2, 2] == 40 and cells[0, 1] == 10 and cells[1, 1] == 10
    assert remedied.totals_basis == "published-cells"
    # totals are recomputed from what is published: 25 + 10 = 35, never the true 40
    assert remedied.row_totals.tolist() == [35, 40, 50]
    assert remedy_status(check_table(stats), remedied) == REVIEW
    assert remedied.actions[0].startswith("redacted 3 count(s) of 7 or fewer")


def test_opensafely_keeps_zeros_when_they_are_safe():
    remedied = opensafely(np.array([0, 5, 12]), RuleSet().with_values(zeros_are_disclosive=False))
    assert remedied.cells[0] == 0 and np.isnan(remedied.cells[1]) and remedied.cells[2] == 10
