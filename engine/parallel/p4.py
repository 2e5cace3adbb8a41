"""P4 (Prasser et al., digest P3): anonymize partitions in parallel, harmonize, check compliance, merge.

The driver splits the table (engine.parallel.partitioning), sends each partition to a worker once, and then only
exchanges class summaries with them:

1. each worker finds its partition's optimum under the whole configuration;
2. the driver harmonizes the levels (average or minimum) and each worker summarizes its partition at that
   transformation, suppressing the classes its class models reject;
3. compliance: the driver merges the partitions' released classes by their labels and checks every class model on the
   merged classes (P4 does this only when privacy is not fully monotone; it is cheap, so here it always runs and fails
   closed); then, beyond P4, the risk-based models (population uniqueness, average risk, ...) are decided on the merged
   histogram with the single-machine engine's suppression order (size, the quality model's per-class loss for Loss,
   first record) and its bisection;
4. each worker releases its records with the suppression decided, and reports its quality; the quality of the whole
   is the row-weighted average of the partitions' (as P4 reports it).

The suppression limit holds for the whole table: the records suppressed by all steps together are at most
floor(limit x n), or the run has no solution.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import atomic_folder
from ..classes import Evaluation, group
from ..distributions import ClassView
from ..errors import InputError
from ..policy import DatasetPolicy
from ..privacy import PrivacyConfiguration
from .partitioning import harmonize, random_partitions, sorted_partitions
from .worker import PartitionClasses, PartitionJob, classes, optimum, release

SUPPRESSED = "*"


class P4NoSolution(RuntimeError):
    """No harmonized transformation meets the privacy models within the suppression limit."""


class P4ClusterError(RuntimeError):
    """The cluster could not finish a step (a worker died more often than Dask retries, the scheduler went away):
    the run fails and writes nothing. Errors raised by the steps' own code pass through unchanged."""


@contextmanager
def cluster_errors(step: str | None):
    """Turn what Dask and its transport raise into P4ClusterError naming the step; Dask itself has already retried
    the tasks of a dead worker on another (recomputing what was lost from the tasks that made it)."""
    try:
        yield
    except (P4NoSolution, InputError):
        raise
    except Exception as exc:
        module = type(exc).__module__ or ""
        if module.split(".")[0] in ("distributed", "tornado", "asyncio", "concurrent") \
                or isinstance(exc, (TimeoutError, ConnectionError)):
            raise P4ClusterError(f"the Dask cluster failed during the {step or 'P4'} step: "
                                 f"{type(exc).__name__}: {exc}") from exc
        raise


@dataclass
class P4Result:
    levels: tuple[int, ...]
    partition_levels: list[tuple[int, ...] | None]
    released: pd.DataFrame
    record_suppressed: np.ndarray
    suppressed_records: int
    loss: float
    seconds: dict[str, float]
    merged: Evaluation
    details: dict = field(default_factory=dict)
    # Local transformation: each record's levels (attributes x records) and the levels at which its suppression is
    # counted (engine.local.quality_at_record_levels); `levels` is then the coarsest level any record got.
    record_levels: np.ndarray | None = None
    suppression_levels: np.ndarray | None = None
    iterations: list[dict] = field(default_factory=list)

    @property
    def quality(self) -> float:
        return 1.0 - self.loss


class StepBar:
    """A tqdm bar per P4 step, one tick per partition done; shown when asked for (on a terminal when None)."""

    def __init__(self, progress: bool | None) -> None:
        self.progress = progress

    def __call__(self, step: str | None, total: int):
        if step is None or self.progress is False:
            return None
        from tqdm import tqdm

        return tqdm(total=total, desc=f"P4 {step}", unit="partition", leave=False,
                    disable=None if self.progress is None else False)


class LocalExecutor:
    """Runs the steps in this process, one partition after the other (tests, and P4 without a cluster). Its handles
    are the objects themselves."""

    def __init__(self, progress: bool | None = False) -> None:
        self.bar = StepBar(progress)

    def put(self, jobs: Sequence[PartitionJob]) -> list:
        return list(jobs)

    def compute(self, delayed: Sequence) -> list:
        return [item.compute(scheduler="sync") for item in delayed]

    def submit(self, function: Callable, *args, **kwargs):
        return function(*args, **kwargs)

    def map(self, function: Callable, items: Sequence, step: str | None = None, **kwargs) -> list:
        bar = self.bar(step, len(items))
        results = []
        for item in items:
            results.append(function(item, **kwargs))
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.close()
        return results


