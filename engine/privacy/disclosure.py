"""Bounds on how much a class may shift a sensitive value's frequency against the table's, as ARX checks them.

* delta-disclosure privacy (Brickell and Shmatikov 2008): for every value a class holds, |log2(p/q)| < delta,
  p the value's share in the class, q its share in the table. Only values present in the class are checked (ARX);
  so merging a class with one that lacks a value can create a violation, and the model is monotone neither with nor
  without suppression (as ARX declares it).
* beta-likeness (Cao and Karras 2012): for every value a class holds, (p - q) / q <= beta (basic), or
  <= min(beta, -ln q) (enhanced). Only increases are bounded, so a merge of passing classes passes: monotone
  without suppression, not with it.

q is over every input record, as for t-closeness (engine.sensitive).
"""
from __future__ import annotations

import math

import numpy as np

from .base import ClassModel
from .registry import register

LOG2 = math.log(2.0)


def _shares(classes, attribute: str) -> tuple:
    distribution = classes.distribution(attribute)
    q = classes.sensitive_attribute(attribute).distribution[distribution.values]
    p = distribution.counts / classes.sizes[distribution.classes].astype(np.float64)
    return distribution, p, q


class DeltaDisclosureModel(ClassModel):
    name = "delta_disclosure"
    monotone_with_suppression = False
    monotone_without_suppression = False

    def __init__(self, attribute: str, delta: float) -> None:
        if delta <= 0:
            raise ValueError("delta must be positive")
        self.attribute = attribute
        self.delta = float(delta)

    def disclosure(self, classes) -> np.ndarray:
        """Per class, the largest |log2(p/q)| over its values."""
        distribution, p, q = _shares(classes, self.attribute)
        value = np.abs(np.log(p / q) / LOG2)
        out = np.zeros(classes.class_count)
        np.maximum.at(out, distribution.classes, value)
        return out

    def violating(self, classes) -> np.ndarray:
        return self.disclosure(classes) >= self.delta

    def describe(self) -> dict:
        return {"model": self.name, "attribute": self.attribute, "delta": self.delta}


class BetaLikenessModel(ClassModel):
    name = "beta_likeness"
    monotone_with_suppression = False
    monotone_without_suppression = True

    def __init__(self, attribute: str, beta: float, variant: str = "enhanced") -> None:
        if beta <= 0:
            raise ValueError("beta must be positive")
        if variant not in ("basic", "enhanced"):
            raise ValueError(f"unknown beta-likeness variant {variant!r}")
        self.attribute = attribute
        self.beta = float(beta)
        self.variant = variant

    def violating(self, classes) -> np.ndarray:
        distribution, p, q = _shares(classes, self.attribute)
        bound = self.beta if self.variant == "basic" else np.minimum(self.beta, -np.log(q))
        failed = (p - q) / q > bound
        return np.bincount(distribution.classes, weights=failed, minlength=classes.class_count) > 0

    def describe(self) -> dict:
        return {"model": self.name, "attribute": self.attribute, "beta": self.beta, "variant": self.variant}


@register("delta_disclosure")
def _delta_from_spec(spec, source: str | None, index: int, context: dict | None = None) -> DeltaDisclosureModel:
    return DeltaDisclosureModel(spec.attribute, spec.delta)


@register("beta_likeness")
def _beta_from_spec(spec, source: str | None, index: int, context: dict | None = None) -> BetaLikenessModel:
    return BetaLikenessModel(spec.attribute, spec.beta, spec.variant)
