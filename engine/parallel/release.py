"""`safeshare deid --dataset`: a P4 release whose data never passes through the driver (engine.parallel.dataset).

The output folder is a `safeshare deid` output like any other, so the bundle, the app and the gate take it as they
take a single-file release; only the data is laid out differently:

    OUT/manifest.json                 format safeshare-release/1 with "layout": "dataset"; `files` lists every part
                                      and report.html with its sha256; `data_sha256` is the hash of the parts' listing
                                      (engine.bundle.dataset_digest), so a seal covers every part and its name
    OUT/data/part-NNNNN.parquet       one per partition, written by the worker that anonymized it
    OUT/report.html                   from the summaries the driver holds (classes, quality, gate, P4's steps)

There is no data.csv: a CSV of tens of millions of rows is not what anyone opens, and the parts are the data. The
folder appears whole or not at all. The release gate is evaluated on the merged release's class sizes, exactly as for
a single-file release; models the gate must re-check on the released records (`gate.require`) and research subsets
need the records on one machine and are refused here.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from ..atomic import atomic_folder
from ..errors import InputError
from ..policy import DatasetPolicy

DATASET_RELEASE_FILES = ("data", "report.html", "manifest.json")


def check_dataset_policy(policy: DatasetPolicy) -> None:
    """Refuse what a release written by the workers cannot do (InputError naming the field)."""
    from ..subset import subset_specs

    if policy.gate is not None and policy.gate.require:
        raise InputError(policy.source, "gate.require", "a partitioned dataset release cannot re-check models on "
                         "its records on one machine; drop gate.require or release without --dataset")
    if subset_specs(policy):
        raise InputError(policy.source, "privacy", "a research subset needs the whole table on one machine; "
                         "release without --dataset")


def deidentify_dataset(policy: DatasetPolicy, out: str | Path, partitions: int | None = None,
                       scheduler: str | None = None, progress: bool | None = False, site=None,
                       time_limit: float | None = None) -> dict:
    """Run P4 with the workers reading the policy's input and writing the release into `out`; return the manifest.
    Raises InputError (bad policy or output) or NoSolutionError. A refused gate still writes the folder (as `safeshare
    deid` does), with `gate.passed` false, which sealing refuses."""
    from ..atomic import check_output_folder
    from ..bundle import dataset_digest
    from ..deid import (DeidResult, NoSolutionError, build_manifest, check_populations, finite_json, parallel_spec,
                        privacy_configuration)
    from ..gate import combine, evaluate_gate
    from ..sitegate import SiteGateSource, load_site_gate, site_folder
    from .cluster import executor_for
    from .p4 import P4NoSolution, describe_run, run_p4_dataset

    started = time.perf_counter()
    check_output_folder(out, DATASET_RELEASE_FILES)   # before the run: a run that cannot write should not start
    check_dataset_policy(policy)
    parallel = parallel_spec(policy, partitions, scheduler)
    if parallel is None:
        raise InputError(policy.source, "search.parallel", "a dataset release is a P4 run: give --partitions or "
                         "search.parallel")
    site_gate = site if isinstance(site, SiteGateSource) else load_site_gate(site_folder(site))
    effective_gate = combine(policy.gate, site_gate, policy.source)
    limit = time_limit if time_limit is not None else policy.search.time_limit_seconds
    out = Path(out)
    try:
        with executor_for(parallel.scheduler, progress=progress) as (executor, where), \
                atomic_folder(out, DATASET_RELEASE_FILES) as staging:
            p4 = run_p4_dataset(policy, parallel.partitions, executor, str(staging / "data"),
                                parallel.partitioning, parallel.harmonization, limit / 2, parallel.seed,
                                statistics=parallel.statistics)
            check_populations(policy, effective_gate, p4.records)
            release = p4.release
            kept = ~release.suppressed
            risk, gate = evaluate_gate(effective_gate, release.sizes[kept])
            table = p4.table
            release.loss = 1.0 - p4.quality[policy.quality.model]
            configuration = privacy_configuration(policy, p4.records)
            search, record = describe_run(p4, release, table, parallel, where, p4.quality_row_weighted,
                                          bool(configuration.risk_models), risk, read_and_written_by="workers")
            result = DeidResult(policy, table, search, release, None, None, p4.quality, p4.attribute_quality,
                                time.perf_counter() - started, None,
                                extra={"risk": risk, "gate": gate, "parallel": record,
                                       "privacy_models": [model.describe() for model in configuration.models]})
            parts = {f"data/{name}": digest for name, digest in p4.sha256.items()}
            manifest = finite_json(build_manifest(result, dataset_digest(parts), dict(parts)))
            manifest["layout"] = "dataset"
            html = render_dataset_report(manifest, release.sizes, release.suppressed)
            (staging / "report.html").write_text(html, encoding="utf-8")
            manifest["files"]["report.html"] = hashlib.sha256(html.encode("utf-8")).hexdigest()
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n",
                                                   encoding="utf-8")
    except P4NoSolution as exc:
        raise NoSolutionError(f"{policy.source or policy.dataset}: P4 with {parallel.partitions} partitions: {exc}")
    return manifest


def render_dataset_report(manifest: dict, sizes: np.ndarray, suppressed: np.ndarray) -> str:
    """The release report of a partitioned release, from what the driver holds: the gate, the summary, the
    transformation, every quality model, the class sizes and P4's steps (no per-value distributions: the records
    stayed on the workers)."""
    from ..report import (_table, bar_chart_svg, class_size_distribution, gate_section, parallel_section,
                          report_head, risk_interval_label)

    parallel = manifest["parallel"]
    summary = [
        ["records", manifest["records"]],
        ["suppressed records", manifest["suppressed_records"]],
        ["equivalence classes released", manifest["equivalence_classes"]],
        ["smallest released class", manifest["smallest_class"]],
        ["privacy models", "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in manifest["privacy"])],
        ["suppression limit", manifest["suppression_limit"]],
        ["search", f'P4, {parallel["partitions"]} partitions ({parallel["scheduler"]}), '
                   f'{parallel["partitioning"]} partitioning, {parallel["harmonization"]} harmonization'],
        ["data", f'{len([f for f in manifest["files"] if f.startswith("data/")])} Parquet parts under data/'],
        ["data sha256 (of the parts' listing)", manifest["data_sha256"]],
        ["seconds", f'{manifest["seconds"]:.3f}'],
    ]
    transformation = [[name, level] for name, level in manifest["transformation"].items()]
    quality = [[name, f"{value:.6f}", "yes" if name == manifest["optimized_for"] else ""]
               for name, value in manifest["quality"].items()]
    labels, values = class_size_distribution(sizes, suppressed)
    chart = bar_chart_svg(labels, values, "Records by equivalence-class size", "class size")
    kept = np.asarray(sizes)[~np.asarray(suppressed)]
    edges = [(0.5, 1.0), (0.2, 0.5), (0.1, 0.2), (0.0, 0.1)]
    risk_rows = [[risk_interval_label(low, high), int(kept[(1.0 / kept > low) & (1.0 / kept <= high)].sum())]
                 for low, high in edges] if kept.size else []
    return f"""{report_head(manifest, "partitioned dataset")}
{gate_section(manifest.get("gate"))}
<h2>Summary</h2>{_table(None, summary)}
<h2>Transformation (every partition)</h2>{_table(["attribute", "level"], transformation)}
<h2>Quality over the whole release (1 = original data)</h2>{_table(["model", "quality", "optimized"], quality)}
<h2>Equivalence classes</h2>{chart}
<h2>Prosecutor risk of released records</h2>{_table(["risk (1 / class size)", "records"], risk_rows)}
{parallel_section(manifest)}
</body></html>
"""


__all__ = ["DATASET_RELEASE_FILES", "check_dataset_policy", "deidentify_dataset", "render_dataset_report"]
