"""The release gate evaluated again by `safeshare release`, on the released data itself.

A deid output's manifest is plain JSON in a folder: its hashes bind the data files to it, but nothing binds its gate
verdict or its risk figures to the data. Whoever can write the output folder can make an output under a lax site gate
and lower the recorded figures until they meet a strict one (issue 24, item 8). So sealing does not take the record's
word: `recheck_release` recomputes, from the released data file(s) (data.parquet, or a partitioned release's
data/part-NNNNN.parquet), the classes over the quasi-identifiers and from them the gate's figures, and

1. evaluates the gate on them: the policy's gate as the manifest records it (`gate.policy_gate`) tightened to the
   gate of the site that releases (its SITE/gate.yaml, or the built-in floor), plus every population and estimator
   the manifest says it checked: whatever the record claims was checked is checked again, and any limit of the
   releasing site applies to it;
2. compares every recorded figure with the recomputation: records, released records, sample uniques and
   uniqueness, smallest class, number of classes, and for each recorded population the estimate of each recorded
   estimator (uniques, uniqueness, |PU|/|SU|, the model used).

Either failing refuses the release. Each data file is read once, its bytes hashed against the manifest and parsed
from those same bytes, so a file swapped between the check and the read cannot slip past.

Which columns a release may hold, and which of them are quasi-identifiers, is not taken from the manifest: a writer
of the output folder rewrites it, and the data alone cannot tell a quasi-identifier from a sensitive attribute. Left
to the manifest, dropping a raw quasi-identifier from `transformation` (figures recomputed over the others), or
adding a column no policy released (exact birth dates), was sealed (adversarial review, round 2). So:

- given the dataset policy (`safeshare release --policy FILE`, the custodian's file), its sha256 must be the
  manifest's `policy_sha256`, `transformation` must name exactly the policy's quasi-identifiers, the classes are
  formed over the policy's quasi-identifiers, the released columns must be exactly the policy's non-identifying
  attributes (an identifying attribute, a column the policy does not have, or one it releases missing: refused),
  and the policy's gate is the file's, not the manifest's copy;
- without the policy, fail closed: every released column must be a quasi-identifier `transformation` names, so every
  column is in the classes the gate is evaluated on; a sensitive or insensitive attribute (released as it is) can be
  released only with the policy that declares it. Roles recorded in the manifest would be the writer's word again.

What is taken from the manifest: without a policy the quasi-identifiers (the keys of `transformation`, which must
then cover every column) and the policy's own gate (`gate.policy_gate`; a writer could relax it, but only down to the
releasing site's floor, which is what a release guarantees); in both cases `suppressed_records`. A suppressed record
has every quasi-identifier `*`; so can a kept class generalized to the top of every hierarchy, and the data alone
cannot tell the two apart: of the records whose quasi-identifiers are all `*`, `suppressed_records` are taken as
suppressed (it must not exceed their number) and the rest as one released class. Such records carry no
quasi-identifying value, so this split moves the figures by at most one class of indistinguishable records. The
gate's `require:` models (l-diversity and the like, policy choices rather than the site's floor) are not re-evaluated
here.

Cost on ADULT (30,162 records, nine quasi-identifiers): one Parquet read of those columns, one grouping, one estimate
per population and estimator: a fraction of a second.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from .manifest import Manifest
from .policy import DatasetPolicy, GateSpec, estimator_names
from .sitegate import EffectiveGate, GatePopulation, SiteGateSource, combine

SUPPRESSED = "*"
REL_TOLERANCE = 1e-9   # recomputed estimates are the same computation on the same classes: equal up to rounding


class ReleaseGateError(ValueError):
    """The released data cannot be read as the manifest describes it (a refusal, like a failed gate)."""


def released_roles(manifest: Manifest, policy: DatasetPolicy | None = None) -> tuple[list[str], dict[str, str]]:
    """The quasi-identifiers the classes are formed over, and every column a release may hold with its role
    (module docstring): the policy's when given (after checking the manifest was made from it), else the keys of
    the manifest's `transformation`, each a quasi-identifier. Raises ReleaseGateError when they disagree."""
    if policy is None:
        qis = list(manifest.transformation)
        if not qis:
            raise ReleaseGateError("the manifest names no quasi-identifiers (field 'transformation' is empty)")
        return qis, {name: "quasi_identifying" for name in qis}
    source = policy.source or "the dataset policy"
    if manifest.policy_sha256 != policy.sha256:
        raise ReleaseGateError(f"the manifest's 'policy_sha256' is {manifest.policy_sha256!r}, {source} has sha256 "
                               f"{policy.sha256!r}: the output was not made with this policy")
    qis = policy.quasi_identifiers
    if sorted(manifest.transformation) != sorted(qis):
        raise ReleaseGateError(f"the manifest's 'transformation' names {', '.join(sorted(manifest.transformation))}"
                               f", the quasi-identifiers of {source} are {', '.join(sorted(qis))}")
    return qis, {name: attribute.type for name, attribute in policy.attributes.items()}