class DaskExecutor:
    """Runs the steps on a Dask cluster: partitions are scattered once (or assembled there) and stay on their
    workers. Dask retries a task whose worker died; an error in a task fails the step with that error."""

    def __init__(self, client, progress: bool | None = False) -> None:
        self.client = client
        self.bar = StepBar(progress)

    def put(self, jobs: Sequence[PartitionJob]) -> list:
        with cluster_errors("partition"):
            return self.client.scatter(list(jobs))

    def compute(self, delayed: Sequence) -> list:
        with cluster_errors("read"):
            return self.client.compute(list(delayed))

    def submit(self, function: Callable, *args, **kwargs):
        """A handle (future) of the result, left on the worker that computed it."""
        return self.client.submit(function, *args, pure=False, **kwargs)

    def map(self, function: Callable, items: Sequence, step: str | None = None, **kwargs) -> list:
        with cluster_errors(step):
            futures = self.client.map(function, items, pure=False, **kwargs)
            try:
                bar = self.bar(step, len(futures))
                if bar is not None:
                    from distributed import as_completed

                    for _ in as_completed(futures):
                        bar.update()
                    bar.close()
                return self.client.gather(futures)
            except BaseException:
                self.client.cancel(futures)   # a failed step starts nothing more (what runs, runs to its end)
                raise


