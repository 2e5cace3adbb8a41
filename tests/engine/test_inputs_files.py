"""Issue 25 item 3: Stata, SAS and Excel files as a dataset policy's input.

Each format holds a slice of ADULT and must give exactly the release the same records give as CSV (same
transformation, same released bytes): typed readers return numbers (SAS stores age 39 as 39.0) and Stata value labels,
which must come back as the text the hierarchies name. The manifest records what was read. Unsupported or unreadable
files exit 2 naming the field.
"""
from __future__ import annotations

import shutil
import struct
import subprocess

import pandas as pd
import pytest

from tests.engine.adult_inputs import adult, csv_baseline, deid, write_policy

# Stata value labels for two of ADULT's text columns: the file holds codes, the labels are what Stata shows
SEX = {1: "Male", 2: "Female"}
RACE = {1: "White", 2: "Black", 3: "Asian-Pac-Islander", 4: "Amer-Indian-Eskimo", 5: "Other"}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return adult(3000)


@pytest.fixture(scope="module")
def baseline(frame, tmp_path_factory):
    """The CSV input's manifest (capsys is function-scoped: run the CLI with a local capture)."""
    folder = tmp_path_factory.mktemp("csv")

    class _Quiet:
        def readouterr(self):
            return type("R", (), {"err": "", "out": ""})()

    return csv_baseline(folder, frame, _Quiet())


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """ADULT as a statistical package holds it: age a number."""
    out = frame.copy()
    out["age"] = out["age"].astype("int32")
    return out


def assert_same_release(manifest: dict, baseline: dict) -> None:
    assert manifest["transformation"] == baseline["transformation"]
    assert manifest["data_sha256"] == baseline["data_sha256"], "the released data differ from the CSV input's"
    assert manifest["records"] == baseline["records"]


def test_stata_file_with_value_labels_gives_the_csv_release(tmp_path, frame, baseline, capsys):
    data = typed(frame)
    for name, labels in (("sex", SEX), ("race", RACE)):
        codes = {label: code for code, label in labels.items()}
        data[name] = data[name].map(codes).astype("int8")
    data.to_stata(tmp_path / "adult.dta", write_index=False, value_labels={"sex": SEX, "race": RACE}, version=118)
    code, err, manifest = deid(write_policy(tmp_path, {"path": "adult.dta"}), tmp_path / "out", capsys)
    assert code == 0, err
    assert_same_release(manifest, baseline)
    record = manifest["input"]
    assert record["kind"] == "stata" and record["file"] == "adult.dta" and record["records"] == len(frame)
    assert record["value_labels"] == ["sex", "race"]
    assert len(record["sha256"]) == 64
    # without the labels the codes are read, which the sex hierarchy does not know: bad input naming the attribute
    policy = write_policy(tmp_path, {"path": "adult.dta", "value_labels": False}, "codes.yaml")
    code, err, _ = deid(policy, tmp_path / "codes", capsys)
    assert code == 2 and "sex" in err, err


def test_sas7bdat_file_gives_the_csv_release(tmp_path, frame, baseline, capsys):
    readstat = shutil.which("readstat")
    if readstat is None:
        pytest.fail("Debian's readstat is needed to write a .sas7bdat file (scripts/apt-packages.txt)")
    typed(frame).to_stata(tmp_path / "plain.dta", write_index=False, version=118)
    subprocess.run([readstat, str(tmp_path / "plain.dta"), str(tmp_path / "adult.sas7bdat")], check=True,
                   capture_output=True, timeout=60)
    _fix_readstat_column_text(tmp_path / "adult.sas7bdat")
    written = pd.read_sas(tmp_path / "adult.sas7bdat", format="sas7bdat", encoding="infer")
    assert list(written.columns) == list(frame.columns) and written["age"].dtype.kind == "f"   # 39.0, not "39"
    code, err, manifest = deid(write_policy(tmp_path, {"path": "adult.sas7bdat"}), tmp_path / "out", capsys)
    assert code == 0, err
    assert_same_release(manifest, baseline)
    assert manifest["input"]["kind"] == "sas7bdat" and manifest["input"]["records"] == len(frame)


