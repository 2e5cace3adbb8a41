"""The output rule set: ACRO's names and defaults, every number settable, and where each number came from.

ACRO (`acro/default.yaml`, 1.0.2) is the anchor: a cell built from fewer than `safe_threshold` records fails; a
model (or a standard deviation, or a test) with fewer than `safe_dof_threshold` residual degrees of freedom fails;
the `safe_nk_n` largest contributors making `safe_nk_k` or more of a cell's total fail it (NK dominance); a cell
whose total minus its two largest contributors is less than `safe_pratio_p` of the largest fails (p% ratio); zeros
are disclosive unless `zeros_are_disclosive` is false; rounding uses `safe_round_base`.

An output records the rule set it was checked under (`RuleSet.record()`), with `origin` per number: `default` (the
built-in value above), `site` (`SITE/outputs.yaml`) or `policy` (a dataset policy that tightened the site's floor),
so a checker can see which authority set each limit.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Origin = Literal["default", "site", "policy"]


class Rules(BaseModel):
    """The numbers of the rules (ACRO's names). Strict: unknown keys, numbers as text, booleans as numbers, `.inf`
    and `.nan` are validation errors, so a typo in a site file cannot silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    safe_threshold: Annotated[int, Field(ge=1, le=1_000_000_000)] = 10
    safe_dof_threshold: Annotated[int, Field(ge=1, le=1_000_000_000)] = 10
    safe_nk_n: Annotated[int, Field(ge=1, le=1000)] = 2
    safe_nk_k: Annotated[float, Field(gt=0, le=1)] = 0.90
    safe_pratio_p: Annotated[float, Field(ge=0, le=1)] = 0.10
    zeros_are_disclosive: bool = True
    safe_round_base: Annotated[int, Field(ge=1, le=1_000_000)] = 5


RULE_NAMES: tuple[str, ...] = tuple(Rules.model_fields)


def _at_least(a: float, b: float) -> bool:
    return a >= b


def _at_most(a: float, b: float) -> bool:
    return a <= b


# For each number: is value `a` at least as strict as value `b`? A larger threshold, dof limit, p or rounding base
# flags (or hides) more; a smaller n or k makes NK dominance fail sooner (the largest contributor alone holding k
# implies the two largest do); disclosive zeros are stricter than safe zeros.
AT_LEAST_AS_STRICT: Mapping[str, Callable[[object, object], bool]] = MappingProxyType({
    "safe_threshold": _at_least,
    "safe_dof_threshold": _at_least,
    "safe_nk_n": _at_most,
    "safe_nk_k": _at_most,
    "safe_pratio_p": _at_least,
    "zeros_are_disclosive": lambda a, b: bool(a) or not bool(b),
    "safe_round_base": _at_least,
})
assert set(AT_LEAST_AS_STRICT) == set(RULE_NAMES)


@dataclass(frozen=True)
class RuleSet:
    """The rules an output is checked under, and who set each number.

    `site_source` is the site file (None: no SITE/outputs.yaml, the built-in defaults are the floor) and
    `site_sha256` its hash; `policy_source` names the dataset policy that tightened the floor (None: none did)."""

    rules: Rules = field(default_factory=Rules)
    origin: Mapping[str, Origin] = field(default_factory=lambda: {name: "default" for name in RULE_NAMES})
    site_source: str | None = None
    site_sha256: str | None = None
    policy_source: str | None = None

    def __getattr__(self, name: str):
        # `ruleset.safe_threshold` reads the number; only for the rule names, so typos still raise.
        if name in RULE_NAMES:
            return getattr(self.rules, name)
        raise AttributeError(name)

    def with_values(self, origin: Origin = "policy", **values: object) -> RuleSet:
        """A copy with some numbers replaced (no strictness check: tests and what-if views; `floor.tighten` is the
        checked way for a dataset policy)."""
        rules = Rules.model_validate({**self.rules.model_dump(), **values})
        merged = dict(self.origin)
        merged.update({name: origin for name in values})
        return RuleSet(rules, merged, self.site_source, self.site_sha256, self.policy_source)

    def record(self) -> dict:
        """What an output stores about its rules: the numbers, each number's origin and the files behind them."""
        return {
            "rules": self.rules.model_dump(),
            "origin": {name: self.origin.get(name, "default") for name in RULE_NAMES},
            "site": {"source": self.site_source, "sha256": self.site_sha256},
            "policy": self.policy_source,
        }


DEFAULT_RULES = RuleSet()

__all__ = ["AT_LEAST_AS_STRICT", "DEFAULT_RULES", "Origin", "RULE_NAMES", "RuleSet", "Rules"]
