"""Where a dataset's table comes from, beyond CSV and Parquet files (engine.table reads those): Stata, SAS and Excel
files (engine.sources.files), a SQL database (engine.sources.sql), or a pandas DataFrame given to
`engine.deidentify(policy, data=frame)`.

Every source gives the table as text (engine.sources.text) and a record of what was read for the manifest's `input`
block: its kind, the file's name and SHA-256, or the database dialect with the table or the query's SHA-256, and
the record count. The record never holds a URL or a password.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError


@dataclass(frozen=True)
class SourceTable:
    """A table as read: its text frame, how errors name it, and the manifest's record of it."""

    frame: pd.DataFrame
    where: str
    record: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None   # the input file, for file inputs


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_record(kind: str, path: Path, records: int, labelled: list[str] | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": kind, "file": path.name, "sha256": file_sha256(path), "records": records}
    if labelled:
        record["value_labels"] = labelled
    return record


def sql_source(policy) -> SourceTable:
    """The policy's SQL input (engine.sources.sql) with its record: dialect, table or query SHA-256, records."""
    from .sql import read_sql_table

    spec = policy.input
    frame, dialect = read_sql_table(policy)
    record: dict[str, Any] = {"kind": "sql", "dialect": dialect}
    if spec.table is not None:
        record["table"] = spec.table
        where, field_name = f"table {spec.table}", "input.table"
    else:
        record["query_sha256"] = hashlib.sha256(spec.query.encode("utf-8")).hexdigest()
        where, field_name = "the query's result", "input.query"
    if frame.shape[0] == 0:
        raise InputError(policy.source, field_name, f"{where} has no records")
    record["records"] = int(frame.shape[0])
    return SourceTable(frame, where, record)


def typed_file_source(policy, path: Path, fmt: str) -> SourceTable:
    """A Stata, SAS or Excel file (engine.sources.files) with its record."""
    from .files import read_typed_file

    frame, labelled = read_typed_file(path, fmt, policy.input, policy.source)
    if frame.shape[0] == 0:
        raise InputError(str(path), None, "the table has no records")
    return SourceTable(frame, path.name, file_record(fmt, path, int(frame.shape[0]), labelled), path)


def frame_source(data: object) -> SourceTable:
    """A DataFrame given in place of the policy's input: columns named by text, each once, at least one record.
    Read as text like any typed source; the caller's frame is neither changed nor kept, and its index (which may
    be an identifier) is dropped."""
    from .text import text_frame

    if not isinstance(data, pd.DataFrame):
        raise InputError(None, "data", f"expected a pandas DataFrame, got {type(data).__name__}")
    names = list(data.columns)
    odd = [name for name in names if not isinstance(name, str)]
    if odd:
        raise InputError(None, "data", f"column names must be text (got {type(odd[0]).__name__} {odd[0]!r})")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InputError(None, "data", f"column {twice[0]!r} appears more than once")
    if data.shape[0] == 0:
        raise InputError(None, "data", "the DataFrame has no records")
    return SourceTable(text_frame(data), "the DataFrame", {"kind": "dataframe", "records": int(data.shape[0])})


__all__ = ["SourceTable", "file_record", "file_sha256", "frame_source", "sql_source", "typed_file_source"]
