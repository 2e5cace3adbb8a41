"""The encode step and what every run of one policy shares: the table encoded (narrowed to a research subset where
there is one), the privacy models and quality model built, the populations checked, the lattice, the limits and the
search the runs call (`Prepared.search`).

Below the runs (engine.runs) and the orchestrator (engine.deid); the P4 workers build their privacy models through
`privacy_configuration` too, so a partition is checked against exactly the models the whole table would be.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..encoding import EncodedTable, encode_table
from ..errors import InputError
from ..lattice import Lattice
from ..manifest import ResearchSubset
from ..policy import DatasetPolicy, ParallelSpec, load_policy, parse_policy
from ..privacy import PrivacyConfiguration, build_models
from ..quality import make_quality_model
from ..search import GeneticParameters, SearchResult, resolve_algorithm, search
from ..sitegate import EffectiveGate, SiteGateSource, check_population, combine, load_site_gate, site_folder
from ..table import load_input

if TYPE_CHECKING:
    from ..table import LoadedInput


def privacy_configuration(policy: DatasetPolicy, records: int | None = None) -> PrivacyConfiguration:
    """The policy's privacy models (built through engine.privacy's registry) with its suppression limit; `records`
    is the size of the table de-identified (k-map's estimators need it)."""
    return PrivacyConfiguration(build_models(policy, {"records": records}), policy.suppression_limit)


def encode_policy_table(policy: DatasetPolicy, loaded
                        ) -> tuple[EncodedTable, "LoadedInput", ResearchSubset | None]:
    """Encode the table the search works on. With a research subset (engine.subset) that is the subset: the input
    is the population, counted per class through the table's `population`; the loaded input is narrowed to the
    subset, which is what is released. Returns the table, the (narrowed) input and what the manifest records."""
    from ..subset import PopulationTable, resolve_subset

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


def check_populations(policy: DatasetPolicy, gate: EffectiveGate, records: int) -> None:
    """Every population the run will use (privacy models and gate) is known, finite and contains the sample; checked
    before the search, so a bad population is bad input (exit 2), not a late failure."""
    from ..risk import resolve_population
    from ..sitegate import population_size

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
        base = parallel.model_dump() if parallel is not None else {"partitions": partitions or 2}
        overrides = {k: v for k, v in (("partitions", partitions), ("scheduler", scheduler)) if v is not None}
        try:
            parallel = ParallelSpec.model_validate({**base, **overrides})
        except ValueError as exc:
            raise InputError(policy.source, "search.parallel", str(exc).splitlines()[-1]) from None
    return parallel


@dataclass
class Prepared:
    """One policy made ready to run: what every run (global, local, partitioned) starts from."""

    policy: DatasetPolicy
    loaded: "LoadedInput"              # the input as read (narrowed to a research subset where there is one)
    source: dict[str, Any] | None      # what was read (engine.sources), for the manifest's `input` block
    table: EncodedTable
    subset: ResearchSubset | None
    effective_gate: EffectiveGate      # the policy's gate tightened to the site's
    configuration: PrivacyConfiguration
    quality_model: Any
    lattice: Lattice
    limit: float                       # seconds the search may take
    memory: int                        # MB the search may grow the process by
    algorithm: str
    progress: bool | None
    started: float                     # time.perf_counter() when the run began

    def search(self, table: EncodedTable, quality_model, seconds: float) -> SearchResult:
        """The search step: the policy's algorithm and limits on `table` (the whole table, or a local recoding's
        remaining records) for at most `seconds`."""
        policy = self.policy
        return search(table, self.configuration, quality_model, algorithm=self.algorithm, lattice=self.lattice,
                      time_limit=seconds, progress=self.progress, memory_mb=self.memory,
                      check_limit=policy.search.check_limit,
                      genetic=GeneticParameters(**policy.search.genetic.model_dump()))


def prepare(policy: DatasetPolicy | str | Path | dict, progress: bool | None = False,
            time_limit: float | None = None, site: SiteGateSource | str | os.PathLike | None = None,
            memory_mb: int | None = None, data: pd.DataFrame | None = None) -> Prepared:
    """Load the policy, the site gate and the input, encode the table, check the populations and build the models
    and the search (engine.deid.deidentify documents the arguments). Raises InputError."""
    started = time.perf_counter()
    if isinstance(policy, dict):
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
    return Prepared(policy, loaded, source, table, subset, effective_gate, configuration, quality_model, lattice,
                    limit, memory, algorithm, progress, started)


__all__ = ["Prepared", "check_populations", "encode_policy_table", "parallel_spec", "prepare",
           "privacy_configuration"]
