"""Whose address the custodian service records for a failed authentication (issue 24, item 10): the peer's, unless
the site names its reverse proxies (`custodian serve --trusted-proxy`). uvicorn itself believes X-Forwarded-For from
loopback by default, so with the service on 127.0.0.1 any client could choose the source its failures (and their
per-source rate limit) are filed under. Run as the command runs it: `safeshare custodian serve` on 127.0.0.1.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deploy.records import Records
from deploy.site.folder import Site
from tests.cli_inprocess import run_cli
from tests.proxy.rfbtools import free_port

REPO = Path(__file__).resolve().parents[2]
SPOOFED = "203.0.113.9"


@pytest.fixture
def site(tmp_path: Path) -> Site:
    site = Site(tmp_path / "site")
    site.prepare()
    return site


@contextmanager
def serving(site: Site, *args: str, env: dict | None = None) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "safeshare.cli", "custodian", "serve", "--site", str(site.root),
                             "--listen", f"127.0.0.1:{port}", "--expiry-interval", "3600", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()  # still starting at the deadline: reading its stderr would wait for it forever
                    raise AssertionError(f"custodian serve did not start: {proc.communicate()[1].decode()}")
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def fail_auth(base: str, forwarded_for: str) -> int:
    request = urllib.request.Request(f"{base}/recipients", headers={"Authorization": "Bearer ssk_nobody",
                                                                     "X-Forwarded-For": forwarded_for})
    try:
        urllib.request.urlopen(request, timeout=5)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def sources(site: Site) -> list[str]:
    records = Records(site.db_url)
    try:
        return [event.detail["source"] for event in records.events(action="auth-failed")]
    finally:
        records.dispose()


def test_a_client_cannot_choose_the_source_of_its_failed_authentications(site: Site) -> None:
    """By default (even with uvicorn's $FORWARDED_ALLOW_IPS saying otherwise) the peer address is recorded; a
    spoofed X-Forwarded-For does not move a client to another rate-limit bucket either."""
    with serving(site, env={"FORWARDED_ALLOW_IPS": "*"}) as base:
        assert fail_auth(base, SPOOFED) == 401
        assert fail_auth(base, "198.51.100.1, 198.51.100.2") == 401
    assert sources(site) == ["127.0.0.1", "127.0.0.1"]


def test_a_configured_proxys_forwarded_for_is_believed(site: Site) -> None:
    with serving(site, "--trusted-proxy", "127.0.0.1") as base:
        assert fail_auth(base, SPOOFED) == 401
    assert sources(site) == [SPOOFED]
    with serving(site, "--trusted-proxy", "10.9.8.0/24") as base:  # a proxy elsewhere: this peer is not it
        assert fail_auth(base, "198.51.100.7") == 401
    assert sources(site) == [SPOOFED, "127.0.0.1"]


@pytest.mark.parametrize("value", ["*", "proxy.example", "10.0.0.300"])
def test_a_trusted_proxy_must_be_an_address(site: Site, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The value "*" runs a real `python -m safeshare.cli` (the process's exit code); the others run the same
    main(argv) in process (tests/cli_inprocess.py), where starting to serve fails the test instead of serving
    forever."""
    argv = ["custodian", "serve", "--site", str(site.root), "--listen", "127.0.0.1:0", "--trusted-proxy", value]
    if value == "*":
        result = subprocess.run([sys.executable, "-m", "safeshare.cli", *argv], cwd=REPO, capture_output=True,
                                text=True, timeout=60)
    else:
        from deploy.custodian import api

        def serve(*args, **kwargs) -> int:
            raise AssertionError(f"custodian serve would serve with --trusted-proxy {value!r}")

        monkeypatch.setattr(api, "serve", serve)
        result = run_cli(*argv)
    assert result.returncode == 2 and "--trusted-proxy" in result.stderr and "Traceback" not in result.stderr
