"""The host-side intake: the one path by which anything leaves an enclave's workspace (into the airlock store).

For each workspace (path, recipient, rid, release: from the custodian's records, never from the workspace), the
intake, run by a host process (the custodian service's loop, `safeshare up`, `safeshare airlock intake`):

1. records `output-saved` once for each new `STATE/outputs/<id>/` (with its files' sha256), so the audit trail
   starts when an output is made, not only when it is requested;
2. handles the app's outbox (`STATE/airlock/outbox/<n>.json`, {"request": n, "action": "submit"|"withdraw"}):
   a submission is read from the draft (`requests/<n>/request.json`), its outputs' folders and its supporting
   files, all through the safe-IO helpers (O_NOFOLLOW per component, plain files only, size caps before reading),
   validated (allowlist, bounds, a justification for each fail/review output, both texts, the release, one open
   request per release), copied into the store whole (hidden temp folder, then rename), hashed at that moment and
   submitted (`Airlock.submit`); a refusal writes the reason to the status file and a `refused` event; the outbox
   entry is removed either way;
3. refreshes `STATE/airlock/status/<n>.json` for every request of the recipient (state, decisions and comments once
   visible, the reason of the last refusal), rewriting it only when it differs (which also repairs a status file
   the enclave rewrote: the app shows it, nothing trusts it).

Nothing here follows a link the enclave planted, blocks on a FIFO it made, or reads more than the caps allow.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .records import AirlockRecords
from .store import (DATA_FILE, MAX_FILE_BYTES, MAX_OUTPUTS, MAX_REQUEST_BYTES, MAX_SUPPORTING, META_FILE,
                    OUTPUT_FILES_SKIPPED, AirlockStore, FrozenFile, FrozenOutput, StoreError, check_file,
                    check_output_file, checks_summary, effective_status, sha256)
from .workflow import OPEN_STATES, Airlock, AirlockError, Refused
from .workspace import (MAX_JSON_BYTES, OUTPUTS_DIR, Workspace, WorkspaceError, list_dir, read_file,
                        read_json, rel_outbox, rel_output, rel_request, rel_status, rel_supporting, remove_file,
                        valid_number, write_file)

log = logging.getLogger("safeshare.airlock.intake")

SUBMIT, WITHDRAW = "submit", "withdraw"
MAX_OUTBOX = 100  # entries handled per workspace and pass
MAX_META_BYTES = MAX_FILE_BYTES


@dataclass
class IntakeResult:
    """What one pass did: outbox entries handled (with outcome), outputs recorded as saved, status files written."""

    handled: list[dict[str, Any]] = field(default_factory=list)
    saved: int = 0
    statuses: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"handled": self.handled, "saved": self.saved, "statuses": self.statuses, "errors": self.errors}


def _actor(workspace: Workspace) -> str:
    return f"recipient:{workspace.recipient}"


# --- 1. outputs saved ------------------------------------------------------------------------------------------

def _output_hashes(workspace: Workspace, output_id: str) -> dict[str, str]:
    hashes = {}
    for name, kind in list_dir(workspace.path, rel_output(output_id)):
        if kind == "file":
            hashes[name] = sha256(read_file(workspace.path, rel_output(output_id) + (name,), MAX_FILE_BYTES))
    return hashes


def record_saved_outputs(workspace: Workspace, records: AirlockRecords, seen: set[tuple[str, str]] | None = None
                         ) -> int:
    """One `output-saved` event per output folder not recorded before (by rid and output id); how many new."""
    known = seen if seen is not None else set()
    if not known:
        for event in records.events(recipient=workspace.recipient, action="output-saved", limit=1_000_000):
            known.add((str(event.detail.get("rid")), str(event.detail.get("output_id"))))
    found = []
    for name, kind in list_dir(workspace.path, (OUTPUTS_DIR,)):
        if kind != "dir" or not valid_number(name) or (workspace.rid, name) in known:
            continue
        try:
            read_file(workspace.path, rel_output(name) + (META_FILE,), MAX_META_BYTES)  # complete outputs only
            hashes = _output_hashes(workspace, name)
        except FileNotFoundError:
            continue
        except WorkspaceError as exc:
            hashes = {"refused": str(exc)}
        found.append((name, hashes))
    if found:
        with records.session() as session:  # one commit for the lot (a commit is a disk sync)
            for name, hashes in found:
                records.event(_actor(workspace), "output-saved", "ok", workspace.recipient, None, session=session,
                              rid=workspace.rid, output_id=name, files=hashes)
            session.commit()
        known.update((workspace.rid, name) for name, _ in found)
    return len(found)


# --- 2. submissions ----------------------------------------------------------------------------------------------

def _text(draft: dict[str, Any], name: str) -> str:
    value = draft.get(name)
    return value if isinstance(value, str) else ""


def _read_frozen(workspace: Workspace, folder: tuple[str, ...], name: str, kind: str, where: str, budget: list[int],
                 output_id: str | None = None) -> FrozenFile:
    """One file of an output (`output_id`: also one the checkers are shown) or of the supporting files, read safely
    and checked against the allowlist and bounds; `budget[0]` counts the request's bytes so far. Refused else."""
    if kind != "file":
        raise Refused(f"{where}: not a plain file (a link, folder or device); refused, not followed")
    try:
        data = read_file(workspace.path, folder + (name,), MAX_FILE_BYTES)
        check_file(name, data, where)
        if output_id is not None:
            check_output_file(output_id, name)
    except (WorkspaceError, StoreError) as exc:
        raise Refused(str(exc)) from None
    budget[0] += len(data)
    if budget[0] > MAX_REQUEST_BYTES:
        raise Refused(f"the request's files take more than the {MAX_REQUEST_BYTES} bytes a request may have")
    return FrozenFile(name, data)


