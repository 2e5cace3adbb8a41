"""Saved analyses: a small writable SQLite file of their own, apart from the read-only release database.

A saved analysis is only its parameters (kind plus the query parameters of its page), never a result: opening it
re-runs it on the release, so nothing derived from the data is stored and the release database stays read-only.
Stored with the release's data_sha256 so the list can say when an analysis was made on another release.

The file is bounded: at most MAX_SAVED analyses (409 when full: delete some first) of at most MAX_PARAMS_BYTES of
parameters each (413), so a researcher, or a script in the kiosk, cannot grow it without end. Ids outside SQLite's
64-bit integers name no analysis (404, not an OverflowError).
"""
from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .analyses import KINDS

WORKSPACE_NAME = "workspace.sqlite"
MAX_NAME = 120
MAX_PARAMS = 400
MAX_PARAM_CHARS = 500
MAX_PARAMS_BYTES = 32 * 1024  # a page's query string is far shorter: 400 selected values of 60 characters
MAX_SAVED = 1000
MAX_ID = (1 << 63) - 1  # SQLite's INTEGER


class WorkspaceError(ValueError):
    """A name or parameters that cannot be saved; `status` is the HTTP answer (422 by default, 413 for parameters too
    large, 409 for a full workspace)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def valid_id(analysis_id: object) -> bool:
    """Whether `analysis_id` can name a saved analysis at all (a positive 64-bit integer)."""
    return isinstance(analysis_id, int) and not isinstance(analysis_id, bool) and 0 < analysis_id <= MAX_ID


@dataclass(frozen=True)
class SavedAnalysis:
    id: int
    name: str
    kind: str
    params: list[tuple[str, str]]
    dataset: str
    release: str
    created_at: str

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "kind": self.kind, "params": [list(p) for p in self.params],
                "dataset": self.dataset, "release": self.release, "created_at": self.created_at}


def check_params(params: object) -> list[tuple[str, str]]:
    """Parameters as a list of (key, value) string pairs of bounded size (what a page's query string holds)."""
    if not isinstance(params, (list, tuple)) or len(params) > MAX_PARAMS:
        raise WorkspaceError(f"params must be a list of at most {MAX_PARAMS} [key, value] pairs")
    out = []
    for pair in params:
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(x, str) and len(x) <= MAX_PARAM_CHARS for x in pair)):
            raise WorkspaceError("each parameter must be a [key, value] pair of short strings")
        out.append((pair[0], pair[1]))
    return out


class Workspace:
    """The researcher's saved analyses in STATE/workspace.sqlite (one connection, guarded by a lock)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=DELETE")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS analyses (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, "
            "kind TEXT NOT NULL, params TEXT NOT NULL, dataset TEXT NOT NULL, release TEXT NOT NULL, "
            "created_at TEXT NOT NULL)")

    def save(self, name: str, kind: str, params: object, dataset: str, release: str) -> SavedAnalysis:
        name = " ".join(str(name).split())
        if not name or len(name) > MAX_NAME:
            raise WorkspaceError(f"give the analysis a name of 1 to {MAX_NAME} characters")
        if kind not in KINDS:
            raise WorkspaceError(f"unknown kind of analysis {kind!r} (one of {', '.join(KINDS)})")
        pairs = check_params(params)
        encoded = json.dumps(pairs)
        if len(encoded.encode()) > MAX_PARAMS_BYTES:
            raise WorkspaceError(f"the analysis's parameters take {len(encoded.encode())} bytes; at most "
                                 f"{MAX_PARAMS_BYTES} can be saved (select fewer values)", 413)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._lock:
            (count,) = self._conn.execute("SELECT COUNT(*) FROM analyses").fetchone()
            if count >= MAX_SAVED:
                raise WorkspaceError(f"the workspace holds {count} saved analyses, the most it can: delete some "
                                     "before saving another", 409)
            cursor = self._conn.execute(
                "INSERT INTO analyses (name, kind, params, dataset, release, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (name, kind, encoded, dataset, release, created))
            new_id = int(cursor.lastrowid)
        return SavedAnalysis(new_id, name, kind, pairs, dataset, release, created)

    def get(self, analysis_id: int) -> SavedAnalysis | None:
        if not valid_id(analysis_id):
            return None
        with self._lock:
            row = self._conn.execute("SELECT id, name, kind, params, dataset, release, created_at FROM analyses "
                                     "WHERE id = ?", (int(analysis_id),)).fetchone()
        return self._row(row) if row else None

    def list(self, dataset: str | None = None) -> list[SavedAnalysis]:
        query = "SELECT id, name, kind, params, dataset, release, created_at FROM analyses"
        args: tuple = ()
        if dataset is not None:
            query += " WHERE dataset = ?"
            args = (dataset,)
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY id DESC", args).fetchall()
        return [self._row(row) for row in rows]

    def delete(self, analysis_id: int) -> bool:
        if not valid_id(analysis_id):
            return False
        with self._lock:
            return self._conn.execute("DELETE FROM analyses WHERE id = ?", (int(analysis_id),)).rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @staticmethod
    def _row(row: tuple) -> SavedAnalysis:
        params = [tuple(pair) for pair in json.loads(row[3])]
        return SavedAnalysis(int(row[0]), row[1], row[2], params, row[4], row[5], row[6])  # type: ignore[arg-type]
