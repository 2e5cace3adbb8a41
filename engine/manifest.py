"""The release manifest (`manifest.json`) as typed models: one definition for the engine that writes it and for
`safeshare release`, `verify-release` and the app that read it.

The JSON is what releases are hashed and signed over, so the models reproduce it exactly: fields in the order the
engine has always written them, optional blocks absent (never null) when a run has none, `null` kept where it was
written, integers kept apart from floats (`Number`), and fields these models do not know kept as they were
(`extra="allow"`), so a manifest written by an older or newer engine loads and dumps back to the same bytes.
Models are built with only the fields a manifest holds and dumped with `exclude_unset`, which is what keeps an
absent block absent and a written null written.

Reading a manifest is `load_manifest` / `parse_manifest`: a malformed one raises `ManifestError` naming the file, the
field and the problem (engine.bundle turns it into a refused bundle).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, PrivateAttr, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError,
                      model_validator)

RELEASE_FORMAT = "safeshare-release/1"
MANIFEST = "manifest.json"

# An int stays an int and a float a float: `1` and `1.0` are different bytes in a signed manifest.
Number = Union[StrictInt, StrictFloat]


class ManifestError(ValueError):
    """A manifest that cannot be read as one: not JSON, not an object, or a field of the wrong type."""


class _Block(BaseModel):
    """Every block: lossless (unknown fields kept, nothing coerced across types)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Any) -> Any:
        """Remember the order of the fields read: dumped back in that order, a manifest keeps its bytes even when
        another engine wrote a field these models do not know, or wrote them in another order."""
        block = handler(data)
        if isinstance(data, dict) and isinstance(block, _Block):
            block._order = tuple(data)
        return block

    def document(self) -> dict[str, Any]:
        """This block as the JSON object it was read from or is written as."""
        return self._ordered(self.model_dump(exclude_unset=True))

    def _ordered(self, data: dict[str, Any]) -> dict[str, Any]:
        for name, dumped in data.items():
            value = getattr(self, name, None)
            if isinstance(value, _Block):
                data[name] = value._ordered(dumped)
            elif isinstance(value, list) and any(isinstance(item, _Block) for item in value):
                data[name] = [item._ordered(d) if isinstance(item, _Block) else d for item, d in zip(value, dumped)]
        if not self._order:
            return data
        rank = {name: index for index, name in enumerate(self._order)}
        return dict(sorted(data.items(), key=lambda item: rank.get(item[0], len(rank))))


class PopulationRisk(_Block):
    """One gate population's estimate for the released records (engine.gate.evaluate_gate)."""

    population: StrictStr
    size: Number
    model: StrictStr | None = None
    solved: StrictBool | None = None
    population_uniques: Number | None = None
    population_uniqueness: Number | None = None
    pu_su_ratio: Number | None = None
    note: StrictStr | None = None
    # with several estimators: each one's estimate (the fields above are the strictest one's, engine.gate)
    estimates: list[dict[str, Any]] | None = None


class Risk(_Block):
    """Residual re-identification risk of the released records: sample uniqueness and every gate population."""

    released_records: StrictInt
    sample_uniques: StrictInt
    sample_uniqueness: Number
    estimator: StrictStr | list[StrictStr] | None = None   # one name, or the list when several decide
    populations: list[PopulationRisk] = []
    # the estimate the search's population-uniqueness model decided on (engine.risk.RiskEstimate.to_dict)
    privacy_model_estimate: dict[str, Any] | None = None


class RequiredModel(_Block):
    """A `gate.require` model re-checked on the released classes (engine.gate.check_required): its description
    (name and parameters), then whether it passed and on how many classes it failed."""

    model: StrictStr
    passed: StrictBool


class Gate(_Block):
    """The release gate's verdict with the effective limits and where each came from (engine.sitegate)."""

    passed: StrictBool
    reasons: list[StrictStr] = []
    max_pu_su_ratio: Number | None = None
    max_population_uniqueness: Number | None = None
    min_k: StrictInt | None = None
    populations: list[StrictStr] | None = None
    estimator: StrictStr | list[StrictStr] | None = None
    limits_from: dict[str, StrictStr] | None = None
    site_gate: dict[str, Any] | None = None
    policy_gate: dict[str, Any] | None = None
    required: list[RequiredModel] | None = None


class ParallelRun(_Block):
    """A P4 run (engine.parallel.p4.describe_run): what ran, each partition's own optimum, seconds per step."""

    partitions: StrictInt
    scheduler: StrictStr
    partitioning: StrictStr
    harmonization: StrictStr | None = None
    transformation: StrictStr
    statistics: StrictStr
    partition_transformations: list[dict[str, StrictInt] | None]
    seconds_per_step: dict[str, Number]
    quality_row_weighted: Number
    risk_models_decided_on_merged_table: StrictBool


class LocalRecoding(_Block):
    """Local recoding (engine.local, or P4's local transformation): every iteration's part, and why the release
    was reduced to the first part if it was."""

    recoding: Literal["local"] = "local"
    iterations: list[dict[str, Any]]
    fell_back: StrictStr | None = None


class ResearchSubset(_Block):
    """A research subset (engine.subset): the subset is released, the input is its population."""

    records: StrictInt
    population_records: StrictInt


