"""The de-identification pipeline behind `safeshare deid`: policy -> encode -> search -> apply -> release files.

`deidentify` is a plain function usable from Python; `write_release` writes the whole bundle into a hidden sibling
folder and renames it into place (engine.atomic.atomic_folder), so an output folder always holds exactly the files its
manifest describes, and an interrupted re-run leaves the previous output as it was.

The release gate is the policy's gate tightened to the site gate (engine.sitegate); the manifest records both. The
search runs under the policy's time limit and memory bound (`search:`), releasing the best solution found so far with
`optimal: false` when one is reached. The manifest is strict JSON: a non-finite number in it is an error, never
`Infinity` or `NaN`.
"""
from __future__ import annotations

import hashlib
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import __version__
from .atomic import atomic_folder, check_output_folder
from .classes import Evaluation, combined_key
from .encoding import EncodedTable, encode_table
from .errors import InputError
from .lattice import Lattice
from .manifest import Gate, LocalRecoding, Manifest, ParallelRun, ResearchSubset, Risk, finite_json
from .policy import DatasetPolicy, load_policy
from .privacy import PrivacyConfiguration, build_models
from .quality import MODEL_NAMES, make_quality_model
from .search import GeneticParameters, SearchResult, resolve_algorithm, search
from .sitegate import EffectiveGate, SiteGateSource, check_population, combine, load_site_gate, site_folder
from .table import load_input

SUPPRESSED = "*"
RELEASE_FILES = ("data.parquet", "data.csv", "report.html", "manifest.json")


class NoSolutionError(RuntimeError):
    """No transformation satisfies the privacy models within the suppression limit (a refused result, exit 1)."""


@dataclass
class DeidResult:
    """What a run found and released, with the manifest's blocks already typed: the release gate's verdict on the
    released records (`risk`, `gate`), the models as built, and what only some runs have (P4, local recoding, a
    research subset; None otherwise)."""

    policy: DatasetPolicy
    table: EncodedTable
    search: SearchResult
    best: Evaluation
    released: pd.DataFrame
    record_suppressed: np.ndarray
    quality: dict[str, float]
    attribute_quality: dict[str, dict[str, float]]
    seconds: float
    input_frame: pd.DataFrame
    risk: Risk
    gate: Gate
    privacy_models: list[dict[str, Any]]
    parallel: ParallelRun | None = None
    local: LocalRecoding | None = None
    research_subset: ResearchSubset | None = None
    # what was read (engine.sources): the manifest's `input` block; None where the workers read it (--dataset)
    source: dict[str, Any] | None = None

    @property
    def transformation(self) -> dict[str, int]:
        return {a.name: int(level) for a, level in zip(self.table.attributes, self.best.levels)}


def privacy_configuration(policy: DatasetPolicy, records: int | None = None) -> PrivacyConfiguration:
    """The policy's privacy models (built through engine.privacy's registry) with its suppression limit; `records`
    is the size of the table de-identified (k-map's estimators need it)."""
    return PrivacyConfiguration(build_models(policy, {"records": records}), policy.suppression_limit)


def encode_policy_table(policy: DatasetPolicy, loaded
                        ) -> tuple[EncodedTable, "LoadedInput", ResearchSubset | None]:
    """Encode the table the search works on. With a research subset (engine.subset) that is the subset: the input
    is the population, counted per class through the table's `population`; the loaded input is narrowed to the
    subset, which is what is released. Returns the table, the (narrowed) input and what the manifest records."""
    from dataclasses import replace

    from .subset import PopulationTable, resolve_subset

    bounds = {name: (policy.attributes[name].min_level, policy.attributes[name].max_level)
              for name in policy.quasi_identifiers}
    mask = resolve_subset(policy, loaded.frame)
    if mask is None:
        return encode_table(loaded.frame, loaded.hierarchies, policy.source, bounds, loaded.sensitive), loaded, None
    population = loaded.frame
    sample = replace(loaded, frame=population[mask].reset_index(drop=True))
    table = encode_table(sample.frame, loaded.hierarchies, policy.source, bounds, loaded.sensitive)
    table = replace(table, population=PopulationTable(table, population, loaded.hierarchies))
    return table, sample, ResearchSubset(records=int(mask.sum()), population_records=int(mask.size))


