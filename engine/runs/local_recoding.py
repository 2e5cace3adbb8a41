"""The local run: ARX's iterative local recoding (engine.local), its parts combined, re-checked and gated."""
from __future__ import annotations

import time

from ..pipeline.assess import described_models
from ..classes import Evaluation
from ..gate import gate_result
from ..local import local_recoding
from ..manifest import LocalRecoding
from ..pipeline.prepare import Prepared
from ..pipeline.result import DeidResult, no_solution


def local_run(run: Prepared) -> DeidResult:
    """Local recoding: the iterations' parts combined, re-checked and measured over the whole table; `best` is the
    first (global) part's evaluation, the manifest's `local` block lists every part."""
    policy, loaded, table = run.policy, run.loaded, run.table
    bounds = {name: (policy.attributes[name].min_level, policy.attributes[name].max_level)
              for name in policy.quasi_identifiers}
    local = local_recoding(policy, loaded.frame, loaded.hierarchies, bounds, table, run.configuration, run.search,
                           run.limit, policy.search.local_iterations)
    if local is None:
        raise no_solution(policy, "local recoding, first iteration")
    first = local.parts[0]
    combined = local.combined
    best = Evaluation(first.best.levels, combined.codes, combined.sizes, combined.suppressed,
                      int(combined.sizes[combined.suppressed].sum()), True, first.best.loss, dict(combined.details))
    risk, gate = gate_result(run.effective_gate, combined.sizes[~combined.suppressed], combined.details)
    return DeidResult(policy, table, first.search, best, local.released, local.record_suppressed, local.quality,
                      local.attribute_quality, time.perf_counter() - run.started, loaded.frame, risk, gate,
                      described_models(run.configuration), local=LocalRecoding.model_validate(local.manifest()))


__all__ = ["local_run"]
