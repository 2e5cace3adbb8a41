"""Hierarchy builders (engine.builders): hand-worked labels, monotonicity, CSV round trip, errors, end to end.

Monotonicity is checked here with an independent helper rather than through `Hierarchy.validate`, so a bug shared by
the builder and the validator cannot hide itself.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.builders import build_hierarchy
from engine.errors import InputError
from engine.hierarchy import Hierarchy
from engine.policy import DateBuilder, IntervalBuilder, MaskingBuilder, OrderedBuilder
from safeshare.cli import main

EDUCATION = ["Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad",
             "Bachelors", "Masters", "Doctorate"]


def intervals(**kw) -> IntervalBuilder:
    return IntervalBuilder(builder="intervals", **kw)


def masking(**kw) -> MaskingBuilder:
    return MaskingBuilder(builder="masking", **kw)


def dates(**kw) -> DateBuilder:
    return DateBuilder(builder="dates", **kw)


def ordered(**kw) -> OrderedBuilder:
    return OrderedBuilder(builder="ordered", **kw)


def rows(hierarchy: Hierarchy) -> dict[str, list[str]]:
    """Original value -> its labels at levels 1.. (what a reviewer reads in the CSV)."""
    return {str(row[0]): [str(x) for x in row[1:]] for row in hierarchy.labels}


def assert_monotone(hierarchy: Hierarchy) -> None:
    """Values unique; every level-l label has exactly one level-(l+1) label; the top level is the single group `*`."""
    table = hierarchy.labels.astype(str)
    assert len(set(table[:, 0])) == table.shape[0], "original values are not unique"
    for level in range(table.shape[1] - 1):
        parents: dict[str, set[str]] = {}
        for child, parent in zip(table[:, level], table[:, level + 1]):
            parents.setdefault(child, set()).add(parent)
        split = {c: p for c, p in parents.items() if len(p) > 1}
        assert not split, f"level {level} labels with several parents: {split}"
    assert set(table[:, -1]) == {"*"}


# --- hand-worked labels ---------------------------------------------------------------------------------------------
def test_intervals_labels_and_numeric_row_order():
    h = build_hierarchy(intervals(widths=[5, 10, 20]), ["23", "27", "31", "45", "-3", "20", "20.0", "7.5"], name="age")
    assert rows(h) == {
        "-3": ["[-5, 0[", "[-10, 0[", "[-20, 0[", "*"],        # below start: negative bins, still aligned
        "7.5": ["[5, 10[", "[0, 10[", "[0, 20[", "*"],
        "20": ["[20, 25[", "[20, 30[", "[20, 40[", "*"],       # a bound opens its bin
        "20.0": ["[20, 25[", "[20, 30[", "[20, 40[", "*"],
        "23": ["[20, 25[", "[20, 30[", "[20, 40[", "*"],
        "27": ["[25, 30[", "[20, 30[", "[20, 40[", "*"],
        "31": ["[30, 35[", "[30, 40[", "[20, 40[", "*"],
        "45": ["[45, 50[", "[40, 50[", "[40, 60[", "*"],
    }
    # Rows are in numeric order, so level codes (first appearance) follow the number line.
    assert [str(v) for v in h.values] == ["-3", "7.5", "20", "20.0", "23", "27", "31", "45"]
    assert h.name == "age" and h.levels == 5


def test_intervals_fractional_start_and_float_edges():
    # (0.15 - 0.05) / 0.1 is 1.0000000000000002 and 0.3 / 0.1 is 2.9999999999999996: both sit on a bin edge.
    h = build_hierarchy(intervals(widths=[0.1, 0.2], start=0.05), ["0.15", "0.35", "0.7"])
    assert rows(h) == {
        "0.15": ["[0.15, 0.25[", "[0.05, 0.25[", "*"],
        "0.35": ["[0.35, 0.45[", "[0.25, 0.45[", "*"],
        "0.7": ["[0.65, 0.75[", "[0.65, 0.85[", "*"],
    }
    assert rows(build_hierarchy(intervals(widths=[0.1]), ["0.3"]))["0.3"] == ["[0.3, 0.4[", "*"]


def test_intervals_random_values_lie_in_their_bins():
    rng = np.random.default_rng(7)
    numbers = np.round(rng.uniform(-50, 150, 400), 3)
    h = build_hierarchy(intervals(widths=[0.3, 0.9, 4.5], start=-1.1), [repr(float(x)) for x in numbers])
    assert_monotone(h)
    for row in h.labels:
        value = float(row[0])
        for label in row[1:-1]:
            low, high = (float(x) for x in label.strip("[").rstrip("[").split(", "))
            assert low - 1e-9 <= value < high + 1e-9, (value, label)


def test_masking_labels_keep_length_and_pad_short_values():
    h = build_hierarchy(masking(), ["12345", "12399", "1234", "9"], name="zip")
    assert rows(h) == {
        "12345": ["1234*", "123**", "12***", "1****", "*"],
        "12399": ["1239*", "123**", "12***", "1****", "*"],
        "1234": ["1234*", "123**", "12***", "1****", "*"],   # padded to 1234* and grouped with 12345
        "9": ["9****", "9****", "9****", "9****", "*"],
    }


def test_masking_characters_per_level_and_mask():
    h = build_hierarchy(masking(characters_per_level=2, mask="#"), ["12345", "12399", "54321"])
    # ceil(5 / 2) = 3 masking levels; the third (fully masked, one group) is the top level `*`.
    assert rows(h) == {
        "12345": ["123##", "1####", "*"],
        "12399": ["123##", "1####", "*"],
        "54321": ["543##", "5####", "*"],
    }
    assert rows(build_hierarchy(masking(), ["7", "8"])) == {"7": ["*"], "8": ["*"]}


def test_dates_labels_for_every_unit():
    values = ["2024-02-14", "2019-12-31", "2024-1-5", "2031-07-01"]
    h = build_hierarchy(dates(levels=["month", "quarter", "year", "decade"]), values)
    assert rows(h) == {
        "2019-12-31": ["2019-12", "2019-Q4", "2019", "2010s", "*"],
        "2024-1-5": ["2024-01", "2024-Q1", "2024", "2020s", "*"],
        "2024-02-14": ["2024-02", "2024-Q1", "2024", "2020s", "*"],
        "2031-07-01": ["2031-07", "2031-Q3", "2031", "2030s", "*"],
    }
    assert [str(v) for v in h.values] == ["2019-12-31", "2024-1-5", "2024-02-14", "2031-07-01"]  # chronological
    # Default levels are month, year, decade; the format is honoured.
    assert rows(build_hierarchy(dates(format="%d.%m.%Y"), ["14.02.2024"])) == {
        "14.02.2024": ["2024-02", "2024", "2020s", "*"]}
    # ISO weeks: 2024-12-30 is in week 1 of ISO year 2025.
    assert rows(build_hierarchy(dates(levels=["week"]), ["2024-02-14", "2024-12-30"])) == {
        "2024-02-14": ["2024-W07", "*"], "2024-12-30": ["2025-W01", "*"]}


def test_ordered_runs_over_the_declared_order():
    h = build_hierarchy(ordered(order=EDUCATION, group_sizes=[2, 4]), ["HS-grad", "Bachelors", "Preschool"])
    assert [str(v) for v in h.values] == EDUCATION   # every declared value, in order
    got = rows(h)
    assert got["Preschool"] == ["Preschool-1st-4th", "Preschool-7th-8th", "*"]
    assert got["HS-grad"] == ["HS-grad-Bachelors", "HS-grad-Doctorate", "*"]
    assert got["Masters"] == ["Masters-Doctorate", "HS-grad-Doctorate", "*"]
    # A last run of one keeps the value as its label.
    odd = rows(build_hierarchy(ordered(order=["low", "mid", "high"], group_sizes=[2]), ["low"]))
    assert odd == {"low": ["low-mid", "*"], "mid": ["low-mid", "*"], "high": ["high", "*"]}


# --- monotonicity and CSV round trip --------------------------------------------------------------------------------
SPECS = [
    (intervals(widths=[5, 10, 20, 100]), [str(v) for v in range(-7, 95, 3)] + ["12.5"]),
    (masking(characters_per_level=2), ["10115", "10117", "8000", "80331", "a;b", ""]),
    (dates(levels=["month", "quarter", "year", "decade"]), ["2019-12-31", "2020-01-01", "2020-03-31", "2029-10-01"]),
    (dates(levels=["week"]), ["2020-12-31", "2021-01-03", "2021-01-04"]),
    (ordered(order=EDUCATION + ["semi;colon"], group_sizes=[3, 6, 12]), ["9th", "Masters", "semi;colon"]),
]


@pytest.mark.parametrize("spec, values", SPECS, ids=lambda x: getattr(x, "builder", None))
def test_monotone_and_csv_round_trip(tmp_path, spec, values):
    h = build_hierarchy(spec, values, name="q")
    assert_monotone(h)
    path = tmp_path / "q.csv"
    h.to_csv(path)
    back = Hierarchy.from_csv(path, name="q")
    assert back.labels.shape == h.labels.shape
    assert (back.labels.astype(str) == h.labels.astype(str)).all()


# --- errors ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, values, field, words", [
    (intervals(widths=[5, 12]), ["1"], "attributes.age.hierarchy.widths[1]", "not a multiple"),
    (intervals(widths=[5, 5]), ["1"], "attributes.age.hierarchy.widths[1]", "not a multiple"),
    (intervals(widths=[5]), ["1", "x", "", "inf"], "attributes.age", "not finite numbers, first: '', 'inf', 'x'"),
    (masking(), ["1"], None, None),
    (dates(levels=["week", "year"]), ["2024-01-01"], "attributes.age.hierarchy.levels", "ISO week"),
    (dates(levels=["year", "month"]), ["2024-01-01"], "attributes.age.hierarchy.levels", "fine to coarse"),
    (dates(levels=["year", "year"]), ["2024-01-01"], "attributes.age.hierarchy.levels", "once"),
    (dates(format="%d.%m.%Y"), ["01.02.2024", "2024-01-01"], "attributes.age", "'%d.%m.%Y'"),
    (ordered(order=["a", "b"], group_sizes=[2]), ["a", "z", "y"], "attributes.age", "not in the builder's order"),
    (ordered(order=["a", "b", "a"], group_sizes=[2]), ["a"], "attributes.age.hierarchy.order", "more than once"),
    (ordered(order=list("abcdef"), group_sizes=[2, 3]), ["a"], "attributes.age.hierarchy.group_sizes[1]", "multiple"),
    (ordered(order=["a-b", "c", "a", "b-c"], group_sizes=[2]), ["a"], "attributes.age.hierarchy.order", "ambiguous"),
])
def test_builder_errors_name_the_field(spec, values, field, words):
    if field is None:   # control: a valid spec builds
        build_hierarchy(spec, values, name="age")
        return
    with pytest.raises(InputError) as caught:
        build_hierarchy(spec, values, name="age", source="policy.yaml")
    assert caught.value.field == field and caught.value.file == "policy.yaml"
    assert words in caught.value.problem
    assert str(caught.value).startswith(f"policy.yaml: {field}: ")


# --- through the command line ---------------------------------------------------------------------------------------
DATA = "age;zip;diagnosis\n" + "".join(
    f"{age};{zip_};{diag}\n" for age, zip_, diag in [
        (23, "10115", "flu"), (27, "10117", "cold"), (34, "10119", "flu"), (38, "10178", "asthma"),
        (41, "80331", "flu"), (44, "80333", "cold"), (52, "80335", "flu"), (58, "80339", "gout"),
    ])

POLICY = """\
    dataset: tiny
    input: {path: data.csv}
    attributes:
      age: {type: quasi_identifying, hierarchy: {builder: intervals, widths: [5, 10, 20]}}
      zip: {type: quasi_identifying, hierarchy: {builder: masking}}
      diagnosis: {type: sensitive}
    privacy:
      - {model: k_anonymity, k: 2}
    suppression_limit: 0