def _column_problem(path: Path, names: list[str], roles: dict[str, str], qis: list[str], by_policy: bool
                    ) -> str | None:
    """Why the columns `names` of the data file `path` must not be released under `roles`; None when they may."""
    released = [name for name, role in roles.items() if role != "identifying"]
    identifying = [name for name in names if roles.get(name) == "identifying"]
    unknown = [name for name in names if name not in roles]
    missing = [name for name in (released if by_policy else qis) if name not in names]
    if missing_qis := [name for name in qis if name not in names]:
        where = "the dataset policy declares" if by_policy else "the manifest's 'transformation' names"
        return f"{path}: no column for the quasi-identifier(s) {', '.join(missing_qis)} {where}"
    if identifying:
        return (f"{path}: column(s) {', '.join(identifying)} identifying in the dataset policy (an identifying "
                f"attribute is never released)")
    if unknown and by_policy:
        return (f"{path}: column(s) {', '.join(unknown)} not an attribute of the dataset policy (a release holds "
                f"exactly the policy's quasi-identifying, sensitive and insensitive attributes)")
    if unknown:
        return (f"{path}: column(s) {', '.join(unknown)} not a quasi-identifier the manifest's 'transformation' "
                f"names; without the dataset policy (--policy) every released column must be one, evaluated by the "
                f"gate: release a sensitive or insensitive attribute with the policy that declares it")
    if missing:
        return f"{path}: no column for the attribute(s) the dataset policy releases {', '.join(missing)}"
    return None


