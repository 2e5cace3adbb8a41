"""What report.html shows beyond the manifest, computed once from a run so that the report is a pure rendering.

The manifest holds the release's verdict and figures (engine.manifest); the report also compares the release with its
input: the input's classes over the quasi-identifiers as they are, the release gate's estimates on them ("would the
input itself pass?"), prosecutor risk profiles before and after, per attribute the most frequent values in and out,
and attribute disclosure of the released classes. `report_data` computes all of it from the DeidResult, in the run,
once; `engine.report` only formats it, and never needs the input table or re-runs a risk model.

Costs: one grouping of the input's level-0 codes, one estimator call per gate population on it, one grouping of the
released values for the per-record risk (engine.individual_report, with its main-effects log-linear fit in closed
form), and, with sensitive attributes declared, one grouping of the released classes with their sensitive values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .analysis import prosecutor_profile
from .manifest import Gate, Risk

if TYPE_CHECKING:
    from .pipeline.result import DeidResult
    from .parallel.p4 import P4DatasetResult

TOP_VALUES = 15
SUPPRESSED_LABEL = "*"


@dataclass(frozen=True)
class ClassSizes:
    """A table's equivalence classes as the report shows them: their sizes and prosecutor risk profile."""

    sizes: np.ndarray
    profile: dict

    @classmethod
    def of(cls, sizes: np.ndarray) -> "ClassSizes":
        sizes = np.asarray(sizes, dtype=np.int64)
        return cls(sizes, prosecutor_profile(sizes))

    @property
    def records(self) -> int:
        return int(self.sizes.sum())

    @property
    def uniques(self) -> int:
        return int((self.sizes == 1).sum())

    @property
    def uniqueness(self) -> float:
        return self.uniques / self.records if self.records else 0.0


@dataclass(frozen=True)
class InputGate:
    """The release gate's estimates on the input as it is (the policy's gate over the built-in floor): the "before"
    columns of the populations table, and whether the input itself would have been refused."""

    risk: Risk
    gate: Gate


@dataclass(frozen=True)
class TransformationRow:
    attribute: str
    level: int
    max_level: int
    labels: int
    examples: str


@dataclass(frozen=True)
class ReportData:
    """Everything report.html needs besides the manifest. `before` and `input_gate` are None for a partitioned
    dataset release, whose records never reach the driver; so are the per-value figures."""

    class_sizes: np.ndarray          # every class of the release, suppressed ones included
    class_suppressed: np.ndarray     # per class
    after: ClassSizes                # the released (non-suppressed) classes
    before: ClassSizes | None = None             # the input's classes over the quasi-identifiers as they are
    input_gate: InputGate | None = None          # None also when the gate checks no population
    transformation: tuple[TransformationRow, ...] = ()
    distributions: tuple[dict, ...] = ()
    disclosure: tuple[dict, ...] = ()
    individual: dict | None = None               # per-record risk (engine.individual_report), None: no population


def report_data(result: "DeidResult") -> ReportData:
    """Compute, once, what the report of an in-memory release shows besides its manifest."""
    from .disclosure_report import released_disclosure
    from .gate import gate_result
    from .individual_report import released_individual_risk

    best, table = result.best, result.table
    before = ClassSizes.of(table.base_classes()[1])
    input_gate = None
    if result.risk.populations:
        # as the report has always shown it: the policy's gate over the built-in floor, on the input's classes
        input_gate = InputGate(*gate_result(result.policy.gate, before.sizes))
    rows = []
    for attribute, level in zip(table.attributes, best.levels):
        labels = attribute.labels[level]
        examples = ", ".join(str(v) for v in labels[:4]) + (" …" if labels.size > 4 else "")
        rows.append(TransformationRow(attribute.name, int(level), int(attribute.hierarchy.max_level),
                                      int(labels.size), examples))
    return ReportData(best.sizes, best.suppressed, ClassSizes.of(best.sizes[~best.suppressed]), before, input_gate,
                      tuple(rows), tuple(attribute_distributions(result)), tuple(released_disclosure(result)),
                      released_individual_risk(result))


def dataset_report_data(release: "P4DatasetResult", risk: Risk | None = None) -> ReportData:
    """What the report of a partitioned dataset release shows besides its manifest: the merged release's classes,
    and their per-record risk in each population of `risk` (the manifest's)."""
    from .individual_report import class_size_report

    evaluation = release.release
    kept = np.asarray(evaluation.sizes)[~np.asarray(evaluation.suppressed)]
    populations = [(entry.population, float(entry.size)) for entry in risk.populations] if risk is not None else []
    return ReportData(evaluation.sizes, evaluation.suppressed, ClassSizes.of(kept),
                      individual=class_size_report(kept, populations) if populations else None)


def top_values(labels: np.ndarray, counts: np.ndarray, limit: int = TOP_VALUES) -> list[tuple[str, int]]:
    """The `limit` most frequent labels (count > 0), by count descending, then label."""
    present = np.flatnonzero(counts > 0)
    order = present[np.lexsort((labels[present].astype(str), -counts[present]))][:limit]
    return [(str(labels[i]), int(counts[i])) for i in order]


def attribute_distributions(result: "DeidResult") -> list[dict]:
    """Per released attribute: top values of input and output, distinct counts, suppressed records."""
    table, best = result.table, result.best
    n = int(table.n)
    kept = ~best.suppressed
    kept_sizes = best.sizes[kept]
    suppressed = int(best.sizes[best.suppressed].sum())
    out = []
    for index, (attribute, level) in enumerate(zip(table.attributes, best.levels)):
        in_counts = attribute.counts[0]
        out_counts = np.bincount(best.codes[index][kept], weights=kept_sizes,
                                 minlength=attribute.cardinality(level)).astype(np.int64)
        out_labels = attribute.labels[level]
        if result.local is not None:   # local recoding: classes are not codes of one level; count released values
            released = result.released[attribute.name].to_numpy(dtype=object)
            out_labels, out_counts = np.unique(released[released != SUPPRESSED_LABEL].astype(str), return_counts=True)
        distinct_out = {str(v) for v in out_labels[out_counts > 0]}
        if suppressed:
            distinct_out.add(SUPPRESSED_LABEL)
        out.append({"name": attribute.name, "type": "quasi_identifying", "level": int(level),
                    "max_level": int(attribute.hierarchy.max_level), "records": n,
                    "input": top_values(attribute.labels[0], in_counts), "input_distinct": int((in_counts > 0).sum()),
                    "output": top_values(out_labels, out_counts), "output_distinct": len(distinct_out),
                    "suppressed": suppressed})
    for name, spec in result.policy.attributes.items():
        if spec.type not in ("sensitive", "insensitive") or name not in result.input_frame.columns:
            continue
        counts = result.input_frame[name].value_counts(sort=False)
        values = top_values(counts.index.to_numpy().astype(str), counts.to_numpy())
        out.append({"name": name, "type": spec.type, "records": n, "input": values, "input_distinct": int(counts.size),
                    "output": values, "output_distinct": int(counts.size), "suppressed": 0})
    return out


__all__ = ["ClassSizes", "InputGate", "ReportData", "TOP_VALUES", "TransformationRow", "attribute_distributions",
           "dataset_report_data", "report_data", "top_values"]
