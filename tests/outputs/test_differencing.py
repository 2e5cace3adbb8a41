"""Differencing: a new table whose cohort differs from an earlier output's on the same release by fewer than the
threshold records fails, naming the earlier output."""
from __future__ import annotations

import numpy as np

from outputs.checks import FAIL, PASS
from outputs.differencing import EarlierOutput, check_differencing
from outputs.rules import RuleSet

RECORDS = 1000


def test_nested_cohort_three_records_smaller_fails_naming_the_earlier_output():
    rng = np.random.default_rng(3)
    cohort_a = rng.random(RECORDS) < 0.4
    without_three = cohort_a.copy()
    without_three[np.flatnonzero(cohort_a)[:3]] = False
    earlier = [EarlierOutput("out-7", "women by region", "adult-2026", cohort_a)]
    check = check_differencing(without_three, "adult-2026", earlier, RECORDS)
    assert check.status == FAIL and check.rule == "differencing"
    assert "out-7" in check.reason and "'women by region'" in check.reason and "3 record(s) fewer" in check.reason
    assert [list(c) for c in check.cells] == [["out-7"]]


def test_nested_cohorts_differing_by_the_threshold_pass_and_identical_cohorts_pass():
    cohort_a = np.zeros(RECORDS, dtype=bool)
    cohort_a[:200] = True
    smaller = cohort_a.copy()
    smaller[:10] = False
    earlier = [EarlierOutput("out-1", "all", "r1", cohort_a)]
    assert check_differencing(smaller, "r1", earlier, RECORDS).status == PASS
    assert check_differencing(cohort_a, "r1", earlier, RECORDS).status == PASS
    smaller[9] = True   # 9 records fewer
    assert check_differencing(smaller, "r1", earlier, RECORDS).status == FAIL


def test_cohorts_as_record_index_sets_and_a_larger_cohort():
    earlier = [EarlierOutput("out-2", "cohort", "r1", set(range(100)))]
    assert check_differencing(list(range(104)), "r1", earlier, RECORDS).status == FAIL   # 4 more
    assert check_differencing(list(range(100, 300)), "r1", earlier, RECORDS).status == PASS


def test_other_releases_and_threshold_from_the_rules():
    cohort = np.arange(50)
    earlier = [EarlierOutput("out-3", "x", "other-release", np.arange(47))]
    assert check_differencing(cohort, "r1", earlier, RECORDS).status == PASS
    here = [EarlierOutput("out-4", "y", "r1", np.arange(47))]
    assert check_differencing(cohort, "r1", here, RECORDS, RuleSet().with_values(safe_threshold=3)).status == PASS
    assert check_differencing(cohort, "r1", here, RECORDS).status == FAIL


def test_a_passing_table_fails_once_differencing_is_added():
    from outputs.checks import check_table
    from tests.outputs.microdata import count_stats
    verdict = check_table(count_stats([[20, 30], [40, 50]]), "crosstab")
    assert verdict.status == PASS
    clash = check_differencing(np.arange(140), "r1", [EarlierOutput("out-5", "all", "r1", np.arange(142))], RECORDS)
    combined = verdict.with_checks(clash)
    assert combined.status == FAIL and combined.failing() == {"differencing": [["out-5"]]}
