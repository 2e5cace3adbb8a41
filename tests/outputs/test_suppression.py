"""Suppression that leaks nothing (reference section (c), test 7; acro 1.0.2 fails it), checked by an attacker
written independently of outputs.remedies (tests/outputs/leakcheck.py: single-hidden-cell lines and linear-
programming bounds from the published numbers only)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outputs.checks import FAIL, REVIEW, check_table
from outputs.remedies import primary_mask, remedy_status, suppress
from outputs.rules import RuleSet
from tests.outputs.leakcheck import hidden_totals, intervals, single_hidden_lines
from tests.outputs.microdata import count_stats

PROTECTION = 10   # the default protection margin: the threshold


def _suppressed(counts, labels=None, margins=True, rules=RuleSet()):
    stats = count_stats(counts, labels=labels, axes=("sex", "region"))
    verdict = check_table(stats, "crosstab", rules)
    remedied = suppress(stats.count, primary_mask(verdict, stats.shape), margins=margins, rules=rules,
                        labels=stats.labels)
    return stats, verdict, remedied


def _assert_nothing_recoverable(remedied, true_table, primary, protection=PROTECTION):
    true = np.asarray(true_table, dtype=float).reshape(np.asarray(remedied.cells).shape)
    shown = np.asarray(remedied.cells)
    assert np.array_equal(np.isnan(shown), remedied.hidden)
    assert np.array_equal(shown[~remedied.hidden], true[~remedied.hidden]), "shown cells are the true cells"
    assert not (primary.reshape(shown.shape) & ~remedied.hidden).any(), "a failing cell is shown"
    if remedied.row_totals is not None:
        shown_rows = ~np.isnan(remedied.row_totals)
        assert np.array_equal(remedied.row_totals[shown_rows], true.sum(axis=1)[shown_rows])
    if remedied.col_totals is not None:
        shown_cols = ~np.isnan(remedied.col_totals)
        assert np.array_equal(remedied.col_totals[shown_cols], true.sum(axis=0)[shown_cols])
    if remedied.grand_total is not None and not np.isnan(remedied.grand_total):
        assert remedied.grand_total == true.sum()
    if remedied.row_totals is None and remedied.col_totals is None and remedied.grand_total is None:
        return   # no margins: nothing links a hidden cell to what is shown
    assert single_hidden_lines(remedied) == []
    bounds = intervals(remedied, hidden_totals(remedied))
    view = shown.shape if shown.ndim == 2 else (1, shown.size)    # the attacker sees a frequency table as one row
    true2 = true.reshape(view)
    for cell in map(tuple, np.argwhere(primary.reshape(view))):
        cell = (int(cell[0]), int(cell[1]))
        lo, hi = bounds[cell]
        assert lo <= true2[cell] <= hi
        assert hi - lo >= protection, f"cell {cell} ({true2[cell]:g}) narrowed to [{lo:g}, {hi:g}]"
    for cell, (lo, hi) in bounds.items():
        if isinstance(cell, tuple):
            assert hi - lo >= 1, f"hidden cell {cell} is derivable exactly: {lo:g}"
    for name, cells in hidden_totals(remedied).items():
        value = sum(true2[c] for c in cells)
        if value < protection:   # a failing total that is hidden must stay hidden
            lo, hi = bounds[name]
            assert hi - lo >= protection, f"{name} ({value:g}) narrowed to [{lo:g}, {hi:g}]"


def test_sex_by_region_with_totals_leaks_neither_3_nor_9():
    counts = [[25, 12, 3], [30, 9, 0]]
    stats, verdict, remedied = _suppressed(counts, labels=[["1", "2"], ["1", "2", "3"]])
    primary = primary_mask(verdict, stats.shape)
    assert primary.tolist() == [[False, False, True], [False, True, True]]
    assert 3 not in remedied.shown_numbers() and 9 not in remedied.shown_numbers()
    _assert_nothing_recoverable(remedied, counts, primary)
    assert remedy_status(verdict, remedied) == REVIEW and remedied.status == REVIEW
    assert remedied.actions[0].startswith("primary suppression of 3 cell(s)")
    record = remedied.to_dict()
    assert record["totals_basis"] in ("true", None)
    assert ["2", "2"] in record["hidden"] and ["1", "3"] in record["hidden"]


def test_primary_suppression_alone_would_leak():
    """The attacker finds what acro 1.0.2 effectively publishes with margins: one hidden cell per row."""
    from outputs.remedies import Remedied
    counts = np.array([[25.0, 12, 3], [30, 9, 0]])
    hidden = np.array([[False, False, True], [False, True, True]])
    naive = Remedied("suppression", np.where(hidden, np.nan, counts), hidden, hidden, counts.sum(axis=1),
                     counts.sum(axis=0), float(counts.sum()), "true")
    assert single_hidden_lines(naive)   # column 2 total minus nothing, row 0 total minus 25 and 12 ...
    bounds = intervals(naive)
    assert bounds[(0, 2)] == pytest.approx((3, 3))


def test_without_margins_primary_suppression_suffices():
    counts = [[25, 12, 3], [30, 9, 0]]
    stats, verdict, remedied = _suppressed(counts, margins=False)
    assert remedied.hidden.tolist() == [[False, False, True], [False, True, True]]
    assert remedied.row_totals is None and remedied.col_totals is None and remedied.grand_total is None


def test_frequency_table_with_total():
    counts = [40, 3, 25, 31]
    stats = count_stats(counts, labels=[["a", "b", "c", "d"]], axes=("race",))
    verdict = check_table(stats, "frequencies")
    remedied = suppress(stats.count, primary_mask(verdict, stats.shape), labels=stats.labels)
    assert 3 not in remedied.shown_numbers()
    assert remedied.hidden.sum() >= 2 and remedied.grand_total in (99.0, None)
    _assert_nothing_recoverable(remedied, counts, primary_mask(verdict, stats.shape))


small_tables = st.integers(2, 4).flatmap(
    lambda r: st.integers(2, 4).flatmap(
        lambda c: st.lists(st.lists(st.integers(0, 40), min_size=c, max_size=c), min_size=r, max_size=r)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_tables)
def test_suppression_never_leaves_a_recoverable_cell(counts):
    stats, verdict, remedied = _suppressed(counts)
    primary = primary_mask(verdict, stats.shape)
    _assert_nothing_recoverable(remedied, counts, primary)
    assert remedy_status(verdict, remedied) in (REVIEW, FAIL)
    assert remedy_status(verdict, remedied) == REVIEW


def test_remedy_status_fails_when_a_failing_cell_is_left_shown():
    stats, verdict, _ = _suppressed([[25, 12], [3, 40]])
    incomplete = suppress(stats.count, np.zeros(stats.shape, dtype=bool), margins=False)
    assert remedy_status(verdict, incomplete) == FAIL


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 40), min_size=2, max_size=6))
def test_frequency_table_suppression_never_leaves_a_recoverable_cell(counts):
    stats = count_stats(counts, labels=[[f"v{i}" for i in range(len(counts))]], axes=("race",))
    verdict = check_table(stats, "frequencies")
    remedied = suppress(stats.count, primary_mask(verdict, stats.shape), labels=stats.labels)
    _assert_nothing_recoverable(remedied, counts, primary_mask(verdict, stats.shape))