def quality_under_all_models(table: EncodedTable, best: Evaluation, aggregation: str, gs_factor: float
                             ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    quality: dict[str, float] = {}
    per_attribute: dict[str, dict[str, float]] = {}
    for name in MODEL_NAMES:
        model = make_quality_model(name, table, aggregation=aggregation, gs_factor=gs_factor)
        quality[name] = model.quality(best.levels, best.codes, best.sizes, best.suppressed)
        losses = model.attribute_losses(best.levels, best.codes, best.sizes, best.suppressed)
        if losses is not None:
            per_attribute[name] = {k: float(min(1.0, max(0.0, 1.0 - v))) for k, v in losses.items()}
    return quality, per_attribute


def apply_transformation(policy: DatasetPolicy, frame: pd.DataFrame, table: EncodedTable, best: Evaluation
                         ) -> tuple[pd.DataFrame, np.ndarray]:
    """Generalize every record, blank out the quasi-identifiers of suppressed records, drop identifying columns."""
    codes = np.stack([a.to_level[level][a.records] for a, level in zip(table.attributes, best.levels)])
    cards = [a.cardinality(level) for a, level in zip(table.attributes, best.levels)]
    # Find each record's class among the search's classes, to reuse its suppression decision exactly.
    keys = combined_key(np.concatenate([best.codes, codes], axis=1), cards)
    class_keys, record_keys = keys[: best.codes.shape[1]], keys[best.codes.shape[1]:]
    order = np.argsort(class_keys, kind="stable")
    record_class = order[np.searchsorted(class_keys, record_keys, sorter=order)]
    if not np.array_equal(class_keys[record_class], record_keys):
        raise RuntimeError("internal error: a record's class is missing from the search result")
    record_suppressed = best.suppressed[record_class]
    out = pd.DataFrame(index=frame.index)
    for name, attribute in policy.attributes.items():
        if attribute.type == "identifying":
            continue
        if attribute.type == "quasi_identifying":
            encoded = next(a for a in table.attributes if a.name == name)
            level = best.levels[table.names.index(name)]
            values = encoded.labels[level][encoded.to_level[level][encoded.records]].astype(object)
            values[record_suppressed] = SUPPRESSED
            out[name] = values
        else:
            out[name] = frame[name].to_numpy()
    return out, record_suppressed


def check_populations(policy: DatasetPolicy, gate: EffectiveGate, records: int) -> None:
    """Every population the run will use (privacy models and gate) is known, finite and contains the sample; checked
    before the search, so a bad population is bad input (exit 2), not a late failure."""
    from .risk import resolve_population
    from .sitegate import population_size

    for index, spec in enumerate(policy.privacy):
        population = getattr(spec, "population", None)
        if population is None:
            continue
        field_name = f"privacy[{index}].population"
        try:
            size = float(resolve_population(population))
        except InputError as exc:
            raise InputError(policy.source, field_name, exc.problem) from None
        check_population(size, records, policy.source, field_name)
    for population in gate.populations:
        population_size(population, records)


def parallel_spec(policy: DatasetPolicy, partitions: int | None = None, scheduler: str | None = None):
    """The policy's `search.parallel` (P4) with the command line's --partitions and --scheduler over it; None when
    neither asks for P4."""
    parallel = policy.search.parallel
    if partitions is not None or scheduler is not None:
        from .policy import ParallelSpec

        base = parallel.model_dump() if parallel is not None else {"partitions": partitions or 2}
        overrides = {k: v for k, v in (("partitions", partitions), ("scheduler", scheduler)) if v is not None}
        try:
            parallel = ParallelSpec.model_validate({**base, **overrides})
        except ValueError as exc:
            raise InputError(policy.source, "search.parallel", str(exc).splitlines()[-1]) from None
    return parallel


def deidentify(policy: DatasetPolicy | str | Path | dict, progress: bool | None = False,
               time_limit: float | None = None, site: SiteGateSource | str | os.PathLike | None = None,
               memory_mb: int | None = None, partitions: int | None = None, scheduler: str | None = None,
               data: pd.DataFrame | None = None) -> DeidResult:
    """Find the optimal transformation under the policy and apply it. Raises InputError or NoSolutionError.

    `policy` is a loaded policy, a policy file, or the policy as a dict (its relative paths then relative to the
    working folder). `data` is a pandas DataFrame de-identified in place of the policy's input (which it may then
    omit); the result's `released` is the released table as a DataFrame, as `write_release` writes it.

    `site` is the site gate (a loaded one, or a site folder); None looks for the site as `safeshare deid` does
    ($SAFESHARE_SITE, /var/lib/safeshare) and falls back to the built-in floor. `time_limit` and `memory_mb`
    override the policy's `search:` limits; `partitions` and `scheduler` its `search.parallel` (P4)."""
    started = time.perf_counter()
    if isinstance(policy, dict):
        from .policy import parse_policy

        policy = parse_policy(policy)
    elif not isinstance(policy, DatasetPolicy):
        policy = load_policy(policy)
    site_gate = site if isinstance(site, SiteGateSource) else load_site_gate(site_folder(site))
    effective_gate = combine(policy.gate, site_gate, policy.source)
    loaded = load_input(policy, data)
    source = loaded.source
    table, loaded, subset = encode_policy_table(policy, loaded)
    check_populations(policy, effective_gate, int(loaded.frame.shape[0]))
    configuration = privacy_configuration(policy, table.n)
    quality_model = make_quality_model(policy.quality.model, table, policy.quality.aggregation,
                                       policy.quality.gs_factor)
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    limit = time_limit if time_limit is not None else policy.search.time_limit_seconds
    memory = memory_mb if memory_mb is not None else policy.search.memory_mb
    try:
        algorithm = resolve_algorithm(configuration, quality_model, policy.search.algorithm, lattice.size)
    except ValueError as exc:   # an algorithm that cannot be exact under this configuration
        raise InputError(policy.source, "search.algorithm", str(exc)) from None
    if policy.search.algorithm == "auto":
        algorithm = "auto"   # validated above; the search weighs the optimal algorithm against the time limit
    def run_search(table: EncodedTable, quality_model, seconds: float) -> SearchResult:
        return search(table, configuration, quality_model, algorithm=algorithm, lattice=lattice, time_limit=seconds,
                      progress=progress, memory_mb=memory, check_limit=policy.search.check_limit,
                      genetic=GeneticParameters(**policy.search.genetic.model_dump()))

    parallel = parallel_spec(policy, partitions, scheduler)
    if parallel is not None:
        if table.population is not None:
            raise InputError(policy.source, "search.parallel",
                             "P4 runs without a research subset (as P4's own implementation)")
        if policy.search.recoding == "local" and parallel.transformation != "local":
            raise InputError(policy.source, "search.parallel.transformation",
                             "search.recoding is local: P4 recodes locally with transformation: local")
        return _with_source(_deidentify_p4(policy, loaded, table, configuration, parallel, limit, effective_gate,
                                           started, progress), source)
    if policy.search.recoding == "local":
        return _with_source(_deidentify_local(policy, loaded, table, configuration, run_search, limit,
                                              effective_gate, started), source)
    result = run_search(table, quality_model, limit)
    if result.best is None:
        stopped = f"; the search stopped early: {result.stopped}" if result.stopped else ""
        raise NoSolutionError(
            f"{policy.source or policy.dataset}: no transformation satisfies the privacy models with at most "
            f"{policy.suppression_limit:g} of the records suppressed ({result.checked} transformations checked"
            f"{stopped})")
    best = result.best
    released, record_suppressed = apply_transformation(policy, loaded.frame, table, best)
    quality, per_attribute = quality_under_all_models(table, best, policy.quality.aggregation,
                                                      policy.quality.gs_factor)
    from .gate import gate_result

    risk, gate = gate_result(effective_gate, best.sizes[~best.suppressed], best.details,
                             required=required_models(policy, table, best))
    return DeidResult(policy, table, result, best, released, record_suppressed, quality, per_attribute,
                      time.perf_counter() - started, loaded.frame, risk, gate, described_models(configuration),
                      research_subset=subset, source=source)


def _with_source(result: DeidResult, source: dict[str, Any]) -> DeidResult:
    result.source = source
    return result


def described_models(configuration: PrivacyConfiguration) -> list[dict[str, Any]]:
    """The privacy models as built, for the manifest: derived parameters (k-map's k') included."""
    return [model.describe() for model in configuration.models]


def required_models(policy: DatasetPolicy, table: EncodedTable, best: Evaluation) -> tuple | None:
    """(models, view, kept) for the gate's `require:` list: the models built like the search's, and the released
    transformation's classes as the models see them (engine.gate.check_required)."""
    if policy.gate is None or not policy.gate.require:
        return None
    from .classes import ClassCache

    view = ClassCache(table, budget_bytes=0).view(best.levels)
    if view.class_count != best.sizes.size or not np.array_equal(view.sizes, best.sizes):
        raise RuntimeError("internal error: the released classes differ from the search's")
    return gate_required_models(policy, table), view, ~best.suppressed


def gate_required_models(policy: DatasetPolicy, table: EncodedTable) -> list:
    from .privacy import build_model

    return [build_model(spec, policy.source, index, {"records": table.n})
            for index, spec in enumerate(policy.gate.require)]


def _deidentify_local(policy: DatasetPolicy, loaded, table: EncodedTable, configuration: PrivacyConfiguration,
                      run_search, limit: float, effective_gate: EffectiveGate, started: float) -> DeidResult:
    """Local recoding (engine.local): the iterations' parts combined, re-checked and measured over the whole table;
    `best` is the first (global) part's evaluation, the manifest's `local` block lists every part."""
    from .gate import gate_result
    from .local import local_recoding

    bounds = {name: (policy.attributes[name].min_level, policy.attributes[name].max_level)
              for name in policy.quasi_identifiers}
    local = local_recoding(policy, loaded.frame, loaded.hierarchies, bounds, table, configuration, run_search, limit,
                           policy.search.local_iterations)
    if local is None:
        raise NoSolutionError(
            f"{policy.source or policy.dataset}: no transformation satisfies the privacy models with at most "
            f"{policy.suppression_limit:g} of the records suppressed (local recoding, first iteration)")
    first = local.parts[0]
    combined = local.combined
    best = Evaluation(first.best.levels, combined.codes, combined.sizes, combined.suppressed,
                      int(combined.sizes[combined.suppressed].sum()), True, first.best.loss, dict(combined.details))
    risk, gate = gate_result(effective_gate, combined.sizes[~combined.suppressed], combined.details)
    return DeidResult(policy, table, first.search, best, local.released, local.record_suppressed, local.quality,
                      local.attribute_quality, time.perf_counter() - started, loaded.frame, risk, gate,
                      described_models(configuration), local=LocalRecoding.model_validate(local.manifest()))


def _deidentify_p4(policy: DatasetPolicy, loaded, table: EncodedTable, configuration: PrivacyConfiguration,
                   parallel, limit: float, effective_gate: EffectiveGate, started: float,
                   progress: bool | None = False) -> DeidResult:
    """P4 (engine.parallel) on a Dask cluster, or in this process with `scheduler: none`. Its release is measured over
    the whole table: classes are the released values with the suppression each record got (a class can be kept in
    one partition and suppressed in another), so every quality model and the gate see exactly what is released."""
    from .gate import gate_result
    from .parallel import P4NoSolution, run_p4
    from .parallel.cluster import executor_for
    from .parallel.p4 import describe_run

    try:
        with executor_for(parallel.scheduler, progress=progress) as (executor, where):
            p4 = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, parallel.partitions, executor,
                        parallel.partitioning, parallel.harmonization, limit / 2, parallel.seed,
                        parallel.statistics, parallel.transformation)
    except P4NoSolution as exc:
        raise NoSolutionError(f"{policy.source or policy.dataset}: P4 with {parallel.partitions} partitions: {exc}")
    if p4.record_levels is None:
        codes = np.stack([a.to_level[level][a.records] for a, level in zip(table.attributes, p4.levels)]
                         + [p4.record_suppressed.astype(np.int64)])
        cards = [a.cardinality(level) for a, level in zip(table.attributes, p4.levels)] + [2]
        from .classes import group

        class_codes, sizes, record_class = group(codes, np.ones(table.n, dtype=np.int64), cards)
        suppressed = class_codes[-1].astype(bool)
        best = Evaluation(tuple(p4.levels), class_codes[:-1], sizes, suppressed, int(sizes[suppressed].sum()), True)
        quality, per_attribute = quality_under_all_models(table, best, policy.quality.aggregation,
                                                          policy.quality.gs_factor)
    else:   # local transformation: classes are the released values (a class can span levels and partitions)
        from .local import quality_at_record_levels, released_classes

        class_codes, sizes, suppressed, record_class = released_classes(p4.released, table.names,
                                                                        p4.record_suppressed)
        best = Evaluation(tuple(p4.levels), class_codes, sizes, suppressed, int(sizes[suppressed].sum()), True)
        quality, per_attribute = quality_at_record_levels(policy, table, p4.record_levels, p4.record_suppressed, best,
                                                          p4.suppression_levels)
    best.loss = 1.0 - quality[policy.quality.model]
    required = None
    if policy.gate is not None and policy.gate.require:
        # A class of the release can be kept in one partition and suppressed in another: the view is by record.
        from .distributions import view_from_records

        view = view_from_records(best.codes, sizes, record_class, table.sensitive)
        required = (gate_required_models(policy, table), view, ~suppressed)
    risk, gate = gate_result(effective_gate, sizes[~suppressed], p4.merged.details, required=required)
    search, record = describe_run(p4, best, table, parallel, where, p4.quality, bool(configuration.risk_models))
    local = None
    if p4.record_levels is not None:
        # the manifest's transformation is then the coarsest level any released record has
        local = LocalRecoding(recoding="local", iterations=p4.iterations, fell_back=None)
    return DeidResult(policy, table, search, best, p4.released, p4.record_suppressed, quality, per_attribute,
                      time.perf_counter() - started, loaded.frame, risk, gate, described_models(configuration),
                      parallel=record, local=local)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, engine="pyarrow", compression="zstd")
    return buffer.getvalue()


