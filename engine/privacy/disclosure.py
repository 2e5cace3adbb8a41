"""Bounds on how much a class may shift a sensitive value's frequency against the table's, as ARX checks them.

* delta-disclosure privacy (Brickell and Shmatikov 2008): for every value a class holds, |log2(p/q)| < delta,
  p the value's share in the class, q its share in the table. Only values present in the class are checked (ARX);
  so merging a class with one that lacks a value can create a violation, and the model is monotone neither with nor
  without suppression (as ARX declares it).
* beta-likeness (Cao and Karras 2012): for every value a class holds, (p - q) / q <= beta (basic), or
  <= min(beta, -ln q) (enhanced). Only increases are bounded, so a merge of passing classes passes: monotone
  without suppression, not with it.

q is over every input record, as for t-closeness (engine.sensitive).

On the compiled path, when the view has a dense histogram (engine.distributions.ClassView.dense_counts), both decide
in one compiled pass over it (engine.privacy._distribution_kernels), with the reference's decisions to the bit:
beta-likeness on the same floats and a bound per value computed here with numpy; delta-disclosure by comparing
p / q with 2^(+-delta) widened by a margin, and with numpy's logarithm for the rare cells inside the margin.
"""
from __future__ import annotations

import math

import numpy as np

from .base import ClassModel
from .registry import register

LOG2 = math.log(2.0)


def delta_bounds(delta: float) -> np.ndarray:
    """The ratios p / q at which the compiled delta-disclosure decides alone (engine.privacy._distribution_kernels.
    delta_disclosure_dense): [surely violating at or above, surely not below, surely not above, surely violating at
    or below]. The reference's |log2 r| is within 4 units of 2^-53 (relative) of the exact one, far inside the
    margin m = 1e-12 delta + 1e-14 on the exponent; the guard g = 1e-15 covers the rounding of 2^x here (an ulp),
    and stays below the margin's own width in r (m ln 2 >= 7e-15), so the zones never overlap."""
    margin = 1e-12 * delta + 1e-14
    guard = 1e-15
    return np.array([2.0 ** (delta + margin) * (1 + guard), 2.0 ** (delta - margin) * (1 - guard),
                     2.0 ** -(delta - margin) * (1 + guard), 2.0 ** -(delta + margin) * (1 - guard)])


def _dense(classes, attribute: str):
    """The view's dense (values, classes) histogram on the compiled path, else None (the numpy reference decides)."""
    if getattr(classes, "kernels", None) is None:
        return None
    return classes.dense_counts(attribute)


def _table_shares(model, classes) -> np.ndarray:
    """q per value (the table's shares), kept per sensitive attribute: less Python per check."""
    sensitive = classes.sensitive_attribute(model.attribute)
    cached = model._q
    if cached is None or cached[0] is not sensitive:
        cached = model._q = (sensitive, sensitive.distribution)
    return cached[1]


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
        self._q: tuple | None = None
        self._bounds = delta_bounds(self.delta)

    def disclosure(self, classes) -> np.ndarray:
        """Per class, the largest |log2(p/q)| over its values."""
        distribution, p, q = _shares(classes, self.attribute)
        value = np.abs(np.log(p / q) / LOG2)
        out = np.zeros(classes.class_count)
        np.maximum.at(out, distribution.classes, value)
        return out

    def violating(self, classes) -> np.ndarray:
        dense = _dense(classes, self.attribute)
        if dense is None:
            return self.disclosure(classes) >= self.delta
        from . import _distribution_kernels as compiled

        q = _table_shares(self, classes)
        violating, values, rows = compiled.delta_disclosure_dense(dense, classes.sizes, q, self._bounds)
        if values.size:   # too near delta to decide from the ratio: numpy's logarithm, as the reference takes it
            p = dense[values, rows] / classes.sizes[rows].astype(np.float64)
            violating[rows[np.abs(np.log(p / q[values]) / LOG2) >= self.delta]] = True
        return violating

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
        self._q: tuple | None = None
        self._bound: tuple | None = None

    def _bounds(self, q: np.ndarray) -> np.ndarray:
        """The bound per value, as the reference computes it per entry (numpy's logarithm)."""
        if self._bound is None or self._bound[0] is not q:
            with np.errstate(divide="ignore"):
                bound = np.full(q.size, self.beta) if self.variant == "basic" else np.minimum(self.beta, -np.log(q))
            self._bound = (q, bound)
        return self._bound[1]

    def violating(self, classes) -> np.ndarray:
        dense = _dense(classes, self.attribute)
        if dense is not None:
            from . import _distribution_kernels as compiled

            q = _table_shares(self, classes)
            return compiled.beta_likeness_dense(dense, classes.sizes, q, self._bounds(q))
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
