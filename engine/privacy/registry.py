"""One registry from a policy's privacy spellings (`model: k_anonymity`, ...) to the models that implement them.

A model module registers its builder with `@register("name")`; `build_models` turns a policy's `privacy:` list into
models. New models (l-diversity, t-closeness, average risk) plug in here without touching the search.
"""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    from ..policy import DatasetPolicy
    from .base import PrivacyModel

Builder = Callable[..., "PrivacyModel"]   # (spec, source, index, context=None)
_BUILDERS: dict[str, Builder] = {}
# Imported on first use, so that they register themselves.
_MODULES = ("kanonymity", "population", "ldiversity", "tcloseness", "disclosure", "sample_risk", "kmap", "individual")


def register(name: str) -> Callable[[Builder], Builder]:
    def decorate(builder: Builder) -> Builder:
        _BUILDERS[name] = builder
        return builder

    return decorate


def _load() -> None:
    for module in _MODULES:
        import_module(f"{__package__}.{module}")


def build_model(spec, source: str | None = None, index: int = 0, context: dict | None = None) -> "PrivacyModel":
    """`context` carries what some models need from the table: `records`, the number of records (k-map with an
    estimator derives its k' from the sampling fraction)."""
    _load()
    builder = _BUILDERS.get(spec.model)
    if builder is None:
        raise InputError(source, f"privacy[{index}].model", f"privacy model {spec.model!r} is not available")
    return builder(spec, source, index, context)


def build_models(policy: "DatasetPolicy", context: dict | None = None) -> list["PrivacyModel"]:
    return [build_model(spec, policy.source, index, context) for index, spec in enumerate(policy.privacy)]