def build_manifest(result: DeidResult, data_sha256: str, files: dict[str, str], layout: str | None = None
                   ) -> Manifest:
    """The release's manifest, complete but for the report's own hash (`Manifest.with_file` adds it once the report
    is rendered from this). Fields in the order releases have always had them; the blocks only some runs have
    follow `seconds`; `layout` is given only for a partitioned dataset release."""
    policy = result.policy
    best = result.best
    class_sizes = best.sizes[~best.suppressed]
    fields: dict[str, Any] = {
        "format": "safeshare-release/1",
        "engine_version": __version__,
        "dataset": policy.dataset,
        "policy_sha256": policy.sha256,
        "privacy": [spec.model_dump() for spec in policy.privacy],
        "suppression_limit": policy.suppression_limit,
        "transformation": result.transformation,
        "optimized_for": policy.quality.model,
        "quality": result.quality,
        "attribute_quality": result.attribute_quality,
        "algorithm": result.search.algorithm,
        "optimal": result.search.optimal,
        "search_stopped": result.search.stopped,
        "search_limits": dict(result.search.limits or {}),
        "algorithm_choice": result.search.choice,
        "quality_over_time": [list(point) for point in result.search.quality_over_time],
        "records": int(result.table.n),
        "suppressed_records": int(best.suppressed_records),
        "risk_model_evaluations": int(result.search.risk_evaluations),
        "equivalence_classes": int(class_sizes.size),
        "smallest_class": int(class_sizes.min()) if class_sizes.size else 0,
        "checked_transformations": int(result.search.checked),
        "lattice_size": int(result.search.lattice_size),
        "risk": result.risk.document(),
        "gate": result.gate.document(),
        "data_sha256": data_sha256,
        "files": files,
        "seconds": round(result.seconds, 6),
    }
    if result.parallel is not None:   # P4: partitions, harmonized levels per partition, seconds per step
        fields["parallel"] = result.parallel.document()
    fields["privacy_models"] = result.privacy_models
    if result.research_subset is not None:   # the input is the population; the subset is released
        fields["research_subset"] = result.research_subset.document()
    # local recoding: the transformation above is the first part's; every part in local_recoding
    fields["recoding"] = "global" if result.local is None else "local"
    if result.local is not None:
        fields["local_recoding"] = result.local.document()
    if result.source:   # what was read: kind, file or table or query hash, records (never a URL or password)
        fields["input"] = dict(result.source)
    if layout is not None:
        fields["layout"] = layout
    return Manifest.model_validate(finite_json(fields))


