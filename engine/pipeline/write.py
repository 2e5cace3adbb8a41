"""The write step: a run's result as a release folder (data.parquet, data.csv, report.html, manifest.json).

`write_release` writes the whole bundle into a hidden sibling folder and renames it into place
(engine.atomic.atomic_folder), so an output folder always holds exactly the files its manifest describes, and an
interrupted re-run leaves the previous output as it was. The manifest is strict JSON: a non-finite number in it is an
error, never `Infinity` or `NaN`. `build_manifest` is shared with the partitioned dataset release
(engine.parallel.release), whose workers write the data themselves.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pandas as pd

from .. import __version__
from ..atomic import atomic_folder, check_output_folder
from ..manifest import Manifest, finite_json
from .result import DeidResult

RELEASE_FILES = ("data.parquet", "data.csv", "report.html", "manifest.json")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, engine="pyarrow", compression="zstd")
    return buffer.getvalue()


def build_manifest(result: DeidResult, data_sha256: str, files: dict[str, str], layout: str | None = None
                   ) -> Manifest:
    """The release's manifest, complete but for the report's own hash (`Manifest.with_file` adds it once the report
    is rendered from this). Fields in the order releases have always had them; the blocks only some runs have
    follow `seconds`; `layout` is given only for a partitioned dataset release."""
    policy = result.policy
    best = result.best
    class_sizes = best.sizes[~best.suppressed]
    fields: dict[str, Any] = {
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
        "search_stopped": result.search.stopped,
        "search_limits": dict(result.search.limits or {}),
        "algorithm_choice": result.search.choice,
        "quality_over_time": [list(point) for point in result.search.quality_over_time],
        "records": int(result.table.n),
        "suppressed_records": int(best.suppressed_records),
        "risk_model_evaluations": int(result.search.risk_evaluations),
        "equivalence_classes": int(class_sizes.size),
        "smallest_class": int(class_sizes.min()) if class_sizes.size else 0,
        "checked_transformations": int(result.search.checked),
        "lattice_size": int(result.search.lattice_size),
        "risk": result.risk.document(),
        "gate": result.gate.document(),
        "data_sha256": data_sha256,
        "files": files,
        "seconds": round(result.seconds, 6),
    }
    if result.parallel is not None:   # P4: partitions, harmonized levels per partition, seconds per step
        fields["parallel"] = result.parallel.document()
    fields["privacy_models"] = result.privacy_models
    if result.research_subset is not None:   # the input is the population; the subset is released
        fields["research_subset"] = result.research_subset.document()
    # local recoding: the transformation above is the first part's; every part in local_recoding
    fields["recoding"] = "global" if result.local is None else "local"
    if result.local is not None:
        fields["local_recoding"] = result.local.document()
    if result.source:   # what was read: kind, file or table or query hash, records (never a URL or password)
        fields["input"] = dict(result.source)
    if layout is not None:
        fields["layout"] = layout
    return Manifest.model_validate(finite_json(fields))


def check_output(out_dir: str | Path) -> Path:
    """Refuse an output folder `write_release` could not or must not replace (InputError naming --out)."""
    return check_output_folder(out_dir, RELEASE_FILES)


def write_release(result: DeidResult, out_dir: str | Path) -> Manifest:
    """Write data.csv, data.parquet, report.html and manifest.json as one folder: staged in a hidden sibling and
    renamed into place as a whole (replacing a previous output of the same run in one step). The report is
    rendered once, from the finished manifest and what the run computed for it (engine.report_data)."""
    from .. import report   # jinja2 loads only when a report is written
    from ..report_data import report_data

    data = parquet_bytes(result.released)
    csv_text = result.released.to_csv(index=False, sep=";", lineterminator="\n")
    files = {"data.parquet": _sha256(data), "data.csv": _sha256(csv_text.encode("utf-8"))}
    manifest = build_manifest(result, files["data.parquet"], files)
    with atomic_folder(out_dir, RELEASE_FILES) as staging:
        (staging / "data.parquet").write_bytes(data)
        (staging / "data.csv").write_text(csv_text, encoding="utf-8")
        html = report.render_report(manifest, report_data(result))
        (staging / "report.html").write_text(html, encoding="utf-8")
        manifest = manifest.with_file("report.html", _sha256(html.encode("utf-8")))
        (staging / "manifest.json").write_text(manifest.to_json(), encoding="utf-8")
    return manifest


__all__ = ["RELEASE_FILES", "build_manifest", "check_output", "parquet_bytes", "write_release"]
