"""Reading the input table named by a policy, and resolving each quasi-identifier's hierarchy.

Values are read as strings exactly as written (no type inference, no NA guessing) because they must match the
labels of the hierarchy files character for character.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InputError
from .hierarchy import Hierarchy
from .policy import DatasetPolicy, HierarchyFile


@dataclass(frozen=True)
class LoadedInput:
    frame: pd.DataFrame
    hierarchies: dict[str, Hierarchy]
    path: Path


def read_table(policy: DatasetPolicy) -> tuple[pd.DataFrame, Path]:
    path = policy.resolve(policy.input.path)
    if not path.is_file():
        raise InputError(policy.source, "input.path", f"input file {str(path)!r} does not exist")
    fmt = policy.input.format or ("parquet" if path.suffix.lower() in {".parquet", ".pq"} else "csv")
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(path).astype(str)
        else:
            frame = pd.read_csv(
                path, sep=policy.input.separator, dtype=str, keep_default_na=False, na_filter=False,
                encoding=policy.input.encoding,
            )
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputError(str(path), None, f"cannot read {fmt} table: {exc}") from None
    if frame.shape[0] == 0:
        raise InputError(str(path), None, "the table has no records")
    return frame, path


def check_columns(policy: DatasetPolicy, frame: pd.DataFrame, path: Path) -> None:
    declared = list(policy.attributes)
    missing = [name for name in declared if name not in frame.columns]
    if missing:
        raise InputError(policy.source, f"attributes.{missing[0]}",
                         f"no such column in {path.name} (columns: {', '.join(map(str, frame.columns))})")
    undeclared = [str(c) for c in frame.columns if c not in policy.attributes]
    if undeclared:
        # Fail closed: an unclassified column might be identifying.
        raise InputError(policy.source, "attributes",
                         f"columns of {path.name} without a declared type: {', '.join(undeclared)}")


def resolve_hierarchy(policy: DatasetPolicy, name: str, values: np.ndarray) -> Hierarchy:
    spec = policy.attributes[name].hierarchy
    if isinstance(spec, HierarchyFile):
        hierarchy = Hierarchy.from_csv(policy.resolve(spec.file), name=name, sep=spec.separator)
    else:
        from .builders import build_hierarchy

        hierarchy = build_hierarchy(spec, np.unique(values.astype(str)), name=name, source=policy.source)
    attribute = policy.attributes[name]
    for key in ("min_level", "max_level"):
        level = getattr(attribute, key)
        if level is not None and level > hierarchy.max_level:
            raise InputError(policy.source, f"attributes.{name}.{key}",
                             f"level {level} out of range: the hierarchy has levels 0..{hierarchy.max_level}")
    return hierarchy


def load_input(policy: DatasetPolicy) -> LoadedInput:
    frame, path = read_table(policy)
    check_columns(policy, frame, path)
    hierarchies = {
        name: resolve_hierarchy(policy, name, frame[name].to_numpy()) for name in policy.quasi_identifiers
    }
    return LoadedInput(frame=frame, hierarchies=hierarchies, path=path)
