"""Release requests as the researcher drafts them in the kiosk app: STATE/airlock/requests/<n>/, the outbox entry
that asks the host to take one, and the host's status shown back (issue 27, the researcher's side of the airlock).

The app only ever writes into its own workspace: a draft's `request.json`, its supporting files (a typed note saved
as `note.txt`, another output's `data.csv` copied as `output-<id>-data.csv`) and, on submission, one outbox entry
`outbox/<n>.json`, written atomically (temp file, fsync, rename) so the host-side intake never reads half of one.
The intake (outputs/airlock/intake.py) is what freezes a request: it copies and hashes the files outside the
enclave; nothing here is trusted by it, and everything here is re-checked there.

A request groups outputs of the release the app serves, needs a context and a controls text, a justification for
each `fail` or `review` output, and only files of allowlisted types within the store's bounds (the same allowlist and
bounds the intake applies, imported from `outputs.airlock.store`, so a refusal comes at once with its reason instead
of minutes later from the host). At most one open request per release.

The host's `status/<n>.json` is read for display only, with one exception that grants nothing: a status newer than
the last submission that says `returned` (or `refused`) lets the researcher edit and resubmit. "Newer" is the
file's fingerprint (sha256, inode, mtime) differing from the one recorded at submission, so a stale `returned` from
the previous round never unfreezes a resubmitted request, and no clock or host field is compared. A script in the
enclave could forge a status file, and gain nothing: the host decides from its own records.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outputs.airlock import store as airlock_store
from outputs.airlock import workspace as layout

from .output_store import OutputStore, atomic_write, fsync_dir, fsync_write, now

MAX_TEXT = airlock_store.MAX_TEXT

FORMAT = 1
MAX_REQUESTS = layout.MAX_APP_NUMBER
MAX_OUTPUTS_PER_REQUEST = airlock_store.MAX_OUTPUTS
MAX_STATUS_BYTES = layout.MAX_JSON_BYTES
NOTE_NAME = "note.txt"
SKIPPED_FILES = airlock_store.OUTPUT_FILES_SKIPPED  # drawn by the app; checkers' pages re-render from data + meta
NEEDS_JUSTIFICATION = frozenset({"fail", "review"})
HOST_STATES = ("submitted", "returned", "approved", "rejected", "released", "withdrawn", "refused")
EDITABLE = frozenset({"draft", "returned", "refused"})
CLOSED = frozenset({"withdrawn", "rejected", "released"})


class DraftError(ValueError):
    """A request that cannot be made, changed, submitted or withdrawn; `status` is the HTTP answer."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ReleaseRef:
    """The release the app serves: a request groups outputs of this release only."""
    dataset: str
    id: str
    seal_sha256: str

    def as_dict(self) -> dict:
        return {"dataset": self.dataset, "id": self.id, "seal_sha256": self.seal_sha256}


