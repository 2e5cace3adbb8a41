"""Issue 24, item 8: `safeshare release` evaluates the gate itself, on the released data, under the gate of the site
that releases. Before, it re-checked only the risk the manifest records, so an output made under a lax site with its
figures lowered by hand (the manifest is not covered by its own hashes) was sealed by a strict one."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from engine.bundle import BundleError, seal_release, verify_bundle
from safeshare.cli import main
from tests.engine.site_files import site_with, tiny_policy, write_tiny
from tests.engine.test_gate_estimators import localized

STRICT_GATE = "max_population_uniqueness: 0.035\n"   # ADULT under adult-pu1: Los Angeles 0.046 (Dankar -> Pitman)


def example(root: Path, name: str) -> Path:
    policy = root / name
    policy.write_text(localized(name))
    return policy


@pytest.fixture(scope="module")
def adult(tmp_path_factory):
    """ADULT de-identified under a site without a floor on population uniqueness (the built-in floor): adult-pu1
    passes there; adult-k5 (no sample uniques) passes anywhere."""
    root = tmp_path_factory.mktemp("regate")
    lax = site_with(root, "lax", None)
    outputs = {}
    for name in ("adult-pu1.yaml", "adult-k5.yaml"):
        out = root / f"out-{name.removesuffix('.yaml')}"
        assert main(["deid", str(example(root, name)), "--out", str(out), "--quiet", "--site", str(lax)]) == 0
        outputs[name] = out
    return outputs


@pytest.fixture(autouse=True)
def no_machine_site(tmp_path, monkeypatch):
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "no-such-site"))


def edit_manifest(source: Path, target: Path, change) -> dict:
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    change(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def lower_every_estimate(manifest: dict, to: float = 0.03) -> None:
    """What a writer of the output folder does to pass a floor of 0.035: every recorded uniqueness at most 0.03, the
    ratios and uniques made to agree, the verdict left passed."""
    su = manifest["risk"]["sample_uniqueness"]
    for entry in manifest["risk"]["populations"]:
        for estimate in [entry, *entry.get("estimates", [])]:
            if estimate["population_uniqueness"] > to:
                estimate["population_uniqueness"] = to
                estimate["pu_su_ratio"] = to / su
                estimate["population_uniques"] = to * entry["size"]
    manifest["gate"].update(passed=True, reasons=[], max_population_uniqueness=0.035)


def test_hand_lowered_figures_from_a_lax_site_are_refused_by_the_strict_one(adult, tmp_path, capsys):
    """The issue's attack end to end: made under a lax site, figures lowered to pass the strict one's record check,
    released into the strict site: refused (exit 1), nothing written, the data's own figure named."""
    strict = site_with(tmp_path, "strict", STRICT_GATE)
    edited = edit_manifest(adult["adult-pu1.yaml"], tmp_path / "edited", lower_every_estimate)
    assert max(e["population_uniqueness"] for e in edited["risk"]["populations"]) <= 0.035
    assert main(["release", str(tmp_path / "edited"), "--to", str(strict / "releases")]) == 1
    err = capsys.readouterr().err
    assert "released data" in err and "Los Angeles: population uniqueness 0.046" in err, err
    assert "population_uniqueness is 0.03 in the manifest" in err, err
    assert not (strict / "releases").exists() and not (strict / "keys").exists()
    with pytest.raises(BundleError, match="evaluated on the released data"):
        seal_release(tmp_path / "edited", strict / "releases")


def test_figures_that_differ_from_the_data_are_refused_even_where_the_gate_passes(adult, tmp_path, capsys):
    """At the lax site the data pass the gate, but a manifest whose figures are not the data's is still refused:
    what is sealed must say what the data are."""
    lax = site_with(tmp_path, "lax", None)
    edits = {
        "uniques": lambda m: m["risk"].update(sample_uniques=m["risk"]["sample_uniques"] - 100),
        "ratio": lambda m: m["risk"]["populations"][0].update(pu_su_ratio=0.01),
        "model": lambda m: m["risk"]["populations"][2].update(model="snb"),
        "smallest": lambda m: m.update(smallest_class=5),
        "suppressed": lambda m: m.update(suppressed_records=m["suppressed_records"] + 5),
    }
    for name, change in edits.items():
        edit_manifest(adult["adult-pu1.yaml"], tmp_path / name, change)
        assert main(["release", str(tmp_path / name), "--to", str(lax / "releases")]) == 1, name
        err = capsys.readouterr().err
        assert "evaluated on the released data refuses it" in err, (name, err)
    assert not (lax / "releases").exists()


def test_a_dropped_population_or_estimator_is_checked_anyway(adult, tmp_path, capsys):
    """Removing what failed from the record does not help: the releasing site's populations and estimators are
    evaluated on the data whatever the manifest lists."""
    strict = site_with(tmp_path, "strict", STRICT_GATE + "required_populations: [USA]\n")

    def drop_los_angeles(manifest: dict) -> None:
        manifest["risk"]["populations"] = [e for e in manifest["risk"]["populations"] if e["population"] == "USA"]
        manifest["gate"]["populations"] = ["USA"]
        manifest["gate"]["policy_gate"] = {"populations": ["USA"]}
    edit_manifest(adult["adult-pu1.yaml"], tmp_path / "usa-only", drop_los_angeles)
    # USA alone (0.0100 under Pitman) is within 0.035: this output is sealed by the strict site...
    assert main(["release", str(tmp_path / "usa-only"), "--to", str(strict / "releases")]) == 0, \
        capsys.readouterr().err
    # ...but not once the site requires Los Angeles again, nor under an estimator the site adds (Zayatz: 0.062)
    capsys.readouterr()
    (strict / "gate.yaml").write_text(STRICT_GATE + "required_populations: [USA]\nestimator: [dankar, zayatz]\n")
    assert main(["release", str(tmp_path / "usa-only"), "--to", str(strict / "releases")]) == 1
    err = capsys.readouterr().err
    assert f"estimator zayatz required by the site gate {strict / 'gate.yaml'} was not used" in err, err
    (strict / "gate.yaml").write_text(STRICT_GATE)
    assert main(["release", str(tmp_path / "usa-only"), "--to", str(strict / "releases")]) == 1
    assert "Los Angeles" in capsys.readouterr().err


