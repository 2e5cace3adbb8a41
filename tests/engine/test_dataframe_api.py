"""Issue 25 item 4: the engine as a pandas library, a DataFrame in and a DataFrame out.

`engine.deidentify(policy, data=frame)` de-identifies a DataFrame in place of the policy's input and gives the same
release as the same records in the policy's CSV file; its `released` DataFrame is what `write_release` writes.
`engine.risk_report(frame, ...)` answers exactly what `safeshare risk --json` answers for the same table.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

import engine
from engine import InputError
from safeshare.cli import main
from tests.engine.adult_inputs import adult, csv_baseline, policy_document, write_policy


class _NoCapture:
    def readouterr(self):
        return type("R", (), {"err": "", "out": ""})()


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    data = adult(2000)
    data["age"] = data["age"].astype(int)   # as a notebook holds it
    return data


@pytest.fixture(scope="module")
def baseline(frame, tmp_path_factory):
    """The manifest of `safeshare deid` on the same records as the policy's CSV input."""
    return csv_baseline(tmp_path_factory.mktemp("csv"), frame.astype(str), _NoCapture())


def test_dataframe_in_dataframe_out_is_the_csv_release(tmp_path, frame, baseline):
    before = frame.copy()
    policy = write_policy(tmp_path, {"path": "does-not-exist.csv"})   # never read: data= stands in for it
    result = engine.deidentify(policy, data=frame)
    assert isinstance(result.released, pd.DataFrame)
    manifest = engine.write_release(result, tmp_path / "out")
    pd.testing.assert_frame_equal(result.released, pd.read_parquet(tmp_path / "out" / "data.parquet"),
                                  check_dtype=False)
    assert manifest.data_sha256 == baseline["data_sha256"], "the DataFrame's release differs from the CSV input's"
    assert manifest.transformation == baseline["transformation"]
    assert manifest.document()["input"] == {"kind": "dataframe", "records": len(frame)}
    pd.testing.assert_frame_equal(frame, before)   # the caller's frame is untouched


def test_policy_as_a_dict_without_input_and_an_index_never_released(frame, baseline):
    data = frame.copy()
    data.index = [f"patient-{i:05d}" for i in range(len(data))]   # an identifier as the index
    result = engine.deidentify(policy_document(None), data=data)
    assert list(result.released.index) == list(range(len(data)))
    assert not result.released.astype(str).apply(lambda c: c.str.startswith("patient-")).any().any()
    assert result.transformation == baseline["transformation"]


@pytest.mark.parametrize("data, field, words", [
    ([{"sex": "Male"}], "data", "expected a pandas DataFrame"),
    (pd.DataFrame({"sex": pd.Series([], dtype=str)}), "data", "no records"),
    (pd.DataFrame({0: ["x"]}), "data", "column names must be text"),
])
def test_bad_frames_are_bad_input(data, field, words):
    with pytest.raises(InputError) as caught:
        engine.deidentify(policy_document(None), data=data)
    assert caught.value.field == field and words in caught.value.problem


def test_undeclared_column_and_missing_input(frame):
    with pytest.raises(InputError) as caught:
        engine.deidentify(policy_document(None), data=frame.assign(name="Alice"))
    assert caught.value.field == "attributes" and "name" in caught.value.problem   # fail closed: maybe identifying
    with pytest.raises(InputError) as caught:
        engine.deidentify(policy_document(None))
    assert caught.value.field == "input"


def test_risk_report_answers_what_safeshare_risk_json_answers(tmp_path, frame, capsys):
    populations = ["USA", "California", 1_000_000]
    quasi = ["sex", "age", "race", "marital", "educ", "country", "workcls", "occup"]
    document = policy_document({"path": "adult.csv"})
    document["attributes"]["salary"] = {"type": "sensitive"}
    document["gate"] = {"populations": ["USA", "California", 1_000_000.0]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    frame.to_csv(tmp_path / "adult.csv", sep=";", index=False)
    assert main(["risk", str(tmp_path / "policy.yaml"), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    report = engine.risk_report(frame, quasi_identifiers=quasi, population=populations, sensitive=["salary"],
                                dataset="adult")
    assert json.loads(json.dumps(report)) == expected
    assert report["records"] == len(frame) and report["sample_uniques"] > 0
    assert [entry["population"] for entry in report["population_estimates"]] == ["USA", "California", "1000000.0"]
    assert report["attribute_disclosure"] and report["attribute_disclosure"][0]["attribute"] == "salary"


def test_risk_report_defaults_and_bad_arguments(frame):
    report = engine.risk_report(frame, quasi_identifiers=["sex", "age"])
    assert [e["population"] for e in report["population_estimates"]] == ["USA", "California", "Los Angeles"]
    sizes = frame.groupby(["sex", "age"]).size()
    assert report["equivalence_classes"] == len(sizes) and report["sample_uniques"] == int((sizes == 1).sum())
    for kwargs, field in [({"quasi_identifiers": ["zip"]}, "quasi_identifiers"),
                          ({"quasi_identifiers": []}, "quasi_identifiers"),
                          ({"quasi_identifiers": ["sex"], "sensitive": ["nope"]}, "sensitive"),
                          ({"quasi_identifiers": ["sex"], "population": "Atlantis"}, "population"),
                          ({"quasi_identifiers": ["sex"], "population": 10}, "population")]:
        with pytest.raises(InputError) as caught:
            engine.risk_report(frame, **kwargs)
        assert caught.value.field == field, (kwargs, caught.value)


def test_typed_columns_become_the_text_a_csv_export_holds():
    import numpy as np

    from engine.sources.text import text_frame

    frame = pd.DataFrame({"text": ["x", None, "z"], "float": [39.0, np.nan, 2.5],
                          "label": pd.Categorical(["Male", None, "Female"]),
                          "date": pd.to_datetime(["2024-01-02", None, "2023-05-06"]),
                          "int": pd.array([1, None, 3], dtype="Int64"), "mixed": [b"ab", 3, None]}, index=[7, 8, 9])
    assert text_frame(frame).to_dict("list") == {
        "text": ["x", "", "z"], "float": ["39", "", "2.5"], "label": ["Male", "", "Female"],
        "date": ["2024-01-02", "", "2023-05-06"], "int": ["1", "", "3"], "mixed": ["ab", "3", ""]}
