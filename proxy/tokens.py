"""Per-recipient session tokens: issue, verify, revoke, list, and the liveness check the gateway polls.

A token is `secrets.token_urlsafe(32)` (256 random bits). The database keeps only its SHA-256, so looking a token up
is a unique-index lookup on the hash (no comparison of secrets in Python, nothing to time). A token is bound to one
recipient and one enclave target and has an expiry; revoking it (or every token of a recipient) is a write to the
database that the gateway picks up within its poll interval and answers by ending the live sessions.
"""
from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine

from policies.recipient import end_of_day
from proxy.db import GatewaySession, Target, Token, make_engine, make_sessionmaker, utcnow

if TYPE_CHECKING:
    from policies.recipient import RecipientPolicy

TOKEN_BYTES = 32
MAX_TOKEN_LENGTH = 200  # anything longer is not one of ours; refuse before hashing an attacker's megabyte
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{16,200}$")

# Refusal reasons (also shown on the refusal page and written to the gateway log).
UNKNOWN = "unknown"
EXPIRED = "expired"
REVOKED = "revoked"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


class TokenRefused(Exception):
    """The token is unknown, expired or revoked; `reason` is one of UNKNOWN, EXPIRED, REVOKED."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"token {reason}" + (f": {detail}" if detail else ""))
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Grant:
    """What a valid token allows: one recipient, one target, until `expires_at`."""

    token_id: int
    recipient: str
    target_name: str
    upstream: str
    password_file: str | None
    release: str | None
    policy_file: str | None
    expires_at: datetime
    limits: str | None = None   # the SessionLimits granted (JSON), None: read them from policy_file


@dataclass(frozen=True)
class IssuedToken:
    token: str  # the only time the token text exists outside the recipient's hands
    token_id: int
    recipient: str
    target_name: str
    upstream: str
    expires_at: datetime

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["expires_at"] = self.expires_at.isoformat()
        return out


@dataclass(frozen=True)
class TokenInfo:
    token_id: int
    recipient: str
    target_name: str
    upstream: str
    release: str | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    revoke_reason: str | None
    last_used_at: datetime | None
    status: str  # "active", EXPIRED or REVOKED
    hash_prefix: str

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, datetime):
                out[key] = value.isoformat()
        return out


def _status(row: Token, now: datetime) -> str | None:
    """None while the token is usable, else the refusal reason."""
    if row.revoked_at is not None:
        return REVOKED
    if row.expires_at <= now:
        return EXPIRED
    return None


class TokenStore:
    """Tokens and targets in the SQL database. Synchronous (SQLAlchemy); the gateway calls it from a worker thread."""

    def __init__(self, engine_or_url: Engine | str | None = None, *,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        self._session = make_sessionmaker(self.engine)
        self.clock = clock

    def dispose(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        """Raise if the database cannot be read."""
        with self._session() as db:
            db.execute(select(Token.id).limit(1)).all()

    # --- targets ---------------------------------------------------------------------------------------------------

    def ensure_target(self, upstream: str, password_file: str | None = None, name: str | None = None) -> int:
        """Return the id of the target `name` (default: the upstream text), creating or updating it."""
        name = name or upstream
        with self._session.begin() as db:
            target = db.scalar(select(Target).where(Target.name == name))
            if target is None:
                target = Target(name=name, upstream=upstream, password_file=password_file, created_at=self.clock())
                db.add(target)
            else:
                target.upstream = upstream
                target.password_file = password_file
            db.flush()
            return target.id

    # --- tokens ----------------------------------------------------------------------------------------------------

    def issue(self, recipient: str, upstream: str, *, password_file: str | None = None,
              target_name: str | None = None, ttl: timedelta | None = None, expires_at: datetime | None = None,
              release: str | None = None, policy_file: str | None = None, limits: str | None = None) -> IssuedToken:
        if not recipient:
            raise ValueError("a token needs a recipient")
        now = self.clock()
        if expires_at is None:
            expires_at = now + (ttl if ttl is not None else timedelta(hours=8))
        if expires_at.tzinfo is None:
            raise ValueError("expiry must carry a time zone")
        if expires_at <= now:
            raise ValueError(f"expiry {expires_at.isoformat()} is not in the future")
        target_id = self.ensure_target(upstream, password_file, target_name)
        token = new_token()
        with self._session.begin() as db:
            row = Token(token_hash=hash_token(token), recipient=recipient, target_id=target_id, release=release,
                        policy_file=policy_file, limits=limits, created_at=now, expires_at=expires_at)
            db.add(row)
            db.flush()
            token_id = row.id
        return IssuedToken(token=token, token_id=token_id, recipient=recipient, target_name=target_name or upstream,
                           upstream=upstream, expires_at=expires_at)

    def verify(self, token: str | None) -> Grant:
        """The grant of a usable token; raises TokenRefused for a missing, malformed, unknown, expired or revoked
        one."""
        if not token or len(token) > MAX_TOKEN_LENGTH or not _TOKEN_RE.match(token):
            raise TokenRefused(UNKNOWN)
        with self._session() as db:
            row = db.scalar(select(Token).where(Token.token_hash == hash_token(token)))
            if row is None:
                raise TokenRefused(UNKNOWN)
            reason = _status(row, self.clock())
            if reason is not None:
                raise TokenRefused(reason, row.revoke_reason or "")
            return Grant(token_id=row.id, recipient=row.recipient, target_name=row.target.name,
                         upstream=row.target.upstream, password_file=row.target.password_file, release=row.release,
                         policy_file=row.policy_file, expires_at=row.expires_at, limits=row.limits)

    def mark_used(self, token_id: int) -> None:
        with self._session.begin() as db:
            db.execute(update(Token).where(Token.id == token_id).values(last_used_at=self.clock()))

    def check(self, token_ids: Iterable[int]) -> dict[int, str | None]:
        """For the gateway's poll: each id -> None while usable, else the reason (a deleted row counts as
        revoked)."""
        ids = sorted(set(token_ids))
        if not ids:
            return {}
        now = self.clock()
        out: dict[int, str | None] = {token_id: REVOKED for token_id in ids}
        with self._session() as db:
            rows = db.execute(select(Token.id, Token.revoked_at, Token.expires_at).where(Token.id.in_(ids))).all()
        for token_id, revoked_at, expires_at in rows:
            if revoked_at is not None:
                out[token_id] = REVOKED
            elif expires_at <= now:
                out[token_id] = EXPIRED
            else:
                out[token_id] = None
        return out

    def revoke(self, *, token_id: int | None = None, token: str | None = None, recipient: str | None = None,
               reason: str | None = None) -> int:
        """Revoke one token (by id or text) or every unrevoked token of a recipient; returns how many."""
        if sum(x is not None for x in (token_id, token, recipient)) != 1:
            raise ValueError("revoke exactly one of: token id, token, recipient")
        stmt = update(Token).where(Token.revoked_at.is_(None))
        if token_id is not None:
            stmt = stmt.where(Token.id == token_id)
        elif token is not None:
            stmt = stmt.where(Token.token_hash == hash_token(token))
        else:
            stmt = stmt.where(Token.recipient == recipient)
        with self._session.begin() as db:
            result = db.execute(stmt.values(revoked_at=self.clock(), revoke_reason=reason))
            return int(result.rowcount or 0)

    def list_tokens(self, recipient: str | None = None, *, active_only: bool = False) -> list[TokenInfo]:
        now = self.clock()
        stmt = select(Token).order_by(Token.id)
        if recipient is not None:
            stmt = stmt.where(Token.recipient == recipient)
        out = []
        with self._session() as db:
            for row in db.scalars(stmt):
                status = _status(row, now) or "active"
                if active_only and status != "active":
                    continue
                out.append(TokenInfo(
                    token_id=row.id, recipient=row.recipient, target_name=row.target.name,
                    upstream=row.target.upstream, release=row.release, created_at=row.created_at,
                    expires_at=row.expires_at, revoked_at=row.revoked_at, revoke_reason=row.revoke_reason,
                    last_used_at=row.last_used_at, status=status, hash_prefix=row.token_hash[:12]))
        return out


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    gateway: str
    token_id: int
    recipient: str
    target_name: str
    release: str | None
    folder: str
    started_at: datetime
    ended_at: datetime | None
    end_reason: str | None

    @property
    def live(self) -> bool:
        return self.ended_at is None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, datetime):
                out[key] = value.isoformat()
        out["live"] = self.live
        return out


class SessionBook:
    """The gateways' record of sessions in the same database as the tokens: who is connected now, through which
    gateway. Bookkeeping for custodians (`safeshare recipients`); the session folders remain the evidence."""

    def __init__(self, store: TokenStore) -> None:
        self._session = store._session
        self.clock = store.clock

    def started(self, session_id: str, gateway: str, grant: Grant, folder: str, release: str | None) -> None:
        with self._session.begin() as db:
            db.add(GatewaySession(id=session_id, gateway=gateway, token_id=grant.token_id, recipient=grant.recipient,
                                  target_name=grant.target_name, release=release, folder=folder,
                                  started_at=self.clock()))

    def ended(self, session_id: str, reason: str) -> None:
        with self._session.begin() as db:
            db.execute(update(GatewaySession).where(GatewaySession.id == session_id,
                                                    GatewaySession.ended_at.is_(None))
                       .values(ended_at=self.clock(), end_reason=reason[:500]))

    def close_interrupted(self, gateway: str, reason: str = "interrupted: the gateway stopped without ending it") \
            -> list[str]:
        """Close the rows a previous run of `gateway` left open; returns their session ids."""
        with self._session.begin() as db:
            ids = list(db.scalars(select(GatewaySession.id).where(GatewaySession.gateway == gateway,
                                                                   GatewaySession.ended_at.is_(None))))
            if ids:
                db.execute(update(GatewaySession).where(GatewaySession.id.in_(ids))
                           .values(ended_at=self.clock(), end_reason=reason))
        return ids

    def list(self, recipient: str | None = None, *, live_only: bool = False) -> list[SessionInfo]:
        stmt = select(GatewaySession).order_by(GatewaySession.started_at)
        if recipient is not None:
            stmt = stmt.where(GatewaySession.recipient == recipient)
        if live_only:
            stmt = stmt.where(GatewaySession.ended_at.is_(None))
        with self._session() as db:
            return [SessionInfo(session_id=row.id, gateway=row.gateway, token_id=row.token_id,
                                recipient=row.recipient, target_name=row.target_name, release=row.release,
                                folder=row.folder, started_at=row.started_at, ended_at=row.ended_at,
                                end_reason=row.end_reason) for row in db.scalars(stmt)]


_TTL_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_TTL_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_TTL = timedelta(days=36500)  # a hundred years


def parse_ttl(text: str) -> timedelta:
    """`90s`, `30m`, `8h`, `7d`, `2w` (a bare number is seconds)."""
    match = _TTL_RE.match(text)
    if not match:
        raise ValueError(f"expected a duration like 30m, 8h or 7d, got {text!r}")
    seconds = float(match.group(1)) * _TTL_UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError("duration must be positive")
    if seconds > MAX_TTL.total_seconds():  # beyond it, timedelta and datetime overflow (and no access lasts that long)
        raise ValueError(f"duration {text.strip()!r} is too long: at most {MAX_TTL.days}d")
    return timedelta(seconds=seconds)


def parse_expiry(text: str) -> datetime:
    """An ISO date (access through that day, UTC) or an ISO datetime (UTC if no zone is given)."""
    try:
        if len(text) == 10:
            return end_of_day(date.fromisoformat(text))
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"expected an ISO date or datetime, got {text!r}") from None
    except OverflowError:  # the last day datetime can hold
        raise ValueError(f"{text!r} is beyond the last date a token can expire on") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


class AccessEnded(ValueError):
    """The recipient policy's access has ended (its `expires` day is past): no token is issued (refused)."""


def issue_for_policy(store: TokenStore, policy: "RecipientPolicy", policy_file: str | Path, upstream: str, *,
                     expires_at: datetime, password_file: str | None = None, target_name: str | None = None,
                     release: str | None = None, now: datetime | None = None) -> IssuedToken:
    """A token for the recipient `policy` names, for `release` (default the policy's), expiring at `expires_at`
    capped at the end of the policy's `expires` day, with a snapshot of the session limits the policy grants (the
    gateway applies those, without reading the policy file again). Every path that grants access (`safeshare token
    issue`, provisioning, `safeshare up`) issues through here, so none can outlast the policy. Raises AccessEnded when the
    policy's access has ended (at `now`, default the store's clock)."""
    ends = policy.access_ends
    if ends is not None:
        if ends <= (now or store.clock()):
            raise AccessEnded(f"the recipient policy of {policy.recipient} expired ({policy.expires}): access has "
                              "already ended")
        expires_at = min(expires_at, ends)
    return store.issue(policy.recipient, upstream, password_file=password_file, target_name=target_name,
                       expires_at=expires_at, release=release if release is not None else policy.release,
                       policy_file=str(policy_file), limits=policy.limits.model_dump_json())
