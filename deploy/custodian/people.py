"""People who sign in to the custodian service's review pages: per-person credentials, web sessions, sign-in limits.

A person has a name, a role (`checker`: may review airlock requests) and a password stored only as an scrypt hash
(hashlib, parameters kept with the hash so they can be raised later; checked with a constant-time compare). No
shared key: each vote names the person who cast it. A disabled person cannot sign in and their open sessions end.

Web sessions: the browser holds a random token in an HttpOnly, SameSite=Strict cookie; the site database holds only
its SHA-256, so a copy of the database signs nobody in. A session ends at the first of: its absolute lifetime
(ABSOLUTE_SECONDS from sign-in), IDLE_SECONDS without a request, sign-out, or the person being disabled. Each
session has its own CSRF token, put in every form and compared (constant time) on every POST.

Sign-in attempts are limited (`SignInThrottle`): after MAX_FAILURES failures within FAILURE_WINDOW seconds from one
source address, or for one name, further attempts are refused without checking the password until the window has
passed, so a password cannot be guessed faster than that; the failures themselves are audited through the service's
rate-limited `auth-failed` writer (deploy/audit/limits.py).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Integer, String, func, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from deploy.custodian.people_roles import ROLES
from proxy.db import UTCDateTime, make_engine, make_sessionmaker, utcnow
from safeshare.sitedb import create_tables

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
MIN_PASSWORD = 12
MAX_PASSWORD = 1024
# scrypt: N=2**15, r=8, p=1 takes ~32 MiB and ~0.1 s a check (OWASP's minimum is N=2**17 with r=8 for 2023; the
# parameters are stored with each hash, so a site can raise them and re-set passwords)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
SALT_BYTES, HASH_BYTES = 16, 32
ABSOLUTE_SECONDS = 8 * 3600
IDLE_SECONDS = 30 * 60
MAX_FAILURES = 5
FAILURE_WINDOW = 15 * 60.0


class PersonError(ValueError):
    """A person that cannot be added or changed (the message names what is wrong)."""


class Base(DeclarativeBase):
    pass


class PersonRow(Base):
    __tablename__ = "custodian_people"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class WebSessionRow(Base):
    __tablename__ = "custodian_web_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    person: Mapped[str] = mapped_column(String(64), index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    end_reason: Mapped[str | None] = mapped_column(String(50), default=None)


@dataclass(frozen=True)
class Person:
    name: str
    role: str
    created_at: datetime
    disabled_at: datetime | None

    @property
    def active(self) -> bool:
        return self.disabled_at is None

    def as_dict(self) -> dict:
        return {"name": self.name, "role": self.role, "created_at": self.created_at.isoformat(),
                "disabled_at": self.disabled_at.isoformat() if self.disabled_at else None}


@dataclass(frozen=True)
class WebSession:
    """A signed-in person's session as a request sees it (the token itself is only in the browser's cookie)."""

    person: Person
    csrf: str
    created_at: datetime
    expires_at: datetime


# --- passwords ------------------------------------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P,
                  salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$<salt>$<hash>` (base64) of the password."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=HASH_BYTES,
                            maxmem=2 * 128 * n * r * p + (1 << 20))
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def check_password(password: str, stored: str) -> bool:
    """Whether `password` matches the stored scrypt hash (compared in constant time); False for a malformed hash."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        n_, r_, p_ = int(n), int(r), int(p)
        expected = base64.b64decode(digest, validate=True)
        salt_bytes = base64.b64decode(salt, validate=True)
    except ValueError:
        return False
    if not (2 <= n_ <= 2 ** 20 and 1 <= r_ <= 32 and 1 <= p_ <= 16):  # a hash that would take a minute: refused
        return False
    actual = hashlib.scrypt(password.encode("utf-8"), salt=salt_bytes, n=n_, r=r_, p=p_, dklen=len(expected),
                            maxmem=2 * 128 * n_ * r_ * p_ + (1 << 20))
    return hmac.compare_digest(actual, expected)


# A hash checked for names that do not exist, so that "no such person" takes as long as "wrong password".
_DUMMY_HASH = hash_password(secrets.token_urlsafe(16))


