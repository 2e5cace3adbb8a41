"""Dataset policies: what a custodian declares about a table before it is de-identified.

The schema is strict because a typo in a privacy policy must never silently weaken it: unknown keys are errors,
numbers are never coerced from strings or booleans (`k: '5'` and `k: true` are refused, not read as 5 and 1), and
non-finite numbers (`.inf`, `.nan`) are refused everywhere, since `max_pu_su_ratio: .inf` would switch the gate off
and a NaN compares false with every limit. Paths in a policy are relative to the policy file. `load_policy` returns a
validated `DatasetPolicy`; every problem becomes an `InputError` naming the file and the field.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag,
                      ValidationError, field_validator, model_validator)

from .errors import InputError


class _Strict(BaseModel):
    """Unknown keys, coerced types and non-finite numbers are all validation errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# Characters that cannot separate the fields of a CSV file: the quote and the line ends.
_NOT_SEPARATORS = {'"', "\n", "\r"}


def _one_character_separator(value: str) -> str:
    """A separator is one character: pandas reads a longer one as a regular expression and the csv module refuses
    anything else, so `'.*'` or `';;'` would silently mis-split the table or fail deep inside the reader."""
    if len(value) != 1:
        raise ValueError(f"must be exactly one character, got {value!r}")
    if value in _NOT_SEPARATORS:
        raise ValueError(f"{value!r} cannot separate fields")
    return value


Separator = Annotated[str, Field(min_length=1, max_length=1), AfterValidator(_one_character_separator)]


# Population-uniqueness estimators (engine.risk): Pitman, Zayatz, SNB, Dankar's rule choosing among them, or
# `calibrated` (the smallest of the three plus ten sample records' worth; engine.risk.calibrated).
ESTIMATOR_NAMES = ("pitman", "zayatz", "snb", "dankar", "calibrated")
Estimator = Literal["pitman", "zayatz", "snb", "dankar", "calibrated"]


def _estimator_choice(value: object) -> object:
    """One estimator name or a non-empty list of them, checked here so that a typo is named as such (the gate holds
    for the strictest of the estimators named, so an unknown name must never be skipped)."""
    known = ", ".join(ESTIMATOR_NAMES)
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        raise ValueError(f"name at least one estimator ({known})")
    for index, item in enumerate(items):
        where = f"item {index}: " if isinstance(value, list) else ""
        if not isinstance(item, str):
            raise ValueError(f"{where}an estimator is a name ({known}), got {type(item).__name__} {item!r}")
        if item not in ESTIMATOR_NAMES:
            raise ValueError(f"{where}unknown estimator {item!r}; use one of {known}")
    return value


# `estimator: snb` or `estimator: [dankar, snb]`: a gate naming several holds for the strictest of them.
EstimatorChoice = Annotated[Union[Estimator, Annotated[list[Estimator], Field(min_length=1)]],
                            BeforeValidator(_estimator_choice)]


