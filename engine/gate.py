"""The release gate: residual re-identification risk of the released records, checked against the policy.

For each configured population the gate estimates population uniqueness of the released (non-suppressed) records and
the ratio |PU|/|SU| of population-unique to sample-unique shares, (PU / N) / (c1 / n): the probability that a sample
unique is also unique in the population, which the paper recommends to keep at or below 0.25. A record can only be
unique in the population if it is unique in the sample, so a release without sample uniques passes with ratio 0.
Anything the gate cannot establish (a risk model without a solution, an error) refuses the release: fail closed.
"""
from __future__ import annotations

import numpy as np

from .policy import GateSpec


def gate_populations(spec: GateSpec) -> list[tuple[str, float]]:
    from .risk import resolve_population

    return [(str(p), float(resolve_population(p))) for p in spec.populations]


def evaluate_gate(spec: GateSpec | None, kept_sizes: np.ndarray) -> tuple[dict, dict]:
    """Return (risk, gate) sections of the manifest for the released class sizes."""
    spec = spec or GateSpec()
    reasons: list[str] = []
    kept_sizes = np.asarray(kept_sizes, dtype=np.int64)
    n = int(kept_sizes.sum())
    c1 = int((kept_sizes == 1).sum())
    sample_uniqueness = c1 / n if n else 0.0
    populations = []
    try:
        for name, size in gate_populations(spec):
            entry: dict = {"population": name, "size": size}
            if c1 == 0 or n == 0:
                entry.update({"model": None, "solved": True, "population_uniques": 0.0,
                              "population_uniqueness": 0.0, "pu_su_ratio": 0.0,
                              "note": "no sample uniques: no released record can be unique in the population"})
            else:
                from .risk import population_uniqueness

                estimate = population_uniqueness(kept_sizes, size, estimator=spec.estimator)
                entry.update({"model": estimate.model_used, "solved": bool(estimate.solved)})
                if not estimate.solved:
                    entry.update({"population_uniques": None, "population_uniqueness": None, "pu_su_ratio": None})
                    reasons.append(f"{name}: no risk model found a solution ({estimate.model_used}); risk unknown")
                else:
                    pu = float(estimate.population_uniqueness)
                    ratio = pu / sample_uniqueness
                    entry.update({"population_uniques": float(estimate.population_uniques),
                                  "population_uniqueness": pu, "pu_su_ratio": ratio})
                    if ratio > spec.max_pu_su_ratio:
                        reasons.append(f"{name}: |PU|/|SU| = {ratio:.4f} above the allowed {spec.max_pu_su_ratio:g}")
                    if pu > spec.max_population_uniqueness:
                        reasons.append(f"{name}: population uniqueness {pu:.6f} above the allowed "
                                       f"{spec.max_population_uniqueness:g}")
            populations.append(entry)
    except Exception as exc:  # fail closed: a gate that cannot decide refuses
        reasons.append(f"gate error: {type(exc).__name__}: {exc}")
    risk = {
        "released_records": n,
        "sample_uniques": c1,
        "sample_uniqueness": sample_uniqueness,
        "estimator": spec.estimator,
        "populations": populations,
    }
    gate = {
        "passed": not reasons,
        "reasons": reasons,
        "max_pu_su_ratio": spec.max_pu_su_ratio,
        "max_population_uniqueness": spec.max_population_uniqueness,
    }
    return risk, gate
