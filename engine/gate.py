"""The release gate: residual re-identification risk of the released records, checked against the effective gate.

For each configured population the gate estimates population uniqueness of the released (non-suppressed) records and
the ratio |PU|/|SU| of population-unique to sample-unique shares, (PU / N) / (c1 / n): the probability that a sample
unique is also unique in the population, which the paper recommends to keep at or below 0.25. A record can only be
unique in the population if it is unique in the sample, so a release without sample uniques passes with ratio 0.

The limits are those of the effective gate (engine.sitegate): the dataset policy's gate tightened to the site's gate,
so a policy can add populations, estimators and lower limits but never relax the custodian's floor; a refusal names
which of the two set the limit that was exceeded. With several estimators (the site's `estimator:` plus any the
policy adds) each population is estimated under every one of them and the gate holds for the strictest: the entry's
figures are those of the largest estimate, and every estimate is listed under `estimates`. Anything the gate cannot
establish (an estimator without a solution, an error) refuses the release: fail closed.

Each figure says where it came from and how far to trust it: every estimate (and each population's entry) names the
estimator and the model that produced it, whether it solved, and under `benchmark` what benchmarks/risk_accuracy.py
found about that estimator's accuracy at this sampling fraction (engine.risk.accuracy; `measured: false` where the
benchmark did not reach the fraction). These fields are added to the manifest's risk, none renamed.

`safeshare release` calls `evaluate_gate` again on the classes of the released data file(s) themselves
(engine.release_gate), so what is sealed is what the gate passed, whatever the manifest says.
"""
from __future__ import annotations

import numpy as np

from .manifest import Gate, Risk, finite_json
from .policy import GateSpec
from .sitegate import BUILT_IN_GATE, EffectiveGate, SiteGateSource, combine


def gate_populations(spec: GateSpec | EffectiveGate, records: int = 0) -> list[tuple[str, float]]:
    """(label, size) of every population the gate checks; sizes are finite and at least `records`."""
    from .sitegate import population_size

    effective = spec if isinstance(spec, EffectiveGate) else combine(spec)
    return [(p.label, population_size(p, records)) for p in effective.populations]


def check_required(models: list, view, kept: np.ndarray, visible: np.ndarray | None = None
                   ) -> tuple[list[dict], list[str]]:
    """The gate's `require:` models on the released classes: `view` (engine.distributions.ClassView) holds every
    class of the transformation, `kept` marks the released ones, `visible` those a risk model sees (default: kept).
    A class model must pass on every released class; a risk model on the released table. Returns one entry per model
    and the reasons for refusing; a model that cannot be evaluated refuses (fail closed)."""
    entries, reasons = [], []
    for model in models:
        entry = {**model.describe(), "passed": False}
        try:
            if hasattr(model, "violating"):
                failing = model.violating(view) & kept
                entry["failing_classes"] = int(failing.sum())
                entry["failing_records"] = int(view.sizes[failing].sum())
                blocked = model.blocks_release(view)
                entry["passed"] = not failing.any() and not blocked
                if failing.any():
                    reasons.append(f"required {model.name}: {entry['failing_classes']} released class(es) "
                                   f"({entry['failing_records']} records) violate it")
                if blocked:
                    reasons.append(f"required {model.name}: population classes without released records violate it")
            else:
                shown = kept if visible is None else visible
                holds, details = model.assess(view.sizes[shown]) if shown.any() else (True, None)
                entry["passed"] = bool(holds)
                entry["details"] = details
                if not holds:
                    reasons.append(f"required {model.name}: the released table violates it")
        except Exception as exc:   # fail closed
            reasons.append(f"required {model.name}: cannot be checked ({type(exc).__name__}: {exc})")
        entries.append(entry)
    return entries, reasons