def test_an_untouched_passing_output_still_releases(adult, tmp_path, capsys):
    strict = site_with(tmp_path, "strict", STRICT_GATE)
    assert main(["release", str(adult["adult-k5.yaml"]), "--to", str(strict / "releases")]) == 0, \
        capsys.readouterr().err
    sealed = Path(capsys.readouterr().out.strip())
    assert verify_bundle(sealed, strict / "trust.json")["gate"]["passed"] is True
    # adult-pu1 has thousands of sample uniques: its figures (Pitman, Dankar's rule) are recomputed exactly
    lax = site_with(tmp_path, "lax", None)
    assert main(["release", str(adult["adult-pu1.yaml"]), "--to", str(lax / "releases")]) == 0, \
        capsys.readouterr().err
    # and the strict site refuses it, on the data
    capsys.readouterr()
    assert main(["release", str(adult["adult-pu1.yaml"]), "--to", str(strict / "releases")]) == 1
    assert "Los Angeles" in capsys.readouterr().err


def test_the_release_gate_is_fast_on_adult(adult):
    import time

    from engine.bundle import data_files, verify_output
    from engine.release_gate import recheck_release
    from engine.sitegate import BUILT_IN_GATE

    manifest = verify_output(adult["adult-pu1.yaml"])
    recheck_release(adult["adult-pu1.yaml"], manifest, BUILT_IN_GATE, data_files(manifest))   # imports, warm-up
    started = time.perf_counter()
    assert recheck_release(adult["adult-pu1.yaml"], manifest, BUILT_IN_GATE, data_files(manifest)) == []
    assert time.perf_counter() - started < 2.0


def test_a_class_generalized_to_star_everywhere_is_a_released_class(tmp_path, capsys):
    """k = 8 over classes of 7 generalizes A to '*': one released class of 280 records that looks like suppressed
    records in the data; `suppressed_records` (0) splits them, and may not claim more than the starred records."""
    write_tiny(tmp_path, tiny_policy(k=8, gate="{populations: [1000000]}"), unique=False)
    site = site_with(tmp_path, "site", None)
    out = tmp_path / "out"
    assert main(["deid", str(tmp_path / "policy.yaml"), "--out", str(out), "--quiet", "--site", str(site)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["transformation"] == {"A": 1} and manifest["suppressed_records"] == 0
    assert set(pd.read_parquet(out / "data.parquet")["A"]) == {"*"}
    edit_manifest(out, tmp_path / "more", lambda m: m.update(suppressed_records=281))
    policy = ["--policy", str(tmp_path / "policy.yaml")]   # B is released as it is: only the policy says so
    assert main(["release", str(tmp_path / "more"), "--to", str(site / "releases"), *policy]) == 1
    assert "'suppressed_records' is 281, but 280 record(s)" in capsys.readouterr().err
    assert main(["release", str(out), "--to", str(site / "releases"), *policy]) == 0, capsys.readouterr().err


def test_data_that_are_not_what_the_manifest_says_are_refused(tmp_path, capsys):
    """A data file without a quasi-identifier column the manifest names is refused, not skipped."""
    from engine.deid import parquet_bytes
    from tests.enclave.test_app_support import small_frame, write_output

    write_output(tmp_path / "out", small_frame())
    site = site_with(tmp_path, "site", None)
    assert main(["release", str(tmp_path / "out"), "--to", str(site / "releases")]) == 0, capsys.readouterr().err
    capsys.readouterr()
    import hashlib

    def rename_column(manifest: dict) -> None:
        data = parquet_bytes(small_frame().rename(columns={"site": "place"}))
        (tmp_path / "renamed" / "data.parquet").write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        manifest.update(data_sha256=sha, files={"data.parquet": sha})
    edit_manifest(tmp_path / "out", tmp_path / "renamed", rename_column)
    assert main(["release", str(tmp_path / "renamed"), "--to", str(site / "releases")]) == 1
    assert "no column for the quasi-identifier(s) site" in capsys.readouterr().err


def test_a_manifest_swapped_after_the_check_is_not_what_gets_sealed(adult, tmp_path, monkeypatch):
    """The manifest is read once: a writer who swaps in lowered figures while the data files are being copied gets
    the manifest that was checked sealed, not theirs."""
    import engine.bundle as bundle

    lax = site_with(tmp_path, "lax", None)
    output = tmp_path / "out"
    shutil.copytree(adult["adult-pu1.yaml"], output)
    checked = (output / "manifest.json").read_bytes()
    real_copy = shutil.copy2

    def swap_then_copy(source, target, *args, **kwargs):
        manifest = json.loads(checked)
        lower_every_estimate(manifest, to=0.001)
        (output / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return real_copy(source, target, *args, **kwargs)

    monkeypatch.setattr(bundle.shutil, "copy2", swap_then_copy)
    sealed = seal_release(output, lax / "releases")
    assert (sealed / "manifest.json").read_bytes() == checked
    assert (output / "manifest.json").read_bytes() != checked
