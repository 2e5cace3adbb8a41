"""The release gate refuses risky releases; sealed bundles refuse any change (fail closed), and only a seal signed by
a key the site trusts verifies: a writer of the releases folder cannot forge one (issue 12, item 1)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.bundle import BundleError, seal_release, verify_bundle
from safeshare.signing import SigningKey, canonical, rotate_key
from engine.gate import evaluate_gate
from engine.policy import GateSpec
from safeshare.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


@pytest.fixture(scope="module")
def adult_release(tmp_path_factory, demo_dir):
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
    assert verify_bundle(sealed, tmp_path / "trust.json")["data_sha256"] == manifest["data_sha256"]
    assert main(["verify-release", str(sealed), "--site", str(tmp_path)]) == 0  # the site's trust store
    assert "signed by release key" in capsys.readouterr().out
    # the site's key was made on first use: private and out of the releases folder, its public half trusted
    key = tmp_path / "keys" / "release-signing.key"
    assert (key.stat().st_mode & 0o777, key.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    seal = json.loads((sealed / "seal.json").read_text())
    assert seal["signature"]["key_id"] == SigningKey.load(key).key_id
    assert json.loads((tmp_path / "trust.json").read_text())["keys"][0]["key_id"] == seal["signature"]["key_id"]


@pytest.mark.parametrize("tamper", ["data", "manifest", "seal", "missing"])
def test_tampered_bundle_is_refused(adult_release, tmp_path, tamper, capsys):
    sealed = seal_release(adult_release, tmp_path / "releases")
    copy = tmp_path / "copy" / sealed.parent.name / sealed.name  # where it still names its release
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
        verify_bundle(copy, tmp_path / "trust.json")
    assert main(["verify-release", str(copy), "--trust", str(tmp_path / "trust.json")]) == 1


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


# --- signed seals: what a writer of the releases folder can no longer do (issue 12, item 1) -------------------------

def _rehash(bundle: Path, data: bytes | None = None, **manifest_changes) -> None:
    """What a writer of the folder can do without the key: change files, recompute every hash, recompute the seal."""
    import hashlib

    if data is not None:
        (bundle / "data.parquet").write_bytes(data)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.update(manifest_changes)
    for name in manifest["files"]:
        manifest["files"][name] = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    manifest["data_sha256"] = manifest["files"]["data.parquet"]
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    seal = json.loads((bundle / "seal.json").read_text())
    seal["manifest_sha256"] = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    seal["data_sha256"], seal["release"] = manifest["data_sha256"], manifest["data_sha256"][:16]
    (bundle / "seal.json").write_text(json.dumps(seal, indent=2))


def test_raw_data_with_recomputed_hashes_is_refused(adult_release, demo_dir, tmp_path, capsys):
    """Forgery 1 of the issue: raw adult.csv written as data.parquet, manifest files/data_sha256 and the seal's
    manifest_sha256 recomputed. With an unkeyed seal this verified; the signature no longer matches."""
    import pandas as pd

    sealed = seal_release(adult_release, tmp_path / "releases")
    raw = tmp_path / "raw.parquet"
    pd.read_csv(demo_dir / "adult" / "adult.csv", sep=";").to_parquet(raw)
    _rehash(sealed, raw.read_bytes(), records=len(pd.read_parquet(raw)))
    assert main(["verify-release", str(sealed), "--site", str(tmp_path)]) == 1
    assert "signature by key" in capsys.readouterr().err and "does not match" in \
        str(pytest.raises(BundleError, verify_bundle, sealed, tmp_path / "trust.json").value)
    # removing the signature does not help either
    seal = json.loads((sealed / "seal.json").read_text())
    del seal["signature"]
    (sealed / "seal.json").write_text(json.dumps(seal))
    assert main(["verify-release", str(sealed), "--site", str(tmp_path)]) == 1
    assert "unsigned" in capsys.readouterr().err


def _failed_gate_output(tmp_path: Path) -> Path:
    data = "A;B\n" + "".join(f"a{i % 40};b{i % 7}\n" for i in range(280))
    (tmp_path / "data.csv").write_text(data.replace("a39;", "a38;", 6))  # a39 occurs once: the gate fails
    (tmp_path / "hA.csv").write_text("".join(f"a{i};*\n" for i in range(40)))
    (tmp_path / "policy.yaml").write_text(
        "dataset: risky\ninput: {path: data.csv}\n"
        "attributes:\n  A: {type: quasi_identifying, hierarchy: {file: hA.csv}}\n  B: {type: insensitive}\n"
        "privacy:\n  - {model: k_anonymity, k: 1}\nsuppression_limit: 0\n"
        "gate: {populations: [300], estimator: zayatz, max_pu_su_ratio: 0.0, max_population_uniqueness: 0.0}\n")
    assert main(["deid", str(tmp_path / "policy.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 1
    return tmp_path / "out"


@pytest.mark.parametrize("signer", ["none", "own key"])
def test_failed_gate_with_hand_written_seal_is_refused(adult_release, tmp_path, signer, capsys):
    """Forgery 2 of the issue: a failed-gate output with gate.passed set to true, copied into the store with a
    hand-written seal (unsigned, or signed by a key of the forger's own) next to a genuine release of the site."""
    import hashlib

    releases = tmp_path / "site" / "releases"
    seal_release(adult_release, releases)  # the site has its key and trust store
    out = _failed_gate_output(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["gate"] = {**manifest["gate"], "passed": True, "reasons": []}
    (out / "manifest.json").write_text(json.dumps(manifest))
    forged = releases / "risky" / manifest["data_sha256"][:16]
    forged.mkdir(parents=True)
    for name in ["manifest.json", *manifest["files"]]:
        shutil.copy2(out / name, forged / name)
    seal = {"format": "safeshare-seal/2", "dataset": "risky", "release": manifest["data_sha256"][:16],
            "manifest_sha256": hashlib.sha256((forged / "manifest.json").read_bytes()).hexdigest(),
            "data_sha256": manifest["data_sha256"], "sealed_at": "2024-01-01T00:00:00+00:00"}
    if signer == "own key":
        seal["signature"] = SigningKey.generate(tmp_path / "forger.key").sign(canonical(seal))
    (forged / "seal.json").write_text(json.dumps(seal))
    assert main(["verify-release", str(forged), "--site", str(tmp_path / "site")]) == 1
    assert ("unsigned" if signer == "none" else "does not trust") in capsys.readouterr().err
    from engine.bundle import resolve_release

    with pytest.raises(BundleError, match="signature refused"):
        resolve_release(releases, "risky", trust=tmp_path / "site" / "trust.json")


def test_wrong_key_is_refused_at_sealing_and_at_verification(adult_release, tmp_path, capsys):
    """A key the site does not trust cannot seal into it, and its bundles do not verify at another site."""
    other = SigningKey.generate(tmp_path / "other.key")
    releases = tmp_path / "site" / "releases"
    seal_release(adult_release, tmp_path / "elsewhere" / "releases")  # another site, its own key
    assert main(["release", str(adult_release), "--to", str(releases), "--signing-key", str(other.path),
                 "--trust", str(tmp_path / "elsewhere" / "trust.json")]) == 1
    assert "does not trust" in capsys.readouterr().err
    assert not list((releases / "adult").iterdir())  # nothing sealed, no staging left
    # a bundle sealed at one site does not verify against another site's trust store
    theirs = seal_release(adult_release, tmp_path / "third" / "releases")
    assert main(["verify-release", str(theirs), "--trust", str(tmp_path / "elsewhere" / "trust.json")]) == 1
    assert "does not trust" in capsys.readouterr().err
    # bad input: a key file that is missing or readable by others, a trust store that is missing
    assert main(["release", str(adult_release), "--to", str(releases), "--signing-key",
                 str(tmp_path / "nope.key")]) == 2
    other.path.chmod(0o644)
    assert main(["release", str(adult_release), "--to", str(releases), "--signing-key", str(other.path)]) == 2
    assert "readable or writable by others" in capsys.readouterr().err
    assert main(["verify-release", str(theirs), "--trust", str(tmp_path / "none.json")]) == 2


def test_signed_seal_must_match_the_manifest(adult_release, tmp_path, capsys):
    """Even a seal signed by the site's own key is refused when its fields do not describe the bundle, and a seal
    changed after signing (a later date, another release id) no longer matches its signature."""
    sealed = seal_release(adult_release, tmp_path / "releases")
    key = SigningKey.load(tmp_path / "keys" / "release-signing.key")
    original = json.loads((sealed / "seal.json").read_text())
    for field, value in (("data_sha256", "0" * 64), ("dataset", "other"), ("release", "0" * 16),
                         ("format", "safeshare-seal/1")):
        seal = {k: v for k, v in original.items() if k != "signature"}
        seal[field] = value
        seal["signature"] = key.sign(canonical(seal))
        (sealed / "seal.json").write_text(json.dumps(seal))
        with pytest.raises(BundleError, match=f"'{field}'"):
            verify_bundle(sealed, tmp_path / "trust.json")
    changed = {**original, "sealed_at": "2030-01-01T00:00:00+00:00"}
    (sealed / "seal.json").write_text(json.dumps(changed))
    with pytest.raises(BundleError, match="does not match"):
        verify_bundle(sealed, tmp_path / "trust.json")
    # sealing the same output again replaces a bundle that no longer verifies with a good one
    assert seal_release(adult_release, tmp_path / "releases") == sealed
    assert main(["verify-release", str(sealed), "--site", str(tmp_path)]) == 0


def test_rotation_keeps_old_releases_valid(adult_release, tmp_path, capsys):
    """After `rotate_key` (given the site's seals, as `custodian key rotate` does) the retired key still verifies
    what it had signed (old releases stay usable) and nothing it signs afterwards; new releases are signed by the
    new key."""
    from engine.bundle import release_signatures

    releases = tmp_path / "releases"
    old_bundle = seal_release(adult_release, releases)
    key_path, trust = tmp_path / "keys" / "release-signing.key", tmp_path / "trust.json"
    old_key = SigningKey.load(key_path)
    new_key, retired = rotate_key(key_path, trust, "release", signed=release_signatures(releases))
    assert retired == [old_key.key_id]
    assert main(["verify-release", str(old_bundle), "--site", str(tmp_path)]) == 0
    # a new release is signed by the new key
    copy = tmp_path / "out2"
    shutil.copytree(adult_release, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["dataset"] = "adult2"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    new_bundle = seal_release(copy, releases)
    assert json.loads((new_bundle / "seal.json").read_text())["signature"]["key_id"] == new_key.key_id
    assert main(["verify-release", str(new_bundle), "--site", str(tmp_path)]) == 0
    # whoever kept the old key cannot sign with it now: the signing time is covered by the signature
    seal = {k: v for k, v in json.loads((new_bundle / "seal.json").read_text()).items() if k != "signature"}
    seal["signature"] = old_key.sign(canonical(seal), signed_at="2999-01-01T00:00:00+00:00")
    (new_bundle / "seal.json").write_text(json.dumps(seal))
    assert main(["verify-release", str(new_bundle), "--site", str(tmp_path)]) == 1
    assert "after it was retired" in capsys.readouterr().err


def test_manifest_swapped_after_the_seal_check_is_not_used(adult_release, tmp_path, monkeypatch):
    """The manifest is read once: a writer who swaps it right after its hash was checked against the signed seal
    (same data, so every file hash still matches, but other risk figures) does not get the swapped one returned."""
    import engine.bundle as bundle_module

    sealed = seal_release(adult_release, tmp_path / "releases")
    genuine = json.loads((sealed / "manifest.json").read_text())
    real = bundle_module.verify_output

    def swap_then_verify(folder, *args):
        (sealed / "manifest.json").write_text(json.dumps({**genuine, "risk": {"sample_uniques": -1}}))
        return real(folder, *args)

    monkeypatch.setattr(bundle_module, "verify_output", swap_then_verify)
    assert verify_bundle(sealed, tmp_path / "trust.json")["risk"] == genuine["risk"]
