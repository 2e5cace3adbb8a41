"""Known verdicts of the output checks (issue 26's Tests section; reference section (c), tests 1-6, each confirmed
against acro 1.0.2), on micro-data built from integer codes."""
from __future__ import annotations

import numpy as np
import pytest

from outputs.checks import (FAIL, PASS, REVIEW, cell_stats, check_model, check_table, combine, table_stats)
from outputs.rules import RuleSet
from tests.outputs.microdata import codes_from_counts, count_stats, magnitude_stats


def failing(verdict) -> dict[str, list[list[str]]]:
    return verdict.failing()


def test_small_cell_fails_only_there():
    stats = count_stats([[25, 12], [3, 40]], labels=[["Male", "Female"], ["White", "Other"]], axes=("sex", "race"))
    verdict = check_table(stats, "crosstab")
    assert verdict.status == FAIL
    assert failing(verdict) == {"threshold": [["Female", "White"]]}
    assert verdict.check("threshold").positions == ((1, 0),)


def test_threshold_boundary_is_strict():
    assert check_table(count_stats([[10, 10], [10, 10]]), "crosstab").status == PASS
    verdict = check_table(count_stats([[10, 10], [9, 10]]), "crosstab")
    assert verdict.status == FAIL and failing(verdict) == {"threshold": [["sex1", "region0"]]}


def test_zero_cell_fails_zeros_and_threshold_unless_zeros_are_safe():
    stats = count_stats([[0, 15], [20, 30]])
    verdict = check_table(stats, "crosstab")
    assert verdict.status == FAIL
    assert failing(verdict) == {"threshold": [["sex0", "region0"]], "zeros": [["sex0", "region0"]]}
    safe = check_table(stats, "crosstab", RuleSet().with_values(zeros_are_disclosive=False))
    assert safe.status == FAIL and failing(safe) == {"threshold": [["sex0", "region0"]]}


def test_frequency_table_names_cells_by_one_label():
    codes = codes_from_counts([30, 12, 4])
    verdict = check_table(cell_stats(codes, [["White", "Black", "Other"]], axes=("race",)), "frequencies")
    assert failing(verdict) == {"threshold": [["Other"]]}


def _twelve_per_cell(special: dict | None = None) -> dict:
    cells = {(i, j): [1000.0] * 12 for i in range(2) for j in range(2)}
    cells.update(special or {})
    return cells


def test_mean_with_equal_contributors_passes():
    verdict = check_table(magnitude_stats(_twelve_per_cell(), (2, 2)), "mean")
    assert verdict.status == PASS, verdict.to_dict()


def test_one_dominant_contributor_fails_nk_and_p_ratio_at_its_cell():
    stats = magnitude_stats(_twelve_per_cell({(1, 1): [5_000_000.0] + [1000.0] * 11}), (2, 2))
    verdict = check_table(stats, "mean")
    assert verdict.status == FAIL
    assert failing(verdict) == {"nk-rule": [["sex1", "region1"]], "p-ratio": [["sex1", "region1"]]}


def test_top_two_share_of_exactly_k_fails():
    # two contributors of 450 and ten of 10: (450 + 450) / 1000 = 0.90 exactly; p ratio 100 / 450 passes
    stats = magnitude_stats(_twelve_per_cell({(0, 1): [450.0, 450.0] + [10.0] * 10}), (2, 2))
    verdict = check_table(stats, "mean")
    assert failing(verdict) == {"nk-rule": [["sex0", "region1"]]}


def test_p_ratio_of_exactly_p_passes():
    # largest 1000, second 1000, ten of 10: (2100 - 1000 - 1000) / 1000 = 0.10 exactly (NK fails: 2000/2100)
    stats = magnitude_stats(_twelve_per_cell({(0, 0): [1000.0, 1000.0] + [10.0] * 10}), (2, 2))
    verdict = check_table(stats, "mean")
    assert verdict.check("p-ratio").status == PASS
    assert failing(verdict) == {"nk-rule": [["sex0", "region0"]]}
    # one unit less among the rest and p drops below 0.10: p-ratio fails
    stats = magnitude_stats(_twelve_per_cell({(0, 0): [1000.0, 1000.0] + [10.0] * 9 + [9.0]}), (2, 2))
    assert check_table(stats, "mean").check("p-ratio").status == FAIL


def test_sum_with_a_negative_value_is_review():
    stats = magnitude_stats(_twelve_per_cell({(0, 0): [-50.0] + [1000.0] * 11}), (2, 2))
    verdict = check_table(stats, "sum")
    assert verdict.status == REVIEW
    assert failing(verdict) == {"negative": [["sex0", "region0"]]}


def test_a_single_contributor_fails_dominance():
    stats = magnitude_stats({(0, 0): [5.0], (0, 1): [1.0] * 12}, (1, 2))
    verdict = check_table(stats, "mean")
    assert {"threshold", "nk-rule", "p-ratio"} <= set(failing(verdict))


