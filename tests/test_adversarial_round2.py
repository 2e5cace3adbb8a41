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
from safeshare.signing import SigningKey, canonical
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
# Focus 1: trust store resolution and where a bundle lies (safeshare/sitefolder.py, engine/bundle.py)
# ---------------------------------------------------------------------------------------------------------------

def test_a_dataset_id_reference_is_not_served_another_release_through_a_link(tmp_path: Path, capsys,
                                                                              monkeypatch) -> None:
    """A recipient policy names `release: <dataset>/<id>`. A writer of the releases folder makes RELEASES/<dataset>/
    <id> a link to another genuine bundle (another dataset's, or a less generalized one of the same): provisioning's
    resolver followed the link and verified the target where it really lies, so the recipient got a release that is
    not the one its policy names (verify-release on the link did the same). A `<dataset>/<id>` reference is now that
    release or refused (verify-release, which follows links, names the release the link really is)."""
    from engine.bundle import name_release, resolve_release

    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    releases = site / "releases"
    wanted = sealed(tmp_path, releases, dataset="adult")
    other = sealed(tmp_path, releases, frame=raw_frame().iloc[:30], dataset="census")
    shutil.rmtree(wanted)
    wanted.symlink_to(Path("..") / "census" / other.name)   # RELEASES/adult/<id> -> ../census/<other id>
    reference = f"adult/{wanted.name}"
    with pytest.raises(BundleError, match="sealed as release census/"):
        resolve_release(releases, reference, trust=site / "trust.json")
    # verify-release follows links (release names are links) and names the release the link really is
    capsys.readouterr()
    assert main(["verify-release", str(wanted)]) == 0
    assert f"sealed release census/{other.name} verifies" in capsys.readouterr().out
    # a release name (one component, made by `safeshare release --name`, its binding signed) still follows its link
    name_release(releases, "named", other, trust=site / "trust.json")
    assert resolve_release(releases, "named", trust=site / "trust.json") == other.resolve()


def test_a_file_added_to_a_genuine_bundle_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """Verification checked the files the manifest lists and ignored the rest of the folder, while provisioning
    mounts (one host) or ships (Swarm) the whole bundle folder into the enclave: a writer of the releases folder,
    without any key, adds the raw table to a genuine bundle and it entered the enclave beside the release (invariant
    1). A sealed bundle holding anything unlisted is refused now, by verify-release, the app and provisioning."""
    from engine.bundle import resolve_release

    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    genuine = sealed(tmp_path, site / "releases")
    capsys.readouterr()
    assert main(["verify-release", str(genuine)]) == 0
    raw_frame().to_parquet(genuine / "raw.parquet")
    capsys.readouterr()
    assert main(["verify-release", str(genuine)]) == 1
    assert "raw.parquet: not a file of this release" in capsys.readouterr().err
    with pytest.raises(BundleError, match="not a file of this release"):
        resolve_release(site / "releases", f"{genuine.parent.name}/{genuine.name}", trust=site / "trust.json")
    (genuine / "raw.parquet").unlink()
    (genuine / "hidden").mkdir()   # a folder is no better
    (genuine / "hidden" / "raw.csv").write_text(raw_frame().to_csv())
    assert main(["verify-release", str(genuine)]) == 1


def test_the_enclave_mounts_no_folder_a_releases_writer_can_change(tmp_path: Path) -> None:
    """On one host the app container bind-mounted the bundle folder in SITE/releases itself: a bind mount is live,
    so what a writer of the releases folder added there after provisioning and the app verified it appeared in the
    running enclave at /release. The plan mounts the custodian's verified copy now (SITE/enclaves/<rid>/release/...,
    deploy/release_copy.py; tests/deploy/test_release_copy.py)."""
    from deploy.plan import EnclaveSubnets, plan_enclave
    from deploy.site.folder import Site
    from policies.recipient import RecipientPolicy

    root = tmp_path / "site"
    root.mkdir()
    (root / "site.json").write_text(json.dumps({"site_id": "abc123", "gateway_port": 6090}))
    site = Site(root)
    policy = RecipientPolicy.model_validate({"recipient": "alice", "release": "adult/00aa11bb22cc33dd",
                                             "expires": "2099-12-31", "screen": "1280x800"})
    plan = plan_enclave(site, policy, site.releases / "adult" / "00aa11bb22cc33dd",
                        {"app": "safeshare/app:1", "kiosk": "safeshare/kiosk:1", "gateway": "safeshare/gateway:1"},
                        EnclaveSubnets(enclave="10.214.0.0/27", vnc="10.214.0.32/27"))
    (release,) = [m for m in plan.app.mounts if m.target == "/release"]
    assert not Path(release.source).resolve().is_relative_to(site.releases.resolve())


def test_a_release_name_cannot_be_re_pointed_at_another_genuine_release(tmp_path: Path, monkeypatch) -> None:
    """A release name (RELEASES/<name>, the link `safeshare release --name` makes and recipient policies name) lives
    in the releases folder: its writer re-pointed it at another genuine sealed bundle of the site and provisioning
    served that. The binding is signed now (RELEASES/<name>.name.json, by the release key): a link pointing
    elsewhere than its record says is refused (engine/release_names.py; more in tests/engine/test_release_names.py)."""
    from engine.bundle import name_release, resolve_release

    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    releases = site / "releases"
    wanted = sealed(tmp_path, releases, dataset="adult")
    other = sealed(tmp_path, releases, frame=raw_frame().iloc[:30], dataset="census")
    name_release(releases, "adult-k5", wanted, trust=site / "trust.json")   # the custodian names the release
    link = releases / "adult-k5"
    link.unlink()
    link.symlink_to(Path("census") / other.name)   # the folder writer re-points it
    try:
        served = resolve_release(releases, "adult-k5", trust=site / "trust.json")
    except BundleError as exc:
        assert "signed name record" in str(exc)
        served = None
    assert served != other.resolve()


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


