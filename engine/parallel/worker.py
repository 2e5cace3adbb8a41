"""What a worker does with one partition (plain functions of picklable arguments, so Dask can run them anywhere).

Every partition is encoded with the hierarchies the driver built for the whole table, so a level means the same labels
in every partition, and classes of different partitions meet by their generalized labels. A worker returns summaries
the size of its classes, never its records: labels, sizes, what it suppressed, and per class the counts of each
sensitive value, which is all the driver needs to check the merged classes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..classes import Evaluation
from ..encoding import EncodedTable, encode_table
from ..hierarchy import Hierarchy
from ..policy import DatasetPolicy
from ..privacy import PrivacyConfiguration
from ..quality import make_quality_model
from ..sensitive import EncodedSensitive

SUPPRESSED = "*"


@dataclass
class PartitionJob:
    index: int
    policy: DatasetPolicy
    hierarchies: dict[str, Hierarchy]
    sensitive: dict[str, Hierarchy | None]
    frame: pd.DataFrame
    rows: np.ndarray            # positions of the partition's records in the whole table
    total_records: int          # of the whole table (k-map's k' is derived from it, not from a partition)
    # Per sensitive attribute the whole table's (values, counts): with them a partition's models compare its classes
    # with the table's distribution (as the merged release is checked), not with the partition's own.
    table_distributions: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    # The encoded partition, kept by the worker that holds the job between steps (not sent back and forth).
    table: EncodedTable | None = field(default=None, repr=False, compare=False)
    # Local transformation: the partition's local recoding (engine.local.LocalResult), kept by its worker until the
    # release step.
    local: object | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["table"] = None   # a worker encodes its partition itself
        state["local"] = None
        return state


@dataclass
class PartitionClasses:
    """A partition's classes at the harmonized transformation: one row per class in `labels` (quasi-identifier labels
    as text), with `sizes`, `suppressed` (by the partition's class models), `first` (the whole table's position of
    each class's first record), and `sensitive`: per sensitive attribute a frame (class, value, count)."""

    index: int
    labels: pd.DataFrame
    sizes: np.ndarray
    suppressed: np.ndarray
    first: np.ndarray
    sensitive: dict[str, pd.DataFrame] = field(default_factory=dict)


def encode(job: PartitionJob) -> EncodedTable:
    if job.table is None:
        bounds = {name: (job.policy.attributes[name].min_level, job.policy.attributes[name].max_level)
                  for name in job.hierarchies}
        table = encode_table(job.frame, job.hierarchies, job.policy.source, bounds, job.sensitive)
        if job.table_distributions:
            table = replace(table, sensitive=tuple(_with_table_distribution(s, job.table_distributions.get(s.name))
                                                   for s in table.sensitive))
        job.table = table
    return job.table


def _with_table_distribution(attribute: EncodedSensitive, distribution) -> EncodedSensitive:
    if distribution is None:
        return attribute
    values, counts = distribution
    codes = np.searchsorted(values, attribute.values)
    if not np.array_equal(values[np.minimum(codes, values.size - 1)], attribute.values):
        raise RuntimeError(f"internal error: a value of {attribute.name} is missing from the table's distribution")
    return EncodedSensitive(attribute.name, codes[attribute.records], values, np.asarray(counts, dtype=np.int64),
                            attribute.hierarchy)


def configuration(job: PartitionJob, with_risk_models: bool = True) -> PrivacyConfiguration:
    from ..pipeline.prepare import privacy_configuration

    full = privacy_configuration(job.policy, job.total_records)
    models = full.models if with_risk_models else tuple(full.class_models)
    return PrivacyConfiguration(models, full.suppression_limit)


def optimum(job: PartitionJob, time_limit: float | None = None) -> dict:
    """Step 1: the partition's own optimal (or best found) transformation under the whole configuration."""
    from ..search import search

    table = encode(job)
    policy = job.policy
    quality = make_quality_model(policy.quality.model, table, policy.quality.aggregation, policy.quality.gs_factor)
    result = search(table, configuration(job), quality, algorithm=policy.search.algorithm, time_limit=time_limit)
    best = result.best
    return {"index": job.index, "records": table.n, "levels": None if best is None else tuple(best.levels),
            "checked": result.checked, "optimal": result.optimal, "seconds": result.seconds,
            "algorithm": result.algorithm}


def evaluate(job: PartitionJob, levels: tuple[int, ...]) -> tuple[EncodedTable, Evaluation]:
    """The partition at `levels` with its class models applied (risk-based models are decided on the merged table)."""
    from ..search import Evaluator

    table = encode(job)
    quality = make_quality_model("loss", table)
    config = configuration(job, with_risk_models=False)
    evaluator = Evaluator(table, PrivacyConfiguration(config.models, 1.0), quality, cache_bytes=0)
    return table, evaluator.evaluate(levels)


def classes(job: PartitionJob, levels: tuple[int, ...]) -> PartitionClasses:
    """Step 2: the partition at the harmonized transformation, summarized per class."""
    from ..classes import ClassCache

    table, evaluation = evaluate(job, levels)
    labels = pd.DataFrame({a.name: a.labels[level][evaluation.codes[i]]
                           for i, (a, level) in enumerate(zip(table.attributes, levels))})
    first = _first_rows(_record_classes(table, levels, evaluation), evaluation.sizes.size, job.rows)
    view = ClassCache(table, budget_bytes=0).view(levels) if table.sensitive else None
    return PartitionClasses(job.index, labels, evaluation.sizes, evaluation.suppressed, first,
                            _sensitive_counts(table, view))


def _first_rows(record_class: np.ndarray, classes: int, rows: np.ndarray) -> np.ndarray:
    """Per class the whole table's position of its first record (`rows`: the partition's positions in the table)."""
    first = np.full(classes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, record_class, rows)
    return first


def _sensitive_counts(table: EncodedTable, view) -> dict[str, pd.DataFrame]:
    """Per sensitive attribute a frame (class, value, count) of the classes of `view`, what compliance merges."""
    out = {}
    for attribute in table.sensitive:
        distribution = view.distribution(attribute.name)
        out[attribute.name] = pd.DataFrame({"class": distribution.classes,
                                            "value": attribute.values[distribution.values],
                                            "count": distribution.counts})
    return out


def _marked(labels: pd.DataFrame, suppressed_labels: pd.DataFrame) -> np.ndarray:
    """Which rows of `labels` compliance suppressed on the merged table (their labels are in `suppressed_labels`)."""
    names = list(labels.columns)
    marked = labels.merge(suppressed_labels.assign(_gone=True), on=names, how="left")["_gone"]
    return marked.fillna(False).to_numpy(dtype=bool)


def _released_frame(job: PartitionJob, generalized: dict[str, np.ndarray], record_suppressed: np.ndarray
                    ) -> pd.DataFrame:
    """The partition's released records: quasi-identifiers as `generalized` with the suppressed records' blanked,
    the other released attributes as they are, identifying ones left out."""
    out = pd.DataFrame(index=job.frame.index)
    for name, attribute in job.policy.attributes.items():
        if attribute.type == "identifying":
            continue
        if name in generalized:
            values = np.asarray(generalized[name], dtype=object).copy()
            values[record_suppressed] = SUPPRESSED
            out[name] = values
        else:
            out[name] = job.frame[name].to_numpy()
    return out


def _record_classes(table: EncodedTable, levels: tuple[int, ...], evaluation: Evaluation) -> np.ndarray:
    from ..classes import combined_key

    codes = np.stack([a.to_level[level][a.records] for a, level in zip(table.attributes, levels)])
    cards = [a.cardinality(level) for a, level in zip(table.attributes, levels)]
    keys = combined_key(np.concatenate([evaluation.codes, codes], axis=1), cards)
    class_keys, record_keys = keys[:evaluation.codes.shape[1]], keys[evaluation.codes.shape[1]:]
    order = np.argsort(class_keys, kind="stable")
    return order[np.searchsorted(class_keys, record_keys, sorter=order)]


def release(job: PartitionJob, levels: tuple[int, ...], suppressed_labels: pd.DataFrame) -> dict:
    """Step 4: the partition's released records (generalized; suppressed classes' quasi-identifiers blanked) and its
    quality under the policy's model with that suppression (P4 averages it over partitions by records)."""
    table, evaluation = evaluate(job, levels)
    labels = pd.DataFrame({a.name: a.labels[level][evaluation.codes[i]]
                           for i, (a, level) in enumerate(zip(table.attributes, levels))})
    suppressed = evaluation.suppressed | _marked(labels, suppressed_labels)
    policy = job.policy
    quality_model = make_quality_model(policy.quality.model, table, policy.quality.aggregation,
                                       policy.quality.gs_factor)
    loss = quality_model.loss(levels, evaluation.codes, evaluation.sizes, suppressed)
    record_suppressed = suppressed[_record_classes(table, levels, evaluation)]
    generalized = {a.name: a.labels[level][a.to_level[level][a.records]] for a, level in zip(table.attributes, levels)}
    out = _released_frame(job, generalized, record_suppressed)
    return {"index": job.index, "released": out, "rows": job.rows, "records": table.n, "loss": float(loss),
            "record_suppressed": record_suppressed, "suppressed_records": int(record_suppressed.sum()),
            "classes": labels.assign(size=evaluation.sizes, suppressed=suppressed)}


def local_classes(job: PartitionJob, time_limit: float | None = None) -> PartitionClasses:
    """Steps 1-2 with local transformation (P4's LOCAL setting, which has no harmonization): the partition is
    locally recoded with the whole configuration (engine.local: each iteration re-anonymizes the records the previous
    ones suppressed); with no solution under the policy's limit it is recoded again with every record suppressible,
    as P4 does. Returns its released classes by released values, which is how they merge with other partitions'."""
    from ..distributions import view_from_records
    from ..local import local_recoding, released_classes
    from ..search import search

    table = encode(job)
    policy = job.policy
    full = configuration(job)
    bounds = {name: (policy.attributes[name].min_level, policy.attributes[name].max_level) for name in job.hierarchies}
    seconds = time_limit if time_limit is not None else policy.search.time_limit_seconds
    result = None
    for config in (full, PrivacyConfiguration(full.models, 1.0)):
        def run_search(sub_table: EncodedTable, quality_model, budget: float, config=config):
            return search(sub_table, config, quality_model, algorithm=policy.search.algorithm, time_limit=budget,
                          check_limit=policy.search.check_limit)

        result = local_recoding(policy, job.frame, job.hierarchies, bounds, table, config, run_search, seconds,
                                policy.search.local_iterations)
        if result is not None:
            break
    if result is None:
        raise RuntimeError(f"partition {job.index}: local recoding found no solution even with every record "
                           "suppressible")
    job.local = result
    names = list(job.hierarchies)
    codes, sizes, class_suppressed, record_class = released_classes(result.released, names, result.record_suppressed)
    member = np.empty(sizes.size, dtype=np.int64)   # one record of each class: its labels are the class's
    member[record_class] = np.arange(record_class.size)
    labels = pd.DataFrame({name: result.released[name].to_numpy(dtype=object)[member].astype(str) for name in names})
    first = _first_rows(record_class, sizes.size, job.rows)
    view = view_from_records(codes, sizes, record_class, table.sensitive) if table.sensitive else None
    return PartitionClasses(job.index, labels, sizes, class_suppressed, first, _sensitive_counts(table, view))


def release_local(job: PartitionJob, suppressed_labels: pd.DataFrame) -> dict:
    """Step 4 with local transformation: the partition's locally recoded records with the classes compliance
    suppressed on the merged table blanked too, its quality under the policy's model (over the partition, each
    record at its own iteration's levels) and each record's levels, from which the driver measures the whole."""
    from ..classes import Evaluation
    from ..local import local_quality, record_levels, released_classes

    result = job.local
    if result is None:
        raise RuntimeError(f"partition {job.index}: released before it was locally recoded")
    table = encode(job)
    names = list(job.hierarchies)
    record_suppressed = result.record_suppressed | _marked(result.released[names].astype(str), suppressed_labels)
    out = _released_frame(job, {name: result.released[name].to_numpy(dtype=object) for name in names},
                          record_suppressed)
    codes, sizes, class_suppressed, _ = released_classes(out, names, record_suppressed)
    combined = Evaluation((), codes, sizes, class_suppressed, int(sizes[class_suppressed].sum()), True)
    quality, _ = local_quality(job.policy, table, result.parts, record_suppressed, combined)
    return {"index": job.index, "released": out, "rows": job.rows, "records": table.n,
            "loss": 1.0 - float(quality[job.policy.quality.model]), "record_suppressed": record_suppressed,
            "suppressed_records": int(record_suppressed.sum()),
            "record_levels": record_levels(table, result.parts, record_suppressed).astype(np.int16),
            "suppression_levels": np.asarray(result.parts[-1].best.levels, dtype=np.int16),
            "iterations": [dict(part.summary(), partition=job.index) for part in result.parts],
            "fell_back": result.fell_back, "checked": int(sum(part.search.checked for part in result.parts))}


def write_release(job: PartitionJob, levels: tuple[int, ...], suppressed_labels: pd.DataFrame, directory: str) -> dict:
    """Step 4 for a release too large for one process: the worker writes its partition's released records as one
    file of a Parquet dataset (`part-NNNNN.parquet`, written to a temporary name and renamed, so a failed run leaves
    no partial file under the final name) and returns only its figures."""
    import hashlib
    import os
    from pathlib import Path

    output = release(job, levels, suppressed_labels)
    # The driver made the folder (a staging folder it renames into place). It is not made here: a run that failed
    # while this task ran has removed it, and recreating it would leave a partial dataset behind.
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: the release folder is gone (the run was stopped)")
    final = folder / f"part-{job.index:05d}.parquet"
    temporary = folder / f".part-{job.index:05d}.parquet.tmp"
    output["released"].to_parquet(temporary, index=False, engine="pyarrow", compression="zstd")
    os.replace(temporary, final)
    digest = hashlib.sha256()
    with open(final, "rb") as written:
        for block in iter(lambda: written.read(1 << 20), b""):
            digest.update(block)
    return {"index": job.index, "file": str(final), "sha256": digest.hexdigest(), "records": output["records"],
            "loss": output["loss"], "suppressed_records": output["suppressed_records"], "classes": output["classes"]}
