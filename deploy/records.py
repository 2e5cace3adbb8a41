"""The custodian's tables, in the same database as the gateway's tokens and sessions: who was given access to what
(recipients), every custodian action (audit events) and who may call the custodian API (API keys).

The audit table is append-only by use: nothing in safeshare updates or deletes its rows. Each row names the actor
(`cli:<user>`, `api:<key name>` or `system:<job>`), the action, the recipient and the outcome, with details as JSON.
API keys, like tokens, are stored as SHA-256 only.
"""
from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Integer, String, Text, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from proxy.db import UTCDateTime, make_engine, make_sessionmaker, utcnow
from safeshare.sitedb import create_tables

ROLES = ("custodian", "auditor")
ACTIVE, REVOKED, EXPIRED = "active", "revoked", "expired"


class Base(DeclarativeBase):
    pass


class RecipientRow(Base):
    __tablename__ = "custodian_recipients"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    rid: Mapped[str] = mapped_column(String(32), unique=True)
    release_ref: Mapped[str] = mapped_column(String(200))  # as the policy says it
    release: Mapped[str] = mapped_column(String(200))  # the bundle: dataset/id
    policy_sha256: Mapped[str] = mapped_column(String(64))
    policy_file: Mapped[str] = mapped_column(String(1000))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    status: Mapped[str] = mapped_column(String(20), default=ACTIVE)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    end_reason: Mapped[str | None] = mapped_column(String(500), default=None)


class AuditEventRow(Base):
    __tablename__ = "custodian_audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(50), index=True)
    recipient: Mapped[str | None] = mapped_column(String(200), index=True, default=None)
    outcome: Mapped[str] = mapped_column(String(20))  # ok, unchanged, refused, error
    detail: Mapped[str] = mapped_column(Text, default="{}")


class ApiKeyRow(Base):
    __tablename__ = "custodian_api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


@dataclass(frozen=True)
class Recipient:
    name: str
    rid: str
    release_ref: str
    release: str
    policy_sha256: str
    policy_file: str
    expires_at: datetime | None
    status: str
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    end_reason: str | None

    @classmethod
    def of(cls, row: RecipientRow) -> "Recipient":
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, Any]:
        return {key: value.isoformat() if isinstance(value, datetime) else value
                for key, value in asdict(self).items()}


@dataclass(frozen=True)
class AuditEvent:
    id: int
    at: datetime
    actor: str
    action: str
    recipient: str | None
    outcome: str
    detail: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat()}


@dataclass(frozen=True)
class ApiKey:
    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None}


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Records:
    """Recipients, audit events and API keys; synchronous (SQLAlchemy), like the token store it shares a database
    with."""

    def __init__(self, engine_or_url: Engine | str | None = None, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        create_tables(Base.metadata, self.engine)
        self._session = make_sessionmaker(self.engine)
        self.clock = clock

    def dispose(self) -> None:
        self.engine.dispose()

    # --- audit -----------------------------------------------------------------------------------------------------

    def audit(self, actor: str, action: str, outcome: str, recipient: str | None = None, **detail: Any) -> int:
        with self._session.begin() as db:
            row = AuditEventRow(at=self.clock(), actor=actor, action=action, recipient=recipient, outcome=outcome,
                                detail=json.dumps(detail, default=str, sort_keys=True))
            db.add(row)
            db.flush()
            return row.id

    def events(self, recipient: str | None = None, action: str | None = None, limit: int = 1000) -> list[AuditEvent]:
        stmt = select(AuditEventRow).order_by(AuditEventRow.id.desc()).limit(limit)
        if recipient is not None:
            stmt = stmt.where(AuditEventRow.recipient == recipient)
        if action is not None:
            stmt = stmt.where(AuditEventRow.action == action)
        with self._session() as db:
            rows = list(db.scalars(stmt))
        return [AuditEvent(row.id, row.at, row.actor, row.action, row.recipient, row.outcome, json.loads(row.detail))
                for row in reversed(rows)]

    # --- recipients ------------------------------------------------------------------------------------------------

    def recipient(self, name: str) -> Recipient | None:
        with self._session() as db:
            row = db.get(RecipientRow, name)
            return Recipient.of(row) if row is not None else None

    def recipients(self, status: str | None = None) -> list[Recipient]:
        stmt = select(RecipientRow).order_by(RecipientRow.name)
        if status is not None:
            stmt = stmt.where(RecipientRow.status == status)
        with self._session() as db:
            return [Recipient.of(row) for row in db.scalars(stmt)]

    def save_recipient(self, name: str, **values: Any) -> Recipient:
        """Insert or update; a re-provisioned recipient becomes active again."""
        now = self.clock()
        with self._session.begin() as db:
            row = db.get(RecipientRow, name)
            if row is None:
                row = RecipientRow(name=name, created_at=now, **values)
                db.add(row)
            else:
                for key, value in values.items():
                    setattr(row, key, value)
            row.status, row.ended_at, row.end_reason, row.updated_at = ACTIVE, None, None, now
            db.flush()
            return Recipient.of(row)

    def end_recipient(self, name: str, status: str, reason: str) -> None:
        with self._session.begin() as db:
            db.execute(update(RecipientRow).where(RecipientRow.name == name)
                       .values(status=status, ended_at=self.clock(), end_reason=reason[:500],
                               updated_at=self.clock()))

    # --- API keys --------------------------------------------------------------------------------------------------

    def add_key(self, name: str, role: str) -> str:
        """A new API key for `name` with `role`; the key text is returned only here."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if not name or len(name) > 200:
            raise ValueError("an API key needs a name (at most 200 characters)")
        key = "ssk_" + secrets.token_urlsafe(32)
        with self._session.begin() as db:
            if db.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name)) is not None:
                raise ValueError(f"an API key named {name!r} exists (revoke it first)")
            db.add(ApiKeyRow(name=name, role=role, key_hash=hash_key(key), created_at=self.clock()))
        return key

    def revoke_key(self, name: str) -> bool:
        with self._session.begin() as db:
            row = db.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name))
            if row is None or row.revoked_at is not None:
                return False
            # the name is freed for a new key; the old hash stays unusable
            row.revoked_at, row.name = self.clock(), f"{name}#revoked-{row.id}"
            return True

    def keys(self) -> list[ApiKey]:
        with self._session() as db:
            return [ApiKey(row.name, row.role, row.created_at, row.revoked_at)
                    for row in db.scalars(select(ApiKeyRow).order_by(ApiKeyRow.id))]

    def check_key(self, key: str | None) -> ApiKey | None:
        """The key's holder, or None for a missing, unknown or revoked key."""
        holder, _ = self.identify_key(key)
        return holder

    def identify_key(self, key: str | None) -> tuple[ApiKey | None, str]:
        """The key's holder and "ok", or None and why not: "missing", "unknown" (also a key too long to be one) or
        "revoked:<name the key had>" (so that the audit log can say whose old key is still being tried)."""
        if not key:
            return None, "missing"
        if len(key) > 200:
            return None, "unknown"
        with self._session() as db:
            row = db.scalar(select(ApiKeyRow).where(ApiKeyRow.key_hash == hash_key(key)))
            if row is None:
                return None, "unknown"
            if row.revoked_at is not None:
                return None, f"revoked:{row.name.split('#revoked-')[0]}"
            return ApiKey(row.name, row.role, row.created_at, row.revoked_at), "ok"
