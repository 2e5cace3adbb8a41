"""The site gate: the custodian's floor under every release gate, which a dataset policy can only tighten.

A dataset policy's `gate:` is written by whoever prepares the dataset; nothing in it may relax what the custodian
requires of every release at the site (`k: 1` with `gate: {max_pu_su_ratio: 1000}` would otherwise release a table
whose records are nearly all unique). The custodian states that requirement once, in `SITE/gate.yaml`:

    # SITE/gate.yaml: what every release of this site must meet; dataset policies can only tighten it
    max_pu_su_ratio: 0.25            # largest |PU|/|SU| in every checked population
    max_population_uniqueness: 1.0   # largest estimated population uniqueness in every checked population
    min_k: 1                         # smallest class a release may hold (1: no minimum)
    required_populations: [USA, California, Los Angeles]   # always checked, whatever the policy lists
    estimator: dankar                # the estimator(s) that decide: pitman, zayatz, snb, dankar, calibrated, or a list
    max_record_risk: 0.05            # per-record risk (negative binomial) of every released record, each population
    max_expected_reidentifications: 10   # sum of the released records' risks, in every checked population

Every key is optional; a key left out keeps the built-in value below, so a custodian relaxes the built-in floor only
by writing a number down. The file is validated as strictly as a dataset policy (unknown keys, numbers as text or
booleans, `.inf` and `.nan` are errors naming the file and the key).

Without a `gate.yaml` the built-in floor applies: exactly the gate every policy got by default before the site gate
existed, and the paper's recommendation (Prasser et al., IEEE JBHI 2018): |PU|/|SU| at most 0.25, checked in USA,
California and Los Angeles (the smallest of the three is the strictest), no limit of its own on population uniqueness
or class size. Every example policy passes it unchanged; `k: 1` on ADULT (99 % sample uniques) does not, whatever its
own gate says.

The effective gate of a release is the stricter of each: the smaller ratio and population-uniqueness limits, the
larger minimum k, the union of the populations (the site's required ones plus the policy's) and the union of the
estimators (the site's, default Dankar's rule, plus any the policy's `gate.estimator` names). With several estimators
the gate holds for the strictest: each population's risk is the largest of their estimates, so a policy that names a
laxer estimator than the site's (SNB where Dankar's rule picks Pitman) adds an estimate and relaxes nothing. The
manifest records the effective gate, the site gate and where it came from (`gate.site_gate.source`: the file, or
`built-in`). The per-record risk limits (`max_record_risk`, `max_expected_reidentifications`; engine.risk.individual)
have no built-in value: a limit either gate sets is in force, the smaller one where both set it.

Where the site is: `safeshare deid --site SITE`, else `$SAFESHARE_SITE`, else `/var/lib/safeshare` when that folder
exists (the default of `deploy.site.folder`, which the engine does not import); `seal_release` uses the folder above
the releases store (`SITE/releases/..`) and re-checks the manifest's recorded risk against that site's gate, so an
output produced under another (or no) site gate cannot be sealed here; it then evaluates the gate itself on the
released data (engine.release_gate), so a hand-edited verdict or risk figure cannot be sealed either.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError

from .errors import InputError
from .policy import (EstimatorChoice, ExpectedReidentifications, GateSpec, Population, RecordRiskLimit, _field_path,
                     _Strict, estimator_names, load_yaml)

SITE_ENV = "SAFESHARE_SITE"
DEFAULT_SITE = Path("/var/lib/safeshare")
GATE_FILE = "gate.yaml"
BUILT_IN = "built-in"


class SiteGate(_Strict):
    """The custodian's floor (see the module docstring); the defaults are the built-in floor."""

    max_pu_su_ratio: Annotated[float, Field(ge=0)] = 0.25
    max_population_uniqueness: Annotated[float, Field(ge=0, le=1)] = 1.0
    min_k: Annotated[int, Field(ge=1, le=1_000_000_000)] = 1
    required_populations: list[Population] = Field(
        default_factory=lambda: ["USA", "California", "Los Angeles"])
    # The estimator(s) whose estimates decide; a policy can add estimators, never replace these.
    estimator: EstimatorChoice = "dankar"
    # Per-record risk (negative-binomial model, engine.risk.individual) in every checked population; None: no limit.
    max_record_risk: RecordRiskLimit | None = None
    max_expected_reidentifications: ExpectedReidentifications | None = None


