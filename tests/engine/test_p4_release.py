"""`safeshare deid --dataset`: a P4 release written by the workers as data/part-NNNNN.parquet is the in-memory P4
release, and the bundle, the gate and the app take it like a single-file release (sealed, verified part by part,
refused when a part or the listing changes, imported into the app's database)."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml

from engine.bundle import BundleError, seal_release, verify_bundle
from safeshare.cli import main
from tests.engine.test_p4 import PRIVACY, small_policy

QIS = ["age", "zip", "sex"]


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype(str).sort_values(list(frame.columns)).reset_index(drop=True)


def _parts(folder) -> pd.DataFrame:
    manifest = json.loads((folder / "manifest.json").read_text())
    names = sorted(name for name in manifest["files"] if name.startswith("data/"))
    return pd.concat([pd.read_parquet(folder / name) for name in names], ignore_index=True)


@pytest.fixture
def released(tmp_path, capsys):
    """The same policy released in memory (P4, data.parquet) and as a dataset (P4, parts)."""
    policy = small_policy(tmp_path, PRIVACY["pu-5pct"])
    site = tmp_path / "site"
    site.mkdir()
    args = [policy.source, "--partitions", "2", "--scheduler", "none", "--quiet", "--site", str(site)]
    assert main(["deid", *args, "--out", str(tmp_path / "memory")]) == 0, capsys.readouterr().err
    assert main(["deid", *args, "--out", str(tmp_path / "dataset"), "--dataset"]) == 0, capsys.readouterr().err
    return tmp_path / "memory", tmp_path / "dataset"


def test_the_dataset_release_is_the_in_memory_p4_release(released):
    memory, dataset = released
    one = json.loads((memory / "manifest.json").read_text())
    parts = json.loads((dataset / "manifest.json").read_text())
    assert parts["layout"] == "dataset" and "layout" not in one
    for field in ("transformation", "records", "suppressed_records", "equivalence_classes", "smallest_class",
                  "algorithm", "recoding"):
        assert parts[field] == one[field], field
    for name, value in one["quality"].items():
        assert parts["quality"][name] == pytest.approx(value, abs=1e-12), name
    assert parts["gate"]["passed"] is True and parts["risk"] == one["risk"]
    assert parts["parallel"]["read_and_written_by"] == "workers"
    assert parts["parallel"]["risk_models_decided_on_merged_table"] is True
    assert sorted(parts["files"]) == ["data/part-00000.parquet", "data/part-00001.parquet", "report.html"]
    assert not (dataset / "data.csv").exists()
    # the same records, each partition's in its part (rows in partition order, not input order)
    assert _sorted(_parts(dataset)).equals(_sorted(pd.read_parquet(memory / "data.parquet")))
    report = (dataset / "report.html").read_text()
    assert "partitioned dataset" in report and parts["data_sha256"] in report


def test_the_dataset_release_is_sealed_verified_and_imported_by_the_app(released, tmp_path):
    from enclave.app.release import DATA_TABLE, ROW_ID, load_release

    _, dataset = released
    releases = tmp_path / "site" / "releases"
    bundle = seal_release(dataset, releases, policy=tmp_path / "policy.yaml")   # the policy releases dx as it is
    trust = tmp_path / "site" / "trust.json"
    manifest = verify_bundle(bundle, trust)
    assert (bundle / "data" / "part-00001.parquet").is_file()
    loaded = load_release(bundle, state_dir=tmp_path / "state", trust=trust)
    with loaded.engine.connect() as conn:
        rows = pd.read_sql(sa.text(f"SELECT * FROM {DATA_TABLE} ORDER BY {ROW_ID}"), conn)
    assert len(rows) == manifest["records"]
    expected = _parts(dataset).astype(str)
    assert rows.drop(columns=[ROW_ID]).equals(expected[list(rows.columns.drop(ROW_ID))])


@pytest.mark.parametrize("tamper, words", [
    ("byte", "part-00001.parquet: sha256"),
    ("drop-part", "data_sha256 does not match the listing"),
    ("swap-parts", "part-00000.parquet: sha256"),
])
def test_a_changed_part_or_listing_is_refused(released, tmp_path, tamper, words):
    _, dataset = released
    bundle = seal_release(dataset, tmp_path / "site" / "releases", policy=tmp_path / "policy.yaml")
    trust = tmp_path / "site" / "trust.json"
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    data = copy / "data"
    if tamper == "byte":
        raw = bytearray((data / "part-00001.parquet").read_bytes())
        raw[len(raw) // 2] ^= 1
        (data / "part-00001.parquet").write_bytes(bytes(raw))
        match = words
    elif tamper == "drop-part":
        # a writer who drops a part from the listing must re-hash the listing: the manifest no longer matches
        manifest = json.loads((copy / "manifest.json").read_text())
        del manifest["files"]["data/part-00001.parquet"]
        (copy / "manifest.json").write_text(json.dumps(manifest))
        match = "does not match the seal"
        with pytest.raises(BundleError, match=words):
            from engine.bundle import verify_output

            verify_output(copy)
    else:
        (data / "part-00000.parquet").rename(data / "x")
        (data / "part-00001.parquet").rename(data / "part-00000.parquet")
        (data / "x").rename(data / "part-00001.parquet")
        match = words
    with pytest.raises(BundleError, match=match):
        verify_bundle(copy, trust)


def test_a_refused_gate_writes_the_release_and_sealing_refuses_it(tmp_path, capsys):
    policy = small_policy(tmp_path, PRIVACY["k5"])
    spec = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    spec["gate"] = {"min_k": 1000}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(spec))
    code = main(["deid", policy.source, "--out", str(tmp_path / "out"), "--partitions", "2", "--scheduler", "none",
                 "--dataset", "--quiet", "--json"])
    assert code == 1
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["gate"]["passed"] is False
    with pytest.raises(BundleError, match="gate did not pass"):
        seal_release(tmp_path / "out", tmp_path / "site" / "releases")


@pytest.mark.parametrize("change, field", [
    ({"gate": {"require": [{"model": "l_diversity", "attribute": "dx", "l": 2}]}}, "gate.require"),
    ({"search": {"parallel": {"partitions": 2, "transformation": "local"}}}, "search.parallel.transformation"),
])
def test_what_a_dataset_release_cannot_do_is_refused_naming_the_field(tmp_path, capsys, change, field):
    policy = small_policy(tmp_path, PRIVACY["k5"])
    spec = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    spec.update(change)
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(spec))
    code = main(["deid", policy.source, "--out", str(tmp_path / "out"), "--partitions", "2", "--scheduler", "none",
                 "--dataset", "--quiet"])
    assert code == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failed_cluster_exits_3_with_the_step_and_writes_nothing(tmp_path, capsys, monkeypatch):
    import engine.parallel.release as release_module
    from engine.parallel.p4 import P4ClusterError

    policy = small_policy(tmp_path, PRIVACY["k5"])

    def lost(*args, **kwargs):
        raise P4ClusterError("the Dask cluster failed during the anonymize step: KilledWorker: ...")

    monkeypatch.setattr(release_module, "deidentify_dataset", lost)
    code = main(["deid", policy.source, "--out", str(tmp_path / "out"), "--partitions", "2", "--dataset", "--quiet"])
    assert code == 3
    err = capsys.readouterr().err
    assert "failed during the anonymize step" in err and "nothing was written" in err
    assert not (tmp_path / "out").exists()
