"""The airlock's last step through the real front door (issue 27): a request submitted, approved by two checkers and
released through the airlock library at a site, then downloaded from a `safeshare gateway` process started with
--airlock (as provisioning and `safeshare up` start it) with the recipient's token; the download is an airlock event,
another recipient's token and a revoked token are refused, and `safeshare verify-output` passes on the download
(and fails on a changed byte)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from outputs.airlock.workflow import Airlock
from proxy.tokens import TokenStore
from safeshare.signing import ensure_outputs_key
from tests.deploy.review_helpers import submit
from tests.deploy.site_helpers import REPO, cli


@pytest.fixture
def site(tmp_path: Path):
    root = tmp_path / "site"
    (root / "db").mkdir(parents=True)
    url = f"sqlite:///{root / 'db' / 'safeshare.db'}"
    tokens = TokenStore(url)
    airlock = Airlock.open(root, url)
    yield {"root": root, "url": url, "tokens": tokens, "airlock": airlock}
    airlock.close()
    tokens.dispose()


@pytest.fixture
def gateway(site: dict, tmp_path: Path):
    """`safeshare gateway --airlock SITE/airlock` on a free port (stopped after)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "safeshare.cli", "gateway", "--listen", "127.0.0.1:0", "--sessions",
         str(site["root"] / "sessions"), "--db", site["url"], "--novnc", str(tmp_path / "no-novnc"),
         "--airlock", str(site["root"] / "airlock")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = process.stdout.readline()
        found = re.match(r"listening on (http://\S+)/", line)
        assert found, line + process.stderr.read()[-2000:] if process.poll() is not None else line
        yield found.group(1)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        process.stdout.close()
        process.stderr.close()


def get(url: str, token: str | None) -> tuple[int, bytes]:
    headers = {"Cookie": f"safeshare_token={token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_a_released_package_is_downloaded_at_the_front_door_and_verifies(site: dict, gateway: str,
                                                                        tmp_path: Path) -> None:
    airlock, tokens, root = site["airlock"], site["tokens"], site["root"]
    alice = tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    bob = tokens.issue("bob", "127.0.0.1:5901", ttl=timedelta(hours=1))
    request_id = submit(airlock)
    url = f"{gateway}/outputs/{request_id}/package.zip"
    # before release even the requester gets nothing
    assert get(url, alice.token)[0] == 403
    for output_id in ("1", "2"):
        airlock.vote(request_id, output_id, "carol", "approve", "ok")
        airlock.vote(request_id, output_id, "dave", "approve", "ok")
    assert airlock.get(request_id).state == "approved"
    airlock.release(request_id, ensure_outputs_key(root), "custodian:test")

    status, page = get(f"{gateway}/outputs", alice.token)
    assert status == 200 and f"/outputs/{request_id}/package.zip".encode() in page
    status, listed = get(f"{gateway}/outputs", bob.token)
    assert status == 200 and request_id.encode() not in listed
    status, body = get(url, bob.token)
    assert status == 403 and b"PK" not in body
    status, body = get(url, alice.token)
    assert status == 200 and body.startswith(b"PK")
    package = tmp_path / "package.zip"
    package.write_bytes(body)

    verified = cli("verify-output", str(package), "--site", str(root), "--json")
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    changed = bytearray(body)
    changed[len(changed) // 2] ^= 0x01
    (tmp_path / "changed.zip").write_bytes(bytes(changed))
    assert cli("verify-output", str(tmp_path / "changed.zip"), "--site", str(root)).returncode == 1

    tokens.revoke(recipient="alice", reason="left the project")
    status, body = get(url, alice.token)
    assert status == 403 and b'data-reason="revoked"' in body

    events = airlock.records.events(request_id=request_id)
    downloaded = [e for e in events if e.action == "downloaded"]
    assert len(downloaded) == 1 and downloaded[0].actor == "recipient:alice"
    assert downloaded[0].detail["package_sha256"] == airlock.get(request_id).package_sha256
    refused = [(e.actor, e.detail["reason"]) for e in events if e.action == "download-refused"]
    assert refused == [("recipient:alice", "state is submitted, not released"),
                       ("recipient:bob", "another recipient's request"),
                       ("token:refused", "token revoked")]