def read_output(workspace: Workspace, output_id: str, justification: str | None, budget: list[int]) -> FrozenOutput:
    """One output's folder read safely and checked (allowlist, bounds, its release); Refused with the reason."""
    entries = list_dir(workspace.path, rel_output(output_id))
    if not entries:
        raise Refused(f"output {output_id}: no such output in the workspace")
    files = []
    for name, kind in entries:
        if name in OUTPUT_FILES_SKIPPED:
            continue
        files.append(_read_frozen(workspace, rel_output(output_id), name, kind, f"output {output_id}: {name}", budget,
                                  output_id))
    meta_file = next((f for f in files if f.name == META_FILE), None)
    if meta_file is None or not any(f.name == DATA_FILE for f in files):
        raise Refused(f"output {output_id}: data.csv or meta.json missing")
    meta = json.loads(meta_file.data)
    if not isinstance(meta, dict):
        raise Refused(f"output {output_id}: meta.json is not an object")
    release = meta.get("release") if isinstance(meta.get("release"), dict) else {}
    made_on = f"{release.get('dataset')}/{release.get('id')}"
    if made_on != workspace.release:
        raise Refused(f"output {output_id}: made on release {made_on}, not the release of this workspace "
                      f"({workspace.release}); only outputs of the release you were given can be requested")
    if not justification:
        exception = meta.get("exception")
        if isinstance(exception, dict) and isinstance(exception.get("justification"), str):
            justification = exception["justification"].strip() or None
    checks = checks_summary(meta.get("checks"))
    claimed = meta.get("status") if isinstance(meta.get("status"), str) else ""
    status = effective_status(claimed, checks, remedied=meta.get("remedy") not in (None, "", {}, []))
    return FrozenOutput(output_id=output_id, name=str(meta.get("name", ""))[:200], kind=str(meta.get("kind", ""))[:50],
                        status=status, checks=checks,
                        justification=justification, files=tuple(files),
                        release={k: release.get(k) for k in ("dataset", "id", "seal_sha256", "data_sha256")})


def read_submission(workspace: Workspace, number: int) -> dict[str, Any]:
    """The arguments of `Airlock.submit` for the workspace's draft `number`, read safely; Refused with the reason."""
    try:
        draft = read_json(workspace.path, rel_request(number))
    except FileNotFoundError:
        raise Refused(f"request {number}: no draft (requests/{number}/request.json)") from None
    except WorkspaceError as exc:
        raise Refused(str(exc)) from None
    if not isinstance(draft, dict):
        raise Refused(f"request {number}: request.json is not an object")
    listed = draft.get("outputs")
    if not isinstance(listed, list) or not listed:
        raise Refused(f"request {number}: field 'outputs' must list at least one output")
    if len(listed) > MAX_OUTPUTS:
        raise Refused(f"request {number}: {len(listed)} outputs; at most {MAX_OUTPUTS}")
    budget = [0]
    outputs = []
    for entry in listed:
        if not isinstance(entry, dict) or not valid_number(entry.get("output_id")):
            raise Refused(f"request {number}: each output must be {{'output_id': <positive integer>, "
                          f"'justification': text}}")
        justification = entry.get("justification")
        justification = justification.strip() or None if isinstance(justification, str) else None
        try:
            outputs.append(read_output(workspace, str(int(entry["output_id"])), justification, budget))
        except (WorkspaceError, ValueError) as exc:  # JSON of meta.json; Refused is a ValueError
            raise Refused(str(exc) if isinstance(exc, Refused) else f"output {entry['output_id']}: {exc}") from None
    supporting = []
    try:
        entries = list_dir(workspace.path, rel_supporting(number))
    except WorkspaceError as exc:
        raise Refused(str(exc)) from None
    if len(entries) > MAX_SUPPORTING:
        raise Refused(f"request {number}: {len(entries)} supporting files; at most {MAX_SUPPORTING}")
    for name, kind in entries:
        supporting.append(_read_frozen(workspace, rel_supporting(number), name, kind, f"supporting file {name}",
                                       budget))
    return {"context": _text(draft, "context"), "controls": _text(draft, "controls"), "outputs": outputs,
            "supporting": supporting}


