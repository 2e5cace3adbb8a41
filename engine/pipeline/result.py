"""What one de-identification run found and released (`DeidResult`), and the refusal when it found nothing.

The lowest module of the pipeline's own types: the runs (engine.runs, engine.parallel.release) build a `DeidResult`,
the release writer (engine.pipeline.write) and the report (engine.report_data, engine.disclosure_report) read one, and
none of them needs the orchestrator (engine.deid) for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..classes import Evaluation
from ..encoding import EncodedTable
from ..manifest import Gate, LocalRecoding, ParallelRun, ResearchSubset, Risk
from ..policy import DatasetPolicy
from ..search import SearchResult


class NoSolutionError(RuntimeError):
    """No transformation satisfies the privacy models within the suppression limit (a refused result, exit 1)."""


@dataclass
class DeidResult:
    """What a run found and released, with the manifest's blocks already typed: the release gate's verdict on the
    released records (`risk`, `gate`), the models as built, and what only some runs have (P4, local recoding, a
    research subset; None otherwise)."""

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
    risk: Risk
    gate: Gate
    privacy_models: list[dict[str, Any]]
    parallel: ParallelRun | None = None
    local: LocalRecoding | None = None
    research_subset: ResearchSubset | None = None
    # what was read (engine.sources): the manifest's `input` block; None where the workers read it (--dataset)
    source: dict[str, Any] | None = None

    @property
    def transformation(self) -> dict[str, int]:
        return {a.name: int(level) for a, level in zip(self.table.attributes, self.best.levels)}


def no_solution(policy: DatasetPolicy, detail: str) -> NoSolutionError:
    """The refusal every run raises when nothing satisfies the models: names the policy, the suppression limit and
    `detail` (what was tried)."""
    return NoSolutionError(
        f"{policy.source or policy.dataset}: no transformation satisfies the privacy models with at most "
        f"{policy.suppression_limit:g} of the records suppressed ({detail})")


__all__ = ["DeidResult", "NoSolutionError", "no_solution"]
