"""The release gate refuses risky releases; sealed bundles refuse any change (fail closed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.bundle import BundleError, seal_release, verify_bundle
from engine.gate import evaluate_gate
from engine.policy import GateSpec
from safeshare.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


@pytest.fixture(scope="module")
def adult_release(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("adult") / "out"
    assert main(["deid", str(EXAMPLES / "adult-k5.yaml"), "--out", str(out), "--quiet"]) == 0
    return out


def test_k_anonymous_release_passes_gate_and_seals(adult_release, tmp_path, capsys):
    manifest = json.loads((adult_release / "manifest.json").read_text())
    assert manifest["gate"]["passed"] is True
    assert manifest["risk"]["sample_uniques"] == 0
    assert main(["release", str(adult_release), "--to", str(tmp_path / "releases")]) == 0
    sealed = Path(capsys.readouterr().out.strip())
    assert sealed.parent.name == "adult" and (sealed / "seal.json").is_file()
    assert verify_bundle(sealed)["data_sha256"] == manifest["data_sha256"]
    assert main(["verify-release", str(sealed)]) == 0


@pytest.mark.parametrize("tamper", ["data", "manifest", "seal", "missing"])
def test_tampered_bundle_is_refused(adult_release, tmp_path, tamper, capsys):
    sealed = seal_release(adult_release, tmp_path / "releases")
    copy = tmp_path / "copy"
    shutil.copytree(sealed, copy)
    if tamper == "data":
        raw = bytearray((copy / "data.parquet").read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        (copy / "data.parquet").write_bytes(bytes(raw))
    elif tamper == "manifest":
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["quality"]["loss"] = 0.99
        (copy / "manifest.json").write_text(json.dumps(manifest))
    elif tamper == "seal":
        (copy / "seal.json").unlink()
    else:
        (copy / "data.csv").unlink()
    with pytest.raises(BundleError):
        verify_bundle(copy)
    assert main(["verify-release", str(copy)]) == 1


def test_edited_gate_verdict_is_refused_even_with_a_new_seal(adult_release, tmp_path):
    """Re-sealing by hand does not help: the manifest's hashes must still match the files."""
    copy = tmp_path / "copy"
    shutil.copytree(adult_release, copy)
    (copy / "data.csv").write_text("sex;age\nMale;39\n")
    with pytest.raises(BundleError, match="data.csv"):
        seal_release(copy, tmp_path / "releases")


def test_gate_refuses_high_pu_su_ratio():
    # Many uniques in a small population: most sample uniques are population uniques.
    sizes = np.array([1] * 400 + [2] * 50 + [3] * 10)
    risk, gate = evaluate_gate(GateSpec(populations=[1000.0], estimator="zayatz", max_pu_su_ratio=0.25), sizes)
    assert gate["passed"] is False
    assert "|PU|/|SU|" in gate["reasons"][0]
    assert risk["populations"][0]["pu_su_ratio"] > 0.25


def test_gate_fails_closed_when_the_model_errors(monkeypatch):
    import engine.risk as risk_module

    def broken(*args, **kwargs):
        raise FloatingPointError("boom")

    monkeypatch.setattr(risk_module, "population_uniqueness", broken)
    _, gate = evaluate_gate(GateSpec(), np.array([1, 1, 2, 3]))
    assert gate["passed"] is False and "gate error" in gate["reasons"][0]


def test_failed_gate_refuses_release(tmp_path, capsys):
    data = "A;B\n" + "".join(f"a{i % 40};b{i % 7}\n" for i in range(280))
    (tmp_path / "data.csv").write_text(data)
    (tmp_path / "hA.csv").write_text("".join(f"a{i};*\n" for i in range(40)))
    (tmp_path / "policy.yaml").write_text(
        "dataset: risky\ninput: {path: data.csv}\n"
        "attributes:\n  A: {type: quasi_identifying, hierarchy: {file: hA.csv}}\n  B: {type: insensitive}\n"
        "privacy:\n  - {model: k_anonymity, k: 1}\nsuppression_limit: 0\n"
        "gate: {populations: [300], estimator: zayatz, max_pu_su_ratio: 0.0, max_population_uniqueness: 0.0}\n")
    # k = 1 keeps every class; with 280 records and 40 values there are no uniques, so the gate passes...
    assert main(["deid", str(tmp_path / "policy.yaml"), "--out", str(tmp_path / "ok"), "--quiet"]) == 0
    # ...but one unique record in a population of 300 is refused.
    (tmp_path / "data.csv").write_text(data.replace("a39;", "a38;", 6))  # a39 now occurs once
    code = main(["deid", str(tmp_path / "policy.yaml"), "--out", str(tmp_path / "out"), "--quiet"])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert code == 1 and manifest["gate"]["passed"] is False
    assert main(["release", str(tmp_path / "out"), "--to", str(tmp_path / "releases")]) == 1
    assert "gate did not pass" in capsys.readouterr().err
    assert not (tmp_path / "releases" / "risky").exists()


def test_release_names_and_references(adult_release, tmp_path, capsys):
    """Recipient policies refer to releases by name, by dataset/id, or by a dataset with one bundle; a name moves
    atomically, and anything that fits no sealed bundle (or escapes the store) is refused with what exists."""
    from engine.bundle import name_release, resolve_release

    releases = tmp_path / "releases"
    assert main(["release", str(adult_release), "--to", str(releases), "--name", "adult-k5"]) == 0
    sealed = Path(capsys.readouterr().out.strip())
    assert (releases / "adult-k5").is_symlink() and not Path(str((releases / "adult-k5").readlink())).is_absolute()
    assert resolve_release(releases, "adult-k5") == sealed.resolve()
    assert resolve_release(releases, f"adult/{sealed.name}") == sealed.resolve()
    assert resolve_release(releases, "adult") == sealed.resolve()  # the only bundle of that dataset
    for bad, match in (("nothing", "no such sealed release.*adult, adult-k5"), ("../x", "not a release reference"),
                       ("/etc", "not a release reference")):
        with pytest.raises(BundleError, match=match):
            resolve_release(releases, bad)
    # a second bundle of the dataset makes the bare dataset ambiguous; names stay exact
    other = releases / "adult" / "0000000000000000"
    shutil.copytree(sealed, other)
    with pytest.raises(BundleError, match="ambiguous"):
        resolve_release(releases, "adult")
    with pytest.raises(BundleError, match="release name"):
        name_release(releases, "bad/name", sealed)
    with pytest.raises(BundleError, match="not a release name"):
        name_release(releases, "adult", sealed)
    # a name pointing at a bundle that no longer verifies is refused when resolved
    (sealed / "seal.json").write_text("{}")
    with pytest.raises(BundleError, match="seal"):
        resolve_release(releases, "adult-k5")
