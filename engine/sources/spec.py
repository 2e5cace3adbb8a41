"""Checks of a policy's `input:` that pydantic cannot name a field for, run when the policy is parsed.

An input is a file (`path`) or a SQL database (`url` with `table` or `query`). The URL never holds a password (it is
in the policy, which is hashed into every manifest and copied around): the password comes from `password_env` or
`password_file`. A query must be one read-only statement (SELECT or WITH); the reader also runs it in a read-only
transaction (engine.sources.sql), which is what actually holds: this check only refuses what is plainly not a read.
Kept free of pandas and SQLAlchemy, so that parsing a policy stays light.
"""
from __future__ import annotations

import re
from pathlib import PurePath
from urllib.parse import parse_qsl, urlsplit

from ..errors import InputError

# File formats by suffix, when `input.format` is not given.
SUFFIX_FORMATS = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet",
                  ".dta": "stata", ".sas7bdat": "sas7bdat", ".xpt": "xport", ".xlsx": "excel", ".xlsm": "excel"}
# Dialects whose reads run in a transaction the database itself keeps read-only (engine.sources.sql).
SQL_DIALECTS = ("postgresql", "sqlite")
_SQL_ONLY = ("table", "query", "password_env", "password_file")
_FILE_ONLY = ("path", "format", "sheet")
_PASSWORD_KEYS = {"password", "passwd", "pwd", "pass", "sslpassword"}
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9_]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# Suffixes of table files that are not read (the format is named in the error); any other suffix is CSV, as always.
UNSUPPORTED_SUFFIXES = {".sav": "SPSS", ".zsav": "SPSS", ".por": "SPSS", ".xls": "Excel 97-2003", ".ods": "OpenDocument",
                        ".sas7bcat": "a SAS format catalog", ".rds": "R", ".rdata": "R", ".feather": "Feather",
                        ".json": "JSON", ".sqlite": "SQLite (give input.url: sqlite:///FILE)",
                        ".db": "a database (give input.url)"}
FORMATS = ("csv", "parquet", "stata", "sas7bdat", "xport", "excel")


def file_format(path: str, given: str | None) -> str:
    """The format of an input file: `input.format`, else by the file's suffix (CSV when it names none of them)."""
    return given or SUFFIX_FORMATS.get(PurePath(path).suffix.lower(), "csv")


def check_input(spec, source: str | None) -> None:
    """Refuse an `input:` that names no table, mixes a file with a database, or could leak or write (InputError
    naming the field). `spec` is a `policy.InputSpec`."""
    # fields given a value other than their default: a policy rebuilt from a dump (P4's workers, `model_dump()`)
    # sets every field, with the defaults, and is the same input
    defaults = type(spec).model_fields
    given = {name for name in spec.model_fields_set if getattr(spec, name) != defaults[name].default}
    if spec.url is None:
        if spec.path is None:
            raise InputError(source, "input", "name the table: path (a file) or url (a SQL database)")
        extra = [name for name in _SQL_ONLY if name in given]
        if extra:
            raise InputError(source, f"input.{extra[0]}", "applies to a SQL input (input.url) only")
        suffix = PurePath(spec.path).suffix.lower()
        if spec.format is None and suffix in UNSUPPORTED_SUFFIXES:
            raise InputError(source, "input.path", f"{UNSUPPORTED_SUFFIXES[suffix]} files ({suffix}) are not read; "
                                                   f"input formats: {', '.join(FORMATS)}")
        fmt = file_format(spec.path, spec.format)
        if spec.sheet is not None and fmt != "excel":
            raise InputError(source, "input.sheet", f"applies to Excel files only (this input is {fmt})")
        if "value_labels" in given and fmt != "stata":
            raise InputError(source, "input.value_labels", f"applies to Stata files only (this input is {fmt})")
        return
    extra = [name for name in _FILE_ONLY if name in given] + [n for n in ("separator", "value_labels") if n in given]
    if extra:
        raise InputError(source, f"input.{extra[0]}", "applies to a file input only; a SQL input has url and "
                                                      "table or query")
    check_url(spec.url, source)
    if (spec.table is None) == (spec.query is None):
        raise InputError(source, "input.table" if spec.table is not None else "input.query",
                         "give exactly one of table (a whole table) or query (one read-only SELECT)")
    if spec.table is not None and not spec.table.strip():
        raise InputError(source, "input.table", "an empty table name")
    if spec.query is not None:
        check_query(spec.query, source)
    if spec.password_env is not None and spec.password_file is not None:
        raise InputError(source, "input.password_file", "give one of password_env or password_file, not both")
    if spec.password_env is not None and not _ENV_NAME.fullmatch(spec.password_env):
        raise InputError(source, "input.password_env", "not an environment variable's name")


