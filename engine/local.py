"""Local recoding as ARX does it: an iterative partitioning of the table (Meurers et al. 2021, digest P1.6).

The first iteration is the ordinary global search. Each further iteration re-anonymizes, with the same privacy
configuration and quality model, only the records the previous iteration suppressed, and gives the records it keeps
its own transformation. Iterations stop at `iterations`, when nothing is left suppressed, or when one finds no
solution or keeps no record. The first iteration gets half the time limit (the global search needs it); the rest is
split evenly over the iterations still to run, so time an early iteration does not use goes to the later ones.

Why the combined output still satisfies the models: a part's kept classes satisfy k-anonymity within the part, and
classes of different parts that generalize to the same values merge, which only grows them; the combined classes are
nevertheless re-checked and any violator suppressed (fail closed). Risk-based models (population uniqueness) are not
closed under union, so the whole combined output is re-evaluated; if suppression within the limit cannot make it
hold, the release falls back to the first (global) part alone.

Quality is computed over the whole table from per-record contributions (each record at its own part's levels), so it
is comparable with a global result: Loss, Precision, Discernibility and AECS exactly as their global formulas sum
over records; Non-uniform entropy with whole-table value counts per record and its suppression term over the final
suppressed records at the levels of the part that suppressed them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .pipeline.apply import apply_transformation
from .classes import Evaluation, group
from .encoding import EncodedTable, encode_table
from .quality import MODEL_NAMES, make_quality_model
from .quality.base import QualityModel

SUPPRESSED = "*"


@dataclass
class LocalPart:
    """One iteration: which input records it anonymized, its search result, and which of them it released."""

    iteration: int
    records: np.ndarray          # row positions in the input
    table: EncodedTable
    search: object               # SearchResult
    best: Evaluation
    record_suppressed: np.ndarray
    transformation: dict[str, int]

    def summary(self) -> dict:
        return {"iteration": self.iteration, "transformation": self.transformation,
                "records": int(self.records.size), "released_records": int((~self.record_suppressed).sum()),
                "suppressed_records": int(self.record_suppressed.sum()), "algorithm": self.search.algorithm,
                "optimal": bool(self.search.optimal)}


@dataclass
class LocalResult:
    parts: list[LocalPart]
    released: pd.DataFrame
    record_suppressed: np.ndarray
    combined: Evaluation            # the classes of the combined output (codes: factorized released labels)
    quality: dict[str, float]
    attribute_quality: dict[str, dict[str, float]]
    fell_back: str | None = None    # why the release was reduced to the first part, None if it was not
    extra: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        return {"recoding": "local", "iterations": [p.summary() for p in self.parts], "fell_back": self.fell_back}


Search = Callable[[EncodedTable, QualityModel, float], object]


def local_recoding(policy, frame: pd.DataFrame, hierarchies: dict, bounds: dict, table: EncodedTable,
                   configuration, run_search: Search, time_limit: float, iterations: int) -> LocalResult | None:
    """Run the iterations; None when the first (global) iteration has no solution. `run_search(table, quality
    model, seconds)` is the caller's search (same algorithm choice and limits as a global run)."""
    started = time.perf_counter()
    n = int(frame.shape[0])
    remaining = np.arange(n)
    parts: list[LocalPart] = []
    for iteration in range(iterations):
        left = time_limit - (time.perf_counter() - started)
        if parts and left <= 0:
            break
        # The first iteration is the global search over every record and gets half the limit (a heuristic there
        # needs time: an even 1/100 leaves seconds at most); the rest is split evenly over the iterations still to
        # run, so what one leaves unused goes to the next.
        share = 0.5 if iteration == 0 and iterations > 1 else 1.0 / (iterations - iteration)
        budget = max(left, 1e-3) * share
        sub_frame = frame.iloc[remaining].reset_index(drop=True)
        sub_table = table if not parts else _part_table(table, sub_frame, remaining, hierarchies, policy.source,
                                                        bounds)
        model = make_quality_model(policy.quality.model, sub_table, policy.quality.aggregation,
                                   policy.quality.gs_factor)
        result = run_search(sub_table, model, budget)
        if result.best is None:
            if not parts:
                return None
            break
        _, suppressed = apply_transformation(policy, sub_frame, sub_table, result.best)
        if parts and not (~suppressed).any():
            break   # no progress: the rest stays suppressed as the previous part left it
        levels = {a.name: int(lv) for a, lv in zip(sub_table.attributes, result.best.levels)}
        parts.append(LocalPart(iteration, remaining, sub_table, result, result.best, suppressed, levels))
        remaining = remaining[suppressed]
        if remaining.size == 0:
            break
    return combine(policy, frame, table, configuration, parts)


