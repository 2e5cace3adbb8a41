"""`safeshare up`'s airlock (issue 27) without the kiosk: the command lines `up` runs (the custodian service on HOME
for the review pages, the gateway with HOME/airlock, the app as the recipient), the custodian service started as `up`
starts it answering /healthz and serving the checkers' sign-in page, and `up`'s intake over HOME/app freezing what the
real app submitted into HOME/airlock under a recipient id that stays the same across runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from deploy.airlock.intake import local_intake
from deploy.local import UpConfig, component_argv, free_port, status
from deploy.site.folder import Site
from enclave.app import create_app
from tests.deploy.site_helpers import REPO
from tests.enclave.test_app_outputs import outputs_frame
from tests.enclave.test_app_support import TestClient, synthetic_bundle


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_up_runs_the_custodian_service_on_its_home_and_the_gateway_with_its_airlock(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = UpConfig(home=home, review_listen="127.0.0.1:7123")
    argv = component_argv(config, home / "releases" / "adult" / "00aa", 8050, recipient="alice")
    assert argv["custodian"][3:] == ["custodian", "serve", "--site", str(home), "--listen", "127.0.0.1:7123"]
    assert option(argv["gateway"], "--airlock") == str(home / "airlock")
    assert option(argv["app"], "--recipient") == "alice" and option(argv["app"], "--state") == str(home / "app")
    assert option(argv["app"], "--site") is None  # no HOME/outputs.yaml: ACRO's defaults
    (home).mkdir()
    (home / "outputs.yaml").write_text("safe_threshold: 11\n")
    argv = component_argv(config, home / "releases" / "adult" / "00aa", 8050, recipient="alice")
    assert option(argv["app"], "--site") == str(home)  # HOME is a site: its floor is the app's
    with_db = component_argv(UpConfig(home=home, db_url="sqlite:////elsewhere.db"), home, 1)["custodian"]
    assert option(with_db, "--db") == "sqlite:////elsewhere.db"


def test_the_review_pages_answer_as_up_starts_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    listen = f"127.0.0.1:{free_port()}"
    config = UpConfig(home=home, review_listen=listen)
    argv = component_argv(config, home / "releases" / "x" / "y", 1)["custodian"]
    log = open(tmp_path / "custodian.log", "wb")
    process = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://{listen}/healthz", timeout=2) as response:
                    assert json.load(response)["status"] == "ok"
                    break
            except OSError:
                assert process.poll() is None, (tmp_path / "custodian.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the custodian service did not answer"
                time.sleep(0.3)
        with urllib.request.urlopen(f"http://{listen}/review/login", timeout=10) as response:
            page = response.read().decode()
            assert response.status == 200 and "<form" in page
        # `safeshare status` checks it like the gateway and the app
        nothing = f"http://127.0.0.1:{free_port()}/"  # gateway and app are not started here
        (home / "up.json").write_text(json.dumps({"pid": os.getpid(), "review": f"http://{listen}/review",
                                                  "gateway": nothing, "app": nothing,
                                                  "components": {"custodian": {"pid": process.pid}}}))
        report = status(home)
        assert report["components"]["custodian"]["answers"] is True and report["review"].endswith("/review")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    # stopped cleanly (uvicorn re-raises the SIGTERM once shut down): its intake thread ended with it
    assert "Application shutdown complete" in (tmp_path / "custodian.log").read_text()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synthetic_bundle(tmp_path_factory.mktemp("up-airlock"), outputs_frame(),
                            quasi_identifiers=["sex", "race", "age"])


def test_the_intake_over_home_app_freezes_what_the_app_submitted(bundle: Path, tmp_path: Path) -> None:
    from outputs.airlock.workflow import Airlock

    home = tmp_path / "home"
    (home / "app").mkdir(parents=True)
    db_url = f"sqlite:///{home / 'db.sqlite'}"
    app = create_app(bundle, state_dir=home / "app", trust=bundle.parents[2] / "trust.json", recipient="alice")
    with TestClient(app) as client:
        output = client.post("/api/outputs", json={"name": "sex", "kind": "frequencies",
                                                   "query": {"attribute": "sex", "exclude_suppressed": True}})
        assert output.status_code == 200, output.text
        made = client.post("/api/requests", json={"context": "Table 1", "controls": "counts of at least 10",
                                                  "outputs": [{"output_id": output.json()["id"]}]})
        number = made.json()["number"]
        submitted = client.post(f"/api/requests/{number}/submit")
        assert submitted.status_code == 200, submitted.text
    release = f"{bundle.parent.name}/{bundle.name}"
    airlock = Airlock.open(home, db_url)  # its tables first: two engines creating them at once race in SQLite
    intake = local_intake(home, db_url, "alice", bundle, interval=0.1)
    try:
        deadline = time.monotonic() + 30
        while not airlock.records.requests(recipient="alice"):
            assert time.monotonic() < deadline, "the intake took nothing in"
            time.sleep(0.1)
    finally:
        intake.stop()
    try:
        (request,) = airlock.records.requests(recipient="alice")
        rid = Site(home).recipient_id("alice")
        assert request.rid == rid and request.state == "submitted" and request.release == release
        assert (home / "airlock" / rid / request.request_id / "request.json").is_file()
        assert not (home / "app" / "airlock" / "outbox" / f"{number}.json").exists()
    finally:
        airlock.close()
    # the recipient id is the same on the next run (HOME/site.json keeps the site id)
    assert Site(home).recipient_id("alice") == rid
    local_intake(home, db_url, "alice", bundle, interval=0.1).stop()
    assert json.loads((home / "site.json").read_text())["site_id"] == Site(home).site_id


def test_a_bad_review_address_is_bad_input(tmp_path: Path) -> None:
    """Through the same main(argv) in process (refused before `up` installs its signal handlers); a real `up` process's
    exit code 2: tests/deploy/test_local_up.py::test_bad_input_exits_2."""
    from tests.cli_inprocess import run_cli

    done = run_cli("up", "--home", str(tmp_path / "h"), "--review-listen", "nope")
    assert done.returncode == 2 and "expected HOST:PORT, got 'nope'" in done.stderr
    assert not (tmp_path / "h" / "up.json").exists()
