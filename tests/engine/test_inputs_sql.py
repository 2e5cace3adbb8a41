"""Issue 25 item 3: a dataset policy reads its table from a SQL database (a table, or one read-only query).

Against a real PostgreSQL server the test starts (password authentication, so that the password really travels from
`password_env` / `password_file` to the driver) and against SQLite: ADULT read from the database gives exactly the
CSV input's release, the manifest records the dialect, the table or the query's SHA-256 and the record count, and no
output file holds the password. Bad URLs, unreachable servers, missing tables, wrong passwords and statements that
write exit 2 naming the field, and what the database holds is unchanged.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import time

import pytest

from tests.engine.adult_inputs import adult, csv_baseline, deid, write_policy
from tests.pg import postgres_server
from tests.proxy.rfbtools import free_port

PASSWORD = "s3cret-Pa55word-in-no-file"
COLUMNS = ["sex", "age", "race", "marital", "educ", "country", "workcls", "occup", "salary"]


class _NoCapture:
    def readouterr(self):
        return type("R", (), {"err": "", "out": ""})()


@pytest.fixture(scope="module")
def frame():
    return adult(2000)


@pytest.fixture(scope="module")
def baseline(frame, tmp_path_factory):
    """(the CSV input's manifest, its output folder)"""
    folder = tmp_path_factory.mktemp("csv")
    return csv_baseline(folder, frame, _NoCapture()), folder / "out"


@pytest.fixture(scope="module")
def postgres(frame):
    """A PostgreSQL server that wants a password, holding ADULT as table `adult` (age an integer) and, for queries
    that must keep the input order, `adult_rows` with a row number."""
    with postgres_server(password=PASSWORD) as url:
        import psycopg

        dsn = url.replace("postgresql+psycopg://", "postgresql://").replace("safeshare@", f"safeshare:{PASSWORD}@")
        with _connect_when_ready(dsn) as connection:
            columns = ", ".join(f'"{c}" {"integer" if c == "age" else "text"}' for c in COLUMNS)
            connection.execute(f"CREATE TABLE adult ({columns})")
            connection.execute(f"CREATE TABLE adult_rows (row_id integer PRIMARY KEY, {columns})")
            rows = [tuple(int(v) if c == "age" else v for c, v in zip(COLUMNS, record))
                    for record in frame[COLUMNS].itertuples(index=False)]
            with connection.cursor() as cursor:
                cursor.executemany(f"INSERT INTO adult VALUES ({', '.join(['%s'] * len(COLUMNS))})", rows)
                # reversed on disk: only the query's ORDER BY gives the CSV's order
                cursor.executemany(f"INSERT INTO adult_rows VALUES (%s, {', '.join(['%s'] * len(COLUMNS))})",
                                   [(i, *row) for i, row in reversed(list(enumerate(rows)))])
        yield url, dsn


def assert_same_records(out, manifest: dict, baseline: dict, baseline_out) -> None:
    """A table has no order of its own: the same transformation, quality and suppression, and the same released
    records in some order (a query with ORDER BY must give the CSV's bytes, tested below)."""
    for key in ("transformation", "quality", "suppressed_records", "records", "equivalence_classes"):
        assert manifest[key] == baseline[key], key
    released = sorted((out / "data.csv").read_text().splitlines())
    assert released == sorted((baseline_out / "data.csv").read_text().splitlines())


def _connect_when_ready(dsn: str, seconds: float = 30.0):
    """A connection once the server accepts them: its port opens while it still answers "starting up"."""
    import psycopg

    deadline = time.monotonic() + seconds
    while True:
        try:
            return psycopg.connect(dsn, connect_timeout=5)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def rows_in(dsn: str, table: str = "adult") -> int:
    import psycopg

    with psycopg.connect(dsn) as connection:
        return connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def no_password_anywhere(folder) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), f"{path} holds the password"


def test_postgres_table_with_password_from_environment(tmp_path, postgres, frame, baseline, capsys, monkeypatch):
    url, _ = postgres
    monkeypatch.setenv("ADULT_DB_PASSWORD", PASSWORD)
    policy = write_policy(tmp_path, {"url": url, "table": "adult", "password_env": "ADULT_DB_PASSWORD"})
    code, err, manifest = deid(policy, tmp_path / "out", capsys)
    assert code == 0, err
    assert_same_records(tmp_path / "out", manifest, *baseline)
    assert manifest["input"] == {"kind": "sql", "dialect": "postgresql", "table": "adult", "records": len(frame)}
    no_password_anywhere(tmp_path / "out")
    assert PASSWORD not in (tmp_path / "out" / "manifest.json").read_text()