def _assemble(policy, frame: pd.DataFrame, parts: list[LocalPart]) -> tuple[pd.DataFrame, np.ndarray]:
    released, suppressed = apply_transformation(policy, frame, parts[0].table, parts[0].best)
    suppressed = suppressed.copy()
    for part in parts[1:]:
        sub_frame = frame.iloc[part.records].reset_index(drop=True)
        values, _ = apply_transformation(policy, sub_frame, part.table, part.best)
        kept = ~part.record_suppressed
        rows = part.records[kept]
        for name in policy.quasi_identifiers:
            column = released[name].to_numpy(dtype=object).copy()
            column[rows] = values[name].to_numpy(dtype=object)[kept]
            released[name] = column
        suppressed[rows] = False
    return released, suppressed


def _part_table(table: EncodedTable, sub_frame: pd.DataFrame, rows: np.ndarray, hierarchies, source, bounds
                ) -> EncodedTable:
    """A later iteration's table: its records' quasi-identifiers encoded afresh, its sensitive attributes kept in
    the whole table's coding and distribution, so t-closeness and the like compare each part's classes with the
    whole table (what the combined output is re-checked against), not with the records left over."""
    from dataclasses import replace

    part = encode_table(sub_frame, hierarchies, source, bounds)
    return replace(part, sensitive=tuple(replace(s, records=s.records[rows]) for s in table.sensitive))


def released_classes(released: pd.DataFrame, names: list[str], suppressed: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                          np.ndarray, np.ndarray]:
    """Classes of the combined output by released values (records of different parts with equal values merge);
    suppressed records form their own classes. Returns codes, sizes, per-class suppression, class of each record."""
    rows, cards = [], []
    for name in names:
        codes, uniques = pd.factorize(released[name].to_numpy(dtype=object))
        rows.append(codes.astype(np.int64))
        cards.append(max(len(uniques), 1))
    rows.append(suppressed.astype(np.int64))
    cards.append(2)
    codes, sizes, record_class = group(np.stack(rows), np.ones(len(suppressed), dtype=np.int64), cards)
    class_suppressed = codes[-1].astype(bool)
    return codes[:-1], sizes, class_suppressed, record_class


def combine(policy, frame: pd.DataFrame, table: EncodedTable, configuration, parts: list[LocalPart],
            ) -> LocalResult:
    """Put the parts together, re-check the privacy models on the whole output, compute its quality."""
    names = table.names
    released, suppressed = _assemble(policy, frame, parts)
    fell_back = None
    codes, sizes, class_suppressed, record_class = released_classes(released, names, suppressed)
    if configuration.class_models:   # never fires for k-anonymity (merging only grows classes)
        from .distributions import view_from_records

        view = view_from_records(codes, sizes, record_class, table.sensitive)
        for model in configuration.class_models:
            class_suppressed |= model.violating(view)
    n = int(frame.shape[0])
    max_suppressed = configuration.max_suppressed(n)
    count = int(sizes[class_suppressed].sum())
    combined = Evaluation((), codes, sizes, class_suppressed, count, count <= max_suppressed)
    if configuration.risk_models:
        # Classes whose every value is "*" are hidden from risk models without counting as suppressed (as ARX).
        first = np.zeros(sizes.size, dtype=np.int64)
        first[record_class[::-1]] = np.arange(n)[::-1]
        all_star = np.all(np.stack([released[name].to_numpy(dtype=object)[first] == SUPPRESSED for name in names]),
                          axis=0)
        for model in configuration.risk_models:
            if not combined.solution:
                break
            visible = ~combined.suppressed & ~all_star
            index = np.flatnonzero(visible)
            order = index[np.lexsort((index, sizes[index]))]
            combined = model.enforce(combined, order, max_suppressed, visible)
        if not combined.solution and len(parts) > 1:
            fell_back = "the combined output did not satisfy the risk-based privacy models"
            return _finish(policy, frame, table, configuration, parts[:1], fell_back)
    if not combined.solution:   # fail closed: the first part alone is the global search's proven solution
        raise RuntimeError("internal error: the released output does not satisfy the privacy models")
    # Whatever the re-check suppressed (nothing, for k-anonymity) is blanked in the output.
    suppressed = combined.suppressed[record_class]
    for name in names:
        column = released[name].to_numpy(dtype=object).copy()
        column[suppressed] = SUPPRESSED
        released[name] = column
    return _result(policy, table, parts, released, suppressed, combined, fell_back)


def _finish(policy, frame, table, configuration, parts, fell_back) -> LocalResult:
    result = combine(policy, frame, table, configuration, parts)
    result.fell_back = fell_back
    return result