def released_class_sizes(folder: str | Path, manifest: Manifest, files: list[str],
                         policy: DatasetPolicy | None = None) -> np.ndarray:
    """Sizes of the released (not suppressed) classes over the quasi-identifiers, from the data files in `files`.

    The quasi-identifiers and the columns a file may hold are `released_roles`'s (the policy's when given). Each
    file is grouped on its own and the per-file counts are summed by value, so a partitioned release is never held
    whole in memory. Raises ReleaseGateError when a file does not match its hash, holds a column it may not or lacks
    one, or the counts contradict the manifest's records and suppressed records."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    qis, roles = released_roles(manifest, policy)
    count = "__records__"
    while count in qis:
        count += "_"
    counted = []
    for name in files:
        path = folder / name
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ReleaseGateError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        if hashlib.sha256(raw).hexdigest() != manifest.files.get(name):
            raise ReleaseGateError(f"{path}: does not match the manifest's sha256 (changed while being released?)")
        try:
            schema = pq.read_schema(pa.BufferReader(raw))
            if problem := _column_problem(path, list(schema.names), roles, qis, policy is not None):
                raise ReleaseGateError(problem)
            frame = pq.read_table(pa.BufferReader(raw), columns=qis).to_pandas()
        except ReleaseGateError:
            raise
        except Exception as exc:   # pyarrow's errors for a corrupt file are many kinds
            raise ReleaseGateError(f"{path}: not readable Parquet ({type(exc).__name__}: {exc})") from None
        frame = frame.astype(object)
        counted.append(frame.groupby(qis, dropna=False, sort=False).size().rename(count).reset_index())
    table = pd.concat(counted, ignore_index=True) if len(counted) > 1 else counted[0]
    if len(counted) > 1:
        table = table.groupby(qis, dropna=False, sort=False)[count].sum().reset_index()
    sizes = table[count].to_numpy(dtype=np.int64)
    all_star = np.ones(len(table), dtype=bool)
    for name in qis:
        all_star &= (table[name] == SUPPRESSED).to_numpy(dtype=bool)
    records = int(sizes.sum())
    if records != manifest.records:
        raise ReleaseGateError(f"the data hold {records} records, the manifest's 'records' says {manifest.records}")
    starred = int(sizes[all_star].sum())
    suppressed = manifest.suppressed_records or 0
    if not 0 <= suppressed <= starred:
        raise ReleaseGateError(f"the manifest's 'suppressed_records' is {suppressed}, but {starred} record(s) have "
                               f"every quasi-identifier {SUPPRESSED!r} (a suppressed record has)")
    kept = sizes[~all_star]
    if starred - suppressed:
        kept = np.append(kept, starred - suppressed)   # a released class generalized to '*' everywhere
    return kept


RELEASE_COMPANIONS = frozenset({"data.csv", "report.html"})   # listed besides the data files a release consists of


def companion_problems(folder: str | Path, manifest: Manifest, files: list[str]) -> list[str]:
    """Why the files a release lists besides its gated data files must not be sealed; [] when they may.

    Everything listed is copied into the sealed bundle, which provisioning mounts whole into the enclave. So only
    the files a release consists of may be listed (the data files, data.csv, report.html), and data.csv must be the
    CSV of the gated data.parquet as `safeshare deid` writes it (read once, its bytes checked against the manifest):
    a writer of the output folder could otherwise list the raw table, or put raw records in data.csv with its hash,
    and have them sealed past a gate that evaluated data.parquet only. (report.html is free text the gate cannot
    evaluate; its content is the custodian's to look at.)"""
    import pandas as pd
    import pyarrow as pa

    folder = Path(folder)
    problems = [f"{folder / name}: listed in the manifest's 'files' but not a file of a release (only "
                f"{', '.join(sorted({*files, *RELEASE_COMPANIONS}))})"
                for name in sorted(manifest.files) if name not in files and name not in RELEASE_COMPANIONS]
    if "data.csv" not in manifest.files or problems:
        return problems
    if files != ["data.parquet"]:
        return [f"{folder / 'data.csv'}: a partitioned release has no data.csv"]
    raws = {}
    for name in ("data.parquet", "data.csv"):
        try:
            raws[name] = (folder / name).read_bytes()
        except OSError as exc:
            return [f"{folder / name}: cannot be read: {exc.strerror or exc}"]
        if hashlib.sha256(raws[name]).hexdigest() != manifest.files.get(name):
            return [f"{folder / name}: does not match the manifest's sha256 (changed while being released?)"]
    try:
        frame = pd.read_parquet(pa.BufferReader(raws["data.parquet"]))
    except Exception as exc:   # pyarrow's errors for a corrupt file are many kinds
        return [f"{folder / 'data.parquet'}: not readable Parquet ({type(exc).__name__}: {exc})"]
    if frame.to_csv(index=False, sep=";", lineterminator="\n").encode("utf-8") != raws["data.csv"]:
        return [f"{folder / 'data.csv'}: not the CSV of the gated data.parquet (a release's data.csv holds the same "
                f"records as its data.parquet, written by `safeshare deid`)"]
    return []


def release_gate(manifest: Manifest, site: SiteGateSource, policy: DatasetPolicy | None = None) -> EffectiveGate:
    """The gate a release is held to when it is sealed: the policy's gate (the file's when `policy` is given, else
    as the manifest records it) tightened to `site`, plus every population and estimator the manifest records as
    checked."""
    recorded_gate = manifest.gate
    policy_gate = None
    if policy is not None:
        policy_gate = policy.gate
    elif recorded_gate is not None and recorded_gate.policy_gate is not None:
        try:
            policy_gate = GateSpec.model_validate(recorded_gate.policy_gate)
        except ValueError as exc:
            raise ReleaseGateError(f"field 'gate.policy_gate' is not a dataset policy's gate: "
                                   f"{str(exc).splitlines()[0]}") from None
    effective = combine(policy_gate, site)
    populations = list(effective.populations)
    seen = {_population_key(p.value) for p in populations}
    recorded = []
    if recorded_gate is not None and recorded_gate.populations:
        recorded += [(label, f"gate.populations[{i}]") for i, label in enumerate(recorded_gate.populations)]
    if manifest.risk is not None:
        recorded += [(entry.size, f"risk.populations[{i}].size") for i, entry in enumerate(manifest.risk.populations)]
    for value, where in recorded:
        key = _population_key(value)
        if key not in seen:
            seen.add(key)
            populations.append(GatePopulation(value, "manifest.json", where))
    estimators = list(effective.estimators)
    if manifest.risk is not None:
        estimators += _recorded_estimators(manifest.risk.estimator, "risk.estimator")
    if recorded_gate is not None:
        estimators += _recorded_estimators(recorded_gate.estimator, "gate.estimator")
    return replace(effective, populations=tuple(populations), estimators=estimator_names(estimators))


def _recorded_estimators(value: object, field_name: str) -> list[str]:
    if value is None:
        return []
    from .policy import ESTIMATOR_NAMES

    names = [value] if isinstance(value, str) else list(value)
    unknown = [name for name in names if name not in ESTIMATOR_NAMES]
    if unknown:
        raise ReleaseGateError(f"field '{field_name}' names unknown estimator(s) {', '.join(map(repr, unknown))}")
    return names


def _population_key(value: object) -> tuple:
    from .risk import resolve_population

    try:
        return ("size", float(resolve_population(value)))
    except Exception:
        return ("name", str(value).strip().lower())


def recheck_release(folder: str | Path, manifest: Manifest, site: SiteGateSource, files: list[str],
                    policy: DatasetPolicy | None = None) -> list[str]:
    """Why a deid output must not be sealed at the site whose gate is `site`, from its released data; [] when it may.

    The released columns must be those `policy` releases (without a policy: quasi-identifiers only), the gate
    evaluated on the data's classes must pass, and every risk figure the manifest records must be the recomputed
    one (module docstring). `files` are the release's data files (engine.bundle.data_files)."""
    from .gate import evaluate_gate, population_estimates, strictest
    from .risk import resolve_population

    if companions := companion_problems(folder, manifest, files):
        return companions
    try:
        kept = released_class_sizes(folder, manifest, files, policy)
        effective = release_gate(manifest, site, policy)
    except ReleaseGateError as exc:
        return [str(exc)]
    risk, gate = evaluate_gate(effective, kept)
    problems = [f"gate on the released data: {reason}" for reason in gate["reasons"]]
    recorded = manifest.risk
    if recorded is None:
        return problems + ["the manifest records no risk to compare with the released data"]
    n, c1 = int(kept.sum()), int((kept == 1).sum())

    def differs(field_name: str, written: object, actual: object) -> None:
        if not _same(written, actual):
            problems.append(f"{field_name} is {written!r} in the manifest, {actual!r} in the released data")

    differs("risk.released_records", recorded.released_records, n)
    differs("risk.sample_uniques", recorded.sample_uniques, c1)
    differs("risk.sample_uniqueness", recorded.sample_uniqueness, c1 / n if n else 0.0)
    if manifest.smallest_class is not None:
        differs("smallest_class", manifest.smallest_class, int(kept.min()) if kept.size else 0)
    if manifest.equivalence_classes is not None:
        differs("equivalence_classes", manifest.equivalence_classes, int(kept.size))
    recorded_estimators = estimator_names(_recorded_estimators(recorded.estimator, "risk.estimator")) or ("dankar",)
    cache: dict[tuple[float, str], dict] = {}   # (population size, estimator) -> estimate; the gate's first
    for entry in risk["populations"]:
        for estimate in entry.get("estimates") or ([{**entry, "estimator": effective.estimators[0]}]
                                                    if len(effective.estimators) == 1 and c1 else []):
            cache[(float(entry["size"]), estimate["estimator"])] = estimate
    for index, entry in enumerate(recorded.populations):
        where = f"risk.populations[{index}] ({entry.population})"
        try:
            size = float(resolve_population(entry.size))
        except Exception:
            problems.append(f"{where}: size {entry.size!r} is not a population size")
            continue
        if size < n:
            problems.append(f"{where}: size {size:g} is smaller than the {n} released records")
            continue
        recorded_individual = (entry.model_extra or {}).get("individual_risk")
        if recorded_individual is not None:
            from .privacy.individual import measure

            written = recorded_individual if isinstance(recorded_individual, dict) else {}
            actual = measure(kept, size, effective.max_record_risk)
            for name in ("max_risk", "expected_reidentifications", "global_risk"):
                differs(f"{where}.individual_risk.{name}", written.get(name), actual[name])
        if c1 == 0 or n == 0:
            for name in ("population_uniques", "population_uniqueness", "pu_su_ratio"):
                differs(f"{where}.{name}", getattr(entry, name), 0.0)
            continue
        listed = entry.estimates if entry.estimates is not None else None
        names = [e.get("estimator") for e in listed] if listed else list(recorded_estimators)
        try:
            _recorded_estimators(names, f"{where}.estimates")
        except ReleaseGateError as exc:
            problems.append(str(exc))
            continue
        missing = [name for name in names if (size, name) not in cache]
        for estimate in population_estimates(kept, size, tuple(missing)):
            cache[(size, estimate["estimator"])] = estimate
        actual = [cache[(size, name)] for name in names]
        for written, computed in zip(listed or [], actual):
            for name in ("model", "solved", "population_uniques", "population_uniqueness", "pu_su_ratio"):
                differs(f"{where}.estimates[{computed['estimator']}].{name}", written.get(name), computed[name])
        top = strictest(actual)
        if top is None:
            differs(f"{where}.solved", entry.solved, False)
            continue
        differs(f"{where}.model", entry.model, top["model"])
        for name in ("population_uniques", "population_uniqueness", "pu_su_ratio"):
            differs(f"{where}.{name}", getattr(entry, name), top[name])
    return problems


def _same(written: object, actual: object) -> bool:
    """Recorded and recomputed agree: equal, or equal numbers up to rounding (never a bool for a number)."""
    if isinstance(written, bool) or isinstance(actual, bool) or written is None or actual is None:
        return written == actual and type(written) is type(actual)
    if isinstance(written, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(float(written), float(actual), rel_tol=REL_TOLERANCE, abs_tol=1e-15)
    return written == actual


__all__ = ["RELEASE_COMPANIONS", "ReleaseGateError", "companion_problems", "recheck_release", "release_gate",
           "released_class_sizes", "released_roles"]
