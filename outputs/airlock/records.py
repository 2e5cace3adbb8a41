"""The airlock's tables in the site database (the same database as the custodian's and the gateway's tables).

    airlock_requests  one row per request: who, which release, state, round, the hash of its frozen request.json,
                      release time, download deadline, package hash
    airlock_outputs   per request, output and round: the files' sha256 and the justification's sha256 as submitted
                      (what decides whether a resubmitted output's votes are reset)
    airlock_votes     every vote ever cast (older rounds kept for the record; only the current round counts)
    airlock_events    append-only audit trail: nothing in safeshare updates or deletes its rows

Plain SQLAlchemy (no import of proxy.db or deploy: this is a library the app side, the custodian service and the
command line share). `create_all` on open, so a site gets the tables the first time any airlock tool opens it.
Times are timezone-aware UTC (stored naive in SQLite).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Integer, String, Text, create_engine, event, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from safeshare.sitedb import create_tables
from safeshare.sqltime import UTCDateTime as UTC, utcnow

from .states import VOTES

ACTIONS = ("output-saved", "submitted", "refused", "returned", "voted", "approved", "rejected",
           "released", "release-refused", "downloaded", "download-refused", "withdrawn")


class Base(DeclarativeBase):
    pass


class RequestRow(Base):
    __tablename__ = "airlock_requests"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    recipient: Mapped[str] = mapped_column(String(200), index=True)
    rid: Mapped[str] = mapped_column(String(32), index=True)
    release: Mapped[str] = mapped_column(String(200))
    app_number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20), index=True)
    round: Mapped[int] = mapped_column(Integer, default=1)
    request_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTC, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTC, default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(UTC, default=None)
    download_until: Mapped[datetime | None] = mapped_column(UTC, default=None)
    package_sha256: Mapped[str | None] = mapped_column(String(64), default=None)


class OutputRow(Base):
    __tablename__ = "airlock_outputs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    output_id: Mapped[str] = mapped_column(String(16))
    round: Mapped[int] = mapped_column(Integer)
    files_json: Mapped[str] = mapped_column(Text)  # {name: sha256}
    justification_sha256: Mapped[str | None] = mapped_column(String(64), default=None)


class VoteRow(Base):
    __tablename__ = "airlock_votes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    output_id: Mapped[str] = mapped_column(String(16))
    round: Mapped[int] = mapped_column(Integer)
    checker: Mapped[str] = mapped_column(String(200))
    vote: Mapped[str] = mapped_column(String(10))
    comment: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTC, default=utcnow)


class EventRow(Base):
    __tablename__ = "airlock_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTC, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(30), index=True)
    recipient: Mapped[str | None] = mapped_column(String(200), index=True, default=None)
    request_id: Mapped[str | None] = mapped_column(String(64), index=True, default=None)
    outcome: Mapped[str] = mapped_column(String(20))  # ok, refused, error
    detail: Mapped[str] = mapped_column(Text, default="{}")


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    recipient: str
    rid: str
    release: str
    app_number: int
    state: str
    round: int
    request_sha256: str
    created_at: datetime
    updated_at: datetime
    released_at: datetime | None
    download_until: datetime | None
    package_sha256: str | None

    @classmethod
    def of(cls, row: RequestRow) -> "RequestRecord":
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, Any]:
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class OutputRecord:
    request_id: str
    output_id: str
    round: int
    files: dict[str, str]
    justification_sha256: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Vote:
    id: int
    request_id: str
    output_id: str
    round: int
    checker: str
    vote: str
    comment: str
    at: datetime

    @classmethod
    def of(cls, row: VoteRow) -> "Vote":
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat()}


@dataclass(frozen=True)
class AirlockEvent:
    id: int
    at: datetime
    actor: str
    action: str
    recipient: str | None
    request_id: str | None
    outcome: str
    detail: dict[str, Any]

    @classmethod
    def of(cls, row: EventRow) -> "AirlockEvent":
        try:
            detail = json.loads(row.detail)
        except ValueError:
            detail = {"unreadable": row.detail}
        return cls(row.id, row.at, row.actor, row.action, row.recipient, row.request_id, row.outcome,
                   detail if isinstance(detail, dict) else {"detail": detail})

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat()}


def make_engine(url: str) -> Engine:
    """An engine for the site database URL; SQLite waits for a writer instead of failing (several processes, the
    custodian service, the gateway, the command line, share the file)."""
    connect_args = {"timeout": 30, "check_same_thread": False} if url.startswith("sqlite") else {}
    engine = create_engine(url, connect_args=connect_args)
    if url.startswith("sqlite"):
        @event.listens_for(engine, "connect")
        def _pragmas(connection, _record) -> None:  # pragma: no cover - exercised by every test
            cursor = connection.cursor()
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()
    return engine


def _json(detail: dict[str, Any]) -> str:
    return json.dumps(detail, sort_keys=True, default=str)


class AirlockRecords:
    """The airlock's rows: requests, outputs per round, votes and the append-only events."""

    def __init__(self, engine_or_url: Engine | str, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        self._owns_engine = not isinstance(engine_or_url, Engine)
        create_tables(Base.metadata, self.engine)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self.clock = clock

    def dispose(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def session(self) -> Session:
        return self._session()

    # --- events ------------------------------------------------------------------------------------------------

    def event(self, actor: str, action: str, outcome: str, recipient: str | None = None,
              request_id: str | None = None, session: Session | None = None, **detail: Any) -> None:
        """Append one event (in `session` when given, so it commits with the change it records)."""
        row = EventRow(at=self.clock(), actor=actor[:200], action=action, recipient=recipient, request_id=request_id,
                       outcome=outcome, detail=_json(detail))
        if session is not None:
            session.add(row)
            return
        with self._session() as own:
            own.add(row)
            own.commit()

    def events(self, recipient: str | None = None, request_id: str | None = None, action: str | None = None,
               limit: int = 1000, since: datetime | None = None) -> list[AirlockEvent]:
        """Events, oldest first (the last `limit` of them)."""
        query = select(EventRow)
        if recipient is not None:
            query = query.where(EventRow.recipient == recipient)
        if request_id is not None:
            query = query.where(EventRow.request_id == request_id)
        if action is not None:
            query = query.where(EventRow.action == action)
        if since is not None:
            query = query.where(EventRow.at >= since)
        query = query.order_by(EventRow.id.desc()).limit(max(0, int(limit)))
        with self._session() as session:
            return [AirlockEvent.of(row) for row in reversed(session.scalars(query).all())]

    # --- requests ----------------------------------------------------------------------------------------------

    def get(self, request_id: str) -> RequestRecord | None:
        with self._session() as session:
            row = session.get(RequestRow, request_id)
            return RequestRecord.of(row) if row is not None else None

    def requests(self, recipient: str | None = None, states: Iterable[str] | None = None,
                 rid: str | None = None) -> list[RequestRecord]:
        query = select(RequestRow)
        if recipient is not None:
            query = query.where(RequestRow.recipient == recipient)
        if rid is not None:
            query = query.where(RequestRow.rid == rid)
        if states is not None:
            query = query.where(RequestRow.state.in_(list(states)))
        query = query.order_by(RequestRow.created_at, RequestRow.request_id)
        with self._session() as session:
            return [RequestRecord.of(row) for row in session.scalars(query).all()]

    def outputs(self, request_id: str, round: int | None = None) -> list[OutputRecord]:
        query = select(OutputRow).where(OutputRow.request_id == request_id)
        if round is not None:
            query = query.where(OutputRow.round == round)
        with self._session() as session:
            return [OutputRecord(r.request_id, r.output_id, r.round, json.loads(r.files_json),
                                 r.justification_sha256)
                    for r in session.scalars(query.order_by(OutputRow.round, OutputRow.id)).all()]

    def votes(self, request_id: str, output_id: str | None = None, round: int | None = None) -> list[Vote]:
        query = select(VoteRow).where(VoteRow.request_id == request_id)
        if output_id is not None:
            query = query.where(VoteRow.output_id == str(output_id))
        if round is not None:
            query = query.where(VoteRow.round == round)
        with self._session() as session:
            return [Vote.of(r) for r in session.scalars(query.order_by(VoteRow.id)).all()]


__all__ = ["ACTIONS", "AirlockEvent", "AirlockRecords", "Base", "EventRow", "OutputRecord", "OutputRow",
           "RequestRecord", "RequestRow", "VOTES", "Vote", "VoteRow", "make_engine", "utcnow"]