def _latest_for(airlock: Airlock, workspace: Workspace, number: int, states: Iterable[str] | None = None):
    rows = [r for r in airlock.records.requests(recipient=workspace.recipient, rid=workspace.rid, states=states)
            if r.app_number == number]
    return rows[-1] if rows else None


def handle_entry(airlock: Airlock, workspace: Workspace, number: int, entry: Any) -> dict[str, Any]:
    """One outbox entry: submit or withdraw request `number`; the outcome (never raises for a refusal)."""
    actor = _actor(workspace)
    action = entry.get("action", SUBMIT) if isinstance(entry, dict) else None
    result: dict[str, Any] = {"workspace": str(workspace.path), "recipient": workspace.recipient,
                              "request": number, "action": action}
    if action == WITHDRAW:
        record = _latest_for(airlock, workspace, number, OPEN_STATES)
        if record is None:
            airlock.records.event(actor, "withdrawn", "refused", workspace.recipient, None, app_number=number,
                                  reason=f"request {number} is not open")
            return {**result, "outcome": "refused", "reason": f"request {number} is not open"}
        try:
            airlock.withdraw(record.request_id, actor, "withdrawn by the researcher")
        except AirlockError as exc:
            return {**result, "outcome": "refused", "reason": str(exc), "request_id": record.request_id}
        return {**result, "outcome": "ok", "request_id": record.request_id}
    try:
        if action != SUBMIT or (isinstance(entry, dict) and str(entry.get("request", number)) != str(number)):
            raise Refused(f"outbox entry {number}.json: want {{'request': {number}, 'action': 'submit' or "
                          f"'withdraw'}}")
        submission = read_submission(workspace, number)
    except Refused as exc:
        airlock.records.event(actor, "refused", "refused", workspace.recipient, None, app_number=number,
                              reason=str(exc))
        return {**result, "outcome": "refused", "reason": str(exc)}
    try:
        record = airlock.submit(recipient=workspace.recipient, rid=workspace.rid, release=workspace.release,
                                app_number=number, release_seal_sha256=workspace.release_seal_sha256, actor=actor,
                                **submission)
    except AirlockError as exc:  # submit has written the refused event
        return {**result, "outcome": "refused", "reason": str(exc)}
    return {**result, "outcome": "ok", "request_id": record.request_id, "round": record.round}


def handle_outbox(airlock: Airlock, workspace: Workspace) -> list[dict[str, Any]]:
    handled = []
    for name, kind in list_dir(workspace.path, rel_outbox())[:MAX_OUTBOX]:
        stem = name[:-5] if name.endswith(".json") else ""
        parts = rel_outbox() + (name,)
        if kind == "dir":  # cannot be removed file-wise; ignored (an event every pass would flood the trail)
            continue
        if not valid_number(stem) or kind != "file":
            remove_file(workspace.path, parts)
            airlock.records.event(_actor(workspace), "refused", "refused", workspace.recipient, None,
                                  reason=f"outbox entry {name!r} is not <number>.json (a plain file); removed")
            continue
        number = int(stem)
        try:
            entry = read_json(workspace.path, parts, MAX_JSON_BYTES)
        except FileNotFoundError:
            continue
        except WorkspaceError as exc:
            entry = {"invalid": str(exc)}
        if isinstance(entry, dict) and "invalid" in entry:
            airlock.records.event(_actor(workspace), "refused", "refused", workspace.recipient, None,
                                  app_number=number, reason=entry["invalid"])
            outcome = {"workspace": str(workspace.path), "request": number, "outcome": "refused",
                       "reason": entry["invalid"]}
        else:
            outcome = handle_entry(airlock, workspace, number, entry)
        remove_file(workspace.path, parts)
        handled.append(outcome)
    return handled


# --- 3. status files ---------------------------------------------------------------------------------------------

def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value else None


