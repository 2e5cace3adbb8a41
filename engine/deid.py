"""The de-identification pipeline behind `safeshare deid`: policy -> encode -> search -> apply -> release files.

The thin top: `deidentify` prepares the policy (engine.pipeline.prepare: the encode step, the models, the search)
and picks one run (engine.runs: global, local recoding, or P4 partitions), which composes the steps below it
(engine.pipeline.apply, engine.pipeline.assess) into a `DeidResult` (engine.pipeline.result); `write_release`
(engine.pipeline.write) writes it. Data flows one way: no module below imports this one. The names other packages
and tests import from here are re-exported.

The release gate is the policy's gate tightened to the site gate (engine.sitegate); the manifest records both. The
search runs under the policy's time limit and memory bound (`search:`), releasing the best solution found so far with
`optimal: false` when one is reached.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from .pipeline.apply import SUPPRESSED, apply_transformation
from .pipeline.assess import described_models, gate_required_models, quality_under_all_models, required_models
from .errors import InputError
from .policy import DatasetPolicy
from .pipeline.prepare import check_populations, encode_policy_table, parallel_spec, prepare, privacy_configuration
from .pipeline.result import DeidResult, NoSolutionError
from .pipeline.write import RELEASE_FILES, build_manifest, check_output, parquet_bytes, write_release
from .runs.global_recoding import global_run
from .runs.local_recoding import local_run
from .runs.partitioned import partitioned_run
from .sitegate import SiteGateSource


def deidentify(policy: DatasetPolicy | str | Path | dict, progress: bool | None = False,
               time_limit: float | None = None, site: SiteGateSource | str | os.PathLike | None = None,
               memory_mb: int | None = None, partitions: int | None = None, scheduler: str | None = None,
               data: pd.DataFrame | None = None) -> DeidResult:
    """Find the optimal transformation under the policy and apply it. Raises InputError or NoSolutionError.

    `policy` is a loaded policy, a policy file, or the policy as a dict (its relative paths then relative to the
    working folder). `data` is a pandas DataFrame de-identified in place of the policy's input (which it may then
    omit); the result's `released` is the released table as a DataFrame, as `write_release` writes it.

    `site` is the site gate (a loaded one, or a site folder); None looks for the site as `safeshare deid` does
    ($SAFESHARE_SITE, /var/lib/safeshare) and falls back to the built-in floor. `time_limit` and `memory_mb`
    override the policy's `search:` limits; `partitions` and `scheduler` its `search.parallel` (P4)."""
    run = prepare(policy, progress, time_limit, site, memory_mb, data)
    policy = run.policy
    parallel = parallel_spec(policy, partitions, scheduler)
    if parallel is not None:
        if run.table.population is not None:
            raise InputError(policy.source, "search.parallel",
                             "P4 runs without a research subset (as P4's own implementation)")
        if policy.search.recoding == "local" and parallel.transformation != "local":
            raise InputError(policy.source, "search.parallel.transformation",
                             "search.recoding is local: P4 recodes locally with transformation: local")
        return _with_source(partitioned_run(run, parallel), run.source)
    if policy.search.recoding == "local":
        return _with_source(local_run(run), run.source)
    return global_run(run)


def _with_source(result: DeidResult, source) -> DeidResult:
    result.source = source
    return result


__all__ = ["DeidResult", "NoSolutionError", "RELEASE_FILES", "SUPPRESSED", "apply_transformation",
           "build_manifest", "check_output", "check_populations", "deidentify", "described_models",
           "encode_policy_table", "gate_required_models", "parallel_spec", "parquet_bytes", "privacy_configuration",
           "quality_under_all_models", "required_models", "write_release"]
