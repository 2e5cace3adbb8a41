"""Shared pieces of the airlock tests: a site with a database, a workspace with saved outputs, a request."""
from __future__ import annotations

import json
from pathlib import Path

from outputs.airlock.records import AirlockRecords
from outputs.airlock.store import AirlockStore, FrozenFile, FrozenOutput
from outputs.airlock.workflow import Airlock
from outputs.airlock.workspace import Layout, Workspace, write_json_atomic

RID = "ab12cd34ef"
RELEASE = "adult/20261126-abc"
CSV = b"sex,count\nfemale,120\nmale,130\n"


def db_url(site: Path) -> str:
    (site / "db").mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{site / 'db' / 'safeshare.db'}"


def open_airlock(site: Path) -> Airlock:
    site.mkdir(parents=True, exist_ok=True)
    return Airlock(AirlockStore(site), AirlockRecords(db_url(site)))


def frozen_output(output_id: str = "1", status: str = "pass", justification: str | None = None,
                  csv: bytes = CSV) -> FrozenOutput:
    meta = json.dumps({"name": f"table {output_id}", "kind": "table", "status": status}).encode()
    return FrozenOutput(output_id, f"table {output_id}", "table", status,
                        [{"rule": "threshold", "status": status, "reason": "10 or more", "cells": 0}],
                        justification, (FrozenFile("data.csv", csv), FrozenFile("meta.json", meta)))


def submit(airlock: Airlock, outputs=None, recipient: str = "alice", number: int = 1, release: str = RELEASE):
    return airlock.submit(recipient=recipient, rid=RID, release=release, app_number=number,
                          context="Counts of the adult cohort by sex for the paper's table 1",
                          controls="Cells of 10 or more, checked by the app", outputs=outputs or [frozen_output()])


def save_output(state: Path, output_id: int, status: str = "pass", csv: bytes = CSV, extra: dict | None = None,
                release: str = RELEASE) -> Path:
    """An output folder as enclave.app.output_store writes it."""
    folder = Layout(state).output_dir(output_id)
    folder.mkdir(parents=True)
    dataset, release_id = release.split("/")
    (folder / "data.csv").write_bytes(csv)
    (folder / "rendering.html").write_text("<table><tr><td>not copied</td></tr></table>")
    meta = {"id": output_id, "name": f"table {output_id}", "kind": "table", "status": status,
            "checks": [{"rule": "threshold", "status": status, "cells": [[0, 1]] if status != "pass" else [],
                        "reason": "a cell under 10" if status != "pass" else "all cells 10 or more"}],
            "release": {"dataset": dataset, "id": release_id, "seal_sha256": "0" * 64},
            "exception": None, **(extra or {})}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def draft(state: Path, number: int, outputs: list[dict], context: str = "Table 1 of the paper",
          controls: str = "Threshold 10 checked", submit: bool = True, action: str = "submit") -> None:
    layout = Layout(state)
    write_json_atomic(layout.request_file(number), {"number": number, "context": context, "controls": controls,
                                                    "outputs": outputs})
    if submit:
        write_json_atomic(layout.outbox_file(number), {"request": number, "action": action})


def workspace(state: Path, recipient: str = "alice") -> Workspace:
    state.mkdir(parents=True, exist_ok=True)
    return Workspace(state, recipient, RID, RELEASE, "f" * 64)


def status(state: Path, number: int) -> dict:
    return json.loads(Layout(state).status_file(number).read_text())
