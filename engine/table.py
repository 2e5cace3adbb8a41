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
from typing import TYPE_CHECKING

import re

import numpy as np
import pandas as pd

from .errors import InputError
from .hierarchy import Hierarchy
from .pathvars import missing_hint
from .policy import DatasetPolicy, HierarchyFile

if TYPE_CHECKING:
    from .sources import SourceTable


@dataclass(frozen=True)
class LoadedInput:
    frame: pd.DataFrame
    hierarchies: dict[str, Hierarchy]
    path: Path | None   # the input file; None for a database or a DataFrame
    # Sensitive attributes the privacy models name, with their hierarchy (hierarchical t-closeness) or None.
    sensitive: dict[str, Hierarchy | None] = field(default_factory=dict)
    # What was read, for the manifest's `input` block (engine.sources): kind, file or table or query hash, records.
    source: dict = field(default_factory=dict)


def input_file(policy: DatasetPolicy) -> tuple[Path, str]:
    """The policy's input file and its format (`input.format`, else by suffix); a missing file is bad input."""
    from .sources.spec import file_format

    if policy.input is None:
        raise InputError(policy.source, "input", "the policy names no input (path or url); or give the table as "
                                                 "engine.deidentify(policy, data=frame)")
    if policy.input.path is None:
        raise InputError(policy.source, "input.url", "this reads a file; the policy's input is a database")
    path = policy.resolve(policy.input.path)
    if not path.is_file():
        raise InputError(policy.source, "input.path",
                         f"input file {str(path)!r} does not exist{missing_hint(policy.input.path)}")
    return path, file_format(policy.input.path, policy.input.format)


def read_source(policy: DatasetPolicy, data: pd.DataFrame | None = None) -> "SourceTable":
    """The table as text with the record of what was read: `data` when given (a DataFrame in place of the policy's
    input), else the policy's file or database (engine.sources)."""
    from .sources import SourceTable, file_record, frame_source, sql_source, typed_file_source

    if data is not None:
        return frame_source(data)
    if policy.input is not None and policy.input.url is not None:
        return sql_source(policy)
    path, fmt = input_file(policy)
    if fmt not in ("csv", "parquet"):
        return typed_file_source(policy, path, fmt)
    frame, path = read_table(policy)
    return SourceTable(frame, path.name, file_record(fmt, path, int(frame.shape[0])), path)


def read_table(policy: DatasetPolicy) -> tuple[pd.DataFrame, Path]:
    """The policy's table as text and the path that names it (a database's table or query: a label)."""
    if policy.input is not None and policy.input.url is not None:
        source = read_source(policy)
        return source.frame, Path(source.where)
    path, fmt = input_file(policy)
    if fmt not in ("csv", "parquet"):
        return typed_file_source(policy, path, fmt).frame, path
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


def check_columns(policy: DatasetPolicy, frame: pd.DataFrame, path: Path | str) -> None:
    """Every declared attribute is a column and every column is declared; `path` names the table in errors."""
    name = path.name if isinstance(path, Path) else path
    declared = list(policy.attributes)
    missing = [name for name in declared if name not in frame.columns]
    if missing:
        found = len(declared) - len(missing)
        # Only the policy's own names are shown: a header without the declared attributes may not be a table at all.
        raise InputError(policy.source, f"attributes.{missing[0]}",
                         f"no such column in {name} ({len(missing)} of the {len(declared)} declared attributes "
                         f"missing: {', '.join(missing[:10])}"
                         + (")" if found else "; the file's header is not shown, as it holds none of them)"))
    undeclared = [str(c) for c in frame.columns if c not in policy.attributes]
    if undeclared:
        # Fail closed: an unclassified column might be identifying.
        raise InputError(policy.source, "attributes",
                         f"columns of {name} without a declared type: {', '.join(undeclared)}")


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


def load_input(policy: DatasetPolicy, data: pd.DataFrame | None = None) -> LoadedInput:
    """The policy's table (or `data`, a DataFrame given in its place) checked against the declared attributes, with
    the hierarchies of its quasi-identifiers and sensitive attributes."""
    source = read_source(policy, data)
    frame = source.frame
    check_columns(policy, frame, source.where)
    hierarchies = {
        name: resolve_hierarchy(policy, name, frame[name].to_numpy()) for name in policy.quasi_identifiers
    }
    sensitive = {
        name: (None if policy.attributes[name].hierarchy is None
               else resolve_hierarchy(policy, name, frame[name].to_numpy()))
        for name in policy.sensitive_attributes
    }
    return LoadedInput(frame=frame, hierarchies=hierarchies, path=source.path, sensitive=sensitive,
                       source=source.record)
