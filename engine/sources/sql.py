"""A table read from a SQL database through SQLAlchemy (the `sql` extra): a whole table, or one read-only query.

Reads are held read-only by the database, not by trust in the query: PostgreSQL runs them in a transaction begun
with SET TRANSACTION READ ONLY, SQLite opens the file with `mode=ro` (and `PRAGMA query_only`). engine.sources.spec
already refused non-SELECT statements and URLs that hold a password. The password comes from an environment variable
or a file that only its owner can read, is given to the driver only, and is blanked from every error message; the
manifest records the dialect, the table or the query's SHA-256, and the record count (engine.sources.source_record),
never the URL.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from ..errors import InputError
from .text import text_frame

CONNECT_TIMEOUT_SECONDS = 15   # an unreachable server is bad input, not a hang


def read_sql_table(policy) -> tuple[pd.DataFrame, str]:
    """(the table as text, the dialect) read as `policy.input` says; InputError naming the field otherwise."""
    spec, source = policy.input, policy.source
    try:
        import sqlalchemy as sa
    except ImportError:
        raise InputError(source, "input.url", "SQL inputs need SQLAlchemy and a driver: pip install "
                                              "'safeshare[sql]'") from None
    try:
        url = sa.engine.make_url(spec.url)
    except (sa.exc.ArgumentError, ValueError):
        raise InputError(source, "input.url", "not a database URL (dialect+driver://user@host:port/database)") \
            from None
    password = read_password(policy)
    dialect = url.get_backend_name()
    connect_args: dict = {}
    if dialect == "sqlite":
        url = _sqlite_read_only(policy, url)
    else:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        if password is not None:
            url = url.set(password=password)
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise InputError(source, "input.url", f"no usable driver for {url.drivername!r}: "
                                              f"{_scrub(exc, password)} (pip install 'safeshare[sql]')") from None
    try:
        frame = _read(sa, engine, spec, source, dialect, password)
    finally:
        engine.dispose()
    return frame, dialect


def _read(sa, engine, spec, source: str | None, dialect: str, password: str | None) -> pd.DataFrame:
    try:
        connection = engine.connect()
    except (sa.exc.DBAPIError, sa.exc.SQLAlchemyError) as exc:
        raise InputError(source, "input.url", f"cannot connect to the database: {_scrub(exc, password)}") from None
    with connection:
        try:
            with connection.begin():
                if dialect == "postgresql":
                    connection.exec_driver_sql("SET TRANSACTION READ ONLY")
                else:
                    connection.exec_driver_sql("PRAGMA query_only = ON")
                if spec.table is not None:
                    field = "input.table"
                    if not sa.inspect(connection).has_table(spec.table):
                        raise InputError(source, field, f"no table {spec.table!r} in the database")
                    table = sa.Table(spec.table, sa.MetaData(), autoload_with=connection)
                    result = connection.execute(sa.select(table))
                else:
                    field = "input.query"
                    result = connection.exec_driver_sql(spec.query)
                if not result.returns_rows:
                    raise InputError(source, field, "returns no rows (not a SELECT)")
                columns = [str(name) for name in result.keys()]
                rows = result.fetchall()
        except sa.exc.DBAPIError as exc:
            raise InputError(source, field if "field" in locals() else "input.url",
                             f"the database refused: {_scrub(exc, password)}") from None
    duplicated = sorted({name for name in columns if columns.count(name) > 1})
    if duplicated:
        raise InputError(source, "input.query", f"the result has column {duplicated[0]!r} more than once")
    return text_frame(pd.DataFrame.from_records(rows, columns=columns, coerce_float=False))


def read_password(policy) -> str | None:
    """The password `input.password_env` or `input.password_file` names (None if neither); the file must be
    readable by its owner only, like the site's keys."""
    spec, source = policy.input, policy.source
    if spec.password_env is not None:
        value = os.environ.get(spec.password_env)
        if not value:
            raise InputError(source, "input.password_env", f"environment variable {spec.password_env} is not set")
        return value
    if spec.password_file is None:
        return None
    path = policy.resolve(spec.password_file)
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise InputError(source, "input.password_file", f"{path}: not a file")
        if mode & 0o077:
            raise InputError(source, "input.password_file",
                             f"{path}: readable or writable by others (mode {mode & 0o777:o}); chmod 600 it, and "
                             f"change the password if others may have read it")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(source, "input.password_file", f"{path}: not readable ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise InputError(source, "input.password_file", f"{path}: not UTF-8 text") from None
    password = text.rstrip("\r\n")
    if not password:
        raise InputError(source, "input.password_file", f"{path}: empty")
    return password


def _sqlite_read_only(policy, url):
    """`sqlite:///FILE` (relative to the policy, like every path in it) opened read-only through an SQLite URI: a
    missing file is an error, never a new empty database."""
    database = url.database or ""
    path = policy.resolve(database)
    if not path.is_file():
        raise InputError(policy.source, "input.url", f"no SQLite database file {str(path)!r}")
    return url.set(drivername="sqlite+pysqlite", database=f"file:{quote(str(Path(path).resolve()))}",
                   query={"mode": "ro", "uri": "true"})


def _scrub(exc: BaseException, password: str | None) -> str:
    """The driver's first line of what went wrong, without the password or the statement SQLAlchemy appends."""
    original = getattr(exc, "orig", None) or exc
    text = (str(original).strip().splitlines() or [type(original).__name__])[0]
    if password:
        text = text.replace(password, "***")
    return text[:300]


__all__ = ["CONNECT_TIMEOUT_SECONDS", "read_password", "read_sql_table"]