def _json_bytes(record: dict) -> bytes:
    return (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def clean_text(value: object, what: str, required: bool = False) -> str:
    """A request text: stripped, at most MAX_TEXT characters; empty allowed in a draft unless `required`."""
    text = "" if value is None else str(value).strip()
    if required and not text:
        raise DraftError(f"the {what} is empty")
    if len(text) > MAX_TEXT:
        raise DraftError(f"the {what} has {len(text)} characters; at most {MAX_TEXT}", 413)
    return text


def _output_id(value: object, where: str) -> int:
    text = str(value)
    if isinstance(value, bool) or not re.fullmatch(r"[1-9][0-9]{0,8}", text):
        raise DraftError(f"{where}: {value!r} is not an output number")
    return int(text)


_ATTACHED = re.compile(r"output-([1-9][0-9]{0,8})-data\.csv")


def supporting_item(name: str) -> dict:
    """What a supporting file's name says it is: the typed note, another output's data, or a file."""
    if name == NOTE_NAME:
        return {"name": name, "kind": "note"}
    match = _ATTACHED.fullmatch(name)
    if match:
        return {"name": name, "kind": "output", "output_id": int(match.group(1))}
    return {"name": name, "kind": "file"}


def _fingerprint(path: Path) -> list | None:
    """What identifies one version of a status file: its bytes' sha256, its inode and its mtime (a rewrite by
    rename gives another inode; a rewrite in place another mtime)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not _regular(info.st_mode) or info.st_size > MAX_STATUS_BYTES:
            return ["unreadable", info.st_ino, info.st_mtime_ns]
        with os.fdopen(os.dup(fd), "rb") as handle:
            body = handle.read(MAX_STATUS_BYTES + 1)
        return [hashlib.sha256(body).hexdigest(), info.st_ino, info.st_mtime_ns]
    finally:
        os.close(fd)


def _regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)


def read_status(path: Path) -> dict | None:
    """The host's status file as a dict of display values, or None when there is none; a file that is not a small
    regular JSON object is shown as unreadable, never followed through a link nor read past MAX_STATUS_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return {"state": "unknown", "reason": "the status file cannot be read"}
    try:
        info = os.fstat(fd)
        if not _regular(info.st_mode) or info.st_size > MAX_STATUS_BYTES:
            return {"state": "unknown", "reason": "the status file is not a small regular file"}
        with os.fdopen(os.dup(fd), "rb") as handle:
            body = handle.read(MAX_STATUS_BYTES + 1)
    finally:
        os.close(fd)
    try:
        status = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {"state": "unknown", "reason": "the status file is not JSON"}
    if not isinstance(status, dict):
        return {"state": "unknown", "reason": "the status file is not a JSON object"}
    return display_status(status)


def _short(value: Any, limit: int = MAX_TEXT) -> str | None:
    if value is None:
        return None
    return str(value)[:limit]


def _when(value: Any) -> str | None:
    """A time as the pages show it: ISO to the second (the host's votes carry microseconds)."""
    text = _short(value, 40)
    return re.sub(r"(T[0-9:]{8})\.[0-9]+", r"\1", text) if text else text


def display_status(status: dict) -> dict:
    """Only the fields a page shows, as short strings (the file comes from outside the app's control)."""
    state = status.get("state")
    out: dict[str, Any] = {
        "state": state if state in HOST_STATES else "unknown",
        "request_id": _short(status.get("request_id"), 100),
        "round": status.get("round") if isinstance(status.get("round"), int) else None,
        "reason": _short(status.get("reason")),
        "updated_at": _short(status.get("updated_at") or status.get("at"), 40),
        "download_until": _short(status.get("download_until"), 40),
        "outputs": [],
    }
    refusal = status.get("refusal")
    if isinstance(refusal, dict):  # the intake refused the last submission: the reason, and it can be fixed
        out["reason"] = out["reason"] or _short(refusal.get("reason")) or "refused"
        if state in (None, "draft", "refused"):
            out["state"] = "refused"
    outputs = status.get("outputs")
    if isinstance(outputs, dict):
        outputs = [{"output_id": key, **(value if isinstance(value, dict) else {"decision": value})}
                   for key, value in outputs.items()]
    for item in outputs[:MAX_OUTPUTS_PER_REQUEST] if isinstance(outputs, list) else []:
        if not isinstance(item, dict):
            continue
        comments = []
        for comment in item.get("comments", [])[:50] if isinstance(item.get("comments"), list) else []:
            if isinstance(comment, dict):
                comments.append({"text": _short(comment.get("comment") or comment.get("text")) or "",
                                 "by": _short(comment.get("checker") or comment.get("by"), 100),
                                 "vote": _short(comment.get("vote"), 20), "at": _when(comment.get("at"))})
            else:
                comments.append({"text": _short(comment) or "", "by": None, "vote": None, "at": None})
        decision = item.get("decision") or item.get("state")
        if isinstance(decision, dict):
            decision = decision.get("state")
        out["outputs"].append({"output_id": _short(item.get("output_id"), 20),
                               "decision": _short(decision, 20), "comments": comments})
    return out


class Drafts:
    """The requests of one workspace (STATE/airlock), made against the release `release` from the outputs in
    `outputs`; one lock guards every change (the app serves from one process)."""

    def __init__(self, state_dir: str | Path, outputs: OutputStore, release: ReleaseRef, recipient: str):
        self.state = Path(state_dir)
        self.outputs = outputs
        self.release = release
        self.recipient = recipient
        self.layout = layout.Layout(self.state)
        self.requests_dir = self.layout.requests
        self.outbox_dir = self.layout.outbox
        self.status_dir = self.layout.status
        for folder in (self.requests_dir, self.outbox_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        for leftover in self.requests_dir.glob(".new-*"):  # a crash mid-create leaves a hidden folder only
            shutil.rmtree(leftover, ignore_errors=True)

    # -- reading ------------------------------------------------------------------------------------------------

    def _numbers(self) -> list[int]:
        return sorted(int(p.name) for p in self.requests_dir.iterdir()
                      if layout.valid_number(p.name) and p.is_dir() and not p.is_symlink())

    def _folder(self, number: object) -> Path | None:
        if not layout.valid_number(number):
            return None
        folder = self.layout.request_dir(number)
        return folder if (folder / layout.REQUEST_FILE).is_file() and not folder.is_symlink() else None

    def _read(self, number: object) -> dict | None:
        folder = self._folder(number)
        if folder is None:
            return None
        try:
            record = json.loads((folder / layout.REQUEST_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("number") == int(str(number)) else None

    def _outbox(self, number: int) -> dict | None:
        path = self.layout.outbox_file(number)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None

    def _status_path(self, number: int) -> Path:
        return self.layout.status_file(number)

    def view(self, record: dict) -> dict:
        """A request with what the pages and the API show: its state (the app's own, or a newer host status),
        whether it can be edited, its outputs with their names and statuses, and the host status."""
        number = record["number"]
        status_path = self._status_path(number)
        status = read_status(status_path)
        pending = self._outbox(number)
        fresh = status is not None and _fingerprint(status_path) != record.get("status_seen")
        state = record.get("state", "draft")
        if state == "submitted":
            state = status["state"] if fresh and status else "submitting"
            if pending is not None and pending.get("action") == "submit":
                state = "submitting"
        elif state == "withdrawn":
            state = "withdrawing" if pending is not None else state
            if status is not None and status["state"] == "refused":
                status = None  # withdrawn before the airlock took it: its "not open" answer is no news
        outputs = []
        for item in record.get("outputs", []):
            saved = self.outputs.get(item["output_id"])
            outputs.append({**item, "name": saved["name"] if saved else None,
                            "status": saved["status"] if saved else "missing",
                            "kind": saved["kind"] if saved else None,
                            "needs_justification": bool(saved and saved["status"] in NEEDS_JUSTIFICATION)})
        editable = state in EDITABLE
        return {**{k: v for k, v in record.items() if k != "status_seen"}, "state": state,
                "supporting": [supporting_item(str(name)) for name in record.get("supporting", [])],
                "editable": editable, "outputs": outputs, "host_status": status, "status_is_new": fresh,
                "missing": self.missing_for_submission(record) if editable else [], "url": f"/requests/{number}"}

    def note(self, number: object) -> str:
        """The text of a request's supporting note ("" when it has none)."""
        folder = self._folder(number)
        path = folder / layout.SUPPORTING_DIR / NOTE_NAME if folder is not None else None
        if path is None or not path.is_file() or path.is_symlink():
            return ""
        return path.read_text(encoding="utf-8", errors="replace").rstrip("\n")

    def get(self, number: object) -> dict | None:
        record = self._read(number)
        return self.view(record) if record is not None else None

    def list(self) -> list[dict]:
        out = []
        for number in reversed(self._numbers()):
            record = self._read(number)
            if record is not None:
                out.append(self.view(record))
        return out

    def open_for_release(self, exclude: int | None = None) -> list[int]:
        """Numbers of the requests for the served release that are still open (not withdrawn, rejected or
        released): at most one may be."""
        return [item["number"] for item in self.list()
                if item["number"] != exclude and item.get("release", {}).get("id") == self.release.id
                and item.get("release", {}).get("dataset") == self.release.dataset and item["state"] not in CLOSED]

    # -- checking -----------------------------------------------------------------------------------------------

    def output_files(self, output_id: int) -> dict[str, bytes]:
        """The files of an output a request carries (every regular file of its folder but the rendering), each
        checked against the airlock's allowlist and per-file bound; DraftError with the reason otherwise."""
        folder = self.outputs.folder(output_id)
        if folder is None:
            raise DraftError(f"there is no output {output_id}", 404)
        files: dict[str, bytes] = {}
        for path in sorted(folder.iterdir()):
            if path.name in SKIPPED_FILES or path.name.startswith("."):
                continue
            if path.is_symlink() or not path.is_file():
                raise DraftError(f"output {output_id}: {path.name} is not a regular file and cannot be requested")
            body = path.read_bytes()
            _check_file(f"output {output_id}", path.name, body)
            files[path.name] = body
        return files

    def _check_output(self, output_id: int) -> dict:
        saved = self.outputs.get(output_id)
        if saved is None:
            raise DraftError(f"there is no output {output_id}", 404)
        release = saved.get("release") or {}
        if release.get("id") != self.release.id or release.get("dataset") != self.release.dataset:
            raise DraftError(f"output {output_id} was made on release {release.get('dataset')}/{release.get('id')}, "
                             f"not on the release served ({self.release.dataset}/{self.release.id}): save it again "
                             "on this release")
        self.output_files(output_id)
        return saved

    def _check_size(self, folder: Path, record: dict, payloads: dict[str, bytes] | None = None) -> None:
        """The request's bound on all its files together (sizes from the folders; each file's own checks are
        made when an output is added and again on submission)."""
        total = 0
        for item in record["outputs"]:
            output_folder = self.outputs.folder(item["output_id"])
            if output_folder is not None:
                total += sum(p.stat().st_size for p in output_folder.iterdir()
                             if p.name not in SKIPPED_FILES and not p.name.startswith(".") and p.is_file())
        for name in record["supporting"]:
            path = folder / layout.SUPPORTING_DIR / name
            if payloads and name in payloads:
                total += len(payloads[name])
            elif path.is_file():
                total += path.stat().st_size
        try:
            airlock_store.check_total(total, "the request's files")
        except ValueError as exc:
            raise DraftError(f"{exc} (split it, or leave out an output)", 413) from None

    def missing_for_submission(self, record: dict) -> list[str]:
        """What still keeps a request from being submitted, as sentences (empty: it can be)."""
        problems = []
        if not record.get("context", "").strip():
            problems.append("the context is empty: say what the outputs are and for which study")
        if not record.get("controls", "").strip():
            problems.append("the controls text is empty: say what was done to make the outputs safe")
        if not record.get("outputs"):
            problems.append("the request holds no output")
        for item in record.get("outputs", []):
            saved = self.outputs.get(item["output_id"])
            if saved is None:
                problems.append(f"output {item['output_id']} no longer exists")
            elif saved["status"] in NEEDS_JUSTIFICATION and not (item.get("justification") or "").strip():
                problems.append(f"output {item['output_id']} ({saved['name']}) is {saved['status']}: "
                                "it needs a justification")
        return problems

    # -- changing -----------------------------------------------------------------------------------------------

    def _write(self, folder: Path, record: dict) -> None:
        record["updated_at"] = now()
        atomic_write(folder / layout.REQUEST_FILE, _json_bytes(record))

    def create(self, changes: dict | None = None) -> dict:
        """A new draft for the served release (refused while another request for it is open)."""
        with self._lock:
            open_ = self.open_for_release()
            if open_:
                raise DraftError(f"request {open_[0]} for release {self.release.dataset}/{self.release.id} is still "
                                 "open: at most one open request per release (withdraw it, or wait for its "
                                 "decision)", 409)
            numbers = self._numbers()
            number = (numbers[-1] + 1) if numbers else 1
            if number > MAX_REQUESTS:
                raise DraftError(f"the workspace holds request number {numbers[-1]}, the highest there can be", 409)
            stamp = now()
            record = {"format": FORMAT, "number": number, "release": self.release.as_dict(),
                      "recipient": self.recipient, "context": "", "controls": "", "outputs": [], "supporting": [],
                      "state": "draft", "submissions": 0, "created_at": stamp, "updated_at": stamp,
                      "submitted_at": None, "created_by": self.recipient, "status_seen": None}
            temp = Path(tempfile.mkdtemp(prefix=".new-", dir=self.requests_dir))
            try:
                (temp / layout.SUPPORTING_DIR).mkdir()
                fsync_write(temp / layout.REQUEST_FILE, _json_bytes(record))
                os.rename(temp, self.layout.request_dir(number))
            except BaseException:
                shutil.rmtree(temp, ignore_errors=True)
                raise
            fsync_dir(self.requests_dir)
            if changes:
                try:
                    return self.update(number, changes)
                except BaseException:  # refused as a whole: no empty draft left behind
                    shutil.rmtree(self.layout.request_dir(number), ignore_errors=True)
                    raise
            return self.view(record)

    def _editable(self, number: object) -> tuple[Path, dict]:
        record = self._read(number)
        folder = self._folder(number)
        if record is None or folder is None:
            raise DraftError(f"there is no request {number}", 404)
        state = self.view(record)["state"]
        if state not in EDITABLE:
            raise DraftError(f"request {number} is {state}: it can be changed only as a draft or once the "
                             "checkers return it", 409)
        return folder, record

    def update(self, number: object, changes: dict) -> dict:
        """Apply a PATCH: any of `context`, `controls`, `outputs` ([{output_id, justification}], replacing the
        list), `note` (the supporting note's text; empty removes it), `supporting_outputs` (ids whose data is
        attached for the checkers, replacing the list)."""
        with self._lock:
            folder, record = self._editable(number)
            if "context" in changes:
                record["context"] = clean_text(changes["context"], "context")
            if "controls" in changes:
                record["controls"] = clean_text(changes["controls"], "controls text")
            if "outputs" in changes:
                record["outputs"] = self._outputs(changes["outputs"])
            payloads: dict[str, bytes] = {}
            if "note" in changes or "supporting_outputs" in changes:
                record["supporting"], payloads = self._supporting(record, changes)
            self._check_size(folder, record, payloads)
            # only now, every check passed: the supporting folder holds exactly the listed files (the intake takes
            # every file in it), then the draft names them
            self._sync_supporting(folder, record["supporting"], payloads)
            self._write(folder, record)
            return self.view(record)

    def _outputs(self, items: object) -> list[dict]:
        if not isinstance(items, list) or len(items) > MAX_OUTPUTS_PER_REQUEST:
            raise DraftError(f"outputs must be a list of at most {MAX_OUTPUTS_PER_REQUEST} outputs")
        out, seen = [], set()
        for i, item in enumerate(items):
            if isinstance(item, dict):
                output_id = _output_id(item.get("output_id"), f"outputs[{i}].output_id")
                justification = item.get("justification")
            else:
                output_id, justification = _output_id(item, f"outputs[{i}]"), None
            if output_id in seen:
                raise DraftError(f"outputs[{i}]: output {output_id} is already in the request")
            seen.add(output_id)
            saved = self._check_output(output_id)
            text = clean_text(justification, f"justification of output {output_id}")
            if not text and (saved.get("exception") or {}).get("justification"):
                text = clean_text(saved["exception"]["justification"], f"justification of output {output_id}")
            out.append({"output_id": output_id, "justification": text or None})
        return out

    def _supporting(self, record: dict, changes: dict) -> tuple[list[str], dict[str, bytes]]:
        """The supporting files asked for (checkers only): the names the request will list, and the new bytes of
        those that change; each checked against the allowlist. Nothing is written here."""
        wanted: dict[str, dict] = {name: supporting_item(name) for name in record.get("supporting", [])}
        payloads: dict[str, bytes] = {}
        if "note" in changes:
            note = clean_text(changes["note"], "supporting note")
            wanted.pop(NOTE_NAME, None)
            if note:
                payloads[NOTE_NAME] = (note + "\n").encode("utf-8")
                wanted[NOTE_NAME] = {"name": NOTE_NAME, "kind": "note"}
        if "supporting_outputs" in changes:
            ids = changes["supporting_outputs"] or []
            if not isinstance(ids, list) or len(ids) > MAX_OUTPUTS_PER_REQUEST:
                raise DraftError(f"supporting_outputs must be a list of at most {MAX_OUTPUTS_PER_REQUEST} output "
                                 "numbers")
            wanted = {name: item for name, item in wanted.items() if item["kind"] != "output"}
            for i, value in enumerate(ids):
                output_id = _output_id(value, f"supporting_outputs[{i}]")
                folder_of = self.outputs.folder(output_id)
                if folder_of is None:
                    raise DraftError(f"supporting_outputs[{i}]: there is no output {output_id}", 404)
                name = f"output-{output_id}-data.csv"
                body = (folder_of / airlock_store.DATA_FILE).read_bytes()
                payloads[name] = body
                wanted[name] = {"name": name, "kind": "output", "output_id": output_id}
        if len(wanted) > airlock_store.MAX_SUPPORTING:
            raise DraftError(f"a request takes at most {airlock_store.MAX_SUPPORTING} supporting files")
        for name, body in payloads.items():
            _check_file("supporting file", name, body)
        return sorted(wanted), payloads

    @staticmethod
    def _sync_supporting(folder: Path, names: list[str], payloads: dict[str, bytes]) -> None:
        """Write the changed supporting files and remove every file the request does not list."""
        support = folder / layout.SUPPORTING_DIR
        support.mkdir(exist_ok=True)
        for name, body in payloads.items():
            atomic_write(support / name, body)
        for path in support.iterdir():
            if path.name not in names and not path.name.startswith("."):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def submit(self, number: object) -> dict:
        """Ask the host to take the request: refused with every reason when it is incomplete; otherwise the
        outbox entry is written atomically and the request is frozen until a newer host status returns it."""
        with self._lock:
            folder, record = self._editable(number)
            problems = self.missing_for_submission(record)
            if problems:
                raise DraftError("the request cannot be submitted: " + "; ".join(problems))
            for item in record["outputs"]:
                self._check_output(item["output_id"])
            self._sync_supporting(folder, record["supporting"], {})  # nothing unlisted goes with it
            for name in record["supporting"]:
                path = folder / layout.SUPPORTING_DIR / name
                if not path.is_file() or path.is_symlink():
                    raise DraftError(f"the supporting file {name} is missing")
                _check_file("supporting file", name, path.read_bytes())
            self._check_size(folder, record)
            others = self.open_for_release(exclude=record["number"])
            if others:
                raise DraftError(f"request {others[0]} for this release is still open: at most one open request "
                                 "per release", 409)
            before = (folder / layout.REQUEST_FILE).read_bytes()
            record["state"] = "submitted"
            record["submissions"] = int(record.get("submissions", 0)) + 1
            record["submitted_at"] = now()
            record["status_seen"] = _fingerprint(self._status_path(record["number"]))
            self._write(folder, record)
            body = (folder / layout.REQUEST_FILE).read_bytes()
            entry = {"request": record["number"], "action": "submit", "submission": record["submissions"],
                     "at": record["submitted_at"], "request_sha256": hashlib.sha256(body).hexdigest()}
            try:
                atomic_write(self.layout.outbox_file(record["number"]), _json_bytes(entry))
            except BaseException as exc:
                # no outbox entry: the draft goes back to what it was, not frozen waiting for a submission that
                # the intake will never see
                atomic_write(folder / layout.REQUEST_FILE, before)
                if isinstance(exc, OSError):
                    raise DraftError(f"the request could not be handed to the airlock ({exc.strerror or exc}); "
                                     "it is still a draft: try again", 503) from None
                raise
            return self.view(record)

    def withdraw(self, number: object) -> dict:
        """Withdraw a request: a draft never submitted simply closes; one the host has (or is about to take) gets
        a withdraw entry in the outbox, replacing a pending submit of the same request."""
        with self._lock:
            record = self._read(number)
            folder = self._folder(number)
            if record is None or folder is None:
                raise DraftError(f"there is no request {number}", 404)
            state = self.view(record)["state"]
            if state in CLOSED or state == "withdrawing":
                raise DraftError(f"request {number} is {state} already", 409)
            submitted = int(record.get("submissions", 0)) > 0
            before = (folder / layout.REQUEST_FILE).read_bytes()
            record["state"] = "withdrawn"
            record["withdrawn_at"] = now()
            self._write(folder, record)
            if submitted:
                entry = {"request": record["number"], "action": "withdraw", "submission": record["submissions"],
                         "at": record["withdrawn_at"]}
                try:
                    atomic_write(self.layout.outbox_file(record["number"]), _json_bytes(entry))
                except BaseException:
                    atomic_write(folder / layout.REQUEST_FILE, before)
                    raise
            return self.view(record)


def _check_file(where: str, name: str, body: bytes) -> None:
    """The airlock store's allowlist and per-file bounds, applied in the app so a refusal comes with its reason at
    once (the intake applies them again)."""
    try:
        airlock_store.check_file(name, body, f"{where}: {name}")
    except ValueError as exc:
        raise DraftError(str(exc), 422) from None


__all__ = ["Drafts", "DraftError", "ReleaseRef", "display_status", "read_status"]
