"""How the review pages read an output (deploy/airlock/review_render.py): the table from data.csv, the cells its checks
flag marked by position (meta.json's flags) or by labels (each check's cells, as ACRO names them), structural zeros
apart, and files that are not what they claim shown as an error, never as markup."""
from __future__ import annotations

import json

from deploy.airlock.review_render import Cell, analysis_lines, output_table, parse_csv, read_meta

CROSSTAB = b"sex \\ race,White,Other,total\nFemale,120,3,123\nMale,130,0,130\ntotal,250,3,253\n"


def marked(table) -> dict[tuple[int, int], tuple[str, str]]:
    return {(r, c): (cell.css, cell.title) for r, row in enumerate(table.rows) for c, cell in enumerate(row)
            if isinstance(cell, Cell)}


def test_cells_marked_by_position() -> None:
    meta = {"checks": [{"rule": "threshold", "status": "fail", "cells": [["Female", "Other"]], "reason": "under 10"}],
            "flags": [{"row": 0, "col": 1, "rule": "threshold", "status": "fail"}]}
    table = output_table(CROSSTAB, meta)
    assert marked(table) == {(0, 2): ("flag-fail", "threshold (fail): under 10")}
    assert table.flagged == 1 and table.header == ["sex \\ race", "White", "Other", "total"]
    assert table.rows[1] == ["Male", "130", "0", "130"]


def test_cells_marked_by_labels_when_there_are_no_positions() -> None:
    meta = {"checks": [
        {"rule": "threshold", "status": "fail", "cells": [["Female", "Other"]], "reason": "under 10"},
        {"rule": "nk-rule", "status": "review", "cells": [["Male"]], "reason": "dominated"},  # one axis: its row
        {"rule": "structural-zeros", "status": "pass", "cells": [["Male", "Other"]], "reason": "cannot hold a record"},
        {"rule": "zeros", "status": "pass", "cells": [["Male", "White"]], "reason": ""},  # a pass marks nothing
        {"rule": "threshold", "status": "fail", "cells": [["Nobody", "Other"], ["Female", "Nowhere"], "x", []]},
    ]}
    table = output_table(CROSSTAB, meta)
    got = marked(table)
    assert got[(0, 2)] == ("flag-fail", "threshold (fail): under 10")
    assert got[(1, 1)] == ("flag-review", "nk-rule (review): dominated")
    assert got[(1, 2)][0] == "flag-review" and "structural-zeros (pass)" in got[(1, 2)][1]
    assert (1, 3) not in got  # the total column of a one-axis label is not the cell
    assert set(got) == {(0, 2), (1, 1), (1, 2)} and table.flagged == 3


def test_a_structural_zero_alone_is_not_a_failing_cell() -> None:
    meta = {"flags": [{"row": 1, "col": 1, "rule": "structural-zeros", "status": "pass"}],
            "checks": [{"rule": "structural-zeros", "status": "pass", "cells": [], "reason": "impossible"}]}
    table = output_table(CROSSTAB, meta)
    assert marked(table) == {(1, 2): ("flag-structural", "structural-zeros (pass): impossible")}
    assert table.flagged == 0


def test_positions_outside_the_table_and_malformed_meta_are_ignored() -> None:
    meta = {"flags": [{"row": 9, "col": 0, "rule": "t", "status": "fail"}, {"row": 0, "col": -1, "rule": "t",
                                                                            "status": "fail"}, "x", {"row": "0"}],
            "checks": "not a list"}
    assert marked(output_table(CROSSTAB, meta)) == {}
    assert read_meta(b"[1, 2]") == {} and read_meta(b"\xff") == {} and read_meta(None) == {}
    assert read_meta(json.dumps({"a": 1}).encode()) == {"a": 1}


def test_files_that_are_not_csv_are_an_error_not_a_table() -> None:
    assert parse_csv(b"\xff\xfe").error.startswith("data.csv is not UTF-8")
    assert parse_csv(b"").error == "data.csv is empty"
    assert output_table(None, {}).error == "no data.csv in this output"
    long = parse_csv(b"a,b\n" + b"x," + b"y" * 600 + b"\n")
    assert len(long.rows[0][1]) == 501 and long.rows[0][1].endswith("…")


def test_the_analysis_in_words() -> None:
    lines = analysis_lines({"kind": "crosstab", "query": {"row": "sex", "where": ["age>=30"], "empty": None},
                            "cohorts": [{"filters": ["age>=30"]}], "created_by": "alice"})
    assert lines == [("analysis", "crosstab"), ("query: row", "sex"), ("query: where", '["age>=30"]'),
                     ("cohort 1", '{"filters": ["age>=30"]}'), ("created by", "alice")]