def generate_password() -> str:
    """A random password of 20 URL-safe characters (~120 bits)."""
    return secrets.token_urlsafe(15)


def check_new_password(password: str, source: str = "the password") -> str:
    if "\n" in password.rstrip("\n") or "\r" in password:
        raise PersonError(f"{source}: a password is one line")
    password = password.rstrip("\n")
    if len(password) < MIN_PASSWORD:
        raise PersonError(f"{source}: a password needs at least {MIN_PASSWORD} characters, got {len(password)}")
    if len(password) > MAX_PASSWORD:
        raise PersonError(f"{source}: a password has at most {MAX_PASSWORD} characters")
    return password


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# --- the store ------------------------------------------------------------------------------------------------------

class People:
    """People and their web sessions in the site database (created on first use, next to the custodian tables)."""

    def __init__(self, engine_or_url: Engine | str | None = None, *, clock: Callable[[], datetime] = utcnow,
                 absolute_seconds: int = ABSOLUTE_SECONDS, idle_seconds: int = IDLE_SECONDS,
                 scrypt_n: int = SCRYPT_N) -> None:
        self.engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        create_tables(Base.metadata, self.engine)
        self._session = make_sessionmaker(self.engine)
        self.clock = clock
        self.absolute = timedelta(seconds=absolute_seconds)
        self.idle = timedelta(seconds=idle_seconds)
        self.scrypt_n = scrypt_n

    # people

    def add(self, name: str, role: str, password: str) -> Person:
        if not NAME.fullmatch(name or ""):
            raise PersonError(f"person name {name!r}: 1 to 64 letters, digits, '_', '.', '@' or '-', starting with a "
                              "letter or digit")
        if role not in ROLES:
            raise PersonError(f"role {role!r}: one of {', '.join(ROLES)}")
        password = check_new_password(password)
        stored = hash_password(password, n=self.scrypt_n)
        with self._session.begin() as db:
            if db.scalar(select(PersonRow).where(PersonRow.name == name)) is not None:
                raise PersonError(f"a person named {name!r} exists")
            # the airlock tells people apart ignoring case (a requester 'Alice' is 'alice'): no two such names
            twin = db.scalar(select(PersonRow.name).where(func.lower(PersonRow.name) == name.lower()))
            if twin is not None:
                raise PersonError(f"person name {name!r}: {twin!r} exists, and names differing only in case are "
                                  f"one person to the airlock")
            row = PersonRow(name=name, role=role, password_hash=stored, created_at=self.clock())
            db.add(row)
            db.flush()
            return _person(row)

    def get(self, name: str) -> Person | None:
        with self._session() as db:
            row = db.scalar(select(PersonRow).where(PersonRow.name == name))
            return _person(row) if row is not None else None

    def list(self) -> list[Person]:
        with self._session() as db:
            return [_person(row) for row in db.scalars(select(PersonRow).order_by(PersonRow.name))]

    def disable(self, name: str) -> bool:
        """Disable the person and end their sessions; False when there is no active person of that name."""
        now = self.clock()
        with self._session.begin() as db:
            row = db.scalar(select(PersonRow).where(PersonRow.name == name))
            if row is None or row.disabled_at is not None:
                return False
            row.disabled_at = now
            db.execute(update(WebSessionRow).where(WebSessionRow.person == name, WebSessionRow.ended_at.is_(None))
                       .values(ended_at=now, end_reason="disabled"))
            return True

    def authenticate(self, name: str, password: str) -> tuple[Person | None, str]:
        """The person and "ok", or None and why not ("unknown", "wrong-password", "disabled"). Every path runs one
        scrypt check, so the time taken does not tell whether the name exists."""
        row_hash, person = _DUMMY_HASH, None
        if NAME.fullmatch(name or "") and len(password) <= MAX_PASSWORD:
            with self._session() as db:
                row = db.scalar(select(PersonRow).where(PersonRow.name == name))
                if row is not None:
                    row_hash, person = row.password_hash, _person(row)
        matches = check_password(password[:MAX_PASSWORD], row_hash)
        if person is None:
            return None, "unknown"
        if not matches:
            return None, "wrong-password"
        if not person.active:
            return None, "disabled"
        return person, "ok"

    # web sessions

    def start_session(self, person: Person, source: str) -> tuple[str, WebSession]:
        """A new session for a signed-in person: the cookie's token (returned only here) and the session."""
        token = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        now = self.clock()
        expires = now + self.absolute
        with self._session.begin() as db:
            db.add(WebSessionRow(token_hash=token_hash(token), person=person.name, csrf=csrf, source=source[:100],
                                 created_at=now, last_seen_at=now, expires_at=expires))
        return token, WebSession(person, csrf, now, expires)

    def session(self, token: str | None) -> tuple[WebSession | None, str]:
        """The live session of a cookie's token (its idle clock restarted) and "ok", or None and why not: "missing",
        "unknown", "ended", "expired", "idle" or "disabled". An expired or idle session is ended here."""
        if not token or len(token) > 200:
            return None, "missing" if not token else "unknown"
        now = self.clock()
        with self._session.begin() as db:
            row = db.get(WebSessionRow, token_hash(token))
            if row is None:
                return None, "unknown"
            if row.ended_at is not None:
                return None, "ended"
            reason = "expired" if now >= row.expires_at else "idle" if now - row.last_seen_at >= self.idle else None
            person_row = db.scalar(select(PersonRow).where(PersonRow.name == row.person))
            if reason is None and (person_row is None or person_row.disabled_at is not None):
                reason = "disabled"
            if reason is not None:
                row.ended_at, row.end_reason = now, reason
                return None, reason
            row.last_seen_at = now
            return WebSession(_person(person_row), row.csrf, row.created_at, row.expires_at), "ok"

    def end_session(self, token: str | None, reason: str = "signed-out") -> bool:
        if not token or len(token) > 200:
            return False
        with self._session.begin() as db:
            row = db.get(WebSessionRow, token_hash(token))
            if row is None or row.ended_at is not None:
                return False
            row.ended_at, row.end_reason = self.clock(), reason
            return True