def status_documents(airlock: Airlock, workspace: Workspace) -> dict[int, dict[str, Any]]:
    """The status file of each request number the host knows about for this workspace."""
    documents: dict[int, dict[str, Any]] = {}
    latest = {}
    for record in airlock.records.requests(recipient=workspace.recipient, rid=workspace.rid):
        latest[record.app_number] = record  # oldest first: the last one wins
    refusals: dict[int, Any] = {}
    for action in ("refused", "withdrawn"):
        for event in airlock.records.events(recipient=workspace.recipient, action=action, limit=10_000):
            number = event.detail.get("app_number")
            if event.outcome == "refused" and isinstance(number, int):
                if number not in refusals or refusals[number].id < event.id:
                    refusals[number] = event
    for number in sorted(set(latest) | set(refusals)):
        record = latest.get(number)
        if record is not None:
            view = airlock.researcher_view(record.request_id)
            document = {"request": number, "request_id": record.request_id, "state": record.state,
                        "round": record.round, "release": record.release, "updated_at": _iso(record.updated_at),
                        "released_at": _iso(record.released_at), "download_until": _iso(record.download_until),
                        "outputs": view["outputs"], "refusal": None}
        else:
            document = {"request": number, "request_id": None, "state": "draft", "round": 0,
                        "release": workspace.release, "updated_at": None, "released_at": None,
                        "download_until": None, "outputs": {}, "refusal": None}
        refusal = refusals.get(number)
        if refusal is not None and (record is None or refusal.at >= record.updated_at):
            document["refusal"] = {"reason": refusal.detail.get("reason", ""), "at": _iso(refusal.at)}
        documents[number] = document
    return documents


def _status_bytes(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8")


def refresh_status(airlock: Airlock, workspace: Workspace) -> int:
    """Write every status file that differs from what the host knows; how many were written."""
    written = 0
    for number, document in status_documents(airlock, workspace).items():
        parts = rel_status() + (f"{number}.json",)
        data = _status_bytes(document)
        try:
            current = read_file(workspace.path, parts, MAX_JSON_BYTES)
        except (FileNotFoundError, WorkspaceError):
            current = None
        if current != data:
            write_file(workspace.path, parts, data)
            written += 1
    return written


# --- the pass and the loop ---------------------------------------------------------------------------------------

def run_intake(site_root: str | Path, workspaces: Iterable[Workspace], db_url: str | None = None,
               airlock: Airlock | None = None, seen: dict[str, set[tuple[str, str]]] | None = None
               ) -> IntakeResult:
    """One pass over `workspaces`: saved outputs, outbox, status files. A workspace that fails (unreadable, a
    folder where a file should be) is reported in `errors` and does not stop the others."""
    own = airlock is None
    if airlock is None:
        from safeshare.sitedb import site_db_url

        airlock = Airlock(AirlockStore(site_root), AirlockRecords(db_url or site_db_url(site_root)))
    result = IntakeResult()
    try:
        for workspace in workspaces:
            try:
                known = seen.setdefault(workspace.recipient, set()) if seen is not None else None
                result.saved += record_saved_outputs(workspace, airlock.records, known)
                result.handled.extend(handle_outbox(airlock, workspace))
                result.statuses += refresh_status(airlock, workspace)
            except FileNotFoundError:
                continue  # a workspace not made yet
            except (WorkspaceError, OSError, AirlockError, StoreError) as exc:
                message = f"{workspace.path}: {exc}"
                log.warning("airlock intake: %s", message)
                result.errors.append(message)
            except Exception as exc:  # anything else one workspace provokes never stops the other recipients' pass
                message = f"{workspace.path}: {type(exc).__name__}: {exc}"
                log.exception("airlock intake: %s", message)
                result.errors.append(message)
    finally:
        if own:
            airlock.close()
    return result


class IntakeLoop:
    """`run_intake` every `interval` seconds in a daemon thread, until `stop()`. `workspaces` is called at each
    pass (the custodian's active recipients change while the service runs)."""

    def __init__(self, site_root: str | Path, workspaces: Callable[[], Iterable[Workspace]] | Iterable[Workspace],
                 interval: float = 1.0, db_url: str | None = None) -> None:
        self.site_root = Path(site_root)
        self._workspaces = workspaces if callable(workspaces) else (lambda ws=list(workspaces): ws)
        self.interval = interval
        self.db_url = db_url
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: dict[str, set[tuple[str, str]]] = {}
        self.passes = 0
        self.last: IntakeResult | None = None
        self._airlock: Airlock | None = None

    def run_once(self) -> IntakeResult:
        if self._airlock is None:
            from safeshare.sitedb import site_db_url

            self._airlock = Airlock(AirlockStore(self.site_root),
                                    AirlockRecords(self.db_url or site_db_url(self.site_root)))
        self.last = run_intake(self.site_root, list(self._workspaces()), airlock=self._airlock, seen=self._seen)
        self.passes += 1
        return self.last

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a loop in a service keeps going; the next pass retries
                log.exception("airlock intake pass failed")
            self._stop.wait(self.interval)

    def start(self) -> "IntakeLoop":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="airlock-intake", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._airlock is not None:
            self._airlock.close()
            self._airlock = None

    def __enter__(self) -> "IntakeLoop":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["IntakeLoop", "IntakeResult", "Workspace", "handle_entry", "handle_outbox", "read_output",
           "read_submission", "record_saved_outputs", "refresh_status", "run_intake", "status_documents"]