def check_url(url: str, source: str | None) -> None:
    """A database URL (`dialect[+driver]://user@host:port/database`, `sqlite:///file.db`) of a supported dialect,
    holding no password. The URL itself is never quoted back: a mistyped one may hold a password after all."""
    try:
        parts = urlsplit(url)
        port = parts.port   # a port that is no number raises here
    except ValueError:
        raise InputError(source, "input.url", "not a database URL (dialect+driver://user@host:port/database)") from None
    del port
    scheme = parts.scheme
    if not scheme or not _URL_SCHEME.fullmatch(scheme) or not url.startswith(f"{scheme}://"):
        raise InputError(source, "input.url", "not a database URL (dialect+driver://user@host:port/database)")
    if parts.password is not None or any(key.lower() in _PASSWORD_KEYS for key, _ in parse_qsl(parts.query)):
        raise InputError(source, "input.url", "holds a password: the policy is hashed into manifests and copied "
                                              "around; give it with input.password_env or input.password_file")
    dialect = scheme.split("+")[0].lower()
    if dialect not in SQL_DIALECTS:
        raise InputError(source, "input.url", f"dialect {dialect!r} is not supported ({', '.join(SQL_DIALECTS)}): "
                                              f"its reads could not be held read-only")
    if dialect == "sqlite" and parts.path in ("", "/", "/:memory:"):
        raise InputError(source, "input.url", "an SQLite URL names a database file (sqlite:///relative/file.db or "
                                              "sqlite:////absolute/file.db)")


def check_query(query: str, source: str | None) -> None:
    """One statement that reads: it starts with SELECT or WITH, and no `;` outside quotes and comments ends it
    before its end."""
    code = _code_only(query)
    if code is None:
        raise InputError(source, "input.query", "unterminated quote or comment")
    statements = [part for part in code.split(";") if part.strip()]
    if not statements:
        raise InputError(source, "input.query", "an empty query")
    if len(statements) > 1:
        raise InputError(source, "input.query", "one statement only (a ';' separates several)")
    first = statements[0].split(None, 1)[0].upper()
    if first not in ("SELECT", "WITH"):
        raise InputError(source, "input.query", f"only a read-only SELECT (or WITH ... SELECT) is run, not {first}")


def _code_only(query: str) -> str | None:
    """The query with string literals, quoted names and comments blanked out (dollar quotes too), so that what is
    left is SQL keywords and punctuation; None when a quote or comment does not end."""
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch in ("'", '"'):
            end = i + 1
            while True:
                end = query.find(ch, end)
                if end < 0:
                    return None
                if query[end + 1:end + 2] == ch:   # a doubled quote inside the literal
                    end += 2
                    continue
                break
            out.append(" ")
            i = end + 1
        elif query.startswith("--", i):
            end = query.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif query.startswith("/*", i):
            end = query.find("*/", i + 2)
            if end < 0:
                return None
            out.append(" ")
            i = end + 2
        elif ch == "$" and (tag := re.match(r"\$[A-Za-z_]?[A-Za-z0-9_]*\$", query[i:])):
            end = query.find(tag.group(0), i + len(tag.group(0)))
            if end < 0:
                return None
            out.append(" ")
            i = end + len(tag.group(0))
        else:
            out.append(ch)
            i += 1
    return "".join(out)


__all__ = ["FORMATS", "SQL_DIALECTS", "SUFFIX_FORMATS", "UNSUPPORTED_SUFFIXES", "check_input", "check_query", "check_url", "file_format"]
