"""Adversarial review of issue 24's new defences ("Integrity, round 2"), as the issue's attacker: a reader of the site
folders, a writer of SITE/releases (or of a deid output folder before `safeshare release`) or SITE/sessions, and a
writer of the folders and the site's database; never the private keys, trust.json or gate.yaml.

Each test is one attack end to end. A hole fixed here passes; a hole left for the next session is an
`xfail(strict=True)` whose reason says exactly what gets through and what a fix must do."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from engine.bundle import SEAL_FORMAT, BundleError, seal_release, verify_bundle
from safeshare.cli import main
from safeshare.signing import SigningKey, TrustStore, canonical
# no_ambient_site: an autouse fixture (no $SAFESHARE_SITE or default site of the machine running the tests)
from tests.engine.test_trust_from_site import no_ambient_site, raw_frame, sealed  # noqa: F401
from tests.enclave.test_app_support import small_frame, write_output


def _relist(folder: Path, name: str) -> None:
    """List `folder/name` in the output's manifest with its sha256, as a writer of the output folder would."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _site(root: Path, gate_yaml: str | None = None) -> Path:
    site = root / "site"
    (site / "releases").mkdir(parents=True)
    if gate_yaml is not None:
        (site / "gate.yaml").write_text(gate_yaml)
    return site


# ---------------------------------------------------------------------------------------------------------------
# Focus 4: the release re-gate (engine/release_gate.py, engine/bundle.py seal_release)
# ---------------------------------------------------------------------------------------------------------------

def test_release_refuses_a_data_csv_holding_other_records_than_the_data_it_gated(tmp_path: Path) -> None:
    """The re-gate evaluates data.parquet only, but a deid output also ships data.csv, listed with its sha256: a
    writer of the output folder replaces data.csv with raw records and updates its hash. `release` sealed that, and
    the whole bundle (raw CSV included) is what provisioning mounts at the enclave's /release: raw data entered an
    enclave (invariant 1). Now data.csv must be the CSV of the gated data.parquet, or the release is refused."""
    site = _site(tmp_path)
    out = tmp_path / "out"
    write_output(out, small_frame())
    genuine = pd.read_parquet(out / "data.parquet")
    (out / "data.csv").write_text(genuine.to_csv(index=False, sep=";", lineterminator="\n"))
    _relist(out, "data.csv")
    # the genuine companion is accepted
    bundle = seal_release(out, site / "releases")
    verify_bundle(bundle, site / "trust.json")
    shutil.rmtree(bundle)

    (out / "data.csv").write_text(raw_frame().to_csv(index=False, sep=";", lineterminator="\n"))
    _relist(out, "data.csv")
    with pytest.raises(BundleError, match=r"data\.csv.*not the CSV of the gated data\.parquet"):
        seal_release(out, site / "releases")
    assert not any((site / "releases").rglob("seal.json"))


def test_release_refuses_extra_files_listed_in_the_manifest(tmp_path: Path) -> None:
    """Any plain file name listed in the manifest's files was copied into the sealed bundle unchecked by the gate: a
    writer of the output folder lists raw.parquet (the raw table) and release sealed it into the bundle that
    provisioning mounts in the enclave. Only the files a release consists of may be listed now."""
    site = _site(tmp_path)
    out = tmp_path / "out"
    write_output(out, small_frame())
    raw_frame().to_parquet(out / "raw.parquet")
    _relist(out, "raw.parquet")
    with pytest.raises(BundleError, match=r"raw\.parquet.*not a file of a release"):
        seal_release(out, site / "releases")
    assert not any((site / "releases").rglob("seal.json"))


@pytest.mark.xfail(strict=True, reason=(
    "HOLE (medium): the re-gate takes the quasi-identifiers from the manifest's own 'transformation' keys, which a "
    "writer of the deid output folder rewrites: drop a quasi-identifier (here 'age', raw and unique per record) from "
    "'transformation' and recompute the figures over the others, and `safeshare release` seals raw ages under a "
    "site gate of min_k 5. The release cannot tell a quasi-identifier from the data alone; a fix must bind the "
    "quasi-identifiers to something the writer cannot rewrite: the policy (policy_sha256 checked against the "
    "policy file the custodian names at release), or the site's record of the dataset's quasi-identifiers, or "
    "gating over every released column not declared sensitive/insensitive in that policy."))
def test_release_refuses_a_manifest_whose_transformation_omits_a_quasi_identifier(tmp_path: Path) -> None:
    site = _site(tmp_path, "min_k: 5\n")
    honest = tmp_path / "honest"
    write_output(honest, raw_frame())   # every column a quasi-identifier: 40 unique ages, k = 1
    with pytest.raises(BundleError, match="refuses"):
        seal_release(honest, site / "releases")
    forged = tmp_path / "forged"
    write_output(forged, raw_frame(), quasi_identifiers=["sex", "site"])   # 'age' left out of 'transformation'
    with pytest.raises(BundleError):
        seal_release(forged, site / "releases")
