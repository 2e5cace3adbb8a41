"""The airlock's rules (pure functions) and the `Airlock` class that applies them over the store and the database.

States of a request: draft (in the app only), submitted, returned (for changes), approved, rejected, released,
withdrawn. Open states (at most one request per recipient and release): submitted, returned, approved.

Deciding an output (`decide`): the latest vote of each checker counts (a checker may change theirs: that is how a
conflict ends by agreement).
    approved  >= 2 approvals from different checkers, more approvals than rejections, no `changes` vote
    rejected  >= 2 rejections, more rejections than approvals
    changes   some latest vote is `changes` and >= 2 checkers voted
    conflict  approvals and rejections both present and none of the above (a third vote or a change is needed)
    pending   otherwise (fewer than two checkers, or one approval alone)
A request is decided once every output is approved, rejected or changes: any `changes` returns it to the
researcher; otherwise it is approved when at least one output is approved (only those are released), else rejected.

Independent review: a checker sees only their own votes on an output until two distinct checkers have voted on it
in the current round (`visible_votes`). The requester may never vote (refused and audited). A resubmission after
`returned` is round + 1; an output whose files or justification changed starts with no votes (the older rounds'
votes stay in the database for the record, not counted), an unchanged output keeps the votes it had.

Every method writes its event to `airlock_events` in the same transaction as the change it records.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .records import VOTES, AirlockRecords, OutputRow, RequestRecord, RequestRow, Vote, VoteRow
from .store import (MAX_OUTPUTS, MAX_SUPPORTING, MAX_TEXT, OUTPUT_ID, AirlockStore, ChecksumMismatch, FrozenFile,
                    FrozenOutput, StoreError, check_file, check_output_file, check_total, effective_status,
                    new_request_id, request_bytes, sha256)

from .states import (APPROVED, DRAFT, OPEN_STATES, REJECTED, RELEASED, RETURNED, STATES, SUBMITTED,  # noqa: F401
                     WITHDRAWN)
PENDING, CONFLICT, CHANGES = "pending", "conflict", "changes"
DECISIONS = (PENDING, APPROVED, REJECTED, CHANGES, CONFLICT)
APPROVE, REJECT = "approve", "reject"
DOWNLOAD_DAYS = 7
MAX_COMMENT = 4000
NEEDS_JUSTIFICATION = ("fail", "review")


class AirlockError(ValueError):
    """A request or step the airlock refuses; the message says why (shown to the person who asked)."""


class Refused(AirlockError):
    """Refused by a rule (wrong state, requester voting, missing justification, second open request...)."""


class NotFound(AirlockError):
    """No such request (or output)."""


@dataclass(frozen=True)
class OutputDecision:
    state: str  # pending | approved | rejected | changes | conflict
    approvals: int = 0
    rejections: int = 0
    changes: int = 0
    checkers: tuple[str, ...] = ()
    approved_by: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "approvals": self.approvals, "rejections": self.rejections,
                "changes": self.changes, "checkers": list(self.checkers), "approved_by": list(self.approved_by)}


def person_key(name: str) -> str:
    """A name as people are told apart: case and runs of spaces ignored (what `same_person` compares)."""
    return " ".join(name.split()).casefold()


def latest_votes(votes: Iterable[Vote]) -> dict[str, Vote]:
    """The latest vote of each checker (by id: the order they were cast), keyed by `person_key`: 'carol' and
    'Carol' are one person (as for the requester rule), so one person's two spellings are one vote, not two."""
    latest: dict[str, Vote] = {}
    for vote in sorted(votes, key=lambda v: v.id):
        latest[person_key(vote.checker)] = vote
    return latest


def decide(votes: Iterable[Vote]) -> OutputDecision:
    """An output's decision from its counted votes (see the module docstring)."""
    latest = latest_votes(votes)
    kinds = [v.vote for v in latest.values()]
    approvals, rejections, changes = kinds.count(APPROVE), kinds.count(REJECT), kinds.count(CHANGES)
    checkers = tuple(sorted(v.checker for v in latest.values()))
    approved_by = tuple(sorted(v.checker for v in latest.values() if v.vote == APPROVE))
    if approvals >= 2 and approvals > rejections and changes == 0:
        state = APPROVED
    elif rejections >= 2 and rejections > approvals:
        state = REJECTED
    elif changes and len(latest) >= 2:
        state = CHANGES
    elif approvals and rejections:
        state = CONFLICT
    else:
        state = PENDING
    return OutputDecision(state, approvals, rejections, changes, checkers, approved_by)


