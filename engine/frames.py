"""The engine as a pandas library: a DataFrame in, a DataFrame out, for custodians who work in notebooks.

    import pandas as pd
    import engine

    frame = pd.read_stata("survey.dta")
    engine.risk_report(frame, quasi_identifiers=["age", "sex", "zip"], population="USA")
    result = engine.deidentify("policy.yaml", data=frame)   # or the policy as a dict
    result.released                                         # the released table, a DataFrame

`deidentify(policy, data=frame)` is engine.deid.deidentify: the same search, gate and manifest as `safeshare deid`,
with the frame read in place of the policy's input. `risk_report` asks `safeshare risk`'s questions of a frame without
a policy file: it builds the policy `safeshare risk` would need (each quasi-identifier with a hierarchy that only
keeps or hides its value: the analysis is of the table as it is, at level 0, so no other level matters) and runs the
same analysis, so its figures are those `safeshare risk --json` prints for the same table and populations.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from .errors import InputError

# A hierarchy of two levels, the value and `*`, for any text: masking with more characters per level than any value.
_IDENTITY_HIERARCHY = {"builder": "masking", "characters_per_level": 1_000_000}
DEFAULT_POPULATIONS = ("USA", "California", "Los Angeles")   # `safeshare risk` on a policy without a gate


def risk_report(frame: pd.DataFrame, quasi_identifiers: Sequence[str], population: str | float | Sequence = None,
                sensitive: Sequence[str] = (), dataset: str = "data") -> dict:
    """`safeshare risk`'s report (the dict `--json` prints) for `frame` as it is: class sizes, sample uniques, the
    prosecutor risk profile, every population model's estimate of population uniqueness for each population, and the
    attribute disclosure of each `sensitive` column. `population` is a preset name ("USA"), a size, or a list of
    them (default: USA, California, Los Angeles). Columns named neither as quasi-identifiers nor as sensitive are not
    looked at. Raises InputError naming the argument for a bad one."""
    from .analysis import analyse
    from .policy import parse_policy

    if isinstance(quasi_identifiers, str):
        quasi_identifiers = [quasi_identifiers]
    names = list(quasi_identifiers) + list(sensitive)
    if not quasi_identifiers:
        raise InputError(None, "quasi_identifiers", "name at least one column")
    if not isinstance(frame, pd.DataFrame):
        raise InputError(None, "frame", f"expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise InputError(None, "quasi_identifiers" if missing[0] in quasi_identifiers else "sensitive",
                         f"no column {missing[0]!r} in the DataFrame")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InputError(None, "sensitive", f"{twice[0]!r} is named more than once")
    if population is None:
        populations = list(DEFAULT_POPULATIONS)
    elif isinstance(population, (str, int, float)):
        populations = [population]
    else:
        populations = list(population)
    attributes = {name: {"type": "quasi_identifying", "hierarchy": dict(_IDENTITY_HIERARCHY)}
                  for name in quasi_identifiers}
    attributes.update({name: {"type": "sensitive"} for name in sensitive})
    document = {"dataset": dataset, "attributes": attributes, "privacy": [{"model": "k_anonymity", "k": 1}],
                "suppression_limit": 0.0,
                "gate": {"populations": [float(p) if isinstance(p, int) and not isinstance(p, bool) else p
                                         for p in populations]}}
    try:
        policy = parse_policy(document)
    except InputError as exc:
        argument = {"dataset": "dataset"}.get((exc.field or "").split(".")[0], "population")
        if (exc.field or "").startswith("attributes"):
            argument = "quasi_identifiers"
        raise InputError(None, argument, exc.problem) from None
    try:
        return analyse(policy, data=frame[names])
    except InputError as exc:
        if exc.field and exc.field.startswith("gate.populations"):
            raise InputError(None, "population", exc.problem) from None
        raise


__all__ = ["DEFAULT_POPULATIONS", "risk_report"]