def estimator_names(choice: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The estimators of an `EstimatorChoice` in order, each once; () for None."""
    if choice is None:
        return ()
    items = [choice] if isinstance(choice, str) else list(choice)
    return tuple(dict.fromkeys(items))


def _finite_population_name(value: str) -> str:
    """A population given as text is a preset name or a number; a number written as text must be finite too."""
    try:
        number = float(value.strip().replace("_", ""))
    except ValueError:
        return value
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"a population must be a finite positive number or a preset name, got {value!r}")
    return value


Population = Union[Annotated[str, AfterValidator(_finite_population_name)], Annotated[float, Field(gt=0)]]


# --- hierarchies --------------------------------------------------------------------------------------------------
class HierarchyFile(_Strict):
    """A hierarchy in the ARX CSV layout."""

    file: str
    separator: Separator = ";"


class IntervalBuilder(_Strict):
    """Numeric values into intervals of growing width (e.g. 5, 10, 20 years), then `*`."""

    builder: Literal["intervals"]
    widths: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)
    start: float = 0.0   # finite (like every number); engine.builders bounds the number of intervals


class MaskingBuilder(_Strict):
    """Strings masked right to left (ZIP 12345 -> 1234* -> 123** ...), then `*`."""

    builder: Literal["masking"]
    characters_per_level: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    mask: str = Field(default="*", min_length=1, max_length=1)


class DateBuilder(_Strict):
    """Dates coarsened through calendar units (day -> month -> year -> decade), then `*`."""

    builder: Literal["dates"]
    format: str = "%Y-%m-%d"
    levels: list[Literal["week", "month", "quarter", "year", "decade"]] = Field(
        default_factory=lambda: ["month", "year", "decade"], min_length=1
    )

    @field_validator("format")
    @classmethod
    def _usable_format(cls, value: str) -> str:
        """The format must name the year (every level's label has one) and read back what it writes; `%` alone or
        a stray directive would otherwise fail inside the date parser."""
        if not any(d in value for d in ("%Y", "%y", "%G")):
            raise ValueError(f"date format {value!r} has no year directive (%Y, %y or %G)")
        sample = datetime(2024, 2, 29)
        try:
            text = sample.strftime(value)
            datetime.strptime(text, value)
        except ValueError as exc:
            raise ValueError(f"date format {value!r} is not usable: {exc}") from None
        return value


class OrderedBuilder(_Strict):
    """Ordered categories grouped into runs of neighbours (sizes per level), then `*`."""

    builder: Literal["ordered"]
    order: list[str] = Field(min_length=1)
    group_sizes: list[Annotated[int, Field(ge=2, le=1_000_000_000)]] = Field(min_length=1)


def _hierarchy_kind(value: object) -> str:
    if isinstance(value, dict):
        return str(value.get("builder", "file"))
    return str(getattr(value, "builder", "file"))


HierarchySpec = Annotated[
    Union[
        Annotated[HierarchyFile, Tag("file")],
        Annotated[IntervalBuilder, Tag("intervals")],
        Annotated[MaskingBuilder, Tag("masking")],
        Annotated[DateBuilder, Tag("dates")],
        Annotated[OrderedBuilder, Tag("ordered")],
    ],
    Discriminator(_hierarchy_kind),
]


class Attribute(_Strict):
    type: Literal["identifying", "quasi_identifying", "sensitive", "insensitive"]
    hierarchy: HierarchySpec | None = None
    # Levels the search may use (inclusive); default: all levels of the hierarchy.
    min_level: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    max_level: Annotated[int, Field(ge=0, le=1_000_000)] | None = None

    @model_validator(mode="after")
    def _hierarchy_only_for_quasi_identifiers(self) -> "Attribute":
        if self.type == "quasi_identifying" and self.hierarchy is None:
            raise ValueError("a quasi-identifying attribute needs a hierarchy")
        if self.type not in ("quasi_identifying", "sensitive") and self.hierarchy is not None:
            raise ValueError("only quasi-identifying and sensitive attributes take a hierarchy "
                             f"(this one is {self.type})")
        if self.type != "quasi_identifying" and (self.min_level is not None or self.max_level is not None):
            raise ValueError("min_level and max_level apply to quasi-identifying attributes only")
        if self.min_level is not None and self.max_level is not None and self.min_level > self.max_level:
            raise ValueError("min_level is above max_level")
        return self


# --- input ---------------------------------------------------------------------------------------------------------
class InputSpec(_Strict):
    """Where the table is read from (engine.sources): a file (`path`; its format by suffix unless `format` says) or
    a SQL database (`url` with a `table` or one read-only `query`; the password from `password_env` or
    `password_file`, never in the URL). engine.sources.spec checks which fields go together."""

    path: str | None = None
    format: Literal["csv", "parquet", "stata", "sas7bdat", "xport", "excel"] | None = None
    separator: Separator = ";"
    encoding: str = "utf-8"
    sheet: str | Annotated[int, Field(ge=0)] | None = None   # Excel: the sheet's name or 0-based number
    value_labels: bool = True   # Stata: values through their labels, as the file shows them
    url: str | None = None
    table: str | None = None
    query: str | None = None
    password_env: str | None = None
    password_file: str | None = None

    @field_validator("encoding")
    @classmethod
    def _known_text_encoding(cls, value: str) -> str:
        try:
            info = codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        if not getattr(info, "_is_text_encoding", True):
            raise ValueError(f"{value!r} is not a text encoding")
        return value


# --- privacy models ------------------------------------------------------------------------------------------------
class KAnonymity(_Strict):
    model: Literal["k_anonymity"]
    k: Annotated[int, Field(ge=1, le=1_000_000_000)]


class PopulationUniqueness(_Strict):
    """Population uniqueness <= threshold under a super-population model (engine.risk)."""

    model: Literal["population_uniqueness"]
    threshold: Annotated[float, Field(gt=0, le=1)]
    estimator: Estimator = "dankar"
    population: Population


# Per-record risk limits (engine.risk.individual): the largest re-identification risk of any released record, and the
# largest expected number of re-identifications (the sum of the records' risks), under the negative-binomial model.
RecordRiskLimit = Annotated[float, Field(gt=0, le=1)]
ExpectedReidentifications = Annotated[float, Field(ge=0)]


class IndividualRisk(_Strict):
    """Per-record re-identification risk under the negative-binomial model of Benedetti and Franconi (mu-Argus,
    sdcMicro) with equal sampling weights N / n (engine.risk.individual): no released record's risk E(1/F | f)
    above `max_record_risk`, and the expected number of re-identifications (the sum of the released records' risks)
    at most `max_expected_reidentifications`. At least one of the two."""

    model: Literal["individual_risk"]
    population: Population
    max_record_risk: RecordRiskLimit | None = None
    max_expected_reidentifications: ExpectedReidentifications | None = None

    @model_validator(mode="after")
    def _a_limit(self) -> "IndividualRisk":
        if self.max_record_risk is None and self.max_expected_reidentifications is None:
            raise ValueError("individual_risk needs max_record_risk, max_expected_reidentifications or both")
        return self


class SubsetSpec(_Strict):
    """A research subset (delta-presence, k-map): the input table is the population, the subset the records that
    are released. Exactly one of: `file` (one 0-based row number of the input per line; `subset: FILE` is short for
    `subset: {file: FILE}`), `where` (records whose value of each named attribute is one of the listed values),
    `sample` (a seeded random share of the records)."""

    file: str | None = None
    where: dict[str, list[str]] | None = None
    sample: Annotated[float, Field(gt=0, le=1)] | None = None
    seed: Annotated[int, Field(ge=0, le=(1 << 63) - 1)] = 0

    @model_validator(mode="after")
    def _exactly_one_rule(self) -> "SubsetSpec":
        given = [name for name in ("file", "where", "sample") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("a subset is given by exactly one of file, where or sample"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self


def _subset_shorthand(value: object) -> object:
    return {"file": value} if isinstance(value, str) else value


Subset = Annotated[SubsetSpec, BeforeValidator(_subset_shorthand)]
PositiveReal = Annotated[float, Field(gt=0, le=1_000_000_000)]


class LDiversity(_Strict):
    """Distinct, entropy (Shannon or Grassberger estimator) or recursive (c,l)-diversity of a sensitive attribute."""

    model: Literal["l_diversity"]
    attribute: str
    l: Annotated[float, Field(ge=1, le=1_000_000_000)]
    variant: Literal["distinct", "entropy", "recursive"] = "distinct"
    estimator: Literal["shannon", "grassberger"] = "shannon"
    c: PositiveReal | None = None

    @model_validator(mode="after")
    def _variant_parameters(self) -> "LDiversity":
        if self.variant == "recursive" and self.c is None:
            raise ValueError("recursive l-diversity needs c")
        if self.variant != "recursive" and self.c is not None:
            raise ValueError(f"c applies to recursive l-diversity only (this one is {self.variant})")
        if self.variant != "entropy" and "estimator" in self.model_fields_set:
            raise ValueError(f"estimator applies to entropy l-diversity only (this one is {self.variant})")
        if self.variant in ("distinct", "recursive") and self.l != int(self.l):
            raise ValueError(f"{self.variant} l-diversity needs a whole number l, got {self.l}")
        return self


class TCloseness(_Strict):
    """t-closeness of a sensitive attribute with the equal, ordered or hierarchical ground distance."""

    model: Literal["t_closeness"]
    attribute: str
    t: Annotated[float, Field(ge=0, le=1)]
    distance: Literal["equal", "ordered", "hierarchical"] = "equal"
    # The ordered distance's order: the values listed, `hierarchy` (the attribute's hierarchy rows), or by default
    # ARX's: numeric when every value is a number, else text order.
    order: Literal["hierarchy"] | Annotated[list[str], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _order_only_when_ordered(self) -> "TCloseness":
        if self.order is not None and self.distance != "ordered":
            raise ValueError(f"order applies to the ordered distance only (this one is {self.distance})")
        return self


class DeltaDisclosure(_Strict):
    model: Literal["delta_disclosure"]
    attribute: str
    delta: PositiveReal


class BetaLikeness(_Strict):
    model: Literal["beta_likeness"]
    attribute: str
    beta: PositiveReal
    variant: Literal["basic", "enhanced"] = "enhanced"


class AverageRisk(_Strict):
    """Average re-identification risk (the mean over released records of 1 / class size) at most `threshold`."""

    model: Literal["average_risk"]
    threshold: Annotated[float, Field(gt=0, le=1)]


class SampleUniqueness(_Strict):
    """Share of released records that are unique in the released table at most `threshold`."""

    model: Literal["sample_uniqueness"]
    threshold: Annotated[float, Field(ge=0, le=1)]


class KMap(_Strict):
    """k-map: every released class matches at least k people of the population, counted in a research subset's
    population table (`subset`) or estimated from the population size (`population` with `estimator`)."""

    model: Literal["k_map"]
    k: Annotated[int, Field(ge=1, le=1_000_000_000)]
    subset: Subset | None = None
    population: Population | None = None
    estimator: Literal["poisson", "zero_truncated_poisson"] | None = None
    significance: Annotated[float, Field(ge=0, le=1)] = 0.01

    @model_validator(mode="after")
    def _subset_or_estimator(self) -> "KMap":
        if self.subset is not None and (self.population is not None or self.estimator is not None):
            raise ValueError("k-map takes either a subset or a population with an estimator, not both")
        if self.subset is None and (self.population is None or self.estimator is None):
            raise ValueError("k-map needs a subset, or a population and an estimator (poisson, "
                             "zero_truncated_poisson)")
        return self


class DeltaPresence(_Strict):
    model: Literal["delta_presence"]
    delta_min: Annotated[float, Field(ge=0, le=1)] = 0.0
    delta_max: Annotated[float, Field(ge=0, le=1)]
    subset: Subset

    @model_validator(mode="after")
    def _ordered_bounds(self) -> "DeltaPresence":
        if self.delta_min > self.delta_max:
            raise ValueError(f"delta_min {self.delta_min} is above delta_max {self.delta_max}")
        return self


PrivacySpec = Annotated[Union[KAnonymity, PopulationUniqueness, LDiversity, TCloseness, DeltaDisclosure, BetaLikeness,
                              AverageRisk, SampleUniqueness, KMap, DeltaPresence, IndividualRisk],
                        Field(discriminator="model")]
SENSITIVE_MODELS = ("l_diversity", "t_closeness", "delta_disclosure", "beta_likeness")


# --- quality -------------------------------------------------------------------------------------------------------
class QualitySpec(_Strict):
    model: Literal["loss", "non_uniform_entropy", "discernibility", "aecs", "precision"] = "loss"
    aggregation: Literal["geometric_mean", "arithmetic_mean", "sum"] = "geometric_mean"
    gs_factor: Annotated[float, Field(ge=0, le=1)] = 0.5


DEFAULT_TIME_LIMIT_SECONDS = 600.0   # a search that has not finished in ten minutes releases its best so far
DEFAULT_MEMORY_MB = 1024             # growth of the search's memory (class cache, tags, queues) it may cause
MIN_MEMORY_MB = 16


Fraction = Annotated[float, Field(ge=0, le=1)]


class GeneticSpec(_Strict):
    """The genetic algorithm's parameters (engine.search.genetic); the defaults are Table 2 of Meurers et al. 2021.
    `iterations: null` runs until the time limit. The seed makes runs reproducible (same seed, same result, when
    no limit cuts the run short). `climb` (not in the paper, on by default): hill climbs from the middle of the
    lattice and from the best solution between generations (engine.search.genetic); false runs the paper's
    algorithm alone."""

    subpopulation_size: Annotated[int, Field(ge=2, le=1_000_000)] = 50
    iterations: Annotated[int, Field(ge=1)] | None = 50
    elite_fraction: Fraction = 0.2
    crossover_fraction: Fraction = 0.4
    production_fraction: Fraction = 0.2
    mutation_probability: Fraction = 0.05
    immigration_fraction: Fraction = 0.2
    immigration_interval: Annotated[int, Field(ge=1)] = 10
    seed: Annotated[int, Field(ge=0, le=(1 << 63) - 1)] = 0
    climb: bool = True

    @model_validator(mode="after")
    def _elite_and_children_fit(self) -> "GeneticSpec":
        if self.elite_fraction + self.crossover_fraction > 1 + 1e-9:
            raise ValueError("elite_fraction + crossover_fraction must be at most 1 (the rest are mutants), got "
                             f"{self.elite_fraction} + {self.crossover_fraction}")
        return self


class ParallelSpec(_Strict):
    """P4 partitioned anonymization (engine.parallel): `partitions` parts anonymized in parallel on a Dask cluster
    (`scheduler: local` starts one with a process per core; `tcp://HOST:8786` uses a running one), their
    transformations harmonized (`transformation: global`) or each partition locally recoded (`local`, no
    harmonization), the merged classes checked against every model."""

    partitions: Annotated[int, Field(ge=1, le=100_000)]
    scheduler: str = "local"
    # auto: sorted (P4's), or random under t-closeness, delta-disclosure and beta-likeness (engine.parallel.p4.
    # resolve_strategy); the manifest records what ran.
    partitioning: Literal["auto", "sorted", "random"] = "auto"
    harmonization: Literal["average", "minimum"] = "average"
    transformation: Literal["global", "local"] = "global"
    # partition: each partition's models compare with its own sensitive distributions, as P4's implementation does;
    # table: with the whole table's, as the merged release is checked. auto: table with random partitioning under
    # the models that compare with the table's distribution, else partition (with sorted partitions table measured
    # worse at a 10 % limit: 41 % below the optimum against 25 % on ADULT x 33, t = 0.2).
    statistics: Literal["auto", "table", "partition"] = "auto"
    seed: Annotated[int, Field(ge=0, le=(1 << 63) - 1)] = 0

    @field_validator("scheduler")
    @classmethod
    def _scheduler_address(cls, value: str) -> str:
        if value not in ("local", "none") and not re.fullmatch(r"(tcp|tls|inproc)://[^\s/]+", value):
            raise ValueError(f"expected local, none or a scheduler address such as tcp://host:8786, got {value!r}")
        return value


class SearchSpec(_Strict):
    """How to search the lattice: `auto` picks Flash, Flash2P or branch and bound from what the configuration makes
    monotone (engine.search), or a heuristic (`lightning`: bottom-up greedy, `topdown`: top-down greedy, `genetic`)
    when the optimal search is not expected to finish within the time limit; naming one overrides that."""

    algorithm: Literal["auto", "flash", "flash2p", "bnb", "lightning", "topdown", "genetic"] = "auto"
    # The search stops at the first of these limits and releases the best solution found so far, with
    # `optimal: false` in the manifest (engine.search.common.Deadline).
    time_limit_seconds: Annotated[float, Field(gt=0)] = DEFAULT_TIME_LIMIT_SECONDS
    memory_mb: Annotated[int, Field(ge=MIN_MEMORY_MB, le=1 << 20)] = DEFAULT_MEMORY_MB
    # Heuristics (lightning, topdown) also stop after this many transformations checked; null: no such limit.
    check_limit: Annotated[int, Field(ge=1, le=1 << 62)] | None = None
    genetic: GeneticSpec = Field(default_factory=GeneticSpec)   # used when algorithm is genetic
    # local: ARX's iterative local recoding (engine.local): up to `local_iterations` searches, each on the records the
    # previous ones suppressed, the time limit split over them; global: one transformation for every record.
    recoding: Literal["global", "local"] = "global"
    local_iterations: Annotated[int, Field(ge=1, le=10_000)] = 100
    parallel: ParallelSpec | None = None


class GateSpec(_Strict):
    """Release gate (engine.gate): which populations to check and the largest residual risk allowed.

    A policy's gate can only tighten the site's gate (engine.sitegate): the populations are added to the site's
    required ones, the estimators to the site's, and each limit in effect is the stricter of the two."""

    populations: list[Population] = Field(
        default_factory=lambda: ["USA", "California", "Los Angeles"], min_length=1
    )
    max_pu_su_ratio: Annotated[float, Field(ge=0)] = 0.25
    max_population_uniqueness: Annotated[float, Field(ge=0, le=1)] = 1.0
    # Smallest class a release may hold (k-anonymity checked on the released classes); 1: no minimum.
    min_k: Annotated[int, Field(ge=1, le=1_000_000_000)] = 1
    # Estimators the policy adds to the site gate's (SITE/gate.yaml `estimator:`, default Dankar's rule): the gate
    # holds for the strictest of all of them, so naming a laxer one than the site's changes nothing. None: the site's.
    estimator: EstimatorChoice | None = None
    # Per-record risk (engine.risk.individual, negative-binomial model) in every checked population: no released
    # record above this risk, at most this many expected re-identifications. None: no such limit (the site's, if any).
    max_record_risk: RecordRiskLimit | None = None
    max_expected_reidentifications: ExpectedReidentifications | None = None
    # Privacy models the released table must satisfy, checked again on the release (engine.gate): e.g. an
    # l-diversity the search did not optimize for, or the search's own models re-verified.
    require: list[PrivacySpec] = Field(default_factory=list)


class DatasetPolicy(_Strict):
    dataset: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    description: str = ""
    input: InputSpec | None = None   # None: the table is given to engine.deidentify(data=...)
    attributes: dict[str, Attribute] = Field(min_length=1)
    privacy: list[PrivacySpec] = Field(min_length=1)
    suppression_limit: Annotated[float, Field(ge=0, le=1)]
    quality: QualitySpec = Field(default_factory=QualitySpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    gate: GateSpec | None = None

    # Not part of the YAML: where the policy came from, to resolve relative paths and name files in errors.
    source: str | None = Field(default=None, exclude=True)
    sha256: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _needs_a_quasi_identifier(self) -> "DatasetPolicy":
        if not any(a.type == "quasi_identifying" for a in self.attributes.values()):
            raise ValueError("at least one attribute must be quasi_identifying")
        return self

    @property
    def sensitive_attributes(self) -> list[str]:
        """Sensitive attributes a privacy model (of the search or the gate) names, in policy order."""
        specs = list(self.privacy) + (list(self.gate.require) if self.gate is not None else [])
        named = {spec.attribute for spec in specs if spec.model in SENSITIVE_MODELS}
        return [name for name in self.attributes if name in named]

    @property
    def base_dir(self) -> Path:
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def resolve(self, path: str) -> Path:
        """A path of the policy as a file: `${NAME:-default}` expanded (engine.pathvars), relative to the policy."""
        from .pathvars import expand

        candidate = Path(expand(path, self.source)).expanduser()
        return candidate if candidate.is_absolute() else (self.base_dir / candidate)

    @property
    def quasi_identifiers(self) -> list[str]:
        return [name for name, a in self.attributes.items() if a.type == "quasi_identifying"]


_UNION_TAGS = {"file", "intervals", "masking", "dates", "ordered", "k_anonymity", "population_uniqueness",
               "l_diversity", "t_closeness", "delta_disclosure", "beta_likeness", "average_risk", "sample_uniqueness",
               "k_map", "delta_presence", "individual_risk", "str", "float", "int", "constrained-float"}


def _field_path(loc: tuple) -> str:
    """Dotted path of a validation error, without the union-branch tags pydantic puts into locations."""
    parts: list[str] = []
    for i, item in enumerate(loc):
        if isinstance(item, int):
            parts.append(f"[{item}]")
            continue
        is_tag = item in _UNION_TAGS or "[" in item or "(" in item
        if is_tag and i > 0 and loc[i - 1] in {"hierarchy", "population"} | {x for x in loc if isinstance(x, int)}:
            continue
        if is_tag and (isinstance(loc[i - 1], int) or loc[i - 1] in {"hierarchy", "population", "populations"}):
            continue
        parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(policy)"


def check_model_references(policy: DatasetPolicy) -> None:
    """Cross-field rules pydantic cannot name a field for: a model's attribute must be declared sensitive (and carry
    a hierarchy for the hierarchical distance), and a policy has one research subset at most."""
    specs = [(f"privacy[{i}]", spec) for i, spec in enumerate(policy.privacy)]
    if policy.gate is not None:
        specs += [(f"gate.require[{i}]", spec) for i, spec in enumerate(policy.gate.require)]
    subsets = []
    for where, spec in specs:
        if spec.model in SENSITIVE_MODELS:
            attribute = policy.attributes.get(spec.attribute)
            if attribute is None:
                raise InputError(policy.source, f"{where}.attribute", f"no attribute {spec.attribute!r} is declared")
            if attribute.type != "sensitive":
                raise InputError(policy.source, f"{where}.attribute",
                                 f"{spec.model} needs a sensitive attribute; {spec.attribute!r} is {attribute.type}")
            if getattr(spec, "distance", None) == "hierarchical" and attribute.hierarchy is None:
                raise InputError(policy.source, f"{where}.distance",
                                 f"the hierarchical distance needs a hierarchy on {spec.attribute!r}")
            if getattr(spec, "order", None) == "hierarchy" and attribute.hierarchy is None:
                raise InputError(policy.source, f"{where}.order",
                                 f"order: hierarchy needs a hierarchy on {spec.attribute!r}")
        subset = getattr(spec, "subset", None)
        if subset is not None:
            subsets.append((where, subset))
    for where, subset in subsets[1:]:
        if subset != subsets[0][1]:
            raise InputError(policy.source, f"{where}.subset",
                             f"a policy has one research subset; this one differs from {subsets[0][0]}.subset")
    if policy.gate is not None and policy.gate.require and policy.search.recoding == "local":
        raise InputError(policy.source, "gate.require",
                         "the gate's required models are not checked on local recoding's combined output yet; "
                         "use recoding: global")
    if subsets and policy.search.recoding == "local":
        raise InputError(policy.source, "search.recoding",
                         "local recoding is not available with a research subset (as in ARX)")


def parse_policy(data: object, source: str | None = None, sha256: str | None = None) -> DatasetPolicy:
    if not isinstance(data, dict):
        raise InputError(source, None, "a dataset policy must be a YAML mapping")
    try:
        policy = DatasetPolicy.model_validate({**data, "source": source, "sha256": sha256})
    except ValidationError as exc:
        errors = exc.errors()
        # An unknown key is the most telling problem (usually a typo); report it before what follows from it. A
        # non-finite number fails every branch of a union (`population: .inf` is no string either): name that.
        first = next((e for e in errors if e["type"] == "extra_forbidden"),
                     next((e for e in errors if e["type"] == "finite_number"), errors[0]))
        problem = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            problem = "unknown key"
        elif first["type"] in {"int_type", "float_type"} and isinstance(first.get("input"), (str, bool)):
            given = first.get("input")
            kind = "a boolean" if isinstance(given, bool) else f"{type(given).__name__} {given!r}"
            problem = f"{problem}, got {kind} (numbers are never converted: write the number unquoted)"
        raise InputError(source, _field_path(tuple(first["loc"])), problem) from None
    if policy.input is not None:
        from .sources.spec import check_input

        check_input(policy.input, source)
    check_model_references(policy)
    return policy


class PolicyLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats: `1e-3` and `1e308` are numbers (YAML 1.1 wants `1.0e-3` and
    reads `1e-3` as text), so a custodian's exponent is a number and still gets the strict number checks
    (`1e309` overflows to infinity and is refused like `.inf`)."""


PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(raw: bytes | str) -> object:
    """Parse policy-like YAML (dataset policies, the site gate) with `PolicyLoader`."""
    return yaml.load(raw, Loader=PolicyLoader)  # noqa: S506 - a SafeLoader subclass


def load_policy(path: str | Path) -> DatasetPolicy:
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), None, "policy file does not exist")
    raw = path.read_bytes()
    try:
        data = load_yaml(raw)
    except yaml.YAMLError as exc:
        raise InputError(str(path), None, f"not valid YAML: {exc}") from None
    return parse_policy(data, source=str(path), sha256=hashlib.sha256(raw).hexdigest())


def policy_json_schema() -> dict:
    """The JSON Schema of dataset policies (shipped as policies/schemas/dataset-policy.schema.json)."""
    schema = DatasetPolicy.model_json_schema(mode="validation")
    schema["properties"].pop("source", None)
    schema["properties"].pop("sha256", None)
    return schema


if __name__ == "__main__":  # pragma: no cover - regenerates the shipped schema
    print(json.dumps(policy_json_schema(), indent=2))
