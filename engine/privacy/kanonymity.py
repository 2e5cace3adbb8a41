"""k-anonymity (Sweeney 2002): every released class holds at least k records.

Monotone with and without suppression: merging classes of at least k records gives a class of at least k, and a
merge with a violating class can only shrink what must be suppressed (Kohlmayer et al. 2015, section 4.2).
"""
from __future__ import annotations

import numpy as np

from .base import ClassModel
from .registry import register


class KAnonymity(ClassModel):
    name = "k_anonymity"
    monotone_with_suppression = True
    monotone_without_suppression = True
    size_only = True   # violating() is `sizes < minimal_class_size`: the compiled check decides it (engine.kernels)

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = int(k)
        self.minimal_class_size = self.k

    def violating(self, classes) -> np.ndarray:
        return classes.sizes < self.k

    def describe(self) -> dict:
        return {"model": self.name, "k": self.k}


@register("k_anonymity")
def _from_spec(spec, source: str | None, index: int, context: dict | None = None) -> KAnonymity:
    return KAnonymity(spec.k)
