"""The real thing: `safeshare app` as a process on a free port, fetched over HTTP; and the release in PostgreSQL."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from enclave.app import create_app
from enclave.app.release import DATA_TABLE
from enclave.app.security import CSP
from tests.pg import postgres_url  # noqa: F401 (a fixture)
from tests.enclave.test_app_support import SAFESHARE, TestClient, free_port, read_ready, small_frame, synthetic_bundle

REPO = Path(__file__).resolve().parents[2]


def test_server_process_serves_pages_with_headers_and_stops(tmp_path) -> None:
    bundle = synthetic_bundle(tmp_path, small_frame())
    port = free_port()
    proc = subprocess.Popen([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(tmp_path / "state"),
                             "--host", "127.0.0.1", "--port", str(port), "--site", str(tmp_path)],
                            cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = read_ready(proc, 60)
        assert url == f"http://127.0.0.1:{port}/"
        with httpx.Client(base_url=url, timeout=10) as client:
            for path in ["/", "/cohort", "/frequencies?attr=age", "/crosstab", "/compare?attr=site&a=sex%3Df&b=sex%3Dm",
                         "/analyses", "/static/app.js", "/static/app.css", "/nope"]:
                response = client.get(path)
                assert response.status_code == (404 if path == "/nope" else 200), path
                assert response.headers["content-security-policy"] == CSP
                assert response.headers["cache-control"] == "no-store"
                assert "server" not in response.headers
                if response.headers["content-type"].startswith("text/html"):
                    assert "<title>safeshare · " in response.text
            count = client.post("/api/count", json={"filters": {"sex": ["f"]}}).json()
            assert count["count"] == 19
            assert client.delete("/api/count").status_code == 405
        # A second app on the same port cannot listen: a clean exit 2.
        busy = subprocess.run([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(tmp_path / "state2"),
                               "--port", str(port), "--site", str(tmp_path)], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert busy.returncode == 2 and "cannot listen" in busy.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    assert code == 0




def test_release_in_postgresql_is_read_only(postgres_url, tmp_path) -> None:
    bundle = synthetic_bundle(tmp_path, small_frame())
    app = create_app(bundle, db_url=postgres_url, state_dir=tmp_path / "state", trust=tmp_path / "trust.json")
    release = app.state.ctx.release
    try:
        assert release.engine.dialect.name == "postgresql" and release.imported
        with TestClient(app) as client:
            assert client.post("/api/count", json={"filters": {"site": ["north", "east"]}}).json()["count"] == 25
            assert "postgresql" in client.get("/").text
        with pytest.raises(sa.exc.InternalError, match="read-only"):
            with release.engine.begin() as conn:
                conn.execute(sa.text(f"DELETE FROM {DATA_TABLE}"))
        with release.engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT COUNT(*) FROM {DATA_TABLE}")).scalar_one() == 40
    finally:
        release.engine.dispose()
    again = create_app(bundle, db_url=postgres_url, state_dir=tmp_path / "state", trust=tmp_path / "trust.json")
    assert again.state.ctx.release.imported is False  # the database already holds this bundle
    again.state.ctx.release.engine.dispose()
    again.state.ctx.workspace.close()