@dataclass(frozen=True)
class SiteGateSource:
    """A site gate and where it came from: a file (with its sha256) or the built-in floor."""

    gate: SiteGate
    source: str = BUILT_IN
    sha256: str | None = None

    def describe(self) -> str:
        return "built-in site gate" if self.source == BUILT_IN else f"site gate {self.source}"

    def record(self) -> dict:
        return {"source": self.source, "sha256": self.sha256, **self.gate.model_dump()}


BUILT_IN_GATE = SiteGateSource(SiteGate())


def site_folder(explicit: str | os.PathLike | None = None) -> Path | None:
    """The site folder: `explicit` (--site), else $SAFESHARE_SITE, else /var/lib/safeshare if it exists, else None.

    A site that is named but is not a folder is bad input: silently falling back to the built-in floor would ignore
    the custodian's gate."""
    if explicit is not None:
        if not str(explicit).strip():
            raise InputError(None, "--site", "empty: name the site folder")
        path = Path(explicit)
        if not path.is_dir():
            raise InputError(str(path), "--site", "not a folder")
        return path
    named = os.environ.get(SITE_ENV, "")
    if named.strip():
        path = Path(named)
        if not path.is_dir():
            raise InputError(str(path), f"${SITE_ENV}", "not a folder")
        return path
    return DEFAULT_SITE if DEFAULT_SITE.is_dir() else None


