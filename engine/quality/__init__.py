"""Quality models: normalized information loss in [0, 1] and quality = 1 - loss."""
from __future__ import annotations

from ..encoding import EncodedTable
from .base import QualityModel
from .classbased import AECS, Discernibility, Precision
from .entropy import NonUniformEntropy
from .loss import Loss

MODEL_NAMES = ("loss", "non_uniform_entropy", "discernibility", "aecs", "precision")


def make_quality_model(name: str, table: EncodedTable, aggregation: str = "geometric_mean",
                       gs_factor: float = 0.5) -> QualityModel:
    if name == "loss":
        return Loss(table, aggregation=aggregation, gs_factor=gs_factor)
    classes = {"non_uniform_entropy": NonUniformEntropy, "discernibility": Discernibility, "aecs": AECS,
               "precision": Precision}
    if name not in classes:
        raise ValueError(f"unknown quality model {name!r}; known: {', '.join(MODEL_NAMES)}")
    return classes[name](table)


__all__ = ["AECS", "Discernibility", "Loss", "MODEL_NAMES", "NonUniformEntropy", "Precision", "QualityModel",
           "make_quality_model"]
