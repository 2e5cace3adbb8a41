"""engine.manifest: every kind of release the engine writes reads back into the typed model and dumps to the very
bytes written (they are hashed and signed), and a malformed manifest is refused naming the file and the field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.bundle import BundleError, verify_output
from engine.manifest import Manifest, ManifestError, load_manifest, parse_manifest
from safeshare.cli import main
from tests.engine.conftest import EXAMPLES
from tests.engine.test_local_recoding import skewed_policy
from tests.engine.test_p4 import PRIVACY, small_policy
from tests.engine.test_privacy_pipeline import write

P4 = ["--partitions", "2", "--scheduler", "none"]


def _small(folder: Path, privacy: str = "k5", **changes: object) -> str:
    policy = small_policy(folder, PRIVACY[privacy])
    spec = yaml.safe_load(Path(policy.source).read_text())
    for key, value in changes.items():
        if key == "dx":
            spec["attributes"]["dx"]["type"] = value
        else:
            spec[key] = value
    Path(policy.source).write_text(yaml.safe_dump(spec))
    return policy.source


def _subset(folder: Path) -> Path:
    (folder / "rows.txt").write_text("0\n2\n4\n7\n")
    return write(folder, "- {model: k_map, k: 2, subset: {file: rows.txt}}")


# (policy maker, extra arguments, what the manifest must show of its layout)
RUNS = {
    "in-memory": (lambda d: _small(d), [], lambda m: m.recoding == "global" and m.parallel is None),
    "in-memory, population uniqueness": (lambda d: _small(d, "pu-5pct"), [],
                                         lambda m: m.risk.privacy_model_estimate is not None),
    "in-memory, l-diversity and gate.require": (
        lambda d: _small(d, "k3-distinct-l2", gate={"require": [{"model": "l_diversity", "attribute": "dx", "l": 2}]}),
        [], lambda m: m.gate.required[0].model == "l_diversity"),
    "P4": (lambda d: _small(d, dx="insensitive"), P4, lambda m: m.parallel.transformation == "global"),
    "P4, population uniqueness": (lambda d: _small(d, "pu-5pct"), P4,
                                  lambda m: m.parallel.risk_models_decided_on_merged_table),
    "P4 local transformation": (
        lambda d: _small(d, search={"recoding": "local", "parallel": {"partitions": 2, "scheduler": "none",
                                                                      "transformation": "local"}}),
        [], lambda m: m.recoding == "local" and m.parallel.transformation == "local"),
    "P4 dataset": (lambda d: _small(d, "k3-distinct-l2"), P4 + ["--dataset"],
                   lambda m: m.is_dataset and m.parallel.model_extra["read_and_written_by"] == "workers"),
    "local recoding": (lambda d: skewed_policy(d, "search: {recoding: local, local_iterations: 3}"), [],
                       lambda m: m.recoding == "local" and len(m.local_recoding.iterations) >= 1),
    "research subset": (_subset, [], lambda m: m.research_subset.population_records == 10),
    "refused gate": (lambda d: _small(d, gate={"min_k": 1000}), [], lambda m: m.gate.passed is False),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_release_reads_back_into_the_model_and_dumps_to_the_same_bytes(tmp_path, name):
    make, arguments, shows = RUNS[name]
    (tmp_path / "src").mkdir()
    policy = make(tmp_path / "src")
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(tmp_path), *arguments]) in (0, 1)
    raw = (out / "manifest.json").read_bytes()
    manifest = load_manifest(out / "manifest.json")
    assert shows(manifest)
    assert manifest.to_json().encode("utf-8") == raw
    assert Manifest.model_validate(json.loads(raw)).to_json().encode("utf-8") == raw


def test_an_example_policy_release_round_trips(tmp_path, demo_dir):
    out = tmp_path / "out"
    assert main(["deid", str(EXAMPLES / "adult-k5.yaml"), "--out", str(out), "--quiet", "--site", str(tmp_path)]) == 0
    raw = (out / "manifest.json").read_bytes()
    assert load_manifest(out / "manifest.json").to_json().encode("utf-8") == raw


def test_unknown_fields_and_their_order_are_kept(tmp_path):
    """A manifest from another engine version: fields this one does not know, in places it would not put them."""
    document = {"format": "safeshare-release/1", "dataset": "d", "newer": {"x": [1, 2.0]}, "records": 3,
                "data_sha256": "a" * 64, "files": {"data.parquet": "a" * 64},
                "gate": {"reasons": [], "passed": True, "later": None}, "search_stopped": None}
    manifest = parse_manifest(document)
    assert manifest.document() == document and list(manifest.document()) == list(document)
    assert list(manifest.document()["gate"]) == ["reasons", "passed", "later"]
    assert manifest.model_extra["newer"] == {"x": [1, 2.0]} and manifest.search_stopped is None
    assert "risk" not in manifest.document()   # absent stays absent, a written null stays written


def test_a_bad_manifest_is_refused_naming_the_file_and_the_field(tmp_path):
    out = tmp_path / "out"
    (tmp_path / "src").mkdir()
    assert main(["deid", _small(tmp_path / "src"), "--out", str(out), "--quiet", "--site", str(tmp_path)]) == 0
    path = out / "manifest.json"
    document = json.loads(path.read_text())
    document["risk"]["populations"][1]["size"] = "many"
    path.write_text(json.dumps(document, indent=2))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(info.value).startswith(f"{path}: field 'risk.populations.1.size': ")
    assert '"many"' in str(info.value)
    with pytest.raises(BundleError, match=r"manifest\.json: field 'risk\.populations\.1\.size'"):
        verify_output(out)
    del document["records"]
    document["gate"]["passed"] = "true"   # never coerced: a string is not a verdict
    path.write_text(json.dumps(document))
    message = str(pytest.raises(ManifestError, load_manifest, path).value)
    assert "field 'records': field required" in message and "gate.passed" in message
    path.write_text("[]")
    with pytest.raises(ManifestError, match="not a JSON object"):
        load_manifest(path)
