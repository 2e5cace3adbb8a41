"""Bad input is a clear error naming file and field, exit code 2, and nothing is written."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from safeshare.cli import main
from tests.engine.site_files import tiny_policy


def write_policy(tmp_path: Path, body: str, hierarchy: str = "a1;*\na2;*\n", data: str = "A;B\na1;x\na2;y\na1;x\n") -> Path:
    (tmp_path / "h.csv").write_text(hierarchy)
    (tmp_path / "data.csv").write_text(data)
    policy = tmp_path / "policy.yaml"
    policy.write_text(textwrap.dedent(body))
    return policy


GOOD = tiny_policy(k=2, suppression_limit=1)


def run(policy: Path, out: Path, capsys) -> tuple[int, str, str]:
    code = main(["deid", str(policy), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_good_policy_writes_bundle(tmp_path, capsys):
    policy = write_policy(tmp_path, GOOD)
    code, out, err = run(policy, tmp_path / "out", capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    for key in ["dataset", "policy_sha256", "transformation", "quality", "suppressed_records", "records",
                "checked_transformations", "risk", "gate", "data_sha256", "seconds", "optimized_for"]:
        assert key in manifest
    assert set(manifest["quality"]) == {"loss", "non_uniform_entropy", "discernibility", "aecs", "precision"}
    assert all(0.0 <= v <= 1.0 for v in manifest["quality"].values())
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"data.csv", "data.parquet", "manifest.json", "report.html"}


@pytest.mark.parametrize("body, hierarchy, data, field, words", [
    (GOOD + "    colour: blue\n", None, None, "colour", "unknown key"),
    (GOOD.replace("{model: k_anonymity, k: 2}", "{model: k_anonymity, k: 2, l: 3}"), None, None, "privacy[0].l", "unknown key"),
    (GOOD.replace("data.csv", "missing.csv"), None, None, "input.path", "does not exist"),
    (GOOD.replace("h.csv", "nope.csv"), None, None, "A", "does not exist"),
    (GOOD, None, "A;B\na1;x\na3;y\na9;z\n", "attributes.A", "'a3', 'a9'"),
    (GOOD, "a1;g1;*\na2;g1;*\ng1x;g1;*\na2x;g2;*\n", None, "A", None),
    (GOOD, "a1;g1;*\na2;g2;*\nb1;g1;x\n", None, "A", "not monotone"),
    (GOOD.replace("{file: h.csv}", "{file: h.csv}, max_level: 4"), None, None, "attributes.A.max_level", "out of range"),
    (GOOD.replace("suppression_limit: 1", "suppression_limit: 1.5"), None, None, "suppression_limit", "less than or equal"),
    (GOOD.replace("      B: {type: insensitive}\n", ""), None, None, "attributes", "without a declared type: B"),
])
def test_bad_input_exit_2(tmp_path, capsys, body, hierarchy, data, field, words):
    kwargs = {}
    if hierarchy is not None:
        kwargs["hierarchy"] = hierarchy
    if data is not None:
        kwargs["data"] = data
    policy = write_policy(tmp_path, body, **kwargs)
    code, _, err = run(policy, tmp_path / "out", capsys)
    if words is None:  # a valid variant: must succeed
        assert code == 0, err
        return
    assert code == 2, err
    assert field in err and words in err
    assert not (tmp_path / "out").exists()


def test_no_solution_is_refused(tmp_path, capsys):
    policy = write_policy(tmp_path, GOOD.replace("k: 2", "k: 10").replace("suppression_limit: 1", "suppression_limit: 0"))
    code, _, err = run(policy, tmp_path / "out", capsys)
    assert code == 1 and "no transformation" in err
    assert not (tmp_path / "out").exists()


def test_help_on_every_subcommand(capsys):
    for command in (["--help"], ["deid", "--help"], ["hierarchy", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(command)
        assert exc.value.code == 0
        assert "usage" in capsys.readouterr().out


def test_shipped_schema_matches_code():
    from engine.policy import policy_json_schema

    shipped = Path(__file__).resolve().parents[2] / "policies" / "schemas" / "dataset-policy.schema.json"
    assert json.loads(shipped.read_text()) == policy_json_schema()
