"""The partitioned run: P4 (engine.parallel) on a Dask cluster, or in this process with `scheduler: none`, its
release measured over the whole table and gated."""
from __future__ import annotations

import time

import numpy as np

from ..pipeline.assess import described_models, gate_required_models, quality_under_all_models
from ..classes import Evaluation
from ..distributions import view_from_records
from ..gate import gate_result
from ..grouping import group
from ..local import quality_at_record_levels, released_classes
from ..manifest import LocalRecoding
from ..parallel import P4NoSolution, run_p4
from ..parallel.cluster import executor_for
from ..parallel.p4 import describe_run
from ..policy import ParallelSpec
from ..pipeline.prepare import Prepared
from ..pipeline.result import DeidResult, NoSolutionError


def partitioned_run(run: Prepared, parallel: ParallelSpec) -> DeidResult:
    """P4 with `parallel`'s partitions and scheduler. Its release is measured over the whole table: classes are the
    released values with the suppression each record got (a class can be kept in one partition and suppressed in
    another), so every quality model and the gate see exactly what is released."""
    policy, loaded, table = run.policy, run.loaded, run.table
    try:
        with executor_for(parallel.scheduler, progress=run.progress) as (executor, where):
            p4 = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, parallel.partitions, executor,
                        parallel.partitioning, parallel.harmonization, run.limit / 2, parallel.seed,
                        parallel.statistics, parallel.transformation)
    except P4NoSolution as exc:
        raise NoSolutionError(f"{policy.source or policy.dataset}: P4 with {parallel.partitions} partitions: {exc}")
    if p4.record_levels is None:
        codes = np.stack([a.to_level[level][a.records] for a, level in zip(table.attributes, p4.levels)]
                         + [p4.record_suppressed.astype(np.int64)])
        cards = [a.cardinality(level) for a, level in zip(table.attributes, p4.levels)] + [2]
        class_codes, sizes, record_class = group(codes, np.ones(table.n, dtype=np.int64), cards)
        suppressed = class_codes[-1].astype(bool)
        best = Evaluation(tuple(p4.levels), class_codes[:-1], sizes, suppressed, int(sizes[suppressed].sum()), True)
        quality, per_attribute = quality_under_all_models(table, best, policy.quality.aggregation,
                                                          policy.quality.gs_factor)
    else:   # local transformation: classes are the released values (a class can span levels and partitions)
        class_codes, sizes, suppressed, record_class = released_classes(p4.released, table.names,
                                                                        p4.record_suppressed)
        best = Evaluation(tuple(p4.levels), class_codes, sizes, suppressed, int(sizes[suppressed].sum()), True)
        quality, per_attribute = quality_at_record_levels(policy, table, p4.record_levels, p4.record_suppressed, best,
                                                          p4.suppression_levels)
    best.loss = 1.0 - quality[policy.quality.model]
    required = None
    if policy.gate is not None and policy.gate.require:
        # A class of the release can be kept in one partition and suppressed in another: the view is by record.
        view = view_from_records(best.codes, sizes, record_class, table.sensitive)
        required = (gate_required_models(policy, table), view, ~suppressed)
    risk, gate = gate_result(run.effective_gate, sizes[~suppressed], p4.merged.details, required=required)
    search, record = describe_run(p4, best, table, parallel, where, p4.quality, bool(run.configuration.risk_models))
    local = None
    if p4.record_levels is not None:
        # the manifest's transformation is then the coarsest level any released record has
        local = LocalRecoding(recoding="local", iterations=p4.iterations, fell_back=None)
    return DeidResult(policy, table, search, best, p4.released, p4.record_suppressed, quality, per_attribute,
                      time.perf_counter() - run.started, loaded.frame, risk, gate, described_models(run.configuration),
                      parallel=record, local=local)


__all__ = ["partitioned_run"]
