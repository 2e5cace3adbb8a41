"""Risk analysis of a table as it is (no transformation): what `safeshare risk` reports.

Custodians look at this before choosing a privacy model: how many records are unique in the sample, how the
prosecutor risk (1 / class size) is spread over the records, and what each super-population model estimates for the
share of the population that is unique, for each population the policy names.
"""
from __future__ import annotations

import numpy as np

from .classes import group
from .encoding import encode_table
from .errors import InputError
from .policy import DatasetPolicy, GateSpec, PopulationUniqueness
from .table import load_input

ESTIMATORS = ("pitman", "zayatz", "snb", "dankar")

# Upper edges of the prosecutor risk intervals (as in ARX's risk profile), highest first.
RISK_EDGES = [1.0, 0.5, 0.334, 0.25, 0.2, 0.167, 0.143, 0.125, 0.1, 0.09, 0.08, 0.07, 0.06, 0.05, 0.04, 0.03, 0.02,
              0.01, 0.001, 0.0001, 0.00001, 0.000001, 0.0]


def class_sizes(policy: DatasetPolicy) -> np.ndarray:
    loaded = load_input(policy)
    table = encode_table(loaded.frame, loaded.hierarchies, policy.source)
    codes = np.stack([a.records for a in table.attributes])
    _, sizes, _ = group(codes, np.ones(table.n, dtype=np.int64), [a.cardinality(0) for a in table.attributes])
    return sizes


def size_histogram(sizes: np.ndarray) -> list[dict]:
    values, counts = np.unique(sizes, return_counts=True)
    return [{"size": int(s), "classes": int(c), "records": int(s * c)} for s, c in zip(values, counts)]


def prosecutor_profile(sizes: np.ndarray) -> dict:
    """Share of records per prosecutor-risk interval ]lower, upper], highest risk first, with cumulative shares."""
    n = float(sizes.sum())
    risk = 1.0 / sizes
    rows = []
    cumulative = 0.0
    for upper, lower in zip(RISK_EDGES[:-1], RISK_EDGES[1:]):
        mask = (risk <= upper) & (risk > lower)
        share = float(sizes[mask].sum()) / n if n else 0.0
        cumulative += share
        rows.append({"lower": lower, "upper": upper, "records": share, "cumulative": min(cumulative, 1.0)})
    return {
        "intervals": rows,
        "average_risk": float(sizes.size / n) if n else 0.0,
        "highest_risk": float(risk.max()) if risk.size else 0.0,
        "records_at_highest_risk": float(sizes[risk == risk.max()].sum() / n) if risk.size else 0.0,
    }


def configured_populations(policy: DatasetPolicy) -> list[str | float]:
    return [population for population, _ in _populations_with_fields(policy)]


def _populations_with_fields(policy: DatasetPolicy) -> list[tuple[str | float, str]]:
    """Each population the policy names once, with the field that names it first (for error messages)."""
    gate = policy.gate or GateSpec()
    populations = [(p, f"gate.populations[{i}]") for i, p in enumerate(gate.populations)]
    for index, spec in enumerate(policy.privacy):
        if isinstance(spec, PopulationUniqueness) and spec.population not in [p for p, _ in populations]:
            populations.append((spec.population, f"privacy[{index}].population"))
    return populations


def population_sizes(policy: DatasetPolicy, records: int) -> list[tuple[str | float, float]]:
    """(population, size) for every configured population; InputError naming the field when a population is
    unknown, not finite or smaller than the sample."""
    from .risk import resolve_population
    from .sitegate import check_population

    sizes = []
    for population, field_name in _populations_with_fields(policy):
        try:
            size = float(resolve_population(population))
        except InputError as exc:
            raise InputError(policy.source, field_name, exc.problem) from None
        check_population(size, records, policy.source, field_name)
        sizes.append((population, size))
    return sizes


def analyse(policy: DatasetPolicy) -> dict:
    from .risk import population_uniqueness

    sizes = class_sizes(policy)
    n = int(sizes.sum())
    c1 = int((sizes == 1).sum())
    estimates = []
    for population, size in population_sizes(policy, n):
        entry = {"population": str(population), "size": size, "sampling_fraction": n / size, "models": {}}
        for estimator in ESTIMATORS:
            entry["models"][estimator] = population_uniqueness(sizes, size, estimator=estimator).to_dict()
        estimates.append(entry)
    return {
        "dataset": policy.dataset,
        "records": n,
        "quasi_identifiers": policy.quasi_identifiers,
        "equivalence_classes": int(sizes.size),
        "sample_uniques": c1,
        "sample_uniqueness": c1 / n if n else 0.0,
        "class_size_histogram": size_histogram(sizes),
        "prosecutor_risk": prosecutor_profile(sizes),
        "population_estimates": estimates,
    }


def format_analysis(report: dict) -> str:
    lines = [f"dataset            {report['dataset']} ({report['records']} records, "
             f"{report['equivalence_classes']} classes over {len(report['quasi_identifiers'])} quasi-identifiers)",
             f"sample uniques     {report['sample_uniques']} ({report['sample_uniqueness']:.4%})",
             "", "class sizes        size: classes (records)"]
    for row in report["class_size_histogram"][:12]:
        lines.append(f"                   {row['size']:>5}: {row['classes']} ({row['records']})")
    if len(report["class_size_histogram"]) > 12:
        lines.append(f"                   ... {len(report['class_size_histogram']) - 12} more sizes (see --json)")
    lines += ["", "prosecutor risk    interval            records   cumulative"]
    for row in report["prosecutor_risk"]["intervals"]:
        if row["records"] > 0:
            lines.append(f"                   ]{row['lower']:.6g}, {row['upper']:.6g}]".ljust(39)
                         + f"{row['records']:8.2%}   {row['cumulative']:8.2%}")
    lines += ["", "population uniqueness (estimated population uniques / N)"]
    for entry in report["population_estimates"]:
        cells = []
        for name, model in entry["models"].items():
            value = model.get("population_uniqueness")
            label = name if name != "dankar" else f"dankar->{model.get('model_used')}"
            cells.append(f"{label}={value:.6%}" if model.get("solved") and value is not None else f"{label}=no solution")
        lines.append(f"  {entry['population']} (N={entry['size']:.6g}, f={entry['sampling_fraction']:.3g}): "
                     + ", ".join(cells))
    return "\n".join(lines)
