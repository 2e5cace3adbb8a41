"""The sequence of sealed sessions, checked against what a writer of the sessions folder and the database cannot
rewrite: a checkpoint the auditor keeps outside the site, and the signed seals.

Why: each signed seal names the session its gateway sealed before it, so deleting a session folder and its row is
found from the next session's seal, unless (a) the deleted session is the newest (no seal names it yet), or (b) a
`session-deleted` audit event says retention removed it: the event is written to the same database the attacker can
write. Two checks close that:

* A **sequence checkpoint** (`make_checkpoint`, `safeshare audit checkpoint`): every sealed session that verifies
  now, each with its seal line (signed by the gateway: its hash is the log's head, its `t` the signed seal time) and
  the retention period that applies to it, plus their count and the newest per gateway. It needs no private key: its
  entries are the gateway's own signed seals, re-checked against the trust store when it is used; its authority over
  *which* sessions existed comes from where the auditor keeps it, outside the site. `check_checkpoint` then requires
  every session it names to be there with the same head, or deleted by a valid retention event.
* A **deletion event is checked** (`check_deletions`): it must name the deleted log's head as the signed seals know
  it (the next session's seal, the checkpoint, the anchor row while it lasts), and be dated no earlier than the
  retention allowed and no later than now. The due date is counted from a signed time only: the start time in the
  session's id (which the next seal and the checkpoint's seals sign), else the checkpoint's seal time, so it errs
  early by at most the session's length. A writer of the database can date an event as they like, but not to before a due date that has
  not yet come: deleting a session before its retention ended is always found.

Nothing here can find the deletion of a session sealed after the newest checkpoint whose successor was deleted too,
or that has no successor yet: export checkpoints often (the custodian can run it from cron) and keep them outside.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from proxy.audit.verify import SIGNED, Finding, SessionCheck
from proxy.eventlog import read_events, seal_message
from proxy.sessiondir import EVENTS, read_meta

FORMAT = "safeshare-session-checkpoint/1"
CLOCK_SKEW = timedelta(minutes=5)  # between the hosts that seal (gateway) and delete (custodian service)
SESSION_ID = re.compile(r"(\d{8}T\d{6}Z)-[0-9a-f]+")


class CheckpointError(ValueError):
    """The checkpoint file is not one: unreadable, a field missing or of the wrong type, or a seal in it that does not
    verify against the trust store. The message names the file and the field."""


@dataclass(frozen=True)
class Deletion:
    """One `session-deleted` audit event as the check needs it."""

    session: str
    log_head: str | None
    at: datetime
    recipient: str | None = None
    event_id: int | None = None


@dataclass
class SequenceReport:
    """What the checkpoint check found, besides the findings it added to sessions."""

    checkpoint: str | None = None
    created: str | None = None
    count: int = 0
    present: int = 0
    deleted: int = 0
    findings: list[SessionCheck] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "created": self.created, "sessions": self.count,
                "present": self.present, "deleted_by_retention": self.deleted}


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def started_at(session: str) -> datetime | None:
    """The start time a session id carries (`20261126T101530Z-1a2b3c4d`), or None."""
    match = SESSION_ID.fullmatch(session)
    if not match:
        return None
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)


def _seal_line(folder: Path, head: str) -> bytes | None:
    """The log's last line if its hash is `head` (the seal a verification checked)."""
    try:
        last = (folder / EVENTS).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    except OSError:
        return None
    return last if hashlib.sha256(last).hexdigest() == head else None


# --- making a checkpoint ------------------------------------------------------------------------------------------

