"""Population sizes: an explicit N or a named preset from populations.yaml (with source and year per figure)."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

from ..errors import InputError

PRESETS_FILE = "populations.yaml"


@lru_cache(maxsize=1)
def presets() -> dict[str, dict]:
    text = resources.files(__package__).joinpath(PRESETS_FILE).read_text(encoding="utf-8")
    return {str(name): dict(entry) for name, entry in yaml.safe_load(text).items()}


def resolve_population(population: str | float | int) -> float:
    """Population size N for a preset name (case-insensitive) or a positive number."""
    if isinstance(population, (int, float)) and not isinstance(population, bool):
        if not population > 0:
            raise InputError(None, "population", f"must be positive, got {population!r}")
        return float(population)
    text = str(population).strip()
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = None
    if value is not None:
        return resolve_population(value)
    by_lower = {name.lower(): entry for name, entry in presets().items()}
    entry = by_lower.get(text.lower())
    if entry is None:
        raise InputError(None, "population",
                         f"unknown preset {text!r}; use a number or one of: {', '.join(presets())}")
    return float(entry["size"])