def _result(policy, table: EncodedTable, parts: list[LocalPart], released: pd.DataFrame, suppressed: np.ndarray,
            combined: Evaluation, fell_back: str | None) -> LocalResult:
    quality, per_attribute = local_quality(policy, table, parts, suppressed, combined)
    return LocalResult(parts, released, suppressed, combined, quality, per_attribute, fell_back)


def record_levels(table: EncodedTable, parts: list[LocalPart], suppressed: np.ndarray) -> np.ndarray:
    """(attributes, n) the level each record was released at (the last part that covered it)."""
    levels = np.zeros((len(table.attributes), table.n), dtype=np.int64)
    for part in parts:
        levels[:, part.records] = np.asarray(part.best.levels, dtype=np.int64)[:, None]
    return levels


def local_quality(policy, table: EncodedTable, parts: list[LocalPart], suppressed: np.ndarray,
                  combined: Evaluation) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Every quality model over the whole table, each record at its own part's levels (see the module docstring);
    Non-uniform entropy's suppression term at the last part's levels."""
    levels = record_levels(table, parts, suppressed)
    last = np.broadcast_to(np.asarray(parts[-1].best.levels, dtype=np.int64)[:, None], levels.shape)
    return quality_at_record_levels(policy, table, levels, suppressed, combined, last)


def quality_at_record_levels(policy, table: EncodedTable, levels: np.ndarray, suppressed: np.ndarray,
                             combined: Evaluation, suppression_levels: np.ndarray
                             ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Every quality model over `table` whose records were released at their own `levels` (attributes x records):
    local recoding, and P4 with local transformation, where each partition's records carry their partition's
    iterations' levels. `suppression_levels` (same shape) gives the levels at which Non-uniform entropy counts each
    suppressed record's values; `combined` are the released classes (for Discernibility and AECS)."""
    kept = ~suppressed
    n = float(table.n)
    n_suppressed = float(suppressed.sum())
    quality: dict[str, float] = {}
    per_attribute: dict[str, dict[str, float]] = {}
    for name in MODEL_NAMES:
        model = make_quality_model(name, table, aggregation=policy.quality.aggregation,
                                   gs_factor=policy.quality.gs_factor)
        attributes = None
        if name == "loss":
            sums = np.empty(len(table.attributes))
            for i, a in enumerate(table.attributes):
                share = np.zeros(table.n)
                for lv in np.unique(levels[i]):
                    rows = levels[i] == lv
                    share[rows] = a.share[lv][a.to_level[lv][a.records[rows]]]
                sums[i] = (model.generalization_weight * float(share[kept].sum())
                           + model.suppression_weight * n_suppressed)
            attributes = model._normalize(sums)
            loss = model.aggregate(attributes)
        elif name == "precision":
            fraction = levels / model._heights[:, None]
            attributes = fraction[:, kept].sum(axis=1) / n + n_suppressed / n
            loss = float(attributes.mean())
        elif name == "non_uniform_entropy":
            raw = np.zeros(len(table.attributes))
            for i, a in enumerate(table.attributes):
                original = a.counts[0][a.to_level[0][a.records]].astype(float)
                generalized = np.empty(table.n)
                for lv in np.unique(levels[i]):
                    rows = levels[i] == lv
                    generalized[rows] = a.counts[lv][a.to_level[lv][a.records[rows]]]
                raw[i] = float(np.log2(generalized / original).sum())
                if n_suppressed > 0:
                    # suppressed records counted per (level, value) they would have had
                    at = suppression_levels[i][suppressed].astype(np.int64)
                    values = a.records[suppressed]
                    codes = np.empty(values.size, dtype=np.int64)
                    for lv in np.unique(at):
                        rows = at == lv
                        codes[rows] = a.to_level[lv][values[rows]]
                    per_value = np.unique(at * (int(a.cardinality(0)) + 1) + codes,
                                          return_counts=True)[1].astype(float)
                    raw[i] += float(np.dot(per_value, np.log2(n_suppressed / per_value)))
            attributes = model._normalize(raw)
            loss = float(attributes.mean())
        else:   # discernibility, aecs: class sizes of the combined output alone
            loss = model.loss((), combined.codes, combined.sizes, combined.suppressed)
        quality[name] = float(min(1.0, max(0.0, 1.0 - loss)))
        if attributes is not None:
            per_attribute[name] = {a.name: float(min(1.0, max(0.0, 1.0 - v)))
                                   for a, v in zip(table.attributes, attributes)}
    return quality, per_attribute


__all__ = ["LocalPart", "LocalResult", "local_quality", "local_recoding", "quality_at_record_levels", "record_levels",
           "released_classes"]