def make_checkpoint(checks: Iterable[SessionCheck], days_for: Callable[[str | None], int],
                    now: datetime) -> dict[str, Any]:
    """The checkpoint of the sessions in `checks` (a verification of a whole sessions root, every check passed):
    their signed seal lines in seal order, the retention days of each, their count and the newest per gateway."""
    entries: list[dict[str, Any]] = []
    for check in checks:
        if not check.ok:
            raise ValueError(f"{check.folder}: does not verify; a checkpoint is made of verified sessions only")
        if not check.sealed or not check.head:
            continue
        folder = Path(check.folder)
        line = _seal_line(folder, check.head)
        if line is None:
            raise ValueError(f"{folder / EVENTS}: changed while the checkpoint was made")
        seal = json.loads(line)
        events = read_events(folder / EVENTS)
        connect = events[0] if events and events[0].get("event") == "connect" else {}
        recipient = connect.get("recipient") or read_meta(folder).get("recipient")
        sealed_at = float(seal.get("t") or 0.0)
        entries.append({"session": check.session, "gateway": seal.get("gateway"), "head": check.head,
                        "lines": check.lines, "sealed_at": datetime.fromtimestamp(sealed_at, timezone.utc).isoformat(),
                        "recipient": recipient, "retention_days": days_for(recipient),
                        "seal": line.decode("ascii")})
    entries.sort(key=lambda entry: (entry["sealed_at"], entry["session"]))
    gateways: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = entry["gateway"] if isinstance(entry["gateway"], str) else "-"
        gateway = gateways.setdefault(name, {"count": 0})
        gateway.update(count=gateway["count"] + 1, last=entry["session"], head=entry["head"])
    last = entries[-1] if entries else None
    return {"format": FORMAT, "created": now.astimezone(timezone.utc).isoformat(), "count": len(entries),
            "last": {"session": last["session"], "head": last["head"]} if last else None,
            "gateways": gateways, "sessions": entries}


# --- reading and checking one ---------------------------------------------------------------------------------------