"""


def write_policy(tmp_path: Path, body: str = POLICY, data: str = DATA) -> Path:
    (tmp_path / "data.csv").write_text(data)
    policy = tmp_path / "policy.yaml"
    policy.write_text(textwrap.dedent(body))
    return policy


def test_deid_end_to_end_with_builders(tmp_path, capsys):
    policy = write_policy(tmp_path)
    code = main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    levels = manifest["transformation"]
    assert set(levels) == {"age", "zip"} and manifest["suppressed_records"] == 0
    released = pd.read_csv(tmp_path / "out" / "data.csv", sep=";", dtype=str, keep_default_na=False)
    original = pd.read_csv(tmp_path / "data.csv", sep=";", dtype=str, keep_default_na=False)
    # Every released value is its original's label at the chosen level of the built hierarchy, and k = 2 holds.
    for name in ("age", "zip"):
        spec = {"age": intervals(widths=[5, 10, 20]), "zip": masking()}[name]
        labels = dict(rows(build_hierarchy(spec, original[name].unique(), name=name)))
        expected = [v if levels[name] == 0 else labels[v][levels[name] - 1] for v in original[name]]
        assert released[name].tolist() == expected
    assert released.groupby(["age", "zip"]).size().min() >= 2
    assert released["diagnosis"].tolist() == original["diagnosis"].tolist()


def test_hierarchy_command_writes_builder_csv(tmp_path, capsys):
    policy = write_policy(tmp_path)
    for name, spec in (("age", intervals(widths=[5, 10, 20])), ("zip", masking())):
        out = tmp_path / f"{name}.csv"
        assert main(["hierarchy", str(policy), name, "--out", str(out)]) == 0, capsys.readouterr().err
        written = Hierarchy.from_csv(out, name=name)
        built = build_hierarchy(spec, pd.read_csv(tmp_path / "data.csv", sep=";", dtype=str)[name].to_numpy())
        assert (written.labels.astype(str) == built.labels.astype(str)).all()
    assert (tmp_path / "age.csv").read_text().splitlines()[0] == "23;[20, 25[;[20, 30[;[20, 40[;*"


@pytest.mark.parametrize("command, edit, data, field, words", [
    ("deid", ("[5, 10, 20]", "[5, 12]"), None, "attributes.age.hierarchy.widths[1]", "not a multiple"),
    ("deid", ("[5, 10, 20]", "[5, 0]"), None, "attributes.age.hierarchy.widths[1]", "greater than 0"),
    ("deid", None, DATA.replace("23;", "unknown;"), "attributes.age", "'unknown'"),
    ("hierarchy", ("{builder: masking}", "{builder: dates}"), None, "attributes.zip", "'%Y-%m-%d'"),
])
def test_bad_builder_input_exits_2(tmp_path, capsys, command, edit, data, field, words):
    body = POLICY.replace(*edit) if edit else POLICY
    policy = write_policy(tmp_path, body, data or DATA)
    out = tmp_path / ("out" if command == "deid" else "zip.csv")
    argv = [command, str(policy), "--out", str(out)] if command == "deid" else [command, str(policy), "zip", "--out",
                                                                                  str(out)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert field in err and words in err
    assert not out.exists()