def _person(row: PersonRow) -> Person:
    return Person(row.name, row.role, row.created_at, row.disabled_at)


def csrf_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a form's CSRF token with the session's."""
    return bool(given) and hmac.compare_digest(expected.encode("utf-8"), str(given).encode("utf-8"))


class SignInThrottle:
    """At most MAX_FAILURES failed sign-ins per source address and per name within FAILURE_WINDOW seconds; beyond
    that `allowed` is False until the oldest failure leaves the window. Memory is bounded: at most `max_keys` keys are
    tracked (the oldest dropped first)."""

    def __init__(self, *, max_failures: int = MAX_FAILURES, window: float = FAILURE_WINDOW,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 10_000) -> None:
        self.max_failures, self.window, self.clock, self.max_keys = max_failures, window, clock, max_keys
        self._lock = threading.Lock()
        self._failures: dict[str, list[float]] = {}

    def _recent(self, key: str, now: float) -> list[float]:
        times = [t for t in self._failures.get(key, []) if now - t < self.window]
        if times:
            self._failures[key] = times
        else:
            self._failures.pop(key, None)
        return times

    def allowed(self, source: str, name: str) -> bool:
        now = self.clock()
        with self._lock:
            return all(len(self._recent(key, now)) < self.max_failures
                       for key in (f"source:{source}", f"name:{name.lower()[:64]}"))

    def failed(self, source: str, name: str) -> None:
        now = self.clock()
        with self._lock:
            for key in (f"source:{source}", f"name:{name.lower()[:64]}"):
                self._failures.setdefault(key, []).append(now)
                del self._failures[key][:-self.max_failures]
            while len(self._failures) > self.max_keys:
                self._failures.pop(next(iter(self._failures)))

    def succeeded(self, source: str, name: str) -> None:
        """A correct password clears the name's failures (not the source's: one address guessing many names)."""
        with self._lock:
            self._failures.pop(f"name:{name.lower()[:64]}", None)