def load_site_gate(site: str | os.PathLike | None) -> SiteGateSource:
    """The gate of a site folder: SITE/gate.yaml validated strictly, or the built-in floor when there is none."""
    if site is None:
        return BUILT_IN_GATE
    path = Path(site) / GATE_FILE
    if not path.exists():
        return BUILT_IN_GATE
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read the site gate: {exc.strerror}") from None
    try:
        data = load_yaml(raw)
    except Exception as exc:  # yaml.YAMLError and decoding errors alike
        raise InputError(str(path), None, f"not valid YAML ({type(exc).__name__})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(str(path), None, "the site gate must be a YAML mapping")
    try:
        gate = SiteGate.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = next((e for e in errors if e["type"] == "extra_forbidden"),
                     next((e for e in errors if e["type"] == "finite_number"), errors[0]))
        problem = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
        raise InputError(str(path), _field_path(tuple(first["loc"])), problem) from None
    return SiteGateSource(gate, str(path), hashlib.sha256(raw).hexdigest())


@dataclass(frozen=True)
class GatePopulation:
    """One population the gate checks, and the file and field that asked for it (for error messages)."""

    value: str | float
    file: str | None
    field: str

    @property
    def label(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class EffectiveGate:
    """The gate a release is checked against: the stricter of the site gate and the policy's gate, per limit.

    `origin` says for each limit whether the site or the policy set the value in force ("site" on a tie: the site's
    floor is what binds), so a refusal can name the site gate. `estimators` are the site's followed by those the
    policy adds; the gate holds for the strictest of them."""

    populations: tuple[GatePopulation, ...]
    max_pu_su_ratio: float
    max_population_uniqueness: float
    min_k: int
    estimators: tuple[str, ...]
    site: SiteGateSource
    origin: dict[str, str] = field(default_factory=dict)
    policy: GateSpec | None = None   # the dataset policy's own gate, as written (None: it has none)
    # Per-record risk limits (None: none in force); each is the smaller of the site's and the policy's.
    max_record_risk: float | None = None
    max_expected_reidentifications: float | None = None

    @property
    def limits_individual_risk(self) -> bool:
        return self.max_record_risk is not None or self.max_expected_reidentifications is not None

    @property
    def estimator(self) -> str | list[str]:
        """The estimators as the manifest records them: one name, or the list when there are several."""
        return self.estimators[0] if len(self.estimators) == 1 else list(self.estimators)

    def where(self, limit: str) -> str:
        return self.site.describe() if self.origin.get(limit) == "site" else "dataset policy"

    def record(self) -> dict:
        return {
            "max_pu_su_ratio": self.max_pu_su_ratio,
            "max_population_uniqueness": self.max_population_uniqueness,
            "min_k": self.min_k,
            **{name: getattr(self, name) for name in RECORD_RISK_LIMITS if getattr(self, name) is not None},
            "populations": [p.label for p in self.populations],
            "estimator": self.estimator,
            "limits_from": dict(self.origin),
            "site_gate": self.site.record(),
            "policy_gate": self.policy.model_dump() if self.policy is not None else None,
        }


def combine(policy_gate: GateSpec | None, site: SiteGateSource = BUILT_IN_GATE, policy_source: str | None = None
            ) -> EffectiveGate:
    """The effective gate: the policy's gate (or the default gate) tightened to the site gate."""
    spec = policy_gate or GateSpec()
    floor = site.gate
    origin = {
        "max_pu_su_ratio": "site" if floor.max_pu_su_ratio <= spec.max_pu_su_ratio else "policy",
        "max_population_uniqueness": ("site" if floor.max_population_uniqueness <= spec.max_population_uniqueness
                                      else "policy"),
        "min_k": "site" if floor.min_k >= spec.min_k else "policy",
    }
    populations: list[GatePopulation] = []
    seen: set[tuple] = set()
    site_file = None if site.source == BUILT_IN else site.source
    named = [(value, site_file, f"required_populations[{index}]") for index, value in
             enumerate(floor.required_populations)]
    named += [(value, policy_source, f"gate.populations[{index}]") for index, value in enumerate(spec.populations)]
    for value, file, field_name in named:
        key = ("size", float(value)) if isinstance(value, (int, float)) else ("name", str(value).strip().lower())
        if key not in seen:
            seen.add(key)
            populations.append(GatePopulation(value, file, field_name))
    estimators = estimator_names([*estimator_names(floor.estimator), *estimator_names(spec.estimator)])
    origin["estimator"] = "site" if set(estimators) == set(estimator_names(floor.estimator)) else "site+policy"
    record_limits = {}
    for name in RECORD_RISK_LIMITS:
        value, where = _stricter_limit(getattr(floor, name), getattr(spec, name))
        if value is not None:
            record_limits[name] = value
            origin[name] = where
    return EffectiveGate(tuple(populations), min(floor.max_pu_su_ratio, spec.max_pu_su_ratio),
                         min(floor.max_population_uniqueness, spec.max_population_uniqueness),
                         max(floor.min_k, spec.min_k), estimators, site, origin, policy_gate, **record_limits)


RECORD_RISK_LIMITS = ("max_record_risk", "max_expected_reidentifications")


def _stricter_limit(site: float | None, policy: float | None) -> tuple[float | None, str]:
    """The smaller of two optional upper limits (None: no limit) and who set it ("site" on a tie)."""
    if site is None:
        return policy, "policy"
    if policy is None or site <= policy:
        return site, "site"
    return policy, "policy"


def population_size(population: GatePopulation, records: int) -> float:
    """The size of a gate population; InputError naming the file and field when it is unknown, not finite, or
    smaller than the sample (a population always contains the sample)."""
    from .risk import resolve_population

    try:
        size = float(resolve_population(population.value))
    except InputError as exc:
        raise InputError(population.file, population.field, exc.problem) from None
    check_population(size, records, population.file, population.field)
    return size


def check_population(size: float, records: int, file: str | None, field_name: str) -> None:
    if not math.isfinite(size) or size <= 0:
        raise InputError(file, field_name, f"a population must be a finite positive number, got {size!r}")
    if size < records:
        raise InputError(file, field_name,
                         f"population of {size:g} is smaller than the {records} records of the table (a population "
                         f"contains the sample)")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def manifest_violations(manifest: dict, site: SiteGateSource) -> list[str]:
    """Why a deid manifest does not meet a site gate, from the risk it records; [] when it does.

    This is the first check `seal_release` makes, so an output produced without this site's gate (another site, an
    older engine) cannot be sealed: every population the site requires must appear with a solved estimate, made
    with every estimator the site requires (unless the release has no sample uniques, which makes every
    population's risk 0), every recorded estimate must be within the site's limits, and the smallest class must
    reach min_k. It checks the recorded risk, not the data; that the record is the data's own is the second check,
    engine.release_gate, which evaluates the gate again on the released data."""
    floor = site.gate
    where = site.describe()
    risk = manifest.get("risk")
    if not isinstance(risk, dict) or not isinstance(risk.get("populations"), list):
        return [f"the manifest records no risk to check against the {where}"]
    problems: list[str] = []
    entries = [e for e in risk["populations"] if isinstance(e, dict)]
    recorded_sizes = {_number(e.get("size")) for e in entries}
    recorded_names = {str(e.get("population")) for e in entries}
    from .risk import resolve_population

    # With no sample uniques no released record can be unique in any population: every population's risk is 0, so
    # one the output did not list is met as well (the gate records ratio 0 for each population it lists).
    uniques = risk.get("sample_uniques")
    no_uniques = isinstance(uniques, int) and not isinstance(uniques, bool) and uniques == 0
    for required in floor.required_populations:
        try:
            size = float(resolve_population(required))
        except InputError as exc:
            problems.append(f"{where}: required population {required!r}: {exc.problem}")
            continue
        if str(required) not in recorded_names and size not in recorded_sizes and not no_uniques:
            problems.append(f"population {required} required by the {where} was not checked")
    # Not recorded: Dankar's rule, the default ever since estimators existed (engine.release_gate then checks the
    # recorded figures against it on the data).
    recorded = risk.get("estimator", "dankar")
    recorded = {recorded} if isinstance(recorded, str) else set(recorded) if isinstance(recorded, list) else set()
    for estimator in estimator_names(floor.estimator):
        if estimator not in recorded and not no_uniques:
            problems.append(f"estimator {estimator} required by the {where} was not used")
    for entry in entries:
        name = entry.get("population")
        ratio = _number(entry.get("pu_su_ratio"))
        uniqueness = _number(entry.get("population_uniqueness"))
        if ratio is None or uniqueness is None:
            problems.append(f"{name}: risk unknown (no solved estimate recorded)")
            continue
        if ratio > floor.max_pu_su_ratio:
            problems.append(f"{name}: |PU|/|SU| = {ratio:.4f} above the {where}'s {floor.max_pu_su_ratio:g}")
        if uniqueness > floor.max_population_uniqueness:
            problems.append(f"{name}: population uniqueness {uniqueness:.6f} above the {where}'s "
                            f"{floor.max_population_uniqueness:g}")
    problems += _record_risk_violations(entries, floor, where)
    if floor.min_k > 1:
        smallest = manifest.get("smallest_class")
        released = _number(risk.get("released_records"))
        if _number(smallest) is None or (released and smallest < floor.min_k):
            problems.append(f"smallest class {smallest!r} below the {where}'s min_k = {floor.min_k}")
    return problems


def _record_risk_violations(entries: list[dict], floor: SiteGate, where: str) -> list[str]:
    """The site's per-record risk limits against the figures each population entry records (engine.gate): an entry
    without them was not checked against the limit."""
    limits = {name: getattr(floor, name) for name in RECORD_RISK_LIMITS if getattr(floor, name) is not None}
    if not limits:
        return []
    problems = []
    measured = {"max_record_risk": "max_risk", "max_expected_reidentifications": "expected_reidentifications"}
    for entry in entries:
        name = entry.get("population")
        figures = entry.get("individual_risk")
        for limit, value in limits.items():
            recorded = _number(figures.get(measured[limit])) if isinstance(figures, dict) else None
            if recorded is None:
                problems.append(f"{name}: per-record risk not recorded ({limit} {value:g} is set by the {where})")
            elif recorded > value:
                problems.append(f"{name}: {measured[limit].replace('_', ' ')} {recorded:.6g} above the {where}'s "
                                f"{limit} = {value:g}")
    return problems


def site_gate_violations(manifest: dict, site: str | os.PathLike) -> list[str]:
    """`manifest_violations` against the gate of the site folder `site`; an unreadable gate is itself a violation
    (fail closed)."""
    try:
        gate = load_site_gate(site)
    except InputError as exc:
        return [f"the site gate cannot be read: {exc}"]
    return manifest_violations(manifest, gate)