def test_postgres_query_with_password_file(tmp_path, postgres, frame, baseline, capsys):
    url, _ = postgres
    secret = tmp_path / "db.password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    query = f"SELECT {', '.join(COLUMNS)} FROM adult_rows ORDER BY row_id"
    policy = write_policy(tmp_path, {"url": url, "query": query, "password_file": "db.password"})
    code, err, manifest = deid(policy, tmp_path / "out", capsys)
    assert code == 0, err
    assert manifest["data_sha256"] == baseline[0]["data_sha256"], "the released data differ from the CSV input's"
    assert manifest["input"] == {"kind": "sql", "dialect": "postgresql",
                                 "query_sha256": hashlib.sha256(query.encode()).hexdigest(), "records": len(frame)}
    no_password_anywhere(tmp_path / "out")


def test_a_write_hidden_in_a_select_is_refused_by_the_read_only_transaction(tmp_path, postgres, capsys, monkeypatch):
    url, dsn = postgres
    monkeypatch.setenv("ADULT_DB_PASSWORD", PASSWORD)
    before = rows_in(dsn)
    query = f"WITH gone AS (DELETE FROM adult RETURNING *) SELECT {', '.join(COLUMNS)} FROM gone"
    policy = write_policy(tmp_path, {"url": url, "query": query, "password_env": "ADULT_DB_PASSWORD"})
    code, err, manifest = deid(policy, tmp_path / "out", capsys)
    assert code == 2 and ": input.query: " in err and "read-only" in err, err
    assert manifest is None and rows_in(dsn) == before == 2000


@pytest.mark.parametrize("spec, env, field, words", [
    ({"table": "no_such_table"}, PASSWORD, "input.table", "no table 'no_such_table'"),
    ({"table": "adult"}, "wrong-password", "input.url", "cannot connect"),
    ({"table": "adult"}, None, "input.password_env", "not set"),
    ({"query": "SELECT nonsense FROM adult"}, PASSWORD, "input.query", "refused"),
    ({"query": "DELETE FROM adult"}, PASSWORD, "input.query", "not DELETE"),
    ({"query": "SELECT * FROM adult; DROP TABLE adult"}, PASSWORD, "input.query", "one statement"),
    ({"query": "SELECT * FROM adult", "table": "adult"}, PASSWORD, "input.table", "exactly one"),
    ({}, PASSWORD, "input.query", "exactly one"),
])
def test_bad_postgres_inputs_exit_2_naming_the_field(tmp_path, postgres, capsys, monkeypatch, spec, env, field,
                                                     words):
    url, dsn = postgres
    if env is not None:
        monkeypatch.setenv("ADULT_DB_PASSWORD", env)
    else:
        monkeypatch.delenv("ADULT_DB_PASSWORD", raising=False)
    policy = write_policy(tmp_path, {"url": url, **spec, "password_env": "ADULT_DB_PASSWORD"})
    code, err, manifest = deid(policy, tmp_path / "out", capsys)
    assert code == 2, err
    assert f": {field}: " in err and words in err, err
    assert manifest is None and PASSWORD not in err
    assert rows_in(dsn) == 2000


def test_password_file_readable_by_others_is_refused(tmp_path, postgres, capsys):
    url, _ = postgres
    secret = tmp_path / "db.password"
    secret.write_text(PASSWORD)
    secret.chmod(0o644)
    code, err, _ = deid(write_policy(tmp_path, {"url": url, "table": "adult", "password_file": "db.password"}),
                        tmp_path / "out", capsys)
    assert code == 2 and ": input.password_file: " in err and "readable or writable by others" in err, err


@pytest.mark.parametrize("url, words", [
    (f"postgresql+psycopg://safeshare:{PASSWORD}@127.0.0.1:5432/postgres", "holds a password"),
    (f"postgresql+psycopg://safeshare@127.0.0.1/postgres?password={PASSWORD}", "holds a password"),
    ("not a database url", "not a database URL"),
    ("postgresql+psycopg://safeshare@127.0.0.1:port/postgres", "not a database URL"),
    ("mysql+pymysql://safeshare@127.0.0.1/adult", "'mysql' is not supported"),
    ("sqlite://", "names a database file"),
])
def test_bad_urls_exit_2_and_are_not_echoed(tmp_path, capsys, url, words):
    code, err, _ = deid(write_policy(tmp_path, {"url": url, "table": "adult"}), tmp_path / "out", capsys)
    assert code == 2 and ": input.url: " in err and words in err, err
    assert PASSWORD not in err