def request_outcome(decisions: Iterable[OutputDecision]) -> str | None:
    """The state a submitted request moves to once every output is decided, else None (stays submitted)."""
    states = [d.state for d in decisions]
    if not states or any(s in (PENDING, CONFLICT) for s in states):
        return None
    if CHANGES in states:
        return RETURNED
    return APPROVED if APPROVED in states else REJECTED


def visible_votes(votes: Iterable[Vote], viewer: str | None) -> list[Vote]:
    """What `viewer` may see of one output's votes in one round: their own only until two distinct checkers have
    voted; everything after that, and everything for the audit view (`viewer` None)."""
    votes = list(votes)
    if viewer is None or len({person_key(v.checker) for v in votes}) >= 2:
        return votes
    return [v for v in votes if same_person(v.checker, viewer)]


def same_person(a: str, b: str) -> bool:
    """Names compared as people would: case and surrounding spaces ignored (fail closed for the requester check)."""
    return person_key(a) == person_key(b)


def validate_submission(context: str, controls: str, outputs: Sequence[FrozenOutput],
                        supporting: Sequence[FrozenFile] = ()) -> None:
    """The rules a request must meet to be submitted; Refused naming the problem. Also re-checks every file
    against the allowlist and the bounds (the intake checked them; a direct caller may not have)."""
    for what, text in (("context", context), ("controls", controls)):
        if not isinstance(text, str) or not text.strip():
            raise Refused(f"the request's {what} text is empty: say {'what the outputs are' if what == 'context' else 'what was done to make them safe'}")
        if len(text) > MAX_TEXT:
            raise Refused(f"the request's {what} text has {len(text)} characters; at most {MAX_TEXT}")
    if not outputs:
        raise Refused("the request holds no output")
    if len(outputs) > MAX_OUTPUTS:
        raise Refused(f"the request holds {len(outputs)} outputs; at most {MAX_OUTPUTS}")
    if len(supporting) > MAX_SUPPORTING:
        raise Refused(f"the request has {len(supporting)} supporting files; at most {MAX_SUPPORTING}")
    seen: set[str] = set()
    total = 0
    for output in outputs:
        if not OUTPUT_ID.fullmatch(output.output_id) or output.output_id in seen:
            raise Refused(f"output {output.output_id!r}: not a positive integer id, or listed twice")
        seen.add(output.output_id)
        if output.status not in ("pass", "review", "fail"):
            raise Refused(f"output {output.output_id}: status {output.status!r} is not pass, review or fail")
        status = effective_status(output.status, output.checks)  # the checks decide, not the claimed status
        if status in NEEDS_JUSTIFICATION and not (output.justification or "").strip():
            raise Refused(f"output {output.output_id} ({output.name}): its checks say {status}; it needs a "
                          f"justification to be requested")
        if output.justification and len(output.justification) > MAX_TEXT:
            raise Refused(f"output {output.output_id}: justification longer than {MAX_TEXT} characters")
        if not output.files:
            raise Refused(f"output {output.output_id}: no file")
        for item in output.files:
            try:
                check_file(item.name, item.data, f"output {output.output_id}: {item.name}")
                check_output_file(output.output_id, item.name)
            except StoreError as exc:
                raise Refused(str(exc)) from None
            total += len(item.data)
    for item in supporting:
        try:
            check_file(item.name, item.data, f"supporting file {item.name}")
        except StoreError as exc:
            raise Refused(str(exc)) from None
        total += len(item.data)
    try:
        check_total(total)
    except StoreError as exc:
        raise Refused(str(exc)) from None