def population_estimates(kept_sizes: np.ndarray, size: float, estimators: tuple[str, ...]) -> list[dict]:
    """One population's estimate under each estimator, as the manifest records them: estimator, the model it used,
    whether it solved, population uniques, uniqueness and |PU|/|SU| (None when unsolved), and the benchmark's
    finding about the estimator at this sampling fraction."""
    from .risk import population_uniqueness
    from .risk.accuracy import benchmark_finding

    n = int(kept_sizes.sum())
    sample_uniqueness = int((kept_sizes == 1).sum()) / n
    estimates = []
    for estimator in estimators:
        estimate = population_uniqueness(kept_sizes, size, estimator=estimator)
        pu = estimate.population_uniqueness
        solved = bool(estimate.solved) and pu is not None and bool(np.isfinite(pu))
        estimates.append({"estimator": estimator, "model": estimate.model_used, "solved": solved,
                          "population_uniques": float(estimate.population_uniques) if solved else None,
                          "population_uniqueness": float(pu) if solved else None,
                          "pu_su_ratio": float(pu) / sample_uniqueness if solved else None,
                          "benchmark": benchmark_finding(estimator, n / size)})
    return estimates


def record_risk_entry(kept_sizes: np.ndarray, size: float, effective: EffectiveGate, name: str,
                      reasons: list[str]) -> dict:
    """The per-record risk figures of one population (engine.privacy.individual.measure: highest record risk,
    expected re-identifications, records above the record limit), with a reason added for each limit exceeded.
    Computed for every population whether or not the release has sample uniques: records in classes of two or more
    carry a risk too."""
    from .privacy.individual import measure

    limit, expected_limit = effective.max_record_risk, effective.max_expected_reidentifications
    figures = measure(kept_sizes, size, limit)
    if limit is not None and not figures["max_risk"] <= limit:
        reasons.append(f"{name}: {figures['records_above_limit']} released record(s) with a re-identification risk "
                       f"above the allowed {limit:g} (highest {figures['max_risk']:.6g}, negative-binomial model; set "
                       f"by the {effective.where('max_record_risk')})")
    if expected_limit is not None and not figures["expected_reidentifications"] <= expected_limit:
        reasons.append(f"{name}: {figures['expected_reidentifications']:.6g} expected re-identifications, above the "
                       f"allowed {expected_limit:g} (negative-binomial model; set by the "
                       f"{effective.where('max_expected_reidentifications')})")
    return figures


def strictest(estimates: list[dict]) -> dict | None:
    """The estimate the gate holds for: the largest population uniqueness (None when any estimator is unsolved:
    the risk is then unknown, and an unknown risk refuses)."""
    if not estimates or any(not e["solved"] for e in estimates):
        return None
    return max(estimates, key=lambda e: e["population_uniqueness"])


