"""The global run: one transformation for every record, found by the search, applied, measured and gated."""
from __future__ import annotations

import time

from ..pipeline.apply import apply_transformation
from ..pipeline.assess import described_models, quality_under_all_models, required_models
from ..gate import gate_result
from ..pipeline.prepare import Prepared
from ..pipeline.result import DeidResult, no_solution


def global_run(run: Prepared) -> DeidResult:
    """Search the whole table, apply the best transformation, measure it under every quality model and gate it.
    Raises NoSolutionError when no transformation satisfies the models."""
    policy, table = run.policy, run.table
    result = run.search(table, run.quality_model, run.limit)
    if result.best is None:
        stopped = f"; the search stopped early: {result.stopped}" if result.stopped else ""
        raise no_solution(policy, f"{result.checked} transformations checked{stopped}")
    best = result.best
    released, record_suppressed = apply_transformation(policy, run.loaded.frame, table, best)
    quality, per_attribute = quality_under_all_models(table, best, policy.quality.aggregation,
                                                      policy.quality.gs_factor)
    risk, gate = gate_result(run.effective_gate, best.sizes[~best.suppressed], best.details,
                             required=required_models(policy, table, best))
    return DeidResult(policy, table, result, best, released, record_suppressed, quality, per_attribute,
                      time.perf_counter() - run.started, run.loaded.frame, risk, gate,
                      described_models(run.configuration), research_subset=run.subset, source=run.source)


__all__ = ["global_run"]