class InputSource(_Block):
    """What the release was made from (engine.sources): the kind (csv, parquet, stata, sas7bdat, xport, excel, sql,
    dataframe), the file's name and SHA-256, or the database's dialect with the table or the query's SHA-256, and
    the records read. Never a URL or a password. Absent in manifests written before engines recorded it."""

    kind: StrictStr
    records: StrictInt


class Manifest(_Block):
    """A release's manifest.json (DESIGN.md, "Contracts"). Fields after `seconds` are written only by the runs that
    have them; `layout` only by a partitioned dataset release (engine.parallel.release)."""

    format: StrictStr = RELEASE_FORMAT
    engine_version: StrictStr | None = None
    dataset: StrictStr
    policy_sha256: StrictStr | None = None
    privacy: list[dict[str, Any]] = []
    suppression_limit: Number | None = None
    transformation: dict[str, StrictInt] = {}
    optimized_for: StrictStr | None = None
    quality: dict[str, Number] = {}
    attribute_quality: dict[str, dict[str, Number]] = {}
    algorithm: StrictStr | None = None
    optimal: StrictBool | None = None
    search_stopped: StrictStr | None = None
    search_limits: dict[str, Any] = {}
    algorithm_choice: dict[str, Any] | None = None
    quality_over_time: list[list[Number]] = []
    records: StrictInt
    suppressed_records: StrictInt | None = None
    risk_model_evaluations: StrictInt | None = None
    equivalence_classes: StrictInt | None = None
    smallest_class: StrictInt | None = None
    checked_transformations: StrictInt | None = None
    lattice_size: StrictInt | None = None
    risk: Risk | None = None
    gate: Gate | None = None
    data_sha256: StrictStr
    files: dict[str, StrictStr]
    seconds: Number | None = None
    parallel: ParallelRun | None = None
    privacy_models: list[dict[str, Any]] | None = None
    research_subset: ResearchSubset | None = None
    recoding: Literal["global", "local"] | None = None
    local_recoding: LocalRecoding | None = None
    input: InputSource | None = None
    layout: StrictStr | None = None

    @property
    def is_dataset(self) -> bool:
        """A partitioned release (data/part-NNNNN.parquet) rather than one data.parquet."""
        return self.layout == "dataset"

    def with_file(self, name: str, sha256: str) -> "Manifest":
        """This manifest listing one more file: the report, whose hash exists only once it is rendered from the
        otherwise complete manifest."""
        return self.model_copy(update={"files": {**self.files, name: sha256}})

    def to_json(self) -> str:
        """The bytes of manifest.json (strict JSON: a non-finite number is an error, never `Infinity`)."""
        return json.dumps(self.document(), indent=2, allow_nan=False) + "\n"


def finite_json(value: object) -> object:
    """`value` with every non-finite float replaced by None: JSON has no Infinity or NaN, and a consumer that reads
    them (Python's json does) would compare them wrongly against limits."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def parse_manifest(document: object, source: str | Path = MANIFEST) -> Manifest:
    """`document` (parsed JSON) as a Manifest; ManifestError naming `source`, the field and the problem."""
    if not isinstance(document, dict):
        raise ManifestError(f"{source}: not a JSON object")
    try:
        return Manifest.model_validate(document)
    except ValidationError as exc:
        raise ManifestError(f"{source}: {_first_problem(exc)}") from None


def load_manifest(path: str | Path, raw: bytes | None = None) -> Manifest:
    """The manifest at `path`, parsed from `raw` when given (bytes already read and checked, e.g. against a seal)."""
    try:
        text = raw.decode("utf-8") if raw is not None else Path(path).read_text(encoding="utf-8")
        document = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: not readable JSON: {exc}") from None
    return parse_manifest(document, path)


def _first_problem(exc: ValidationError) -> str:
    """Pydantic's first error as "field 'risk.populations.0.size': <problem> (got ...)", and how many other fields
    are wrong (a union's alternatives, e.g. int or float, count as one field)."""
    def where(error: dict) -> str:
        parts = [str(p) for p in error["loc"] if not (isinstance(p, str) and p in _UNION_TAGS)]
        return ".".join(parts) or "(top level)"

    errors = exc.errors(include_url=False)
    first = errors[0]
    text = f"field '{where(first)}': {first['msg'].lower()}"
    if first["type"] != "missing":
        text += f" (got {json.dumps(first.get('input'), default=str)[:60]})"
    others = {where(error) for error in errors} - {where(first)}
    if others:
        text += f"; and {len(others)} other field(s): {', '.join(sorted(others)[:3])}"
    return text


# what pydantic adds to an error's location for the alternative of a union that failed
_UNION_TAGS = frozenset({"int", "float", "str", "bool", "list[dict[str,any]]", "list[str]", "constrained-int"})


__all__ = ["Gate", "InputSource", "LocalRecoding", "MANIFEST", "Manifest", "ManifestError", "Number", "ParallelRun",
           "PopulationRisk", "RELEASE_FORMAT", "RequiredModel", "ResearchSubset", "Risk", "finite_json",
           "load_manifest", "parse_manifest"]