def _since_round(rows: dict[int, Any], current: int) -> int:
    """The first round since which an output's files and justification are those of round `current`."""
    since = current
    while since - 1 in rows and (rows[since - 1].files, rows[since - 1].justification_sha256) == \
            (rows[current].files, rows[current].justification_sha256):
        since -= 1
    return since


def _output_hashes(outputs: Sequence[FrozenOutput]) -> dict[str, dict[str, str]]:
    return {o.output_id: {f.name: sha256(f.data) for f in o.files} for o in outputs}


@dataclass
class Airlock:
    """The workflow over one site's store (SITE/airlock) and database (the airlock tables)."""

    store: AirlockStore
    records: AirlockRecords
    download_days: int = DOWNLOAD_DAYS
    _now: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, site_root: Any, db_url: str) -> "Airlock":
        return cls(AirlockStore(site_root), AirlockRecords(db_url))

    def close(self) -> None:
        self.records.dispose()

    def now(self) -> datetime:
        return self.records.clock()

    # --- reading -----------------------------------------------------------------------------------------------

    def get(self, request_id: str) -> RequestRecord:
        record = self.records.get(request_id)
        if record is None:
            raise NotFound(f"no airlock request {request_id!r}")
        return record

    def frozen(self, request_id: str) -> dict[str, Any]:
        """request.json of the request, checked against the hash the database holds (ChecksumMismatch if not)."""
        record = self.get(request_id)
        path = self.store.request_file(request_id)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ChecksumMismatch(f"checksum mismatch: {path}: not readable: {exc.strerror or exc}") from None
        if sha256(data) != record.request_sha256:
            raise ChecksumMismatch(f"checksum mismatch: {path}: sha256 {sha256(data)} is not the "
                                   f"{record.request_sha256} recorded at submission")
        return json.loads(data)

    def counted_votes(self, request_id: str, output_id: str, round_: int | None = None) -> list[Vote]:
        """The votes that count for an output now: from the first round of its current content onwards."""
        return self.all_counted_votes(request_id, round_).get(str(output_id), [])

    def all_counted_votes(self, request_id: str, round_: int | None = None) -> dict[str, list[Vote]]:
        """{output_id: counted votes} for every output of the request's current round (two queries in all)."""
        record = self.get(request_id)
        current = record.round if round_ is None else round_
        rounds: dict[str, dict[int, Any]] = {}
        for row in self.records.outputs(request_id):
            rounds.setdefault(row.output_id, {})[row.round] = row
        by_output: dict[str, list[Vote]] = {}
        for vote in self.records.votes(request_id):
            by_output.setdefault(vote.output_id, []).append(vote)
        counted = {}
        for oid, rows in rounds.items():
            if current not in rows:
                continue
            since = _since_round(rows, current)
            counted[oid] = [v for v in by_output.get(oid, []) if since <= v.round <= current]
        return counted

    def decisions(self, request_id: str) -> dict[str, OutputDecision]:
        return {oid: decide(votes) for oid, votes in self.all_counted_votes(request_id).items()}

    def votes_visible_to(self, request_id: str, output_id: str, checker: str | None) -> list[Vote]:
        return visible_votes(self.counted_votes(request_id, output_id), checker)

    def list(self, states: Iterable[str] | None = None, recipient: str | None = None) -> list[dict[str, Any]]:
        """Requests (oldest first) with their record and, per output, how many checkers voted."""
        out = []
        for record in self.records.requests(recipient=recipient, states=states):
            decisions = self.decisions(record.request_id)
            out.append({**record.as_dict(), "outputs": len(decisions),
                        "decided": sum(d.state in (APPROVED, REJECTED, CHANGES) for d in decisions.values())})
        return out

    def show(self, request_id: str, viewer: str | None = None) -> dict[str, Any]:
        """One request as `viewer` (a checker's name) may see it: the frozen request (texts, outputs, checks,
        justifications, hashes) and per output the votes visible to them, and the decision once two checkers voted
        (before that a decision would tell one checker the other's vote). `viewer` None: the audit view."""
        record = self.get(request_id)
        frozen = self.frozen(request_id)
        all_counted = self.all_counted_votes(request_id)
        outputs = []
        for output in frozen.get("outputs", []):
            oid = str(output["output_id"])
            counted = all_counted.get(oid, [])
            visible = visible_votes(counted, viewer)
            decision = decide(counted)
            independent = viewer is not None and len(decision.checkers) < 2
            outputs.append({**output, "votes": [v.as_dict() for v in visible],
                            "decision": None if independent else decision.as_dict()})
        return {**record.as_dict(), "request": frozen, "outputs": outputs, "viewer": viewer}

    def researcher_view(self, request_id: str) -> dict[str, Any]:
        """What the status file tells the researcher: the state and, once the request is decided (not while checkers
        are still reviewing), each output's decision and the checkers' comments."""
        record = self.get(request_id)
        decided = record.state in (RETURNED, APPROVED, REJECTED, RELEASED)
        all_counted = self.all_counted_votes(request_id) if decided else {}
        outputs = {}
        for output_row in self.records.outputs(request_id, record.round):
            oid = output_row.output_id
            entry: dict[str, Any] = {"files": output_row.files}
            if decided:
                counted = all_counted.get(oid, [])
                entry["decision"] = decide(counted).state
                entry["comments"] = [{"vote": v.vote, "comment": v.comment, "at": v.at.isoformat()}
                                     for v in latest_votes(counted).values() if v.comment]
            outputs[oid] = entry
        return {"request_id": request_id, "state": record.state, "round": record.round,
                "release": record.release, "updated_at": record.updated_at.isoformat(),
                "released_at": record.released_at.isoformat() if record.released_at else None,
                "download_until": record.download_until.isoformat() if record.download_until else None,
                "outputs": outputs}

    def history(self, recipient: str) -> list[dict[str, Any]]:
        """A recipient's airlock history for the auditor: every request, its state, and for released ones what left
        (output files and hashes), when, approved by whom, and the package hash."""
        out = []
        for record in self.records.requests(recipient=recipient):
            entry: dict[str, Any] = record.as_dict()
            outputs = []
            all_counted = self.all_counted_votes(record.request_id)
            for output_row in self.records.outputs(record.request_id, record.round):
                counted = all_counted.get(output_row.output_id, [])
                decision = decide(counted)
                approvals = [{"checker": v.checker, "at": v.at.isoformat()}
                             for v in latest_votes(counted).values() if v.vote == APPROVE]
                outputs.append({"output_id": output_row.output_id, "files": output_row.files,
                                "decision": decision.state, "approved_by": approvals,
                                "released": record.state == RELEASED and decision.state == APPROVED})
            entry["outputs"] = outputs
            entry["events"] = [e.as_dict() for e in self.records.events(request_id=record.request_id)]
            out.append(entry)
        return out

    # --- changing ----------------------------------------------------------------------------------------------

    def _refuse(self, actor: str, action: str, message: str, recipient: str | None, request_id: str | None,
                **detail: Any) -> Refused:
        self.records.event(actor, action, "refused", recipient, request_id, reason=message, **detail)
        return Refused(message)

    def submit(self, *, recipient: str, rid: str, release: str, app_number: int, context: str, controls: str,
               outputs: Sequence[FrozenOutput], supporting: Sequence[FrozenFile] = (),
               release_seal_sha256: str | None = None, actor: str | None = None) -> RequestRecord:
        """Freeze a request: validate, write the store folder whole, record rows and the `submitted` event. A
        resubmission (the same app request number while `returned`) is the next round of that request. Refused
        (with a `refused` event) for a broken rule or a second open request for the release."""
        actor = actor or f"recipient:{recipient}"
        hashes = _output_hashes(outputs)
        try:
            validate_submission(context, controls, outputs, supporting)
        except Refused as exc:
            raise self._refuse(actor, "refused", str(exc), recipient, None, app_number=app_number,
                               outputs=hashes) from None
        open_ = [r for r in self.records.requests(recipient=recipient, states=OPEN_STATES) if r.release == release]
        previous = next((r for r in open_ if r.app_number == app_number), None)
        if previous is not None and previous.state != RETURNED:
            raise self._refuse(actor, "refused", f"request {app_number} is already {previous.state} as "
                               f"{previous.request_id}; only a returned request can be submitted again",
                               recipient, previous.request_id, app_number=app_number, outputs=hashes)
        others = [r for r in open_ if r is not previous]
        if others:
            raise self._refuse(actor, "refused", f"at most one open request per release: {others[0].request_id} "
                               f"(request {others[0].app_number}) is {others[0].state} for release {release}; "
                               f"withdraw it or wait for its decision", recipient, None, app_number=app_number,
                               outputs=hashes)
        now = self.now()
        request_id = previous.request_id if previous else new_request_id(rid, app_number)
        round_ = previous.round + 1 if previous else 1
        document = {
            "format": "safeshare-airlock-request/1", "request_id": request_id, "recipient": recipient, "rid": rid,
            "release": {"ref": release, "seal_sha256": release_seal_sha256}, "app_number": app_number,
            "round": round_, "submitted_at": now.isoformat(timespec="seconds"), "context": context,
            "controls": controls, "outputs": [o.record() for o in outputs],
            "supporting": {f.name: f.record for f in sorted(supporting, key=lambda f: f.name)},
        }
        self.store.write(document, outputs, supporting, replace=previous is not None)
        request_sha = sha256(request_bytes(document))
        with self.records.session() as session:
            if previous is None:
                session.add(RequestRow(request_id=request_id, recipient=recipient, rid=rid, release=release,
                                       app_number=app_number, state=SUBMITTED, round=round_,
                                       request_sha256=request_sha, created_at=now, updated_at=now))
            else:
                row = session.get(RequestRow, request_id)
                row.state, row.round, row.request_sha256, row.updated_at = SUBMITTED, round_, request_sha, now
            for output in outputs:
                record = output.record()
                session.add(OutputRow(request_id=request_id, output_id=output.output_id, round=round_,
                                      files_json=json.dumps(hashes[output.output_id], sort_keys=True),
                                      justification_sha256=record["justification_sha256"]))
            self.records.event(actor, "submitted", "ok", recipient, request_id, session=session, round=round_,
                               app_number=app_number, release=release, request_sha256=request_sha,
                               outputs=hashes)
            session.commit()
        return self.get(request_id)

    def vote(self, request_id: str, output_id: str, checker: str, vote: str, comment: str = "",
             actor: str | None = None, round_: int | None = None) -> OutputDecision:
        """Record `checker`'s vote on an output of a submitted request; moves the request on when every output is
        decided. Refused (and audited) for the requester, an unknown vote, a request not under review, and, when
        `round_` is given (the round the checker's page showed), a request resubmitted since: a vote is for the
        content the checker saw, never for a later round's."""
        output_id = str(output_id)
        actor = actor or f"checker:{checker}"
        record = self.get(request_id)
        detail = {"output_id": output_id, "vote": vote, "round": record.round}
        if not isinstance(checker, str) or not checker.strip():
            raise self._refuse(actor, "voted", "a vote needs the checker's name", record.recipient, request_id,
                               **detail)
        if same_person(checker, record.recipient):
            raise self._refuse(actor, "voted", f"{checker} requested {request_id}: a requester never reviews their "
                               f"own request", record.recipient, request_id, checker=checker, **detail)
        if vote not in VOTES:
            raise self._refuse(actor, "voted", f"vote {vote!r} is not one of {', '.join(VOTES)}", record.recipient,
                               request_id, checker=checker, **detail)
        if record.state != SUBMITTED:
            raise self._refuse(actor, "voted", f"{request_id} is {record.state}, not under review",
                               record.recipient, request_id, checker=checker, **detail)
        if round_ is not None and round_ != record.round:
            raise self._refuse(actor, "voted", f"{request_id} was resubmitted (round {record.round}) since the page "
                               f"that cast this vote (round {round_}) was loaded; look at it again",
                               record.recipient, request_id, checker=checker, **detail)
        current = {o.output_id: o for o in self.records.outputs(request_id, record.round)}
        if output_id not in current:
            raise self._refuse(actor, "voted", f"{request_id} has no output {output_id}", record.recipient,
                               request_id, checker=checker, **detail)
        comment = (comment or "").strip()
        if len(comment) > MAX_COMMENT:
            raise self._refuse(actor, "voted", f"the comment has {len(comment)} characters; at most {MAX_COMMENT}",
                               record.recipient, request_id, checker=checker, **detail)
        now = self.now()
        with self.records.session() as session:
            row = session.get(RequestRow, request_id)
            if row is None or row.state != SUBMITTED or row.round != record.round:  # changed meanwhile
                session.rollback()
                raise self._refuse(actor, "voted", f"{request_id} changed while the vote was cast (now "
                                   f"{row.state if row else 'gone'}); look at it again", record.recipient,
                                   request_id, checker=checker, **detail)
            session.add(VoteRow(request_id=request_id, output_id=output_id, round=record.round,
                                checker=checker.strip(), vote=vote, comment=comment, at=now))
            self.records.event(actor, "voted", "ok", record.recipient, request_id, session=session,
                               checker=checker.strip(), files=current[output_id].files, **detail)
            session.commit()
        decisions = self.decisions(request_id)
        outcome = request_outcome(decisions.values())
        if outcome is not None:
            try:
                self._move(request_id, SUBMITTED, outcome, "system:airlock", {
                    "decisions": {k: d.as_dict() for k, d in decisions.items()},
                    "outputs": {k: current[k].files for k in current}}, round_=record.round)
            except Refused:
                pass  # a vote cast at the same moment moved it already (its step has its event)
        return decisions[output_id]

    def _move(self, request_id: str, expected: str | Sequence[str], state: str, actor: str,
              detail: dict[str, Any], round_: int | None = None, **fields: Any) -> RequestRecord:
        """Change a request's state (only from `expected`, and in round `round_` when given) and write the event of
        that step, in one transaction."""
        allowed = (expected,) if isinstance(expected, str) else tuple(expected)
        if "outputs" not in detail:  # every step's event names the hashes it concerns
            record = self.get(request_id)
            detail = {**detail, "outputs": {o.output_id: o.files
                                            for o in self.records.outputs(request_id, record.round)}}
        with self.records.session() as session:
            row = session.get(RequestRow, request_id)
            if row is None:
                raise NotFound(f"no airlock request {request_id!r}")
            if row.state not in allowed or (round_ is not None and row.round != round_):
                raise Refused(f"{request_id} is {row.state}; this needs {' or '.join(allowed)}")
            row.state, row.updated_at = state, self.now()
            for name, value in fields.items():
                setattr(row, name, value)
            action = {RETURNED: "returned", APPROVED: "approved", REJECTED: "rejected", RELEASED: "released",
                      WITHDRAWN: "withdrawn"}[state]
            self.records.event(actor, action, "ok", row.recipient, request_id, session=session, round=row.round,
                               **detail)
            session.commit()
        return self.get(request_id)

    def return_request(self, request_id: str, actor: str, reason: str = "") -> RequestRecord:
        """Return a submitted (or approved, not yet released) request to the researcher for changes."""
        record = self.get(request_id)
        if record.state not in (SUBMITTED, APPROVED):
            raise self._refuse(actor, "returned", f"{request_id} is {record.state}; only a submitted or approved "
                               f"request can be returned", record.recipient, request_id)
        return self._move(request_id, (SUBMITTED, APPROVED), RETURNED, actor, {"reason": reason})

    def withdraw(self, request_id: str, actor: str, reason: str = "") -> RequestRecord:
        """Withdraw an open request (the researcher, or a custodian); its files stay in the store for the record."""
        record = self.get(request_id)
        if record.state not in OPEN_STATES:
            raise self._refuse(actor, "withdrawn", f"{request_id} is {record.state}; only an open request can be "
                               f"withdrawn", record.recipient, request_id)
        return self._move(request_id, OPEN_STATES, WITHDRAWN, actor, {"reason": reason})

    def release(self, request_id: str, signing_key: Any, actor: str) -> RequestRecord:
        """Release an approved request: re-hash every stored file (request.json against the database, each file
        against request.json), refuse with "checksum mismatch" (and a `release-refused` event) on any difference;
        else build and sign the package of the approved outputs, write package.zip atomically, and mark the request
        released with its download deadline."""
        import fcntl

        self.get(request_id)  # NotFound before anything is made
        lock_path = self.store.release_lock_file(request_id)
        try:  # never through a link a writer of SITE/airlock planted (it would create or lock a file elsewhere)
            lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(f"{lock_path}: not a plain lock file ({exc.strerror or exc}); release refused") from None
        try:  # one release at a time: a second waits, then finds it released
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._release(request_id, signing_key, actor)
        finally:
            os.close(lock)

    def _release(self, request_id: str, signing_key: Any, actor: str) -> RequestRecord:
        from safeshare.signing import append_to_ledger

        from .package import build_package, signature_of

        record = self.get(request_id)
        if record.state != APPROVED:
            raise self._refuse(actor, "release-refused", f"{request_id} is {record.state}; only an approved "
                               f"request is released", record.recipient, request_id)
        decisions = self.decisions(request_id)
        approved = sorted((oid for oid, d in decisions.items() if d.state == APPROVED), key=int)
        try:
            frozen = self.frozen(request_id)
            self._check_against_database(request_id, record.round, frozen)
            contents = self.store.verify(request_id, frozen)
            self.store.verify_supporting(request_id, frozen)
        except (ChecksumMismatch, StoreError) as exc:
            message = str(exc) if str(exc).startswith("checksum mismatch") else f"checksum mismatch: {exc}"
            self.records.event(actor, "release-refused", "refused", record.recipient, request_id,
                               reason=message, round=record.round)
            raise ChecksumMismatch(message) from None
        now = self.now()
        all_counted = self.all_counted_votes(request_id)
        votes = {oid: list(latest_votes(all_counted[oid]).values()) for oid in approved}
        data = build_package(frozen, {oid: contents[oid] for oid in approved}, votes, signing_key,
                             released_at=now.isoformat(timespec="seconds"))
        # the key's ledger records the signature before the package is published: a rotation keeps it verifying
        append_to_ledger(signing_key, [signature_of(data)], request_id=request_id, purpose="outputs")
        self.store.write_package(request_id, data)
        package_sha = sha256(data)
        return self._move(request_id, APPROVED, RELEASED, actor,
                          {"package_sha256": package_sha, "key_id": signing_key.key_id,
                           "outputs": {oid: {n: sha256(b) for n, b in contents[oid].items()} for oid in approved}},
                          released_at=now, download_until=now + timedelta(days=self.download_days),
                          package_sha256=package_sha)

    def _check_against_database(self, request_id: str, round_: int, frozen: dict[str, Any]) -> None:
        rows = {o.output_id: o for o in self.records.outputs(request_id, round_)}
        listed = {str(o["output_id"]): {n: m.get("sha256") for n, m in o.get("files", {}).items()}
                  for o in frozen.get("outputs", [])}
        if set(rows) != set(listed) or any(rows[k].files != listed[k] for k in rows):
            raise ChecksumMismatch("checksum mismatch: request.json's outputs are not those recorded at submission")

    def record_download(self, request_id: str, actor: str, ok: bool, reason: str = "") -> None:
        """For the front door: one `downloaded` / `download-refused` event."""
        record = self.records.get(request_id)
        self.records.event(actor, "downloaded" if ok else "download-refused", "ok" if ok else "refused",
                           record.recipient if record else None, request_id if record else None,
                           package_sha256=record.package_sha256 if record else None,
                           **({"reason": reason} if reason else {}))


__all__ = ["APPROVED", "Airlock", "AirlockError", "CHANGES", "CONFLICT", "DECISIONS", "DOWNLOAD_DAYS", "DRAFT",
           "NotFound", "OPEN_STATES", "OutputDecision", "PENDING", "REJECTED", "RELEASED", "RETURNED", "Refused",
           "STATES", "SUBMITTED", "WITHDRAWN", "decide", "latest_votes", "request_outcome", "same_person",
           "validate_submission", "visible_votes"]
