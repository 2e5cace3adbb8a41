"""The de-identification pipeline behind `safeshare deid`: policy -> encode -> search -> apply -> release files.

`deidentify` is a plain function usable from Python; `write_release` writes the bundle atomically, manifest last, so
that a folder with a manifest always holds the files the manifest describes.
"""
from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import __version__
from .atomic import write_bytes, write_text, write_with
from .classes import Evaluation, combined_key
from .encoding import EncodedTable, encode_table
from .errors import InputError
from .lattice import Lattice
from .policy import DatasetPolicy, load_policy
from .privacy import PrivacyConfiguration, build_models
from .quality import MODEL_NAMES, make_quality_model
from .search import SearchResult, resolve_algorithm, search
from .table import load_input

SUPPRESSED = "*"


class NoSolutionError(RuntimeError):
    """No transformation satisfies the privacy models within the suppression limit (a refused result, exit 1)."""


@dataclass
class DeidResult:
    policy: DatasetPolicy
    table: EncodedTable
    search: SearchResult
    best: Evaluation
    released: pd.DataFrame
    record_suppressed: np.ndarray
    quality: dict[str, float]
    attribute_quality: dict[str, dict[str, float]]
    seconds: float
    input_frame: pd.DataFrame
    extra: dict = field(default_factory=dict)

    @property
    def transformation(self) -> dict[str, int]:
        return {a.name: int(level) for a, level in zip(self.table.attributes, self.best.levels)}


def privacy_configuration(policy: DatasetPolicy) -> PrivacyConfiguration:
    """The policy's privacy models (built through engine.privacy's registry) with its suppression limit."""
    return PrivacyConfiguration(build_models(policy), policy.suppression_limit)


def quality_under_all_models(table: EncodedTable, best: Evaluation, aggregation: str, gs_factor: float
                             ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    quality: dict[str, float] = {}
    per_attribute: dict[str, dict[str, float]] = {}
    for name in MODEL_NAMES:
        model = make_quality_model(name, table, aggregation=aggregation, gs_factor=gs_factor)
        quality[name] = model.quality(best.levels, best.codes, best.sizes, best.suppressed)
        losses = model.attribute_losses(best.levels, best.codes, best.sizes, best.suppressed)
        if losses is not None:
            per_attribute[name] = {k: float(min(1.0, max(0.0, 1.0 - v))) for k, v in losses.items()}
    return quality, per_attribute


def apply_transformation(policy: DatasetPolicy, frame: pd.DataFrame, table: EncodedTable, best: Evaluation
                         ) -> tuple[pd.DataFrame, np.ndarray]:
    """Generalize every record, blank out the quasi-identifiers of suppressed records, drop identifying columns."""
    codes = np.stack([a.to_level[level][a.records] for a, level in zip(table.attributes, best.levels)])
    cards = [a.cardinality(level) for a, level in zip(table.attributes, best.levels)]
    # Find each record's class among the search's classes, to reuse its suppression decision exactly.
    keys = combined_key(np.concatenate([best.codes, codes], axis=1), cards)
    class_keys, record_keys = keys[: best.codes.shape[1]], keys[best.codes.shape[1]:]
    order = np.argsort(class_keys, kind="stable")
    record_class = order[np.searchsorted(class_keys, record_keys, sorter=order)]
    if not np.array_equal(class_keys[record_class], record_keys):
        raise RuntimeError("internal error: a record's class is missing from the search result")
    record_suppressed = best.suppressed[record_class]
    out = pd.DataFrame(index=frame.index)
    for name, attribute in policy.attributes.items():
        if attribute.type == "identifying":
            continue
        if attribute.type == "quasi_identifying":
            encoded = next(a for a in table.attributes if a.name == name)
            level = best.levels[table.names.index(name)]
            values = encoded.labels[level][encoded.to_level[level][encoded.records]].astype(object)
            values[record_suppressed] = SUPPRESSED
            out[name] = values
        else:
            out[name] = frame[name].to_numpy()
    return out, record_suppressed


def deidentify(policy: DatasetPolicy | str | Path, progress: bool | None = False,
               time_limit: float | None = None) -> DeidResult:
    """Find the optimal transformation under the policy and apply it. Raises InputError or NoSolutionError."""
    started = time.perf_counter()
    if not isinstance(policy, DatasetPolicy):
        policy = load_policy(policy)
    loaded = load_input(policy)
    bounds = {name: (policy.attributes[name].min_level, policy.attributes[name].max_level)
              for name in policy.quasi_identifiers}
    table = encode_table(loaded.frame, loaded.hierarchies, policy.source, bounds)
    configuration = privacy_configuration(policy)
    quality_model = make_quality_model(policy.quality.model, table, policy.quality.aggregation,
                                       policy.quality.gs_factor)
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    limit = time_limit if time_limit is not None else policy.search.time_limit_seconds
    try:
        algorithm = resolve_algorithm(configuration, quality_model, policy.search.algorithm, lattice.size)
    except ValueError as exc:   # an algorithm that cannot be exact under this configuration
        raise InputError(policy.source, "search.algorithm", str(exc)) from None
    result = search(table, configuration, quality_model, algorithm=algorithm, lattice=lattice, time_limit=limit,
                    progress=progress)
    if result.best is None:
        raise NoSolutionError(
            f"{policy.source or policy.dataset}: no transformation satisfies the privacy models with at most "
            f"{policy.suppression_limit:g} of the records suppressed ({result.checked} transformations checked)")
    best = result.best
    released, record_suppressed = apply_transformation(policy, loaded.frame, table, best)
    quality, per_attribute = quality_under_all_models(table, best, policy.quality.aggregation,
                                                      policy.quality.gs_factor)
    from .gate import evaluate_gate

    risk, gate = evaluate_gate(policy.gate, best.sizes[~best.suppressed])
    if "population_uniqueness" in best.details:
        risk["privacy_model_estimate"] = best.details["population_uniqueness"]
    return DeidResult(policy, table, result, best, released, record_suppressed, quality, per_attribute,
                      time.perf_counter() - started, loaded.frame, extra={"risk": risk, "gate": gate})


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, engine="pyarrow", compression="zstd")
    return buffer.getvalue()


