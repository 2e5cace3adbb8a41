"""Anchors: what the gateway keeps about each session's log outside the session folder, in its sessions table.

A writer of the session folder can rewrite a log, re-chain it and re-seal it; the gateway's signature stops them
re-sealing, and the anchor stops them replacing a session with an older or shorter genuine one, or deleting it:

* while a session runs, every `interval` seconds: the head of its log and the number of lines (`anchor_head`,
  `anchor_lines`); a gateway killed mid-session leaves this, and the log recovered at its next start must extend it;
* when a session is sealed: the seal line's hash, the number of lines including the seal and the recording's
  SHA-256 (`seal_hash`, `events`, `recording_sha256`), plus the session this gateway sealed before it
  (`previous_session`), which the signed seal names too.

`audit verify --db` compares the folders with these rows (proxy/audit/verify.py).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine

from proxy.db import GatewaySession, make_engine, make_sessionmaker, utcnow


@dataclass(frozen=True)
class Anchor:
    """One row's anchor as `audit verify` needs it."""

    session_id: str
    gateway: str
    folder: str
    ended: bool
    seal_hash: str | None
    events: int | None
    recording_sha256: str | None
    anchor_head: str | None
    anchor_lines: int | None
    previous_session: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session_id, "gateway": self.gateway, "folder": self.folder, "ended": self.ended,
                "seal_hash": self.seal_hash, "events": self.events, "recording_sha256": self.recording_sha256,
                "anchor_head": self.anchor_head, "anchor_lines": self.anchor_lines,
                "previous_session": self.previous_session}


class AnchorBook:
    """Reads and writes anchors in the sessions table of a token store's database (or any engine/URL)."""

    def __init__(self, engine_or_url: Engine | str | Any | None = None) -> None:
        engine = getattr(engine_or_url, "engine", engine_or_url)  # a TokenStore shares its engine
        self._owns = not isinstance(engine, Engine)
        self.engine = engine if isinstance(engine, Engine) else make_engine(engine)
        self._session = make_sessionmaker(self.engine)

    def dispose(self) -> None:
        if self._owns:
            self.engine.dispose()

    def progress(self, heads: Iterable[tuple[str, str, int]]) -> None:
        """Anchor the running head of live sessions: (session id, head, lines)."""
        now = utcnow()
        with self._session.begin() as db:
            for session_id, head, lines in heads:
                db.execute(update(GatewaySession).where(GatewaySession.id == session_id,
                                                        GatewaySession.seal_hash.is_(None))
                           .values(anchor_head=head, anchor_lines=lines, anchored_at=now))

    def sealed(self, session_id: str, seal_hash: str, events: int, recording_sha256: str | None,
               previous_session: str | None) -> None:
        """Anchor a sealed session; the running head becomes the seal (the whole log is the anchored prefix)."""
        with self._session.begin() as db:
            db.execute(update(GatewaySession).where(GatewaySession.id == session_id)
                       .values(seal_hash=seal_hash, events=events, recording_sha256=recording_sha256,
                               anchor_head=seal_hash, anchor_lines=events, anchored_at=utcnow(),
                               previous_session=previous_session))

    def last_sealed(self, gateway: str) -> tuple[str, str] | None:
        """(session id, seal hash) of the session `gateway` sealed last, to chain the next seal to it."""
        with self._session() as db:
            row = db.execute(select(GatewaySession.id, GatewaySession.seal_hash)
                             .where(GatewaySession.gateway == gateway, GatewaySession.seal_hash.is_not(None))
                             .order_by(GatewaySession.anchored_at.desc(), GatewaySession.id.desc()).limit(1)).first()
        return (row[0], row[1]) if row else None

    def get(self, session_id: str) -> Anchor | None:
        with self._session() as db:
            row = db.get(GatewaySession, session_id)
            return _anchor(row) if row is not None else None

    def all(self) -> dict[str, Anchor]:
        """Every session the table records, by session id."""
        with self._session() as db:
            return {row.id: _anchor(row) for row in db.scalars(select(GatewaySession))}


def _anchor(row: GatewaySession) -> Anchor:
    return Anchor(session_id=row.id, gateway=row.gateway, folder=row.folder, ended=row.ended_at is not None,
                  seal_hash=row.seal_hash, events=row.events, recording_sha256=row.recording_sha256,
                  anchor_head=row.anchor_head, anchor_lines=row.anchor_lines, previous_session=row.previous_session)



def extends(hashes: list[str], head: str | None, lines: int | None) -> bool:
    """Whether a log whose line hashes are `hashes` has the anchored `head` at line number `lines` (so that the
    anchored log is a prefix of it). No anchor (None or 0 lines) is extended by every log."""
    if not lines or head is None:
        return True
    return len(hashes) >= lines and hashes[lines - 1] == head


class Sealer:
    """What a gateway adds to every seal it writes: its name, the session it sealed before (a chain of sessions, so
    that deleting a whole session folder and its row is found from the next session's signed seal), and its
    signature. Used from the event loop only (and from the gateway's start, before it serves), so choosing the
    previous session and recording the new one cannot interleave."""

    def __init__(self, gateway: str, keys: Any = None) -> None:
        self.gateway = gateway
        self.keys = keys  # proxy.eventlog.KeySource, or None: seals are unsigned
        self.last: tuple[str, str] | None = None
        self.previous_of: dict[str, str | None] = {}  # session id -> the session sealed before it (to anchor)

    def fields(self) -> dict[str, Any]:
        previous = {"session": self.last[0], "seal": self.last[1]} if self.last else None
        return {"gateway": self.gateway, "previous": previous}

    def key(self) -> Any:
        """The signing key now (re-read after a rotation); None when this gateway does not sign. Never raises: a
        seal must be written even then (unsigned, which `audit verify` reports); the gateway loads the key before it
        serves, and `KeySource` keeps the last good key if the file becomes unreadable."""
        if self.keys is None:
            return None
        try:
            return self.keys.load()
        except ValueError:
            return None

    def sealed(self, session_id: str, seal_hash: str) -> None:
        self.previous_of[session_id] = self.last[0] if self.last else None
        self.last = (session_id, seal_hash)