def evaluate_gate(spec: GateSpec | EffectiveGate | None, kept_sizes: np.ndarray,
                  site: SiteGateSource | None = None, required: tuple | None = None) -> tuple[dict, dict]:
    """Return (risk, gate) sections of the manifest for the released class sizes.

    `spec` is the policy's gate (None: the default gate), combined here with `site` (None: the built-in floor), or
    an already combined `EffectiveGate`. `required` is (models, view, kept) for the gate's `require:` models
    (`check_required`)."""
    effective = spec if isinstance(spec, EffectiveGate) else combine(spec, site or BUILT_IN_GATE)
    reasons: list[str] = []
    kept_sizes = np.asarray(kept_sizes, dtype=np.int64)
    n = int(kept_sizes.sum())
    c1 = int((kept_sizes == 1).sum())
    sample_uniqueness = c1 / n if n else 0.0
    max_ratio, max_pu = effective.max_pu_su_ratio, effective.max_population_uniqueness
    populations = []
    try:
        for name, size in gate_populations(effective, n):
            entry: dict = {"population": name, "size": size}
            if c1 == 0 or n == 0:
                entry.update({"model": None, "solved": True, "population_uniques": 0.0,
                              "population_uniqueness": 0.0, "pu_su_ratio": 0.0,
                              "note": "no sample uniques: no released record can be unique in the population"})
            else:
                estimates = population_estimates(kept_sizes, size, effective.estimators)
                chosen = strictest(estimates)
                several = len(estimates) > 1
                if chosen is None:
                    unsolved = [e for e in estimates if not e["solved"]]
                    entry.update({"model": unsolved[0]["model"], "solved": False, "population_uniques": None,
                                  "population_uniqueness": None, "pu_su_ratio": None,
                                  "estimator": unsolved[0]["estimator"], "benchmark": unsolved[0]["benchmark"]})
                    names = ", ".join(f"{e['estimator']}" + (f" ({e['model']})" if e["model"] not in
                                                               (None, e["estimator"]) else "") for e in unsolved)
                    reasons.append(f"{name}: no risk model found a solution ({names}); risk unknown")
                else:
                    pu, ratio = chosen["population_uniqueness"], chosen["pu_su_ratio"]
                    entry.update({"model": chosen["model"], "solved": True,
                                  "population_uniques": chosen["population_uniques"],
                                  "population_uniqueness": pu, "pu_su_ratio": ratio,
                                  "estimator": chosen["estimator"], "benchmark": chosen["benchmark"]})
                    under = f"; the strictest estimator: {chosen['estimator']}" if several else ""
                    if not ratio <= max_ratio:
                        reasons.append(f"{name}: |PU|/|SU| = {ratio:.4f} above the allowed {max_ratio:g} "
                                       f"(set by the {effective.where('max_pu_su_ratio')}{under})")
                    if not pu <= max_pu:
                        reasons.append(f"{name}: population uniqueness {pu:.6f} above the allowed {max_pu:g} "
                                       f"(set by the {effective.where('max_population_uniqueness')}{under})")
                if several:
                    entry["estimates"] = estimates
            if effective.limits_individual_risk:
                entry["individual_risk"] = record_risk_entry(kept_sizes, size, effective, name, reasons)
            populations.append(entry)
        smallest = int(kept_sizes.min()) if kept_sizes.size else 0
        if n and smallest < effective.min_k:
            reasons.append(f"the smallest released class holds {smallest} record(s), below the minimum k = "
                           f"{effective.min_k} (set by the {effective.where('min_k')})")
    except Exception as exc:  # fail closed: a gate that cannot decide refuses
        reasons.append(f"gate error: {type(exc).__name__}: {exc}")
    required_entries = None
    if required is not None and required[0]:
        required_entries, required_reasons = check_required(*required)
        reasons.extend(required_reasons)
    risk = {
        "released_records": n,
        "sample_uniques": c1,
        "sample_uniqueness": sample_uniqueness,
        "estimator": effective.estimator,
        "populations": populations,
    }
    gate = {
        "passed": not reasons,
        "reasons": reasons,
        **effective.record(),
    }
    if required_entries is not None:
        gate["required"] = required_entries
    return risk, gate


def gate_result(spec: GateSpec | EffectiveGate | None, kept_sizes: np.ndarray, details: dict | None = None,
                site: SiteGateSource | None = None, required: tuple | None = None) -> tuple[Risk, Gate]:
    """`evaluate_gate` as the manifest's typed blocks; `details` are the released evaluation's (its
    population-uniqueness estimate, when the search decided one, is recorded with the risk)."""
    risk, gate = evaluate_gate(spec, kept_sizes, site=site, required=required)
    if details and "population_uniqueness" in details:
        from .risk.accuracy import benchmark_finding

        estimate = dict(details["population_uniqueness"])
        if "estimator" in estimate and "benchmark" not in estimate:
            estimate["benchmark"] = benchmark_finding(str(estimate["estimator"]),
                                                      float(estimate.get("sampling_fraction") or 0.0))
        risk["privacy_model_estimate"] = estimate
    return Risk.model_validate(finite_json(risk)), Gate.model_validate(finite_json(gate))