def check_output(out_dir: str | Path) -> Path:
    """Refuse an output folder `write_release` could not or must not replace (InputError naming --out)."""
    return check_output_folder(out_dir, RELEASE_FILES)


def write_release(result: DeidResult, out_dir: str | Path) -> Manifest:
    """Write data.csv, data.parquet, report.html and manifest.json as one folder: staged in a hidden sibling and
    renamed into place as a whole (replacing a previous output of the same run in one step). The report is
    rendered once, from the finished manifest and what the run computed for it (engine.report_data)."""
    from . import report
    from .report_data import report_data

    data = parquet_bytes(result.released)
    csv_text = result.released.to_csv(index=False, sep=";", lineterminator="\n")
    files = {"data.parquet": _sha256(data), "data.csv": _sha256(csv_text.encode("utf-8"))}
    manifest = build_manifest(result, files["data.parquet"], files)
    with atomic_folder(out_dir, RELEASE_FILES) as staging:
        (staging / "data.parquet").write_bytes(data)
        (staging / "data.csv").write_text(csv_text, encoding="utf-8")
        html = report.render_report(manifest, report_data(result))
        (staging / "report.html").write_text(html, encoding="utf-8")
        manifest = manifest.with_file("report.html", _sha256(html.encode("utf-8")))
        (staging / "manifest.json").write_text(manifest.to_json(), encoding="utf-8")
    return manifest


__all__ = ["DeidResult", "NoSolutionError", "RELEASE_FILES", "apply_transformation", "check_output", "deidentify",
           "write_release"]
