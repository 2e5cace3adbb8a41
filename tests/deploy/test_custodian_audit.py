"""What the custodian service writes to its audit log for requests that fail authentication and for session views,
and that its pages load nothing from another origin (issue 12, items 4, 5 and 14)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from deploy.audit.limits import PER_SOURCE, VIEW_INTERVAL, WINDOW, AuthFailureLog, ViewLog
from deploy.custodian.api import bearer_token, create_app
from deploy.provision import Provisioner
from deploy.records import AuditEventRow
from deploy.site.folder import Site

REPO = Path(__file__).resolve().parents[2]


class Clock:
    """A monotonic clock the test moves by hand (the limits are per time window; no test sleeps)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def service(tmp_path: Path):
    site = Site(tmp_path / "site")
    site.prepare()
    provisioner = Provisioner(site)
    records = provisioner.records
    clock = Clock()
    keys = {"auditor": records.add_key("aud", "auditor"), "custodian": records.add_key("ops", "custodian"),
            "old": records.add_key("old", "auditor")}
    records.revoke_key("old")
    app = create_app(provisioner, expiry_interval=None, auth_log=AuthFailureLog(records, clock=clock),
                     view_log=ViewLog(records, clock=clock))
    with TestClient(app) as client:
        yield {"client": client, "records": records, "keys": keys, "clock": clock, "site": site}
    provisioner.close()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def rows(records, action: str) -> int:
    with records.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(AuditEventRow)
                            .where(AuditEventRow.action == action)).scalar_one()


def test_bearer_header_parsing() -> None:
    assert bearer_token(None) == (None, "missing")
    assert bearer_token("Bearer ssk_abc") == ("ssk_abc", "ok")
    assert bearer_token("bearer  ssk_abc ") == ("ssk_abc", "ok")
    for header in ["", "Bearer", "Bearer ", "Basic dXNlcjpwdw==", "ssk_abc", "Bearer a b"]:
        assert bearer_token(header) == (None, "malformed"), header


def test_each_kind_of_failed_authentication_is_recorded_and_shown(service) -> None:
    client, records, keys = service["client"], service["records"], service["keys"]
    attempts = [({}, "missing"), ({"Authorization": "Basic dXNlcjpwdw=="}, "malformed"),
                ({"Authorization": "Bearer"}, "malformed"), (auth("ssk_nobody"), "unknown"),
                (auth("x" * 5000), "unknown"), (auth(keys["old"]), "revoked")]
    for headers, _ in attempts:
        response = client.get("/recipients", headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert client.get("/audit/sessions", headers=auth("ssk_nobody")).status_code == 401
    assert client.get("/recipients/%1b%5b2J%0a", headers=auth("ssk_nobody")).status_code == 401
    events = records.events(action="auth-failed")
    assert [e.detail["reason"] for e in events] == [reason for _, reason in attempts] + ["unknown"] * 2
    path = events[-1].detail["path"]  # no terminal escapes from a client's path
    assert path.startswith("/recipients/?[2J") and path.isprintable()
    assert all(e.outcome == "refused" and e.detail["source"] == "testclient" for e in events)
    assert events[0].detail["path"] == "/recipients" and events[0].detail["method"] == "GET"
    assert events[-2].detail["path"] == "/audit/sessions"
    assert events[1].detail["scheme"] == "Basic" and "dXNlcjpwdw" not in json.dumps([e.detail for e in events])
    assert events[5].detail["key"] == "old"  # whose revoked key is still in use
    assert keys["old"] not in json.dumps([e.detail for e in events])  # never the key itself
    # a valid key and a wrong role are not authentication failures
    assert client.get("/recipients", headers=auth(keys["auditor"])).status_code == 200
    assert client.post("/expire", headers=auth(keys["auditor"])).status_code == 403
    assert len(records.events(action="auth-failed")) == len(attempts) + 2
    shown = subprocess.run([sys.executable, "-m", "safeshare.cli", "custodian", "events", "--site",
                            str(service["site"].root), "--action", "auth-failed"], cwd=REPO, capture_output=True,
                           text=True, timeout=120, env=dict(os.environ))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == len(attempts) + 2 and all("auth-failed" in line for line in lines)
    assert "reason=revoked" in lines[5] and "source=testclient" in lines[5] and "key=old" in lines[5]


def test_a_flood_of_bad_requests_writes_a_bounded_number_of_rows(service) -> None:
    client, records, keys, clock = service["client"], service["records"], service["keys"], service["clock"]
    for number in range(1000):
        headers = auth(f"ssk_guess{number}") if number % 2 else {"Authorization": "Basic x"}
        assert client.get("/recipients", headers=headers).status_code == 401
    assert rows(records, "auth-failed") == PER_SOURCE  # the rest is counted, not written
    clock.now += WINDOW  # the window ends: the next request of anyone writes its summary
    assert client.get("/recipients", headers=auth(keys["auditor"])).status_code == 200
    assert rows(records, "auth-failed") == PER_SOURCE + 1
    summary = records.events(action="auth-failed")[-1]
    assert summary.detail["summary"] is True and summary.detail["source"] == "testclient"
    assert summary.detail["dropped"] == 1000 - PER_SOURCE
    assert summary.detail["reasons"] == {"malformed": 500 - PER_SOURCE // 2, "unknown": 500 - PER_SOURCE // 2}
    assert summary.detail["since"] <= summary.detail["until"]
    # a new window: written again, then limited again
    for _ in range(3 * PER_SOURCE):
        client.get("/recipients")
    assert rows(records, "auth-failed") == 2 * PER_SOURCE + 1


def test_many_sources_are_bounded_too(tmp_path: Path) -> None:
    """Spread over more addresses than the global bound: still a bounded number of rows and of tracked sources."""
    from deploy.records import Records

    records = Records(f"sqlite:///{tmp_path / 'db.sqlite'}")
    clock = Clock()
    limiter = AuthFailureLog(records, clock=clock, per_source=2, global_limit=5)
    for number in range(1000):
        limiter.record(f"10.0.{number // 250}.{number % 250}", "unknown")
    assert rows(records, "auth-failed") == 5
    assert limiter.flush(force=True) == 1  # every source beyond the bound shares one summary
    summary = records.events(action="auth-failed")[-1]
    assert summary.detail["source"] == "*" and summary.detail["dropped"] == 995


@pytest.fixture
def session(service) -> str:
    """A recorded session as the service sees it: its folder (meta.json) and its prepared frames."""
    site = service["site"]
    folder = site.sessions / "20261123T120000-abc"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"recipient": "alice", "release": "adult/abc"}))
    cache = site.player_cache / folder.name / FRAMES_SHA  # prepared from the recording with this hash
    cache.mkdir(parents=True)
    (cache / "frames.bin").write_bytes(bytes(range(256)) * 64)
    return folder.name