def _fix_readstat_column_text(path) -> None:
    """ReadStat 1.1.8 records its column-text block 12 bytes shorter than the block is (the block's size counts from
    after the 8-byte signature of a 64-bit file, as SAS and pandas read it): pandas then cuts the last column names
    short. Set the size the block has, so that the file is what SAS would have written."""
    data = bytearray(path.read_bytes())
    signature = b"\xfd\xff\xff\xff\xff\xff\xff\xff"
    at = data.find(signature)
    assert at > 0, "no column-text subheader in the .sas7bdat file"
    size = struct.unpack_from("<H", data, at + 8)[0]
    struct.pack_into("<H", data, at + 8, size + 12)
    path.write_bytes(bytes(data))


def test_sas_transport_file_gives_the_csv_release(tmp_path, frame, baseline, capsys):
    pyreadstat = pytest.importorskip("pyreadstat")
    pyreadstat.write_xport(typed(frame), str(tmp_path / "adult.xpt"), file_format_version=5, table_name="ADULT")
    code, err, manifest = deid(write_policy(tmp_path, {"path": "adult.xpt"}), tmp_path / "out", capsys)
    assert code == 0, err
    assert_same_release(manifest, baseline)
    assert manifest["input"]["kind"] == "xport"


def test_excel_file_gives_the_csv_release(tmp_path, frame, baseline, capsys):
    pytest.importorskip("openpyxl")
    with pd.ExcelWriter(tmp_path / "adult.xlsx", engine="openpyxl") as book:
        pd.DataFrame({"note": ["not this sheet"]}).to_excel(book, sheet_name="readme", index=False)
        typed(frame).to_excel(book, sheet_name="records", index=False)
    code, err, manifest = deid(write_policy(tmp_path, {"path": "adult.xlsx", "sheet": "records"}),
                               tmp_path / "out", capsys)
    assert code == 0, err
    assert_same_release(manifest, baseline)
    assert manifest["input"]["kind"] == "excel"
    code, err, _ = deid(write_policy(tmp_path, {"path": "adult.xlsx", "sheet": "missing"}, "p2.yaml"),
                        tmp_path / "o2", capsys)
    assert code == 2 and "input.sheet" in err, err


def test_csv_input_is_recorded_too(baseline, frame):
    assert baseline["input"]["kind"] == "csv" and baseline["input"]["records"] == len(frame)
    assert baseline["input"]["file"] == "adult.csv"


@pytest.mark.parametrize("spec, content, field, words", [
    ({"path": "adult.sav"}, b"$FL2@(#) SPSS", "input.path", "SPSS"),
    ({"path": "adult.dta"}, b"not a stata file at all", "input.path", "not a readable Stata"),
    ({"path": "adult.sas7bdat"}, b"\x00" * 2048, "input.path", "not a readable SAS"),
    ({"path": "adult.xpt"}, b"HEADER RECORD*******LIBRARY", "input.path", "not a readable SAS transport"),
    ({"path": "adult.xlsx"}, b"PK\x03\x04broken", "input.path", "not a readable Excel"),
    ({"path": "adult.dta", "format": "excel"}, None, "input.path", "not a readable Excel"),
    ({"path": "adult.csv", "sheet": 1}, None, "input.sheet", "Excel files only"),
    ({"path": "adult.csv", "value_labels": False}, None, "input.value_labels", "Stata files only"),
    ({"path": "adult.csv", "table": "adult"}, None, "input.table", "SQL input"),
    ({"path": "adult.dta", "format": "spss"}, None, "input.format", None),
])
def test_unsupported_or_unreadable_files_exit_2_naming_the_field(tmp_path, capsys, spec, content, field, words):
    (tmp_path / "adult.csv").write_text("sex;age\nMale;39\n")
    if content is not None:
        (tmp_path / spec["path"]).write_bytes(content)
    else:
        (tmp_path / "adult.dta").write_bytes(b"not a stata file")
    code, err, manifest = deid(write_policy(tmp_path, spec), tmp_path / "out", capsys)
    assert code == 2, err
    assert manifest is None and not (tmp_path / "out").exists()
    assert f": {field}:" in err, err
    if words:
        assert words in err, err
    assert "not a stata file" not in err and "broken" not in err   # the file's content is never quoted
