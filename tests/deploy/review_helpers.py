"""Shared by the review pages' tests: a site with the custodian service, people, and airlock requests submitted
through the airlock library (outputs made like the app's: data.csv and meta.json of a cross-tabulation with one
failing cell, and a passing frequency table)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from outputs.airlock.store import FrozenFile, FrozenOutput

PASSWORD = "correct horse battery staple"
CELL_FAIL = {"rule": "threshold", "status": "fail", "cells": [["Female", "Other"]],
             "reason": "1 cell has fewer than 10 records"}


def crosstab_output(output_id: str = "1", justification: str | None = "Only 3 records; rounded in the paper.") \
        -> FrozenOutput:
    """A sex-by-race table whose (Female, Other) cell fails the threshold rule."""
    data = "sex \\ race,White,Black,Other,total\nFemale,120,40,3,163\nMale,130,45,12,187\ntotal,250,85,15,350\n"
    meta = {
        "id": int(output_id), "name": "sex by race", "kind": "crosstab", "status": "fail",
        "query": {"row": "sex", "col": "race", "where": ["age>=30"]},
        "cohorts": [{"filters": ["age>=30"], "exclude_suppressed": True}],
        "checks": [CELL_FAIL, {"rule": "zeros", "status": "pass", "cells": [], "reason": ""}],
        "flags": [{"row": 0, "col": 2, "rule": "threshold", "status": "fail"}],
        "release": {"dataset": "adult", "id": "20261126T000000Z", "seal_sha256": "ab" * 32},
        "created_at": "2026-11-26T10:00:00+00:00", "created_by": "alice",
    }
    return FrozenOutput(output_id=output_id, name="sex by race", kind="crosstab", status="fail",
                        checks=meta["checks"], justification=justification,
                        files=(FrozenFile("data.csv", data.encode()),
                               FrozenFile("meta.json", json.dumps(meta).encode())),
                        release=meta["release"])


def frequency_output(output_id: str = "2") -> FrozenOutput:
    data = "education,count\nBachelors,410\nMasters,150\n"
    meta = {"id": int(output_id), "name": "education", "kind": "frequencies", "status": "pass",
            "query": {"attribute": "education"}, "cohorts": [{"filters": [], "exclude_suppressed": False}],
            "checks": [{"rule": "threshold", "status": "pass", "cells": [], "reason": ""}], "flags": [],
            "release": {"dataset": "adult", "id": "20261126T000000Z", "seal_sha256": "ab" * 32}}
    return FrozenOutput(output_id=output_id, name="education", kind="frequencies", status="pass",
                        checks=meta["checks"], justification=None,
                        files=(FrozenFile("data.csv", data.encode()),
                               FrozenFile("meta.json", json.dumps(meta).encode())))


def submit(airlock, recipient: str = "alice", rid: str = "r1alice", app_number: int = 1,
           outputs: tuple[FrozenOutput, ...] | None = None, release: str = "adult/20261126T000000Z") -> str:
    record = airlock.submit(recipient=recipient, rid=rid, release=release, app_number=app_number,
                            context="Income by sex and race for the wage-gap study (protocol 7).",
                            controls="Cells under 10 are suppressed in the paper; no record-level data.",
                            outputs=outputs if outputs is not None else (crosstab_output(), frequency_output()),
                            release_seal_sha256="ab" * 32)
    return record.request_id


def prepare_workspace(state: Path, number: int = 1) -> None:
    """An app workspace (STATE) as the kiosk app leaves it after a researcher saved two outputs and submitted them as
    request `number`: STATE/outputs/<id>/ (data.csv, meta.json, rendering.html), the draft request.json and the
    outbox entry asking for its submission (the formats of /work/notes airlock-api: outputs.airlock.workspace)."""
    from outputs.airlock.workspace import Layout, write_json_atomic

    layout = Layout(state)
    for output in (crosstab_output(), frequency_output()):
        folder = layout.output_dir(output.output_id)
        folder.mkdir(parents=True)
        for item in output.files:
            (folder / item.name).write_bytes(item.data)
        (folder / "rendering.html").write_text("<table><tr><td>never shown to a checker</td></tr></table>")
    layout.request_dir(number).mkdir(parents=True)
    write_json_atomic(layout.request_file(number), {
        "number": number, "context": "Income by sex and race for the wage-gap study (protocol 7).",
        "controls": "Cells under 10 are suppressed in the paper; no record-level data.",
        "outputs": [{"output_id": 1, "justification": "Only 3 records; rounded in the paper."}, {"output_id": 2}],
        "updated_at": "2026-11-26T10:00:00+00:00"})
    layout.outbox.mkdir(parents=True, exist_ok=True)
    write_json_atomic(layout.outbox_file(number), {"request": number, "action": "submit",
                                                   "at": "2026-11-26T10:00:00+00:00"})


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)


def sign_in(client, name: str, password: str = PASSWORD):
    """Sign `name` in through the login form; the response of the POST (303 to /review on success)."""
    page = client.get("/review/login")
    return client.post("/review/login", data={"csrf": csrf_of(page.text), "name": name, "password": password},
                       follow_redirects=False)


def write_password(folder: Path, password: str = PASSWORD) -> Path:
    path = folder / "password.txt"
    path.write_text(password + "\n")
    return path
