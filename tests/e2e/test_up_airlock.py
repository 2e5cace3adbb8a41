"""The airlock through a real `safeshare up` (issue 27): the app `up` started saves an output and submits a request
through its own API, `up`'s intake freezes it into HOME/airlock, two checkers (people of the home's site) approve it
and a custodian releases it with the `safeshare airlock` commands, the recipient downloads the signed package at the
gateway's /outputs with the printed token, the download is an airlock event, `safeshare verify-output` passes, the
checkers' review pages answer, and `safeshare status` / `down` still work with the custodian service running."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.cli_inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
HAVE_STACK = all(shutil.which(t) for t in ("Xvfb", "x11vnc", "chromium"))
pytestmark = pytest.mark.skipif(not HAVE_STACK, reason="Xvfb, x11vnc and chromium come from scripts/setup.sh")


def safeshare(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """A real `python -m safeshare.cli` run; the reads and set-up steps use run_cli, the same main(argv) in process."""
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True,
                          input=stdin, timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(url: str, method: str = "GET", body: dict | None = None, cookie: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if cookie:
        headers["Cookie"] = f"safeshare_token={cookie}"
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()



def stop_up(home: Path, up: subprocess.Popen, log) -> subprocess.CompletedProcess:
    """`safeshare down` for the `up` started on HOME, then wait for it (killed after 60 s) and close its output;
    returns down's result for the caller to assert on after its own clean-up."""
    done = safeshare("down", "--home", str(home))
    try:
        up.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    up.stdout.close()
    log.close()
    return done

def test_a_request_made_in_up_is_reviewed_released_and_downloaded(tmp_path: Path) -> None:
    home = tmp_path / "home"
    listen = f"127.0.0.1:{free_port()}"
    log = open(tmp_path / "up.log", "w")
    up = subprocess.Popen([sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--listen", listen,
                           "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True,
                          start_new_session=True)
    try:
        line = up.stdout.readline()
        assert line, (tmp_path / "up.log").read_text()[-3000:]
        ready = json.loads(line)
        token = ready["url"].split("?token=", 1)[1]
        app, gateway, review = ready["app"].rstrip("/"), ready["gateway"].rstrip("/"), ready["review"]
        assert ready["pids"].keys() >= {"app", "kiosk", "gateway", "custodian"}
        # the checkers' pages answer; status reports every component, the custodian service too
        status, page = call(review.removesuffix("/review") + "/review/login")
        assert status == 200 and b"<form" in page
        report = json.loads(run_cli("status", "--home", str(home), "--json").stdout)
        assert report["healthy"] and report["components"]["custodian"]["answers"] is True

        # the researcher (the app's API on loopback, as the kiosk's browser calls it)
        status, body = call(f"{app}/api/outputs", "POST", {"name": "sex", "kind": "frequencies",
                                                           "query": {"attribute": "sex"}})
        assert status == 200, body[:500]
        output = json.loads(body)
        status, body = call(f"{app}/api/requests", "POST", {
            "context": "Table 1 of the demo study", "controls": "counts only, every cell at least 10",
            "outputs": [{"output_id": output["id"], "justification": "published in the census tables"}]})
        assert status == 200, body[:500]
        number = json.loads(body)["number"]
        status, body = call(f"{app}/api/requests/{number}/submit", "POST")
        assert status == 200, body[:500]

        deadline = time.monotonic() + 30
        while True:  # up's intake takes it within a second or so
            listed = json.loads(run_cli("airlock", "list", "--site", str(home), "--json").stdout or "[]")
            if listed:
                break
            assert time.monotonic() < deadline, "the intake took nothing in"
            time.sleep(0.5)
        (request,) = listed
        request_id = request["request_id"]
        assert request["recipient"] == ready["recipient"] and request["state"] == "submitted"

        url = f"{gateway}/outputs/{request_id}/package.zip"
        assert call(url, cookie=token)[0] == 403  # not released yet, not even to the requester
        password = tmp_path / "password"
        password.write_text("correct horse battery staple\n")
        for checker in ("carol", "dave"):
            done = run_cli("custodian", "person", "add", checker, "--role", "checker", "--password-file",
                           str(password), "--site", str(home))
            assert done.returncode == 0, done.stderr
            vote = safeshare if checker == "dave" else run_cli  # the deciding vote in a real process
            done = vote("airlock", "vote", request_id, str(output["id"]), "approve", "--checker", checker,
                        "--password-file", str(password), "--comment", "fine", "--site", str(home), "--json")
            assert done.returncode == 0, done.stderr
        done = safeshare("airlock", "release", request_id, "--site", str(home), "--json")
        assert done.returncode == 0, done.stdout + done.stderr

        status, page = call(f"{gateway}/outputs", cookie=token)
        assert status == 200 and request_id.encode() in page
        status, package = call(url, cookie=token)
        assert status == 200 and package.startswith(b"PK")
        (tmp_path / "package.zip").write_bytes(package)
        verified = safeshare("verify-output", str(tmp_path / "package.zip"), "--site", str(home), "--json")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        history = json.loads(run_cli("airlock", "history", ready["recipient"], "--site", str(home),
                                     "--json").stdout)
        actions = [event["action"] for entry in history for event in entry["events"]]
        assert actions.count("downloaded") == 1 and "released" in actions and "submitted" in actions
    finally:
        done = stop_up(home, up, log)
    assert done.returncode == 0, done.stderr
    assert up.returncode == 0, (tmp_path / "up.log").read_text()[-3000:]
    assert not (home / "up.json").exists()
    with pytest.raises(OSError):  # the gateway is gone with `down`
        call(url, cookie=token)
