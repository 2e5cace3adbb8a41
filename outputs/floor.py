"""The site floor of the output rules: `SITE/outputs.yaml`, which a dataset policy may tighten and never relax.

Like the release gate's `SITE/gate.yaml` (engine.sitegate), the custodian writes once what every output at the site
must meet:

    # SITE/outputs.yaml: the output disclosure-control rules of this site; dataset policies can only tighten them
    safe_threshold: 10          # a cell of fewer records fails
    safe_dof_threshold: 10      # fewer residual degrees of freedom fail
    safe_nk_n: 2                # NK dominance: the n largest contributors ...
    safe_nk_k: 0.90             # ... holding this share of a cell's total or more fail it
    safe_pratio_p: 0.10         # p% ratio: (total - largest - second) / largest below this fails
    zeros_are_disclosive: true  # an empty cell fails (structural zeros excepted)
    safe_round_base: 5          # the rounding remedy's base

Every key is optional; a key left out keeps ACRO's default (origin `default`), a key written down is the site's
(origin `site`). The file is validated strictly: unknown keys, numbers written as text, booleans as numbers, `.inf`
and `.nan` are errors naming the file and the key (exit code 2 from `python -m outputs.floor`).

A dataset policy's output rules (a mapping of the same keys, for example the `outputs:` section a policy file
carries) go through `tighten`: a number at least as strict as the floor's is taken (origin `policy` when stricter),
a number that would relax the floor is refused, naming the policy file, the key, the value and the site's value; a
silently ignored relaxation would hide from the policy's author that their rule is not the one in force.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from engine.errors import InputError
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK

from .rules import AT_LEAST_AS_STRICT, RULE_NAMES, RuleSet, Rules

OUTPUTS_FILE = "outputs.yaml"
SITE_ENV = "SAFESHARE_SITE"
DEFAULT_SITE = Path("/var/lib/safeshare")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats (`1e-3` is a number, so it gets the strict number checks)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def site_folder(site: str | os.PathLike | None = None) -> Path | None:
    """The site folder: `site`, else $SAFESHARE_SITE, else /var/lib/safeshare if it exists, else None (the same
    order as engine.sitegate). A named site that is not a folder is bad input: falling back to the built-in rules
    would silently ignore the custodian's floor."""
    for value, where in ((site, "--site"), (os.environ.get(SITE_ENV), f"${SITE_ENV}")):
        if value is None or (where != "--site" and not str(value).strip()):
            continue
        if not str(value).strip():
            raise InputError(None, where, "empty: name the site folder")
        path = Path(value)
        if not path.is_dir():
            raise InputError(str(path), where, "not a folder")
        return path
    return DEFAULT_SITE if DEFAULT_SITE.is_dir() else None


def _validation_problem(exc: ValidationError) -> tuple[str, str]:
    """The first error's key and problem, preferring unknown keys and non-finite numbers (the likely typos)."""
    errors = exc.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"),
                 next((e for e in errors if e["type"] == "finite_number"), errors[0]))
    key = ".".join(str(part) for part in first["loc"]) or "(rules)"
    problem = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
    return key, problem


def _read_mapping(path: Path, what: str) -> tuple[dict, bytes]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read the {what}: {exc.strerror}") from None
    try:
        data = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except Exception as exc:  # yaml.YAMLError and decoding errors alike
        raise InputError(str(path), None, f"not valid YAML ({type(exc).__name__})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(str(path), None, f"the {what} must be a YAML mapping")
    return data, raw


def parse_floor(data: Mapping, source: str | None = None, sha256: str | None = None) -> RuleSet:
    """A site floor from a mapping (the parsed outputs.yaml); InputError naming `source`, the key and the problem."""
    try:
        rules = Rules.model_validate(dict(data))
    except ValidationError as exc:
        key, problem = _validation_problem(exc)
        raise InputError(source, key, problem) from None
    origin = {name: ("site" if name in data else "default") for name in RULE_NAMES}
    return RuleSet(rules, origin, source, sha256)


def load_floor(site: str | os.PathLike | None) -> RuleSet:
    """The floor of a site folder: SITE/outputs.yaml validated strictly, or ACRO's defaults when there is none."""
    if site is None:
        return RuleSet()
    path = Path(site) / OUTPUTS_FILE
    if not path.exists():
        return RuleSet()
    data, raw = _read_mapping(path, "site's output rules")
    return parse_floor(data, str(path), hashlib.sha256(raw).hexdigest())


def tighten(floor: RuleSet, policy: Mapping | None, source: str | None = None, prefix: str = "outputs") -> RuleSet:
    """The floor tightened by a dataset policy's output rules (`policy`: a mapping of rule names to numbers).

    Refuses (InputError naming `source`, `prefix.key` and both values) any number that would relax the floor; a
    number equal to the floor's keeps the floor's origin, a stricter one becomes `policy`."""
    if not policy:
        return floor
    if not isinstance(policy, Mapping):
        raise InputError(source, prefix, "the output rules must be a mapping of rule names to numbers")
    try:
        Rules.model_validate({**floor.rules.model_dump(), **dict(policy)})
    except ValidationError as exc:
        key, problem = _validation_problem(exc)
        raise InputError(source, f"{prefix}.{key}", problem) from None
    where = f"site floor {floor.site_source}" if floor.site_source else "built-in floor (ACRO's defaults)"
    values = dict(floor.rules.model_dump())
    origin = dict(floor.origin)
    for name, value in policy.items():
        current = values[name]
        if not AT_LEAST_AS_STRICT[name](value, current):
            raise InputError(source, f"{prefix}.{name}",
                             f"{value!r} would relax the {where}'s {current!r}: a dataset policy may only tighten "
                             f"the output rules")
        if value != current:
            values[name] = value
            origin[name] = "policy"
    return RuleSet(Rules.model_validate(values), origin, floor.site_source, floor.site_sha256, source)


def load_policy_rules(path: str | os.PathLike, section: str | None = "outputs") -> dict:
    """A dataset policy's output rules: the `section` mapping of a YAML file (None: the whole file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), None, "policy file does not exist")
    data, _ = _read_mapping(path, "policy")
    if section is None:
        return data
    rules = data.get(section) or {}
    if not isinstance(rules, dict):
        raise InputError(str(path), section, "the output rules must be a mapping of rule names to numbers")
    return rules


def effective_rules(site: str | os.PathLike | None = None, policy: str | os.PathLike | None = None) -> RuleSet:
    """The rules in force: the site's floor (site_folder(site)) tightened by the policy file's `outputs:` rules."""
    floor = load_floor(site_folder(site))
    if policy is None:
        return floor
    return tighten(floor, load_policy_rules(policy), str(policy))


def main(argv: list[str] | None = None) -> int:
    """`python -m outputs.floor [--site SITE] [--policy POLICY.yaml]`: print the rules in force as JSON (exit 0),
    or name the file, key and problem on stderr (exit 2)."""
    parser = argparse.ArgumentParser(prog="python -m outputs.floor", description=main.__doc__)
    parser.add_argument("--site", help="the site folder (default: $SAFESHARE_SITE, else /var/lib/safeshare)")
    parser.add_argument("--policy", help="a dataset policy whose `outputs:` section tightens the site's floor")
    args = parser.parse_args(argv)
    try:
        rules = effective_rules(args.site, args.policy)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(rules.record(), indent=2))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["OUTPUTS_FILE", "effective_rules", "load_floor", "load_policy_rules", "parse_floor", "site_folder",
           "tighten"]
