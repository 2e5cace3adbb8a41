"""Issue 24, item 9: meta.json's fields are signed in the seal.

meta.json is a copy in the session folder that `audit sessions` filters on. A writer of the folder edited its start
(to move the session out of `--since`), end, end reason, front door (`via`), counters or limits, and `audit verify`
still passed. Now the gateway's signed seal holds those fields (`meta`): an edit is a finding naming the field, and
`audit sessions` reads the sealed values, so the session is still listed where it belongs.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from proxy.audit.sessions import find_sessions
from tests.proxy.test_seals import SiteFiles, audit, ordered, problems, recorded_site, site  # noqa: F401 (fixtures)


def edit_meta(folder: Path, **changes) -> dict:
    meta = json.loads((folder / "meta.json").read_text())
    before = dict(meta)
    meta.update(changes)
    (folder / "meta.json").write_text(json.dumps(meta))
    return before


def test_the_seal_holds_meta_json_but_its_head(recorded_site: SiteFiles) -> None:  # noqa: F811
    for folder in ordered(recorded_site):
        seal = json.loads((folder / "events.jsonl").read_bytes().splitlines()[-1])
        meta = json.loads((folder / "meta.json").read_text())
        assert seal["meta"] == {k: v for k, v in meta.items() if k != "log_head"}
        assert {"start", "end", "end_reason", "via", "counters", "limits", "recipient", "release"} <= set(seal["meta"])
        connect = json.loads((folder / "events.jsonl").read_bytes().splitlines()[0])
        assert connect["meta"]["start"] == meta["start"] and connect["meta"]["limits"] == meta["limits"]


@pytest.mark.parametrize("field, value", [
    ("start", "2020-01-01T00:00:00+00:00"),
    ("end", "2020-01-01T00:05:00+00:00"),
    ("end_reason", "closed"),
    ("via", "websockify"),
    ("counters", {"keys_forwarded": 0}),
    ("limits", {"idle_seconds": 1e9}),
])
def test_an_edited_meta_field_is_a_finding(site: SiteFiles, field: str, value) -> None:  # noqa: F811
    folder = ordered(site)[0]
    if isinstance(value, dict):  # one entry changed, the others kept
        value = {**json.loads((folder / "meta.json").read_text())[field], **value}
    before = edit_meta(folder, **{field: value})
    got = problems(site.check(), folder.name)
    if isinstance(value, dict):
        (key,) = [k for k in value if value[k] != before[field][k]]
        assert len(got) == 1 and got[0].startswith(f"field '{field}' differs from the signed seal in ") \
            and f"{key}: {value[key]!r} (sealed {before[field][key]!r})" in got[0], got
    else:
        assert got == [f"field '{field}' is {value!r}, the signed seal says {before[field]!r}"], got
    done = audit("verify", str(folder), "--trust", str(site.trust_file), "--db", site.db)
    assert done.returncode == 1 and f"meta.json: field '{field}'" in done.stdout, done.stdout


def test_a_removed_meta_field_is_a_finding(site: SiteFiles) -> None:  # noqa: F811
    folder = ordered(site)[0]
    meta = json.loads((folder / "meta.json").read_text())
    del meta["via"]
    (folder / "meta.json").write_text(json.dumps(meta))
    assert problems(site.check(), folder.name) == ["field 'via' is missing, the signed seal says 'gateway'"]


def test_audit_sessions_since_is_not_fooled_by_an_edited_start(site: SiteFiles) -> None:  # noqa: F811
    """Move a session's start a day back in meta.json: `--since` its real start still lists it, with the sealed
    start and end reason."""
    first, second = ordered(site)
    real = datetime.fromisoformat(json.loads((first / "meta.json").read_text())["start"])
    edit_meta(first, start=(real - timedelta(days=1)).isoformat(), end_reason="closed")
    since = (real - timedelta(seconds=1)).isoformat()
    listed = [s.session for s in find_sessions(site.sessions, since=real - timedelta(seconds=1))]
    assert listed == [first.name, second.name]
    done = audit("sessions", str(site.sessions), "--since", since, "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["session"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {first.name, second.name}
    assert datetime.fromisoformat(rows[first.name]["start"]) == real
    assert rows[first.name]["end_reason"] != "closed"
    # and `--until` the forged start does not pick it up either
    until = [s.session for s in find_sessions(site.sessions, until=real - timedelta(hours=1))]
    assert until == []