def table_distributions(frame: pd.DataFrame, sensitive: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per sensitive attribute the whole table's distinct values (in text order) and counts."""
    from ..encoding import sorted_codes

    out = {}
    for name in sensitive:
        values, records = sorted_codes(frame[name].to_numpy())
        out[name] = (values, np.bincount(records, minlength=values.size).astype(np.int64))
    return out


# Models that compare each class's sensitive distribution with the whole table's.
TABLE_DISTRIBUTION_MODELS = frozenset({"t_closeness", "delta_disclosure", "beta_likeness"})


def resolve_strategy(policy: DatasetPolicy, partitioning: str, statistics: str) -> tuple[str, str]:
    """`auto` partitioning and statistics by the policy's models. P4 partitions sorted, which keeps records with
    similar quasi-identifiers together (what k-anonymity and population uniqueness need), and each partition compares
    with its own sensitive distribution. Under a model that compares classes with the whole table's distribution
    (t-closeness, delta-disclosure, beta-likeness) sorted partitions have distributions far from the table's, so
    their optima fail on the merged table: there `auto` draws random partitions (each close to the table's
    distribution) anonymized against the table's own distribution, whose classes then still comply when merged
    (the distance of a union of classes is at most the larger of theirs for the equal distance). Measured on ADULT,
    t = 0.2, suppression limit 100 %, 2 partitions: 1.3 % below the optimum against 48 % with sorted partitions."""
    distribution = any(spec.model in TABLE_DISTRIBUTION_MODELS for spec in policy.privacy)
    if partitioning == "auto":
        partitioning = "random" if distribution else "sorted"
    if statistics == "auto":
        statistics = "table" if distribution else "partition"
    return partitioning, statistics


def partition_jobs(policy: DatasetPolicy, frame: pd.DataFrame, hierarchies: dict, sensitive: dict, partitions: int,
                   partitioning: str = "sorted", seed: int = 0, statistics: str = "partition") -> list[PartitionJob]:
    qis = list(hierarchies)
    if partitioning == "sorted":
        parts = sorted_partitions(frame, qis, partitions)
    elif partitioning == "random":
        parts = random_partitions(len(frame), partitions, seed)
    else:
        raise ValueError(f"unknown partitioning {partitioning!r}")
    distributions = table_distributions(frame, sensitive) if statistics == "table" and sensitive else None
    return [PartitionJob(i, policy, hierarchies, sensitive, frame.iloc[rows].reset_index(drop=True), rows, len(frame),
                         distributions)
            for i, rows in enumerate(parts)]


def run_p4(policy: DatasetPolicy, frame: pd.DataFrame, hierarchies: dict, sensitive: dict, partitions: int,
           executor=None, partitioning: str = "sorted", harmonization: str = "average",
           time_limit: float | None = None, seed: int = 0, statistics: str = "partition",
           transformation: str = "global") -> P4Result:
    """P4 on `frame` (the table) with the hierarchies built for the whole of it, with a global transformation
    (harmonized) or a local one (each partition locally recoded, no harmonization; P4's LOCAL setting).
    `statistics: table` gives every partition the whole table's sensitive distributions instead of its own (P4's);
    the merged release is checked against the table's either way."""
    executor = executor or LocalExecutor()
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    partitioning, statistics = resolve_strategy(policy, partitioning, statistics)
    jobs = partition_jobs(policy, frame, hierarchies, sensitive, partitions, partitioning, seed, statistics)
    handles = executor.put(jobs)
    seconds["partition"] = time.perf_counter() - started
    strategy = {"partitioning": partitioning, "statistics": statistics}
    if transformation == "local":
        result = _run_p4_local(policy, frame, handles, hierarchies, sensitive, executor, time_limit, seconds)
        result.details.update(strategy)
        return result
    if transformation != "global":
        raise ValueError(f"unknown transformation {transformation!r}")
    levels, optima, merged, gone = anonymize_partitions(policy, handles, len(frame), hierarchies, sensitive, executor,
                                                        harmonization, time_limit, seconds)
    mark = time.perf_counter()
    outputs = executor.map(release, handles, step="merge", levels=levels, suppressed_labels=gone)
    released = pd.concat([o["released"] for o in outputs], ignore_index=True)
    released.index = np.concatenate([o["rows"] for o in outputs])
    released = released.sort_index().reset_index(drop=True)   # back in the input's order
    record_suppressed = np.zeros(len(frame), dtype=bool)
    for output in outputs:
        record_suppressed[output["rows"]] = output["record_suppressed"]
    seconds["merge"] = time.perf_counter() - mark
    suppressed, loss = _check_limit(policy, outputs, len(frame))
    return P4Result(levels, [o["levels"] for o in optima], released, record_suppressed, suppressed, loss, seconds,
                    merged, {**_details(optima, merged), **strategy})


def _run_p4_local(policy: DatasetPolicy, frame: pd.DataFrame, handles: Sequence, hierarchies: dict, sensitive: dict,
                  executor, time_limit: float | None, seconds: dict[str, float]) -> P4Result:
    """P4 with local transformation: each partition is locally recoded (worker.local_classes); compliance merges
    the partitions' released classes by their released values (records of different partitions and iterations that
    read the same meet in one class) and checks every class model and, beyond P4, decides the risk-based models on
    the merged histogram (order: size, then first record, as single-machine local recoding); the workers blank what
    it suppressed. Quality is measured over the whole table with each record at its own levels."""
    from .worker import local_classes, release_local

    n = int(frame.shape[0])
    mark = time.perf_counter()
    summaries = executor.map(local_classes, handles, step="anonymize", time_limit=time_limit)
    seconds["anonymize"] = time.perf_counter() - mark
    seconds["harmonize"] = 0.0
    mark = time.perf_counter()
    merged, gone, suppressed = comply(policy, summaries, None, n, hierarchies, sensitive)
    seconds["compliance"] = time.perf_counter() - mark
    limit = max_suppressed(policy, n)
    if suppressed > limit:
        raise P4NoSolution(f"the partitions' local recodings suppress {suppressed} records on the merged table, "
                           f"above the limit {limit}")
    mark = time.perf_counter()
    outputs = executor.map(release_local, handles, step="merge", suppressed_labels=gone)
    released = pd.concat([o["released"] for o in outputs], ignore_index=True)
    rows = np.concatenate([o["rows"] for o in outputs])
    released.index = rows
    released = released.sort_index().reset_index(drop=True)
    record_suppressed = np.zeros(n, dtype=bool)
    names = list(hierarchies)
    record_levels = np.zeros((len(names), n), dtype=np.int64)
    suppression_levels = np.zeros((len(names), n), dtype=np.int64)
    for output in outputs:
        record_suppressed[output["rows"]] = output["record_suppressed"]
        record_levels[:, output["rows"]] = output["record_levels"]
        suppression_levels[:, output["rows"]] = np.asarray(output["suppression_levels"])[:, None]
    seconds["merge"] = time.perf_counter() - mark
    suppressed, loss = _check_limit(policy, outputs, n)
    first_parts = [o["iterations"][0]["transformation"] for o in outputs]
    partition_levels = [tuple(int(part[name]) for name in names) for part in first_parts]
    coarsest = tuple(int(v) for v in record_levels[:, ~record_suppressed].max(axis=1)) \
        if (~record_suppressed).any() else tuple(int(v) for v in record_levels.max(axis=1))
    details = {"partitions": [{"index": o["index"], "records": o["records"], "levels": partition_levels[i],
                               "iterations": len(o["iterations"]), "fell_back": o["fell_back"],
                               "checked": o["checked"]}
                              for i, o in enumerate(outputs)],
               "merged_classes": int(merged.sizes.size), "risk": merged.details}
    return P4Result(coarsest, partition_levels, released, record_suppressed, suppressed, loss, seconds, merged,
                    details, record_levels, suppression_levels,
                    [it for o in outputs for it in o["iterations"]])


@dataclass
class P4DatasetResult:
    """P4 whose release the workers wrote as a partitioned Parquet dataset (`files`, one per partition). `quality`
    holds every quality model measured over the whole release (`release`: its classes, from the partitions'
    released classes); `loss` is the policy's model averaged over partitions by records, as P4 reports it."""

    levels: tuple[int, ...]
    partition_levels: list[tuple[int, ...] | None]
    files: list[str]
    records: int
    suppressed_records: int
    loss: float
    seconds: dict[str, float]
    merged: Evaluation
    release: Evaluation
    quality: dict[str, float]
    attribute_quality: dict[str, dict[str, float]]
    details: dict = field(default_factory=dict)
    table: object | None = None   # the whole table's summary (engine.parallel.dataset.summary_table)
    sha256: dict[str, str] = field(default_factory=dict)   # each part's file name -> its sha256

    @property
    def quality_row_weighted(self) -> float:
        return 1.0 - self.loss


def run_p4_dataset(policy: DatasetPolicy, partitions: int, executor, directory: str,
                   partitioning: str = "sorted", harmonization: str = "average", time_limit: float | None = None,
                   seed: int = 0, blocksize: int | str = "64MB", statistics: str = "partition") -> P4DatasetResult:
    """P4 on the policy's input file read by the workers (engine.parallel.dataset), its release written by them into
    `directory` (which every worker must reach: a local folder for a local cluster, a shared one otherwise) with a
    manifest.json listing each part's sha256. The folder appears whole or not at all (engine.atomic.atomic_folder):
    a failing step leaves no part behind. The driver holds summaries only: distinct values, quasi-identifier
    combinations and classes, never records."""
    from ..pipeline.assess import quality_under_all_models
    from .dataset import load_dataset, partition_dataset, release_evaluation, summary_table
    from .worker import write_release

    if policy.search.parallel is not None and policy.search.parallel.transformation != "global" \
            or policy.search.recoding != "global":
        raise InputError(policy.source, "search.parallel.transformation",
                         "a dataset written by the workers is released with a global transformation only; local "
                         "transformation runs on a table the driver reads (safeshare deid --partitions)")
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    partitioning, statistics = resolve_strategy(policy, partitioning, statistics)
    dataset = load_dataset(policy, executor, blocksize)
    seconds["read"] = time.perf_counter() - started
    mark = time.perf_counter()
    handles = partition_dataset(policy, dataset, executor, partitions, partitioning, seed, statistics)
    dataset.chunks = []   # the chunks' memory on the workers is freed once their partitions are assembled
    seconds["partition"] = time.perf_counter() - mark
    levels, optima, merged, gone = anonymize_partitions(policy, handles, dataset.records, dataset.hierarchies,
                                                        dataset.sensitive, executor, harmonization, time_limit,
                                                        seconds)
    mark = time.perf_counter()
    target = Path(directory)
    previous = ([p.name for p in target.glob("part-*.parquet")] + ["manifest.json"]
                if (target / "manifest.json").is_file() else [])
    with atomic_folder(target, previous, option="directory") as staging:
        outputs = executor.map(write_release, handles, step="write", levels=levels, suppressed_labels=gone,
                               directory=str(staging))
        suppressed, loss = _check_limit(policy, outputs, dataset.records)
        table = summary_table(policy, dataset)
        whole = release_evaluation(table, levels, [o["classes"] for o in outputs])
        quality, per_attribute = quality_under_all_models(table, whole, policy.quality.aggregation,
                                                          policy.quality.gs_factor)
        kept = whole.sizes[~whole.suppressed]
        files = {Path(o["file"]).name: o["sha256"] for o in outputs}
        manifest = {"format": "safeshare-p4-dataset/1", "dataset": policy.dataset, "policy_sha256": policy.sha256,
                    "records": dataset.records, "suppressed_records": suppressed,
                    "transformation": dict(zip(dataset.hierarchies, (int(v) for v in levels))),
                    "partition_transformations": [None if o["levels"] is None
                                                  else dict(zip(dataset.hierarchies, o["levels"])) for o in optima],
                    "quality": quality, "attribute_quality": per_attribute, "quality_row_weighted": 1.0 - loss,
                    "equivalence_classes": int(kept.size), "smallest_class": int(kept.min()) if kept.size else 0,
                    "files": files}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    seconds["write"] = time.perf_counter() - mark
    return P4DatasetResult(levels, [o["levels"] for o in optima], [str(target / name) for name in files],
                           dataset.records, suppressed, loss, seconds, merged, whole, quality, per_attribute,
                           {**_details(optima, merged), "partitioning": partitioning, "statistics": statistics},
                           table, files)


def anonymize_partitions(policy: DatasetPolicy, handles: Sequence, records: int, hierarchies: dict, sensitive: dict,
                         executor, harmonization: str, time_limit: float | None, seconds: dict[str, float]):
    """Steps 1-3 on partitions already on their workers: (levels, optima, merged evaluation, labels to suppress)."""
    mark = time.perf_counter()
    optima = executor.map(optimum, handles, step="anonymize", time_limit=time_limit)
    seconds["anonymize"] = time.perf_counter() - mark
    found = [o["levels"] for o in optima if o["levels"] is not None]
    if not found:
        raise P4NoSolution("no partition has a solution under the privacy models")
    seconds["harmonize"] = seconds["compliance"] = 0.0
    limit = max_suppressed(policy, records)
    tried = []
    for levels in raised_levels(harmonize(found, harmonization), found, hierarchies, policy):
        mark = time.perf_counter()
        summaries: list[PartitionClasses] = executor.map(classes, handles, step="harmonize", levels=levels)
        seconds["harmonize"] += time.perf_counter() - mark
        mark = time.perf_counter()
        try:
            merged, gone, suppressed = comply(policy, summaries, levels, records, hierarchies, sensitive)
        except P4NoSolution as exc:
            tried.append((levels, str(exc)))
            seconds["compliance"] += time.perf_counter() - mark
            continue
        seconds["compliance"] += time.perf_counter() - mark
        if suppressed <= limit:
            if tried:
                merged.details = {**merged.details, "raised_from": [list(t[0]) for t in tried]}
            return levels, optima, merged, gone
        tried.append((levels, f"suppresses {suppressed} records, above the limit {limit}"))
    raise P4NoSolution(f"no harmonized transformation meets the models within the suppression limit: "
                       + "; ".join(f"{list(lv)} {why}" for lv, why in tried))


def raised_levels(harmonized: tuple[int, ...], found: Sequence[tuple[int, ...]], hierarchies: dict,
                  policy: DatasetPolicy):
    """The harmonized transformation, then, when its merged release suppresses more than the limit allows (the
    partitions' optima were found for their own records, not for the merged classes), the partitions' per-attribute
    maximum, then every attribute one level higher at a time up to the top of the lattice. P4 itself never needs
    this: its experiments allow 100 % suppression."""
    tops = tuple(policy.attributes[name].max_level if policy.attributes[name].max_level is not None
                 else hierarchies[name].max_level for name in hierarchies)
    seen = set()
    current = tuple(harmonized)
    candidates = [current, tuple(int(v) for v in np.max(np.array(found), axis=0))]
    for candidate in candidates:
        if candidate not in seen:
            seen.add(candidate)
            yield candidate
    current = candidates[-1]
    while current != tops:
        current = tuple(min(level + 1, top) for level, top in zip(current, tops))
        if current not in seen:
            seen.add(current)
            yield current


def describe_run(result: "P4Result | P4DatasetResult", best: Evaluation, table, parallel, where: str,
                 row_weighted: float, risk_models: bool, **record: object):
    """What a P4 run puts into its release's manifest, for the in-memory and the dataset run alike: the search result
    (checks summed over partitions, never a proven optimum) and the `parallel` block (what ran, each partition's
    optimum, seconds per step, P4's row-weighted quality, `record`'s extra fields). The estimate of the risk-based
    models, decided on the merged release and not per partition, is in `result.merged.details`
    (engine.gate.gate_result records it with the risk)."""
    from ..lattice import Lattice
    from ..manifest import ParallelRun
    from ..search.common import SearchResult

    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    search = SearchResult(best, sum(p["checked"] for p in result.details["partitions"]), False,
                          sum(result.seconds.values()), lattice.size, "p4")
    block = {"partitions": parallel.partitions, "scheduler": where, "partitioning": result.details["partitioning"],
             "harmonization": parallel.harmonization if parallel.transformation == "global" else None,
             "transformation": parallel.transformation, "statistics": result.details["statistics"],
             "partition_transformations": [None if lv is None else dict(zip(table.names, lv))
                                           for lv in result.partition_levels],
             "seconds_per_step": {k: round(v, 6) for k, v in result.seconds.items()},
             "quality_row_weighted": row_weighted, "risk_models_decided_on_merged_table": risk_models, **record}
    return search, ParallelRun.model_validate(block)


def max_suppressed(policy: DatasetPolicy, records: int) -> int:
    """How many of `records` the policy's suppression limit lets all steps together suppress (the engine's rule,
    engine.privacy.PrivacyConfiguration.max_suppressed)."""
    return PrivacyConfiguration((), policy.suppression_limit).max_suppressed(records)


def _check_limit(policy: DatasetPolicy, outputs: Sequence[dict], records: int) -> tuple[int, float]:
    """(suppressed records, row-weighted loss); the suppression limit holds for the whole table."""
    total = sum(o["records"] for o in outputs)
    loss = sum(o["loss"] * o["records"] for o in outputs) / total
    suppressed = sum(o["suppressed_records"] for o in outputs)
    limit = max_suppressed(policy, records)
    if suppressed > limit:
        raise P4NoSolution(f"the harmonized transformation suppresses {suppressed} records, above the limit {limit}")
    return suppressed, loss


def _details(optima: Sequence[dict], merged: Evaluation) -> dict:
    return {"partitions": [dict(o) for o in optima], "merged_classes": int(merged.sizes.size),
            "risk": merged.details}


def comply(policy: DatasetPolicy, summaries: Sequence[PartitionClasses], levels: tuple[int, ...] | None, records: int,
           hierarchies: dict, sensitive: dict | None = None) -> tuple[Evaluation, pd.DataFrame, int]:
    """Step 3 on the driver: merge the partitions' released classes by label, check the class models on the merged
    classes and decide the risk-based models on the merged histogram. Returns the merged evaluation, the labels of
    the merged classes to suppress everywhere, and how many records all steps suppress together."""
    from ..pipeline.prepare import privacy_configuration

    names = list(summaries[0].labels.columns)
    parts = []
    for summary in summaries:
        part = summary.labels.copy()
        part["size"] = summary.sizes
        part["kept"] = np.where(summary.suppressed, 0, summary.sizes)
        part["first"] = summary.first
        part["partition"] = summary.index
        part["class"] = np.arange(summary.sizes.size)
        parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    released = table[table["kept"] > 0]
    merged = released.groupby(names, sort=False, dropna=False).agg(size=("kept", "sum"), first=("first", "min"))
    merged = merged.sort_values("first").reset_index()
    configuration = privacy_configuration(policy, records)
    codes = np.stack([pd.factorize(merged[name])[0] for name in names]) if len(merged) else np.zeros((len(names), 0),
                                                                                                      dtype=np.int64)
    sizes = merged["size"].to_numpy(dtype=np.int64)
    view = _merged_view(codes, sizes, merged, released, summaries, names, sensitive)
    suppressed = np.zeros(sizes.size, dtype=bool)
    for model in configuration.class_models:
        suppressed |= model.violating(view)
        if model.blocks_release(view):
            raise P4NoSolution(f"{model.name} fails on classes that cannot be suppressed")
    evaluation = Evaluation(tuple(levels or ()), codes, sizes, suppressed, int(sizes[suppressed].sum()), True)
    already = int(table["size"].sum() - table["kept"].sum())
    limit = max_suppressed(policy, records)
    for model in configuration.risk_models:
        visible = ~evaluation.suppressed & ~(merged[names] == SUPPRESSED).all(axis=1).to_numpy()
        order = _suppression_order(policy, merged, names, sizes, visible, levels, hierarchies)
        evaluation = model.enforce(evaluation, order, max(limit - already, -1), visible)
        if not evaluation.solution:
            raise P4NoSolution(f"{model.name} cannot be met on the merged table within the suppression limit")
    gone = merged.loc[evaluation.suppressed, names].reset_index(drop=True)
    return evaluation, gone, already + int(evaluation.suppressed_records)


def _merged_view(codes, sizes, merged: pd.DataFrame, released: pd.DataFrame, summaries, names,
                 sensitive_hierarchies: dict | None = None) -> ClassView:
    """The merged classes as class models see them: sizes and, per sensitive attribute, the summed value counts."""
    sensitive = summaries[0].sensitive
    if not sensitive:
        return ClassView(codes, sizes)
    from ..sensitive import EncodedSensitive

    if len(sensitive) > 1:
        raise InputError(None, "search.parallel", "P4 supports one sensitive attribute per policy so far")
    name = next(iter(sensitive))
    index = merged[names].assign(merged=np.arange(len(merged)))
    every, kept_rows = [], []
    for summary in summaries:
        frame = summary.sensitive[name]
        every.append(frame)
        kept = ~summary.suppressed[frame["class"].to_numpy()]
        kept_rows.append(frame[kept].join(summary.labels, on="class"))
    every = pd.concat(every, ignore_index=True)
    # The table's distribution is over every record, suppressed ones included (as for a single machine).
    values = np.unique(every["value"].to_numpy().astype(str))
    table_counts = np.bincount(np.searchsorted(values, every["value"].to_numpy().astype(str)),
                               weights=every["count"].to_numpy(), minlength=values.size).astype(np.int64)
    counts = pd.concat(kept_rows, ignore_index=True).merge(index, on=names)
    value_codes = np.searchsorted(values, counts["value"].to_numpy().astype(str))
    # The view's joint classes are (merged class, value) pairs.
    keys = counts["merged"].to_numpy() * values.size + value_codes
    inverse, uniques = pd.factorize(keys, sort=True)
    joint_sizes = np.bincount(inverse, weights=counts["count"].to_numpy()).astype(np.int64)
    uniques = np.asarray(uniques)
    encoded = EncodedSensitive(name, np.zeros(0, dtype=np.int64), values, table_counts,
                               (sensitive_hierarchies or {}).get(name))
    return ClassView(codes, sizes, (encoded,), (uniques // values.size).astype(np.int64),
                     (uniques % values.size)[None, :].astype(np.int64), joint_sizes)


def _suppression_order(policy: DatasetPolicy, merged: pd.DataFrame, names, sizes: np.ndarray, visible: np.ndarray,
                       levels, hierarchies: dict) -> np.ndarray:
    """Classes in the single-machine engine's order: size, under Loss ARX's per-class loss (size x the label's share
    of its hierarchy, aggregated as the policy says), then first record. With local transformation (`levels` None:
    a class's labels come from different levels) size then first record, as single-machine local recoding."""
    index = np.flatnonzero(visible)
    first = merged["first"].to_numpy()[index]
    if policy.quality.model != "loss" or levels is None:
        return index[np.lexsort((first, sizes[index]))]
    values = np.empty((len(names), index.size))
    for i, (name, level) in enumerate(zip(names, levels)):
        hierarchy = hierarchies[name]
        row_codes, row_labels = hierarchy.level_codes(level)
        shares = pd.Series(np.bincount(row_codes, minlength=row_labels.size) / len(hierarchy),
                           index=row_labels.astype(str))
        values[i] = sizes[index] * shares.reindex(merged[name].to_numpy()[index].astype(str)).to_numpy()
    aggregation = policy.quality.aggregation
    if aggregation == "geometric_mean":
        keys = np.prod(values + 1.0, axis=0) ** (1.0 / values.shape[0]) - 1.0
    elif aggregation == "arithmetic_mean":
        keys = values.mean(axis=0)
    else:
        keys = values.sum(axis=0)
    return index[np.lexsort((first, keys, sizes[index]))]