FRAMES_SHA = "ab" * 32


def test_fetching_frames_without_the_player_records_a_view(service, session) -> None:
    client, records, keys, clock = service["client"], service["records"], service["keys"], service["clock"]
    url = f"/audit/sessions/{session}/frames?sha256={FRAMES_SHA}"
    assert client.get(url, headers=auth(keys["custodian"])).status_code == 403
    assert client.get(url).status_code == 401
    assert records.events(action="session-viewed") == []  # refused requests saw nothing
    first = client.get(url, headers={**auth(keys["auditor"]), "Range": "bytes=0-99"})
    assert first.status_code == 206 and first.content == bytes(range(100))
    for start in range(100, 1000, 100):  # a player seeking: many ranges, one view
        assert client.get(url, headers={**auth(keys["auditor"]), "Range": f"bytes={start}-{start + 99}"}
                          ).status_code == 206
    (viewed,) = records.events(action="session-viewed")
    assert viewed.actor == "api:aud" and viewed.recipient == "alice" and viewed.outcome == "ok"
    assert viewed.detail == {"session": session, "endpoint": "frames", "role": "auditor"}
    # another endpoint of the same session is another view; the verification shows the session's integrity
    client.get(f"/audit/sessions/{session}/verify", headers=auth(keys["auditor"]))
    assert [e.detail["endpoint"] for e in records.events(action="session-viewed")] == ["frames", "verify"]
    clock.now += VIEW_INTERVAL  # a later look is a new event
    assert client.get(url, headers=auth(keys["auditor"])).status_code == 200
    assert [e.detail["endpoint"] for e in records.events(action="session-viewed")] == ["frames", "verify", "frames"]


def test_a_view_that_cannot_be_recorded_serves_nothing(service, session) -> None:
    """Fail closed: the event is written before the frames are served."""
    client, records, keys = service["client"], service["records"], service["keys"]
    with records.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TRIGGER no_views BEFORE INSERT ON custodian_audit_events "
                             "WHEN NEW.action = 'session-viewed' BEGIN SELECT RAISE(ABORT, 'audit log full'); END")
    answering = TestClient(client.app, raise_server_exceptions=False)
    response = answering.get(f"/audit/sessions/{session}/frames?sha256={FRAMES_SHA}", headers=auth(keys["auditor"]))
    assert response.status_code == 500 and response.content != bytes(range(256)) * 64
    assert records.events(action="session-viewed") == []


EXTERNAL = re.compile(r"""(?:src|href|url)\s*[=(]\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def test_docs_pages_load_nothing_from_another_origin(service) -> None:
    client = service["client"]
    assert client.get("/openapi.json").status_code == 200  # the schema stays
    for path in ["/docs", "/redoc", "/docs/oauth2-redirect", "/player"]:
        response = client.get(path)
        assert response.status_code in (200, 404), path
        assert not EXTERNAL.search(response.text), f"{path} loads from another origin"
        assert "cdn." not in response.text and "unpkg" not in response.text, path
