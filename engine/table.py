"""Reading the input table named by a policy, and resolving each quasi-identifier's hierarchy.

Values are read as strings exactly as written (no type inference, no NA guessing) because they must match the
labels of the hierarchy files character for character.

Error messages never quote the content of a file that has not shown itself to be the declared table: a policy whose
`input.path` names `/etc/shadow` or a binary must not turn the error into a way of reading it. Read errors are
described by kind and position only, and the header is listed only once every declared attribute was found in it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import re

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
    # Sensitive attributes the privacy models name, with their hierarchy (hierarchical t-closeness) or None.
    sensitive: dict[str, Hierarchy | None] = field(default_factory=dict)


def input_file(policy: DatasetPolicy) -> tuple[Path, str]:
    """The policy's input file and its format (`input.format`, else by suffix); a missing file is bad input."""
    path = policy.resolve(policy.input.path)
    if not path.is_file():
        raise InputError(policy.source, "input.path", f"input file {str(path)!r} does not exist")
    return path, policy.input.format or ("parquet" if path.suffix.lower() in {".parquet", ".pq"} else "csv")


def read_table(policy: DatasetPolicy) -> tuple[pd.DataFrame, Path]:
    path, fmt = input_file(policy)
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(path).astype(str)
        else:
            frame = pd.read_csv(
                path, sep=policy.input.separator, dtype=str, keep_default_na=False, na_filter=False,
                encoding=policy.input.encoding,
            )
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputError(str(path), None, f"cannot read {fmt} table: {_read_problem(exc, policy)}") from None
    if frame.shape[0] == 0:
        raise InputError(str(path), None, "the table has no records")
    return frame, path


# Reader messages that carry only counts and positions; anything else is replaced by its kind.
_SAFE_PARSER_MESSAGE = re.compile(r"Expected \d+ fields in line \d+, saw \d+")


def _read_problem(exc: BaseException, policy: DatasetPolicy) -> str:
    """What went wrong reading the input, without a byte of its content (reader messages can quote lines)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not {policy.input.encoding} text (undecodable byte at offset {exc.start}); a binary file?"
    if isinstance(exc, pd.errors.ParserError):
        found = _SAFE_PARSER_MESSAGE.search(str(exc))
        return f"malformed CSV ({found.group(0)})" if found else "malformed CSV"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return f"not a readable table ({type(exc).__name__})"


def check_columns(policy: DatasetPolicy, frame: pd.DataFrame, path: Path) -> None:
    declared = list(policy.attributes)
    missing = [name for name in declared if name not in frame.columns]
    if missing:
        found = len(declared) - len(missing)
        # Only the policy's own names are shown: a header without the declared attributes may not be a table at all.
        raise InputError(policy.source, f"attributes.{missing[0]}",
                         f"no such column in {path.name} ({len(missing)} of the {len(declared)} declared attributes "
                         f"missing: {', '.join(missing[:10])}"
                         + (")" if found else "; the file's header is not shown, as it holds none of them)"))
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
    sensitive = {
        name: (None if policy.attributes[name].hierarchy is None
               else resolve_hierarchy(policy, name, frame[name].to_numpy()))
        for name in policy.sensitive_attributes
    }
    return LoadedInput(frame=frame, hierarchies=hierarchies, path=path, sensitive=sensitive)