def build_manifest(result: DeidResult, data_sha256: str, files: dict[str, str]) -> dict:
    policy = result.policy
    best = result.best
    class_sizes = best.sizes[~best.suppressed]
    manifest = {
        "format": "safeshare-release/1",
        "engine_version": __version__,
        "dataset": policy.dataset,
        "policy_sha256": policy.sha256,
        "privacy": [spec.model_dump() for spec in policy.privacy],
        "suppression_limit": policy.suppression_limit,
        "transformation": result.transformation,
        "optimized_for": policy.quality.model,
        "quality": result.quality,
        "attribute_quality": result.attribute_quality,
        "algorithm": result.search.algorithm,
        "optimal": result.search.optimal,
        "records": int(result.table.n),
        "suppressed_records": int(best.suppressed_records),
        "risk_model_evaluations": int(result.search.risk_evaluations),
        "equivalence_classes": int(class_sizes.size),
        "smallest_class": int(class_sizes.min()) if class_sizes.size else 0,
        "checked_transformations": int(result.search.checked),
        "lattice_size": int(result.search.lattice_size),
        "risk": result.extra.get("risk"),
        "gate": result.extra.get("gate"),
        "data_sha256": data_sha256,
        "files": files,
        "seconds": round(result.seconds, 6),
    }
    return manifest


def write_release(result: DeidResult, out_dir: str | Path) -> dict:
    """Write data.csv, data.parquet, report.html and manifest.json into `out_dir` (each atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = parquet_bytes(result.released)
    csv_text = result.released.to_csv(index=False, sep=";", lineterminator="\n")
    write_bytes(out / "data.parquet", data)
    write_text(out / "data.csv", csv_text)
    files = {"data.parquet": _sha256(data), "data.csv": _sha256(csv_text.encode("utf-8"))}
    manifest = build_manifest(result, files["data.parquet"], files)
    from .report import render_report

    html = render_report(result, manifest)
    write_text(out / "report.html", html)
    manifest["files"]["report.html"] = _sha256(html.encode("utf-8"))
    write_text(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest


__all__ = ["DeidResult", "NoSolutionError", "apply_transformation", "deidentify", "write_release", "write_with"]