def test_release_takes_the_gate_from_the_site_not_from_beside_a_linked_releases_folder(tmp_path: Path) -> None:
    """SITE/releases is often a link to storage elsewhere. `release` read the site gate from the link's *resolved*
    parent (STORAGE/gate.yaml), while the key and the trust store come from SITE: whoever can write the storage
    beside the releases folder put a lax gate.yaml there and outputs the site's own gate refuses were sealed. The
    gate now comes from the same SITE as the key."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "gate.yaml").write_text("min_k: 4\n")    # the custodian's floor; small_frame's smallest class is 3
    storage = tmp_path / "storage"
    (storage / "releases").mkdir(parents=True)
    (storage / "gate.yaml").write_text("min_k: 1\n")   # planted beside the link's target
    (site / "releases").symlink_to(storage / "releases")
    out = tmp_path / "out"
    write_output(out, small_frame())
    with pytest.raises(BundleError, match="min_k|smallest class|k "):
        seal_release(out, site / "releases")
    assert not any((storage / "releases").rglob("seal.json"))


def test_release_refuses_a_manifest_whose_transformation_omits_a_quasi_identifier(tmp_path: Path) -> None:
    """The re-gate took the quasi-identifiers from the manifest's own 'transformation' keys, which a writer of the
    deid output folder rewrites: 'age' (raw, unique per record) dropped from it and the figures recomputed over the
    others, and `safeshare release` sealed raw ages under a site gate of min_k 5. The released columns and their
    roles now come from the dataset policy (--policy) or, without it, every released column must be a
    quasi-identifier 'transformation' names (engine.release_gate)."""
    site = _site(tmp_path, "min_k: 5\n")
    honest = tmp_path / "honest"
    write_output(honest, raw_frame())   # every column a quasi-identifier: 40 unique ages, k = 1
    with pytest.raises(BundleError, match="refuses"):
        seal_release(honest, site / "releases")
    forged = tmp_path / "forged"
    write_output(forged, raw_frame(), quasi_identifiers=["sex", "site"])   # 'age' left out of 'transformation'
    with pytest.raises(BundleError):
        seal_release(forged, site / "releases")


# ---------------------------------------------------------------------------------------------------------------
# Focus 3: retired key records (safeshare/signing.py, deploy/site/key_rotation.py)
# ---------------------------------------------------------------------------------------------------------------

def _rotate(site: Path, purpose: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["custodian", "key", "rotate", "--purpose", purpose, "--site", str(site), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _forged_bundle(root: Path, releases: Path, key: SigningKey, signed_at: str | None = None) -> Path:
    """A bundle of raw records sealed with `key`, in the format `safeshare release` writes, at RELEASES/synth/<id>."""
    out = root / "raw-out"
    manifest = write_output(out, raw_frame(), "synth")
    bundle = releases / "synth" / manifest["data_sha256"][:16]
    shutil.copytree(out, bundle)
    seal = {"format": SEAL_FORMAT, "dataset": "synth", "release": bundle.name,
            "manifest_sha256": hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest(),
            "data_sha256": manifest["data_sha256"], "sealed_at": "2026-01-01T00:00:00+00:00"}
    seal["signature"] = key.sign(canonical(seal), signed_at=signed_at)
    (bundle / "seal.json").write_text(json.dumps(seal, indent=2) + "\n")
    return bundle


def test_rotation_does_not_record_a_seal_planted_with_the_leaked_key(tmp_path: Path, capsys, monkeypatch) -> None:
    """Rotation records what `safeshare release` signed, from the ledger beside the key (SITE/keys, custodian only),
    not every seal in SITE/releases: a raw-data bundle a thief sealed with a leaked copy of the key before the
    rotation stops verifying with it. (The gateway key's scan of SITE/sessions has no ledger: `audit verify --db`
    finds a planted session by its missing anchor row.)"""
    site = _site(tmp_path)
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    out = tmp_path / "out"
    write_output(out, small_frame())
    genuine = seal_release(out, site / "releases")   # what `safeshare release` seals is in the key's ledger
    assert (site / "keys" / "release-signing.key.signed").stat().st_mode & 0o777 == 0o600
    leaked = SigningKey.load(shutil.copy2(site / "keys" / "release-signing.key", tmp_path / "leaked.key"))
    # the thief plants raw records sealed with the leaked key in the site's releases folder ...
    forged = _forged_bundle(tmp_path, site / "releases", leaked)
    # ... and the custodian, having learnt of the leak, rotates the key
    report = _rotate(site, "release", capsys)
    assert report["retired"] == [leaked.key_id]
    assert main(["verify-release", str(genuine)]) == 0   # what the site sealed keeps verifying
    capsys.readouterr()
    assert main(["verify-release", str(forged)]) == 1, "a seal the site never made outlived the rotation"


def test_release_refuses_a_column_no_policy_released(tmp_path: Path) -> None:
    """The same root: the re-gate read only the columns 'transformation' names, so a column added to data.parquet
    (the exact birth date of every record), every figure left as it was, was sealed. A column that is neither a
    quasi-identifier 'transformation' names nor (with --policy) an attribute the policy releases is refused."""
    site = _site(tmp_path)
    frame = small_frame()
    frame["birth"] = [f"19{50 + i}-0{1 + i % 9}-1{i % 10}" for i in range(len(frame))]
    out = tmp_path / "out"
    write_output(out, frame, quasi_identifiers=["sex", "age", "site"])
    with pytest.raises(BundleError):
        seal_release(out, site / "releases")