def test_unreachable_server_exits_2(tmp_path, capsys):
    port = free_port()   # nothing listens there
    code, err, _ = deid(write_policy(tmp_path, {"url": f"postgresql+psycopg://safeshare@127.0.0.1:{port}/postgres",
                                                "table": "adult"}), tmp_path / "out", capsys)
    assert code == 2 and ": input.url: cannot connect to the database" in err, err


def test_sql_input_without_the_sql_extra_names_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)   # as if not installed: import raises ImportError
    code, err, _ = deid(write_policy(tmp_path, {"url": "sqlite:///adult.db", "table": "adult"}), tmp_path / "out",
                        capsys)
    assert code == 2 and ": input.url: " in err and "safeshare[sql]" in err, err


# --- SQLite ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def sqlite_db(tmp_path, frame):
    path = tmp_path / "adult.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE adult (sex TEXT, age INTEGER, race TEXT, marital TEXT, educ TEXT, "
                           "country TEXT, workcls TEXT, occup TEXT, salary TEXT)")
        connection.executemany(f"INSERT INTO adult VALUES ({', '.join('?' * len(COLUMNS))})",
                               [tuple(int(v) if c == "age" else v for c, v in zip(COLUMNS, row))
                                for row in frame[COLUMNS].itertuples(index=False)])
    connection.close()
    return path


def test_sqlite_table_and_query_give_the_csv_release(tmp_path, sqlite_db, frame, baseline, capsys):
    digest = hashlib.sha256(sqlite_db.read_bytes()).hexdigest()
    code, err, manifest = deid(write_policy(tmp_path, {"url": "sqlite:///adult.db", "table": "adult"}),
                               tmp_path / "table", capsys)
    assert code == 0, err
    assert_same_records(tmp_path / "table", manifest, *baseline)
    assert manifest["input"] == {"kind": "sql", "dialect": "sqlite", "table": "adult", "records": len(frame)}
    query = "SELECT * FROM adult ORDER BY rowid -- the insertion order"
    code, err, manifest = deid(write_policy(tmp_path, {"url": "sqlite:///adult.db", "query": query}, "q.yaml"),
                               tmp_path / "query", capsys)
    assert code == 0, err
    assert manifest["data_sha256"] == baseline[0]["data_sha256"]
    assert manifest["input"]["query_sha256"] == hashlib.sha256(query.encode()).hexdigest()
    assert hashlib.sha256(sqlite_db.read_bytes()).hexdigest() == digest   # opened read-only
    assert not (tmp_path / "adult.db-journal").exists() and not (tmp_path / "adult.db-wal").exists()


def test_sqlite_write_attempts_and_missing_things_exit_2(tmp_path, sqlite_db, capsys):
    digest = hashlib.sha256(sqlite_db.read_bytes()).hexdigest()
    cases = [({"url": "sqlite:///missing.db", "table": "adult"}, "input.url", "no SQLite database file"),
             ({"url": "sqlite:///adult.db", "table": "people"}, "input.table", "no table 'people'"),
             ({"url": "sqlite:///adult.db", "query": "UPDATE adult SET age = 0"}, "input.query", "not UPDATE"),
             ({"url": "sqlite:///adult.db", "query": "SELECT * FROM adult;\nDELETE FROM adult"}, "input.query",
              "one statement"),
             ({"url": "sqlite:///adult.db", "query": "SELECT * FROM adult WHERE sex = 'nobody'"}, "input.query",
              "has no records")]
    for index, (spec, field, words) in enumerate(cases):
        code, err, _ = deid(write_policy(tmp_path, spec, f"p{index}.yaml"), tmp_path / f"out{index}", capsys)
        assert code == 2 and f": {field}: " in err and words in err, (spec, err)
    assert not (tmp_path / "missing.db").exists()   # never created by trying to read it
    assert hashlib.sha256(sqlite_db.read_bytes()).hexdigest() == digest
    assert os.listdir(tmp_path).count("adult.db") == 1