def load_checkpoint(path: str | Path, trust: Any = None) -> dict[str, Any]:
    """Read a checkpoint file and check what it can prove by itself: each entry's head is the hash of its seal line,
    the seal names that session, its signature verifies against `trust` (purpose gateway; an entry whose seal is
    unsigned stays unsigned), and the count is the number of entries. Raises CheckpointError naming the field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: field 'format' is {data.get('format') if isinstance(data, dict) else None!r}, "
                              f"expected {FORMAT!r}")
    entries = data.get("sessions")
    if not isinstance(entries, list) or data.get("count") != len(entries):
        raise CheckpointError(f"{path}: field 'count' ({data.get('count')!r}) is not the number of entries in "
                              f"'sessions'")
    try:
        created = _aware(datetime.fromisoformat(data.get("created")))
    except (TypeError, ValueError):
        raise CheckpointError(f"{path}: field 'created' is not an ISO date-time: {data.get('created')!r}") from None
    for number, entry in enumerate(entries):
        where = f"{path}: sessions[{number}]"
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("session", "head", "seal")):
            raise CheckpointError(f"{where}: needs the text fields 'session', 'head' and 'seal'")
        if not isinstance(entry.get("retention_days"), int) or isinstance(entry.get("retention_days"), bool):
            raise CheckpointError(f"{where}: field 'retention_days' must be a whole number of days")
        line = entry["seal"].encode("utf-8")
        if hashlib.sha256(line).hexdigest() != entry["head"]:
            raise CheckpointError(f"{where}: field 'head' is not the hash of its seal line")
        try:
            seal = json.loads(line)
            entry["_sealed_at"] = datetime.fromtimestamp(float(seal["t"]), timezone.utc)
        except (ValueError, KeyError, TypeError, OverflowError):
            raise CheckpointError(f"{where}: field 'seal' is not a seal line with a time") from None
        if seal.get("event") != "seal" or seal.get("session") != entry["session"]:
            raise CheckpointError(f"{where}: its seal line is not the seal of session {entry['session']!r}")
        if trust is not None and seal.get("signature"):
            from safeshare.signing import SignatureError

            try:
                trust.verify("gateway", seal_message(seal), seal["signature"])
            except SignatureError as exc:
                raise CheckpointError(f"{where}: the seal's signature does not verify with the trust store: {exc}") \
                    from None
    data["_created"] = created
    return data


def deletion_problems(deletion: Deletion, heads: dict[str, str], due_from: datetime | None, days: int,
                      now: datetime, seen_at: datetime | None = None) -> list[str]:
    """Why `deletion` does not account for its session (none: it does). `heads`: what names the deleted log's head
    (source -> head); `due_from`: the signed time retention counts from; `seen_at`: when a checkpoint saw the
    session still there."""
    problems = []
    for source, head in heads.items():
        if deletion.log_head != head:
            problems.append(f"the session-deleted event (#{deletion.event_id}) names log head {deletion.log_head}, "
                            f"{source} names {head}")
            break
    at = _aware(deletion.at)
    if due_from is None:
        problems.append(f"the session-deleted event (#{deletion.event_id}) cannot be checked against the retention "
                        f"period: the session id carries no start time and no checkpoint names the session")
    else:
        due = due_from + timedelta(days=days)
        if at + CLOCK_SKEW < due:
            problems.append(f"deleted before its retention allowed: the session-deleted event (#{deletion.event_id}) "
                            f"is dated {at.isoformat()}, the session was due no earlier than {due.isoformat()} "
                            f"({due_from.isoformat()} + {days} days)")
    if at > now + CLOCK_SKEW:
        problems.append(f"the session-deleted event (#{deletion.event_id}) is dated {at.isoformat()}, in the future")
    if seen_at is not None and at < seen_at - CLOCK_SKEW:
        problems.append(f"the session-deleted event (#{deletion.event_id}) is dated {at.isoformat()}, before the "
                        f"checkpoint of {seen_at.isoformat()} that saw the session")
    return problems


def check_deletions(root: str | Path, checks: list[SessionCheck], deletions: Iterable[Deletion],
                    days_for: Callable[[str | None], int], now: datetime, anchors: dict[str, Any] | None = None,
                    checkpoint: dict[str, Any] | None = None, checkpoint_name: str = "the checkpoint"
                    ) -> SequenceReport:
    """Check every deletion event of a session whose folder is gone, and with `checkpoint` (`load_checkpoint`)
    every session it names. Returns the report; its `findings` are sessions to add to `checks` (each a deleted or
    missing session with why), and findings about present sessions are added to their checks."""
    root = Path(root)
    report = SequenceReport()
    present = {check.session: check for check in checks if Path(check.folder).is_dir()}
    reported = {check.session: check for check in checks if check.session not in present}  # already missing
    by_session: dict[str, list[Deletion]] = {}
    for deletion in deletions:
        by_session.setdefault(deletion.session, []).append(deletion)
    named: dict[str, dict[str, str]] = {}  # session -> {source: head} for sessions whose folder is gone
    for check in checks:
        previous = check.previous
        if check.signature == SIGNED and previous and isinstance(previous.get("session"), str):
            named.setdefault(previous["session"], {})[f"the signed seal of {check.session}"] = previous.get("seal")
    for session, anchor in (anchors or {}).items():
        if anchor.seal_hash:
            named.setdefault(session, {})["its anchor row"] = anchor.seal_hash
    entries = {entry["session"]: entry for entry in (checkpoint or {}).get("sessions", [])}
    if checkpoint is not None:
        report.checkpoint, report.created, report.count = checkpoint_name, checkpoint.get("created"), len(entries)
        for session, entry in entries.items():
            named.setdefault(session, {})[f"{checkpoint_name}"] = entry["head"]

    def account(session: str) -> list[str] | None:
        """None when a valid deletion event accounts for the missing session, else why not."""
        entry = entries.get(session)
        heads = {source: head for source, head in named.get(session, {}).items() if isinstance(head, str)}
        # the start its id carries (signed by the next seal and the checkpoint's), before any end the retention
        # job may count from: never later than the true due date (a recovered session's seal may come days late)
        due_from = started_at(session) or (entry["_sealed_at"] if entry else None)
        recipient_days = entry["retention_days"] if entry else None
        why: list[str] = []
        for deletion in by_session.get(session, []):
            days = recipient_days if recipient_days is not None else days_for(deletion.recipient)
            problems = deletion_problems(deletion, heads, due_from, days, now,
                                         checkpoint["_created"] if entry and checkpoint else None)
            if not problems:
                return None
            why.extend(problems)
        return why

    for session in sorted(set(by_session) | set(entries)):
        if session in present:
            check, entry = present[session], entries.get(session)
            if entry is not None:
                report.present += 1
                if check.head != entry["head"]:
                    check.findings.append(Finding(check.folder, f"not the session {checkpoint_name} recorded: it "
                                                                f"was sealed with head {entry['head']}, the log now "
                                                                f"ends in {check.head}"))
            continue
        why = account(session)
        if why is None:
            report.deleted += int(session in entries)
            continue
        folder = str(root / session)
        if session in entries:
            entry = entries[session]
            why.insert(0, f"missing: {checkpoint_name} (of {report.created}) records this session, sealed at "
                          f"{entry['_sealed_at'].isoformat()} with head {entry['head']}"
                          + ("" if session in by_session else ", and no session-deleted event accounts for it"))
        missing = reported.get(session)
        if missing is None:
            missing = SessionCheck(session, folder)
            report.findings.append(missing)
        missing.findings.extend(Finding(missing.folder, problem) for problem in why)
    return report


__all__ = ["CLOCK_SKEW", "CheckpointError", "Deletion", "FORMAT", "SequenceReport", "check_deletions",
           "deletion_problems", "load_checkpoint", "make_checkpoint", "started_at"]
