"""The gateway's SQL tables: enclave targets and per-recipient session tokens (SQLAlchemy 2.x).

SQLite is the default (`sqlite:///path/to/safeshare.db`); any SQLAlchemy URL works (for example
`postgresql+psycopg://user@host/safeshare`), so several gateways can share one database and a revocation written by
the `safeshare token` command, an admin tool or plain SQL reaches all of them. Only portable column types are used.

Tokens are stored as the SHA-256 of the token text, never the text itself: a copy of the database does not let anyone
open a session. Times are stored in UTC.

The sessions table is also where the gateway anchors each session's log outside its folder (seal hash, number of
lines, recording hash; the running head every few seconds): see `proxy/anchors.py`. Columns added after a database
was created are added by `make_engine` (`_add_missing_columns`), so an existing site keeps its database.
"""
from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from sqlalchemy import Engine, ForeignKey, Integer, String, Text, create_engine, event, inspect, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker

from safeshare.sitedb import create_tables
from safeshare.sqltime import UTCDateTime, utcnow

DEFAULT_DB_URL = "sqlite:///safeshare.db"
DB_URL_ENV = "SAFESHARE_DB"


def default_db_url() -> str:
    return os.environ.get(DB_URL_ENV) or DEFAULT_DB_URL


class Base(DeclarativeBase):
    pass


class Target(Base):
    """One enclave's VNC server as the proxy reaches it: `HOST:PORT` or `unix:PATH`, and its password file."""

    __tablename__ = "gateway_targets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    upstream: Mapped[str] = mapped_column(String(1000))
    password_file: Mapped[str | None] = mapped_column(String(1000), default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Token(Base):
    """A session token: bound to one recipient and one target, expiring, revocable. Only its hash is stored."""

    __tablename__ = "gateway_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    recipient: Mapped[str] = mapped_column(String(200), index=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("gateway_targets.id"))
    release: Mapped[str | None] = mapped_column(String(200), default=None)
    policy_file: Mapped[str | None] = mapped_column(String(1000), default=None)
    # The session limits the token grants (JSON of proxy.limits.SessionLimits), taken from the recipient policy when
    # it was issued: the gateway reads them here, not the policy file on every connection. None for tokens issued
    # without a policy or before this column existed (the gateway then reads `policy_file` as it used to).
    limits: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    revoke_reason: Mapped[str | None] = mapped_column(String(500), default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    target: Mapped[Target] = relationship(lazy="joined")


class GatewaySession(Base):
    """One proxied session as the gateway saw it: a row at start, closed at its end. A gateway that stops without
    closing its rows (killed, host crash) closes them at its next start, so that "live" here means live."""

    __tablename__ = "gateway_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the session folder's id
    gateway: Mapped[str] = mapped_column(String(200), index=True)
    token_id: Mapped[int] = mapped_column(Integer, index=True)
    recipient: Mapped[str] = mapped_column(String(200), index=True)
    target_name: Mapped[str] = mapped_column(String(200))
    release: Mapped[str | None] = mapped_column(String(200), default=None)
    folder: Mapped[str] = mapped_column(String(1000))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None, index=True)
    end_reason: Mapped[str | None] = mapped_column(String(500), default=None)
    # The anchor: what the gateway sealed (hash of the seal line, lines in the log including the seal, the
    # recording's SHA-256), written when the session ends; and while it runs, the head and line count every few
    # seconds, so that a killed gateway leaves a prefix of the log that a rewrite must keep.
    seal_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    events: Mapped[int | None] = mapped_column(Integer, default=None)
    recording_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    anchor_head: Mapped[str | None] = mapped_column(String(64), default=None)
    anchor_lines: Mapped[int | None] = mapped_column(Integer, default=None)
    anchored_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # The session this gateway sealed before this one (it is named in this session's signed seal too).
    previous_session: Mapped[str | None] = mapped_column(String(64), default=None)


WAL_SWITCH_SECONDS = 10.0


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.execute("PRAGMA foreign_keys=ON")
        # WAL: the gateway polls for revocations while the `safeshare token` command writes, without blocking each other.
        _switch_to_wal(cursor)
    finally:
        cursor.close()


def _switch_to_wal(cursor, deadline_seconds: float = WAL_SWITCH_SECONDS) -> None:
    """`PRAGMA journal_mode=WAL`, retried while another connection holds the file.

    WAL is a property of the file, so only the first connection to a new database really switches it, and that needs
    the file to itself: SQLite answers "database is locked" at once, without waiting in the busy handler, when another
    process opens the same new file at that moment. CI saw it with four processes opening a new site's stores
    together (`safeshare up` starts the custodian service beside the intake the same way). A file already in WAL is
    left alone; one still locked after the deadline raises the error as before."""
    (mode,) = cursor.execute("PRAGMA journal_mode").fetchone()
    if str(mode).lower() == "wal":
        return
    give_up = time.monotonic() + deadline_seconds
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= give_up:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def make_engine(url: str | None = None) -> Engine:
    """Engine for `url` (default: $SAFESHARE_DB or sqlite:///safeshare.db); creates the tables if missing."""
    url = url or default_db_url()
    kwargs: dict = {}
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:" and not path.startswith("file:"):
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 5, "check_same_thread": False}
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    create_tables(Base.metadata, engine)
    _add_missing_columns(engine)
    return engine


def _add_missing_columns(engine: Engine) -> None:
    """ALTER TABLE ... ADD COLUMN for the model's columns an older database lacks (nullable ones only, which is
    all this project adds). Idempotent; two processes migrating at once both succeed (the loser's duplicate-column
    error is checked against the table again)."""
    for table in Base.metadata.sorted_tables:
        present = {column["name"] for column in inspect(engine).get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=engine.dialect)
            statement = text(f'ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}')
            try:
                with engine.begin() as connection:
                    connection.execute(statement)
            except (OperationalError, ProgrammingError):
                if column.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                    raise


def make_sessionmaker(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)
