"""ADULT as the input-format tests use it: a slice of the demo table with short column names (SAS transport files
allow 8 characters, Stata no '-'), the policy of policies/examples/adult-k5.yaml over them, and helpers to run
`safeshare deid` and compare its release with the CSV input's."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from engine.policy import load_policy
from safeshare.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "policies" / "examples" / "adult-k5.yaml"
# ADULT's columns -> names every format can hold
SHORT = {"sex": "sex", "age": "age", "race": "race", "marital-status": "marital", "education": "educ",
         "native-country": "country", "workclass": "workcls", "occupation": "occup", "salary-class": "salary"}


def adult(records: int | None = 3000) -> pd.DataFrame:
    """The first `records` records of ADULT (wherever the example policy reads it), as text, short column names."""
    policy = load_policy(EXAMPLE)
    frame = pd.read_csv(policy.resolve(policy.input.path), sep=";", dtype=str, keep_default_na=False)
    frame = frame.rename(columns=SHORT)
    return (frame if records is None else frame.head(records)).reset_index(drop=True)


def policy_document(input_spec: dict | None, dataset: str = "adult") -> dict:
    """adult-k5.yaml's policy over the short names, hierarchies by absolute path, with `input_spec` as its input."""
    policy = load_policy(EXAMPLE)
    attributes = {}
    for name, attribute in policy.attributes.items():
        attributes[SHORT[name]] = {"type": attribute.type,
                                   "hierarchy": {"file": str(policy.resolve(attribute.hierarchy.file))}}
    document = {"dataset": dataset, "attributes": attributes, "privacy": [{"model": "k_anonymity", "k": 5}],
                "suppression_limit": 1.0, "quality": {"model": "loss"}}
    if input_spec is not None:
        document["input"] = input_spec
    return document


def write_policy(folder: Path, input_spec: dict, name: str = "policy.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(policy_document(input_spec), sort_keys=False))
    return path


def deid(policy: Path, out: Path, capsys) -> tuple[int, str, dict | None]:
    """`safeshare deid POLICY --out OUT`: (exit code, stderr, the manifest if one was written)."""
    code = main(["deid", str(policy), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    manifest = out / "manifest.json"
    return code, err, json.loads(manifest.read_text()) if manifest.is_file() else None


def csv_baseline(folder: Path, frame: pd.DataFrame, capsys) -> dict:
    """The manifest of `safeshare deid` on `frame` written as the CSV the demo is."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "adult.csv", sep=";", index=False)
    code, err, manifest = deid(write_policy(folder, {"path": "adult.csv"}), folder / "out", capsys)
    assert code == 0, err
    return manifest
