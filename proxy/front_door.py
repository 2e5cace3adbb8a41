"""What every front door of the proxy does around a `ProxySession`, whichever transport brought the client.

Two front doors exist: the built-in gateway (`proxy.gateway`: noVNC page and WebSocket endpoint) and the per-recipient
proxy behind a site's own websockify (`proxy.recipient_proxy`). A session must be accounted for the same way through
either, or an auditor could not tell them apart, so the pieces live here once:

* `resolve_grant`: a token's grant -> the enclave's VNC server (with its password) and the session limits;
* `SessionKeeper`: the session's row in the sessions table, its signed and chained seal (`proxy.anchors.Sealer`),
  the running anchors of live logs, and at start the recovery of sessions a previous run left open;
* `watch_tokens`: the revocation poll that ends live sessions within `poll_interval` of a revocation or expiry, and
  every session when the database stays unreadable (fail closed).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from policies.recipient import PolicyError, load_recipient_policy
from proxy.anchors import AnchorBook, Sealer, extends
from proxy.eventlog import read_events, verify_log
from proxy.limits import SessionLimits
from proxy.session import ProxySession, UpstreamTarget, seal_interrupted
from proxy.sessiondir import EVENTS
from proxy.tokens import EXPIRED, Grant, SessionBook, TokenRefused, TokenStore
from safeshare.endpoints import read_vnc_password

log = logging.getLogger("safeshare.gateway")

INTERRUPTED = "interrupted: the gateway stopped without ending it"
REPLACED_WAIT = 5.0  # how long a new session waits for the one it replaces to release its keys and seal


async def wait_for_replaced(replaced: Iterable[ProxySession], session_id: str) -> None:
    """Let the sessions a new connection replaces release their keys towards the VNC server (and seal) before the new
    one releases and starts, for at most REPLACED_WAIT; a cancelled wait (the new request gone) propagates."""
    waits = [asyncio.ensure_future(older.wait_closed()) for older in replaced]
    try:
        _, pending = await asyncio.wait(waits, timeout=REPLACED_WAIT)
    finally:
        for waiting in waits:
            waiting.cancel()
    if pending:
        log.warning("session %s: the session it replaces has not ended yet", session_id)


def resolve_grant(grant: Grant, default_limits: SessionLimits) -> tuple[UpstreamTarget, SessionLimits, str | None]:
    """The grant's upstream (with its password) and limits: those the token was issued with, else (a token issued
    before the snapshot, or without a policy) its policy file's, read now, else `default_limits`. Any problem raises
    (OSError, ValueError, PolicyError, or TokenRefused(EXPIRED) for a policy whose access has ended), and the front
    door refuses the connection."""
    password = None
    if grant.password_file:
        password = read_vnc_password(grant.password_file)
    upstream = UpstreamTarget.parse(grant.upstream, password)
    limits, release = default_limits, grant.release
    if grant.limits is not None:   # the limits the token was issued with (proxy.tokens.issue_for_policy)
        return upstream, SessionLimits.model_validate_json(grant.limits), release
    if grant.policy_file:
        policy = load_recipient_policy(Path(grant.policy_file))
        if policy.recipient != grant.recipient:
            raise PolicyError(f"{grant.policy_file} is the policy of {policy.recipient!r}, "
                              f"not of {grant.recipient!r}")
        if policy.access_ends is not None and policy.access_ends <= datetime.now(grant.expires_at.tzinfo):
            raise TokenRefused(EXPIRED, "recipient policy expired")
        limits, release = policy.limits, release or policy.release
    return upstream, limits, release


class SessionKeeper:
    """The records one front door (`name`, distinct per front door sharing a database) keeps of its sessions outside
    their folders. Seals are signed with `signing_key` (proxy.eventlog.KeySource, re-read after a rotation) and
    chained; their hashes are anchored in the sessions table, the running heads every `anchor_interval` seconds."""

    def __init__(self, store: TokenStore, name: str, signing_key: Any = None, anchor_interval: float = 5.0) -> None:
        self.store = store
        self.name = name
        self.sealer = Sealer(name, signing_key)
        self.anchors = AnchorBook(store)
        self.book = SessionBook(store)
        self.anchor_interval = anchor_interval

    async def recover(self) -> None:
        """Sessions a previous run of this front door left open ended with it: their rows are closed and their logs
        sealed as recovered (a damaged log is left exactly as found, for the auditors). Call before serving."""
        self.sealer.last = await asyncio.to_thread(self.anchors.last_sealed, self.name)
        interrupted = await asyncio.to_thread(self.book.close_interrupted, self.name, INTERRUPTED)
        if not interrupted:
            return
        log.warning("closed %d session(s) left open by a previous run: %s", len(interrupted), ", ".join(interrupted))
        wanted = set(interrupted)
        for info in await asyncio.to_thread(self.book.list):
            if info.session_id in wanted and Path(info.folder).is_dir():
                head = await asyncio.to_thread(self.recover_one, info.session_id, Path(info.folder), INTERRUPTED)
                if head is None:
                    log.warning("session %s: log left as found (damaged, missing, or not extending its anchor)",
                                info.session_id)

    def recover_one(self, session_id: str, folder: Path, reason: str) -> str | None:
        """Seal (signed, chained) the log of a session the previous run left open, if it extends what that run
        anchored, and anchor the seal; also anchors a log the previous run sealed but was killed before anchoring.
        Returns the seal hash anchored, or None (the log stays as found, and `audit verify --db` reports it)."""
        anchor = self.anchors.get(session_id)
        prefix = (anchor.anchor_head, anchor.anchor_lines) if anchor is not None else (None, None)
        seal_interrupted(folder, reason, self.sealer, prefix)
        result = verify_log(folder / EVENTS)
        if not result.ok or not extends(result.hashes, *prefix):
            return None
        if anchor is not None and anchor.seal_hash:
            return anchor.seal_hash
        seal = read_events(folder / EVENTS)[-1]
        recording, previous = seal.get("recording"), seal.get("previous")
        self.anchors.sealed(session_id, result.head, result.lines,
                            recording.get("sha256") if isinstance(recording, dict) else None,
                            previous.get("session") if isinstance(previous, dict) else None)
        return result.head

    async def anchor_loop(self, sessions: Callable[[], Iterable[ProxySession]]) -> None:
        """Every `anchor_interval` seconds, anchor the head of each live session's log that moved (a front door
        killed now leaves a prefix that the log recovered at its next start, and any rewrite, must keep)."""
        anchored: dict[str, int] = {}
        while True:
            await asyncio.sleep(self.anchor_interval)
            heads = []
            for session in sessions():
                event_log = session.log
                if event_log is not None and not event_log.closed \
                        and anchored.get(session.session_id) != event_log.lines:
                    heads.append((session.session_id, event_log.head, event_log.lines))
            if not heads:
                continue
            try:
                await asyncio.to_thread(self.anchors.progress, heads)
            except Exception as exc:  # the database may be away for a moment; the next round retries
                log.error("could not anchor session heads: %s", exc)
                continue
            live_ids = {session.session_id for session in sessions()}
            anchored = {key: value for key, value in anchored.items() if key in live_ids}
            anchored.update((session_id, lines) for session_id, _, lines in heads)

    async def opened(self, session: ProxySession, grant: Grant, release: str | None) -> None:
        """The token was used and the session is live: bookkeeping only, a failure is logged."""
        try:
            await asyncio.to_thread(self.store.mark_used, grant.token_id)
            await asyncio.to_thread(self.book.started, session.session_id, self.name, grant, str(session.dir),
                                    release)
        except Exception as exc:
            log.warning("could not record the session in the database: %s", exc)

    async def closed(self, session: ProxySession, reason: str) -> None:
        """Anchor the seal of a session whose run has returned, and close its row."""
        if session.log is not None and session.log.closed:
            try:
                await asyncio.to_thread(
                    self.anchors.sealed, session.session_id, session.log.head, session.log.lines,
                    session.recorder.sha256 if session.recorder is not None else None,
                    self.sealer.previous_of.pop(session.session_id, None))
            except Exception as exc:  # `audit verify --db` reports the missing anchor
                log.error("could not anchor the seal of session %s: %s", session.session_id, exc)
        try:
            await asyncio.to_thread(self.book.ended, session.session_id, session.end_reason or reason)
        except Exception as exc:
            log.warning("could not record the end of session %s: %s", session.session_id, exc)


class Endable(Protocol):
    """A live connection as the revocation watch sees it."""

    session: ProxySession

    def end(self, reason: str) -> None: ...


async def watch_tokens(store: TokenStore, live: Mapping[int, Iterable[Endable]], poll_interval: float,
                       fail_closed_after: float, polled: Callable[[], None] | None = None) -> None:
    """End the connections filed under a token id (in `live`, read at each poll) once that token stopped being valid
    (revoked, also by revoking its recipient, deleted or expired); end all of them if the database stays unreadable
    for `fail_closed_after` seconds. `polled` is called after each successful check. Runs until cancelled."""
    failing_since: float | None = None
    while True:
        await asyncio.sleep(poll_interval)
        ids = list(live)
        if not ids:
            failing_since = None
            continue
        try:
            status = await asyncio.to_thread(store.check, ids)
        except Exception as exc:
            now = time.monotonic()
            failing_since = failing_since or now
            log.error("token database unreadable: %s", exc)
            if now - failing_since >= fail_closed_after:
                for group in list(live.values()):
                    for connection in list(group):
                        connection.end("token database unavailable")
            continue
        failing_since = None
        if polled is not None:
            polled()
        for token_id, reason in status.items():
            if reason is None:
                continue
            for connection in list(live.get(token_id, ())):
                log.info("session %s: token %d %s, ending it", connection.session.session_id, token_id, reason)
                connection.end(f"token {reason}")
