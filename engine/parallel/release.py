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
import time
from pathlib import Path

from ..atomic import atomic_folder
from ..errors import InputError
from ..manifest import Manifest
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
    from ..table import input_file

    if input_file(policy)[1] not in ("csv", "parquet"):   # the workers read CSV or Parquet chunks (.dataset)
        raise InputError(policy.source, "input.format", "the workers of a dataset release read CSV or Parquet files "
                         "only; convert the table, or release without --dataset")


def deidentify_dataset(policy: DatasetPolicy, out: str | Path, partitions: int | None = None,
                       scheduler: str | None = None, progress: bool | None = False, site=None,
                       time_limit: float | None = None) -> Manifest:
    """Run P4 with the workers reading the policy's input and writing the release into `out`; return the manifest.
    Raises InputError (bad policy or output) or NoSolutionError. A refused gate still writes the folder (as `safeshare
    deid` does), with `gate.passed` false, which sealing refuses."""
    from ..atomic import check_output_folder
    from ..bundle import dataset_digest
    from ..pipeline.assess import described_models
    from ..pipeline.prepare import check_populations, parallel_spec, privacy_configuration
    from ..pipeline.result import DeidResult, NoSolutionError
    from ..pipeline.write import build_manifest
    from ..gate import combine, gate_result
    from ..report import render_dataset_report
    from ..report_data import dataset_report_data
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
            risk, gate = gate_result(effective_gate, release.sizes[kept], p4.merged.details)
            table = p4.table
            release.loss = 1.0 - p4.quality[policy.quality.model]
            configuration = privacy_configuration(policy, p4.records)
            search, record = describe_run(p4, release, table, parallel, where, p4.quality_row_weighted,
                                          bool(configuration.risk_models), read_and_written_by="workers")
            result = DeidResult(policy, table, search, release, None, None, p4.quality, p4.attribute_quality,
                                time.perf_counter() - started, None, risk, gate, described_models(configuration),
                                parallel=record)
            parts = {f"data/{name}": digest for name, digest in p4.sha256.items()}
            manifest = build_manifest(result, dataset_digest(parts), dict(parts), layout="dataset")
            html = render_dataset_report(manifest, dataset_report_data(p4, manifest.risk))
            (staging / "report.html").write_text(html, encoding="utf-8")
            manifest = manifest.with_file("report.html", hashlib.sha256(html.encode("utf-8")).hexdigest())
            (staging / "manifest.json").write_text(manifest.to_json(), encoding="utf-8")
    except P4NoSolution as exc:
        raise NoSolutionError(f"{policy.source or policy.dataset}: P4 with {parallel.partitions} partitions: {exc}")
    return manifest


__all__ = ["DATASET_RELEASE_FILES", "check_dataset_policy", "deidentify_dataset"]
