"""`safeshare release` takes the released columns and the quasi-identifiers from the dataset policy (--policy), never
from the manifest a writer of the deid output folder rewrites (adversarial review of issue 24, round 2: a raw
quasi-identifier dropped from 'transformation', or a column added to data.parquet, was sealed). Without the policy
every released column must be a quasi-identifier the manifest names, so every column is gated (fail closed)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from engine.bundle import BundleError, seal_release, verify_bundle
from engine.deid import parquet_bytes
from safeshare.cli import main

POLICY = """\
dataset: clinic
input: {path: data.csv}
attributes:
  name: {type: identifying}
  zip: {type: quasi_identifying, hierarchy: {file: zip.csv}}
  visits: {type: insensitive}
privacy:
  - {model: k_anonymity, k: 3}
suppression_limit: 0
gate: {min_k: 3}
"""


@pytest.fixture(autouse=True)
def test_site(tmp_path, monkeypatch):
    """A site of this test's own (built-in gate), never the machine's."""
    (tmp_path / "site").mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "site"))


@pytest.fixture
def clinic(tmp_path: Path, capsys) -> tuple[Path, Path]:
    """A deid output with an identifying attribute (dropped), a quasi-identifier and an insensitive attribute
    (released as it is), and the policy file it was made with."""
    rows = [f"person{i};{10000 + i % 12};{i % 5}\n" for i in range(120)]
    (tmp_path / "data.csv").write_text("name;zip;visits\n" + "".join(rows))
    (tmp_path / "zip.csv").write_text("".join(f"{10000 + i};{(10000 + i) // 10}*;*\n" for i in range(12)))
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    assert sorted(pd.read_parquet(out / "data.parquet").columns) == ["visits", "zip"]
    return out, policy


def releases(tmp_path: Path) -> Path:
    return tmp_path / "site" / "releases"


def rewrite_data(source: Path, target: Path, change) -> None:
    """What a writer of the output folder does: change data.parquet and every hash the manifest keeps of it."""
    shutil.copytree(source, target)
    frame = change(pd.read_parquet(target / "data.parquet"))
    data = parquet_bytes(frame)
    (target / "data.parquet").write_bytes(data)
    (target / "data.csv").write_text(frame.to_csv(index=False, sep=";", lineterminator="\n"))
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["data_sha256"] = manifest["files"]["data.parquet"] = hashlib.sha256(data).hexdigest()
    manifest["files"]["data.csv"] = hashlib.sha256((target / "data.csv").read_bytes()).hexdigest()
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def test_an_insensitive_attribute_is_released_with_the_policy_only(clinic, tmp_path, capsys) -> None:
    out, policy = clinic
    capsys.readouterr()
    # without the policy, 'visits' (released as it is) is a column the manifest does not make a quasi-identifier
    assert main(["release", str(out), "--to", str(releases(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert "visits" in err and "--policy" in err
    assert not any((tmp_path / "site").rglob("seal.json"))
    # with the custodian's policy file it is what the policy releases
    assert main(["release", str(out), "--to", str(releases(tmp_path)), "--policy", str(policy)]) == 0, \
        capsys.readouterr().err
    sealed = Path(capsys.readouterr().out.strip())
    verify_bundle(sealed, tmp_path / "site" / "trust.json")


def test_a_policy_the_output_was_not_made_with_is_refused(clinic, tmp_path, capsys) -> None:
    out, policy = clinic
    other = tmp_path / "other.yaml"
    other.write_text(POLICY + "# another policy\n")
    capsys.readouterr()
    assert main(["release", str(out), "--to", str(releases(tmp_path)), "--policy", str(other)]) == 1
    assert "not made with this policy" in capsys.readouterr().err
    # a policy file that is not there, or not a policy, is bad input
    assert main(["release", str(out), "--to", str(releases(tmp_path)), "--policy", str(tmp_path / "no.yaml")]) == 2
    (tmp_path / "bad.yaml").write_text("dataset: [\n")
    assert main(["release", str(out), "--to", str(releases(tmp_path)), "--policy", str(tmp_path / "bad.yaml")]) == 2
    assert not any((tmp_path / "site").rglob("seal.json"))


@pytest.mark.parametrize("change, words", [
    (lambda f: f.assign(birth=[f"19{50 + i % 40}-0{1 + i % 9}-1{i % 10}" for i in range(len(f))]),
     "birth not an attribute of the dataset policy"),
    (lambda f: f.assign(name=[f"person{i}" for i in range(len(f))]), "name identifying in the dataset policy"),
    (lambda f: f.drop(columns=["visits"]), "no column for the attribute(s) the dataset policy releases visits"),
])
def test_a_column_the_policy_does_not_release_is_refused(clinic, tmp_path, change, words) -> None:
    """Every figure the gate recomputes over the quasi-identifiers is unchanged by these edits: only the columns
    tell them apart from what the policy releases."""
    out, policy = clinic
    rewrite_data(out, tmp_path / "edited", change)
    with pytest.raises(BundleError, match=words.replace("(", r"\(").replace(")", r"\)")):
        seal_release(tmp_path / "edited", releases(tmp_path), policy=policy)
    assert not any((tmp_path / "site").rglob("seal.json"))
    if "visits" in words:   # fewer columns are no risk: without the policy the quasi-identifiers alone pass
        seal_release(tmp_path / "edited", releases(tmp_path))
        return
    with pytest.raises(BundleError, match="not a quasi-identifier the manifest's 'transformation' names"):
        seal_release(tmp_path / "edited", releases(tmp_path))
    assert not any((tmp_path / "site").rglob("seal.json"))


def test_the_policy_decides_the_quasi_identifiers_not_transformation(clinic, tmp_path) -> None:
    """A writer makes the raw quasi-identifier look released as it is: 'zip' left out of 'transformation'. With the
    policy it is still the quasi-identifier the classes are formed over, and the manifest is refused as not the
    policy's; without it, 'zip' is a column no quasi-identifier of the manifest names."""
    out, policy = clinic
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["transformation"] = {"visits": 0}
    (edited / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    with pytest.raises(BundleError, match="'transformation' names visits, the quasi-identifiers of .* are zip"):
        seal_release(edited, releases(tmp_path), policy=policy)
    with pytest.raises(BundleError, match="zip not a quasi-identifier"):
        seal_release(edited, releases(tmp_path))


def test_adult_with_a_sensitive_attribute_releases_with_its_policy_fast(tmp_path, capsys) -> None:
    """ADULT under adult-k5-distinct-l2 (occupation sensitive): released with --policy, refused without; the
    re-gate with the policy stays well under 2 s."""
    import time

    from engine.bundle import data_files, verify_output
    from engine.policy import load_policy
    from engine.release_gate import recheck_release
    from engine.sitegate import BUILT_IN_GATE
    from tests.engine.test_release_regate import example

    policy = example(tmp_path, "adult-k5-distinct-l2.yaml")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["release", str(out), "--to", str(releases(tmp_path))]) == 1
    assert "occupation not a quasi-identifier" in capsys.readouterr().err
    assert main(["release", str(out), "--to", str(releases(tmp_path)), "--policy", str(policy)]) == 0, \
        capsys.readouterr().err
    manifest, loaded = verify_output(out), load_policy(policy)
    started = time.perf_counter()
    assert recheck_release(out, manifest, BUILT_IN_GATE, data_files(manifest), loaded) == []
    assert time.perf_counter() - started < 2.0
