"""Saved outputs: one folder each in the recipient's workspace (STATE/outputs/<id>/), written atomically, bounded.

An output folder holds exactly three files: `data.csv` (the table or the coefficients as shown), `meta.json` (what
it is: release id and seal hash, the analysis and its query including the cohort definitions, when, by whom, the
checks and the rules they ran under with each number's origin, and the same in ACRO's `results.json` layout under
`acro`) and `rendering.html` (the table drawn by the app's own template from `data`; nothing the researcher wrote is
ever markup). A new output is written into a hidden sibling folder, every file flushed to disk, and renamed into
place, so a reader never sees half an output; comments and exception requests replace `meta.json` atomically.

Bounds, like the saved analyses': at most MAX_OUTPUTS outputs (409 when full) of at most MAX_OUTPUT_BYTES each (413),
at most MAX_COMMENTS comments of MAX_TEXT characters, an exception justification of at most MAX_TEXT characters.
Ids are positive integers; anything else names no output. Nothing here is served as a download: the airlock (the
next issue) takes outputs out of the enclave, never the app.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

from outputs.airlock.store import DATA_FILE, META_FILE, RENDERING_FILE
from outputs.airlock.workspace import OUTPUTS_DIR  # STATE/outputs: the airlock's intake reads it by these names

FILES = (DATA_FILE, META_FILE, RENDERING_FILE)
MAX_OUTPUTS = 200
MAX_OUTPUT_BYTES = 2 * 1024 * 1024
MAX_NAME = 120
MAX_TEXT = 4000
MAX_COMMENTS = 50
_ID = re.compile(r"[1-9][0-9]{0,8}")


class OutputStoreError(ValueError):
    """An output that cannot be stored or changed; `status` is the HTTP answer."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def clean_name(name: object) -> str:
    text = " ".join(str(name).split())
    if not text or len(text) > MAX_NAME:
        raise OutputStoreError(f"give the output a name of 1 to {MAX_NAME} characters")
    return text


def clean_text(text: object, what: str) -> str:
    value = str(text).strip()
    if not value:
        raise OutputStoreError(f"the {what} is empty")
    if len(value) > MAX_TEXT:
        raise OutputStoreError(f"the {what} has {len(value)} characters; at most {MAX_TEXT}", 413)
    return value


def fsync_write(path: Path, payload: bytes) -> None:
    """Write `payload` to `path` and flush it to the disk (the app's outputs and drafts: a crash loses no write)."""
    with open(path, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename or a new file in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(target: Path, payload: bytes) -> None:
    """Write `target` as a hidden temp sibling, flushed, then renamed over it: a reader sees the old or the new."""
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        fsync_write(Path(temp), payload)
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    fsync_dir(target.parent)


class OutputStore:
    """The outputs of one workspace (STATE/outputs), guarded by a lock (the app serves from one process)."""

    def __init__(self, state_dir: str | Path):
        self.root = Path(state_dir) / OUTPUTS_DIR
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Held while an output is checked against the earlier ones and stored: two outputs saved at once (a script
        # posting in parallel) must not both miss each other in the differencing check.
        self.making = threading.RLock()
        for leftover in self.root.glob(".new-*"):  # a crash mid-write leaves a hidden folder, never an output
            shutil.rmtree(leftover, ignore_errors=True)

    def _ids(self) -> list[int]:
        return sorted(int(p.name) for p in self.root.iterdir() if _ID.fullmatch(p.name) and p.is_dir())

    def folder(self, output_id: object) -> Path | None:
        text = str(output_id)
        if not _ID.fullmatch(text):
            return None
        path = self.root / text
        return path if (path / META_FILE).is_file() else None

    def add(self, meta: dict, csv_text: str, rendering: str, complete=None) -> dict:
        """Store a new output (meta gets its id, files and their sha256, then `complete(record)` may add what needs
        the id) in one atomic write; OutputStoreError when a bound is hit."""
        files = {DATA_FILE: csv_text.encode("utf-8"), RENDERING_FILE: rendering.encode("utf-8")}
        with self._lock:
            ids = self._ids()
            if len(ids) >= MAX_OUTPUTS:
                raise OutputStoreError(f"the workspace holds {len(ids)} outputs, the most it can", 409)
            new_id = (ids[-1] + 1) if ids else 1
            record = {**meta, "id": new_id,
                      "files": {name: {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
                                for name, body in files.items()}}
            if complete is not None:
                complete(record)
            body = (json.dumps(record, indent=1, sort_keys=False) + "\n").encode("utf-8")
            size = len(body) + sum(len(b) for b in files.values())
            if size > MAX_OUTPUT_BYTES:
                raise OutputStoreError(f"the output takes {size} bytes; at most {MAX_OUTPUT_BYTES} can be stored "
                                       "(choose an attribute with fewer values or a smaller model)", 413)
            temp = Path(tempfile.mkdtemp(prefix=".new-", dir=self.root))
            try:
                for name, payload in {**files, META_FILE: body}.items():
                    fsync_write(temp / name, payload)
                os.rename(temp, self.root / str(new_id))
            except BaseException:
                shutil.rmtree(temp, ignore_errors=True)
                raise
            fsync_dir(self.root)
        return record

    def get(self, output_id: object) -> dict | None:
        folder = self.folder(output_id)
        if folder is None:
            return None
        return json.loads((folder / META_FILE).read_text(encoding="utf-8"))

    def list(self) -> list[dict]:
        out = []
        for output_id in reversed(self._ids()):
            record = self.get(output_id)
            if record is not None:
                out.append(record)
        return out

    def update(self, output_id: object, change) -> dict:
        """Apply `change(record)` (which may raise OutputStoreError) and replace meta.json atomically."""
        with self._lock:
            folder = self.folder(output_id)
            if folder is None:
                raise OutputStoreError(f"no output {output_id}", 404)
            record = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            change(record)
            body = (json.dumps(record, indent=1) + "\n").encode("utf-8")
            others = sum((folder / name).stat().st_size for name in FILES if name != META_FILE)
            if len(body) + others > MAX_OUTPUT_BYTES:
                raise OutputStoreError("the output would exceed its size bound", 413)
            atomic_write(folder / META_FILE, body)
        return record


__all__ = ["FILES", "MAX_COMMENTS", "MAX_OUTPUTS", "MAX_OUTPUT_BYTES", "MAX_TEXT", "OutputStore",
           "OutputStoreError", "atomic_write", "clean_name", "clean_text", "fsync_dir", "fsync_write", "now"]