def _df_resid(records: int, predictors: int = 2) -> float:
    """Residual degrees of freedom of a least-squares fit with an intercept: records minus the design's rank (what
    statsmodels' df_resid is for OLS, logit and probit)."""
    rng = np.random.default_rng(records)
    design = np.column_stack([np.ones(records), rng.normal(size=(records, predictors))])
    return float(records - np.linalg.matrix_rank(design))


@pytest.mark.parametrize("kind", ["ols", "logit", "probit"])
def test_regression_residual_dof(kind):
    assert _df_resid(12) == 9 and _df_resid(13) == 10
    nine = check_model(_df_resid(12), kind)
    assert nine.status == FAIL and nine.checks[0].rule == "dof"
    assert check_model(_df_resid(13), kind).status == PASS


def test_standard_deviation_uses_count_minus_one():
    stats = count_stats([[10, 11], [11, 11]])
    verdict = check_table(stats, "std")
    assert failing(verdict) == {"dof": [["sex0", "region0"]]}


def test_which_checks_run_per_statistic():
    stats = magnitude_stats(_twelve_per_cell(), (2, 2))
    rules = {s: [c.rule for c in check_table(stats, s).checks] for s in ("mean", "sum", "median", "min", "max")}
    assert rules["mean"] == rules["sum"] == ["threshold", "nk-rule", "p-ratio", "negative"]
    assert rules["median"] == rules["min"] == rules["max"] == ["threshold", "zeros"]
    assert [c.rule for c in check_table(count_stats([[10, 10]]), "crosstab").checks] == ["threshold", "zeros"]
    assert check_model(9, "chi-square").status == FAIL and check_model(10, "chi-square").status == PASS


def test_structural_zeros_of_suppressed_records_are_reported_not_failed():
    # sex x race, both quasi-identifiers; the 12 suppressed records have * in both: (*, White) etc. are structural
    labels = [["Female", "Male", "*"], ["White", "Other", "*"]]
    counts = np.array([[30, 15, 0], [40, 20, 0], [0, 0, 12]])
    verdict = check_table(count_stats(counts, labels=labels), "crosstab")
    assert verdict.status == PASS, verdict.to_dict()
    structural = verdict.check("structural-zeros")
    assert structural.status == PASS
    assert [list(c) for c in structural.cells] == [["Female", "*"], ["Male", "*"], ["*", "White"], ["*", "Other"]]
    # a non-quasi-identifying axis (a sensitive attribute) has no structural zeros: its zero is disclosive
    sensitive = check_table(count_stats(counts, labels=labels, qi_axes=(True, False)), "crosstab")
    assert sensitive.status == FAIL
    # a zero the release makes impossible, marked by the caller
    impossible = np.zeros((2, 2), dtype=bool)
    impossible[0, 1] = True
    marked = check_table(count_stats([[30, 0], [40, 20]], impossible=impossible), "crosstab")
    assert marked.status == PASS and [list(c) for c in marked.check("structural-zeros").cells] == [["sex0",
                                                                                                    "region1"]]
    # an empty cell that is not structural still fails
    assert check_table(count_stats([[30, 0], [40, 20]]), "crosstab").status == FAIL


def test_status_combination():
    assert combine([PASS, REVIEW, PASS]) == REVIEW
    assert combine([REVIEW, FAIL]) == FAIL
    assert combine([]) == PASS


def test_cohort_mask_and_counted_tables_agree():
    counts = np.array([[25, 12, 3], [30, 9, 0]])
    codes = codes_from_counts(counts)
    everyone = np.ones(codes[0].size, dtype=bool)
    from_codes = cell_stats(codes, [["a", "b"], ["x", "y", "z"]], mask=everyone)
    assert np.array_equal(from_codes.count, counts)
    assert check_table(from_codes).to_dict() == check_table(table_stats(counts, [["a", "b"],
                                                                                 ["x", "y", "z"]])).to_dict()
    only_a = codes[0] == 0
    assert cell_stats(codes, [["a", "b"], ["x", "y", "z"]], mask=only_a).count.tolist() == [[25, 12, 3], [0, 0, 0]]


def test_bad_micro_data_is_refused():
    with pytest.raises(ValueError, match="codes outside"):
        cell_stats([np.array([0, 2])], [["a", "b"]])
    with pytest.raises(ValueError, match="finite"):
        cell_stats([np.array([0, 1])], [["a", "b"]], values=np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="unknown statistic"):
        check_table(count_stats([[10]]), "mode")


def test_largest_contributors_match_a_full_sort_with_ties():
    rng = np.random.default_rng(11)
    records = 5000
    codes = [rng.integers(0, 6, records), rng.integers(0, 4, records)]
    values = rng.integers(-3, 40, records).astype(float)   # many ties, some negatives
    stats = cell_stats(codes, [list("abcdef"), list("wxyz")], values=values, top=3)
    cell = codes[0] * 4 + codes[1]
    for flat in range(24):
        mine = np.sort(values[cell == flat])[::-1][:3]
        expected = np.zeros(3)
        expected[:mine.size] = mine
        assert stats.top.reshape(24, 3)[flat].tolist() == expected.tolist()
        assert stats.total.reshape(-1)[flat] == values[cell == flat].sum()
        assert stats.negative.reshape(-1)[flat] == (values[cell == flat] < 0).any()
