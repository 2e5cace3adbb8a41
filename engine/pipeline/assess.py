"""The assess step: what a released transformation is worth and what the gate must re-check.

Quality under every quality model (the manifest's `quality` and `attribute_quality`), the privacy models as built
(derived parameters included), and the models of the gate's `require:` list with the released classes as those
models see them. Every run (global, local, partitioned) measures its release through these.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..classes import ClassCache, Evaluation
from ..encoding import EncodedTable
from ..policy import DatasetPolicy
from ..privacy import PrivacyConfiguration, build_model
from ..quality import MODEL_NAMES, make_quality_model


def quality_under_all_models(table: EncodedTable, best: Evaluation, aggregation: str, gs_factor: float
                             ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each quality model's value of `best` (1 = the original data) and, where a model has them, per attribute."""
    quality: dict[str, float] = {}
    per_attribute: dict[str, dict[str, float]] = {}
    for name in MODEL_NAMES:
        model = make_quality_model(name, table, aggregation=aggregation, gs_factor=gs_factor)
        quality[name] = model.quality(best.levels, best.codes, best.sizes, best.suppressed)
        losses = model.attribute_losses(best.levels, best.codes, best.sizes, best.suppressed)
        if losses is not None:
            per_attribute[name] = {k: float(min(1.0, max(0.0, 1.0 - v))) for k, v in losses.items()}
    return quality, per_attribute


def described_models(configuration: PrivacyConfiguration) -> list[dict[str, Any]]:
    """The privacy models as built, for the manifest: derived parameters (k-map's k') included."""
    return [model.describe() for model in configuration.models]


def required_models(policy: DatasetPolicy, table: EncodedTable, best: Evaluation) -> tuple | None:
    """(models, view, kept) for the gate's `require:` list: the models built like the search's, and the released
    transformation's classes as the models see them (engine.gate.check_required)."""
    if policy.gate is None or not policy.gate.require:
        return None
    view = ClassCache(table, budget_bytes=0).view(best.levels)
    if view.class_count != best.sizes.size or not np.array_equal(view.sizes, best.sizes):
        raise RuntimeError("internal error: the released classes differ from the search's")
    return gate_required_models(policy, table), view, ~best.suppressed


def gate_required_models(policy: DatasetPolicy, table: EncodedTable) -> list:
    """The models of the gate's `require:` list, built as the search builds the policy's own."""
    return [build_model(spec, policy.source, index, {"records": table.n})
            for index, spec in enumerate(policy.gate.require)]


__all__ = ["described_models", "gate_required_models", "quality_under_all_models", "required_models"]
