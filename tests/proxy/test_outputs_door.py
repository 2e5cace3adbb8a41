"""The front door's outputs download (proxy/outputs_door.py) on a real gateway listening on 127.0.0.1: the token's
recipient sees and downloads only their released packages, within the download period, with the bytes the airlock
recorded; everything else is a 403 page; every download and refusal of a named request is an airlock event."""
from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import pytest

from outputs.airlock.records import AirlockRecords, RequestRow
from outputs.airlock.store import AirlockStore, new_request_id
from proxy.gateway import COOKIE, Gateway, openapi_document
from proxy.tokens import TokenStore

NOW = datetime.now(timezone.utc)


class Site:
    """A site folder with the token store and the airlock tables in one SQLite database."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "db").mkdir(parents=True)
        self.url = f"sqlite:///{root / 'db' / 'safeshare.db'}"
        self.tokens = TokenStore(self.url)
        self.records = AirlockRecords(self.url)
        self.store = AirlockStore(root)

    def request(self, recipient: str, rid: str, state: str = "released", package: bytes | None = b"PK-zip",
                download_until: datetime | None = NOW + timedelta(days=7), number: int = 1) -> str:
        request_id = new_request_id(rid, number)
        path = self.store.package_file(request_id)
        path.parent.mkdir(parents=True)
        if package is not None:
            path.write_bytes(package)
        with self.records.session() as session:
            session.add(RequestRow(request_id=request_id, recipient=recipient, rid=rid, release="adult/r1",
                                   app_number=number, state=state, round=1, request_sha256="0" * 64,
                                   created_at=NOW, updated_at=NOW, released_at=NOW if state == "released" else None,
                                   download_until=download_until,
                                   package_sha256=hashlib.sha256(package).hexdigest() if package else None))
            session.commit()
        return request_id

    def close(self) -> None:
        self.tokens.dispose()
        self.records.dispose()


@pytest.fixture
def site(tmp_path: Path):
    made = Site(tmp_path / "site")
    yield made
    made.close()


@asynccontextmanager
async def gateway(site: Site) -> AsyncIterator[str]:
    served = Gateway(TokenStore(site.url), site.root / "sessions", novnc_dir=None, airlock=site.root / "airlock")
    port = await served.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await served.close()
        served.store.dispose()


async def fetch(url: str, token: str | None = None, cookie: bool = True) -> tuple[int, bytes, dict]:
    headers = {"Cookie": f"{COOKIE}={token}"} if token and cookie else {}
    if token and not cookie:
        url += f"?token={token}"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers=headers, allow_redirects=False) as response:
            return response.status, await response.read(), dict(response.headers)


def events(site: Site, action: str | None = None) -> list:
    return site.records.events(action=action)


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_recipient_lists_and_downloads_their_released_package(site: Site) -> None:
    alice = site.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    mine = site.request("alice", "aaaa000001", package=b"PK\x03\x04 alice's package")
    pending = site.request("alice", "aaaa000001", state="submitted", package=None, number=2)
    ended = site.request("alice", "aaaa000001", download_until=NOW - timedelta(seconds=1), number=3)
    bobs = site.request("bob", "bbbb000002")

    async def scenario() -> None:
        async with gateway(site) as base:
            # ?token= becomes the cookie the index page uses, and leaves the address bar
            status, _, headers = await fetch(f"{base}/outputs", alice.token, cookie=False)
            assert status == 303 and headers["Location"] == "/outputs"
            assert f"{COOKIE}=" in headers["Set-Cookie"] and "HttpOnly" in headers["Set-Cookie"]
            status, body, headers = await fetch(f"{base}/outputs", alice.token)
            page = body.decode()
            assert status == 200 and "default-src 'none'" in headers["Content-Security-Policy"]
            assert f'href="/outputs/{mine}/package.zip"' in page
            for hidden in (pending, ended, bobs):  # not released, past its download period, another's
                assert hidden not in page
            status, body, headers = await fetch(f"{base}/outputs/{mine}/package.zip", alice.token)
            assert status == 200 and body == b"PK\x03\x04 alice's package"
            assert headers["Content-Type"] == "application/zip" and headers["Cache-Control"] == "no-store"
            assert headers["Content-Disposition"] == f'attachment; filename="{mine}.zip"'

    run(scenario())
    (downloaded,) = events(site, "downloaded")
    assert (downloaded.actor, downloaded.recipient, downloaded.request_id, downloaded.outcome) == (
        "recipient:alice", "alice", mine, "ok")
    assert downloaded.detail["token_id"] == alice.token_id
    assert downloaded.detail["package_sha256"] == hashlib.sha256(b"PK\x03\x04 alice's package").hexdigest()


def test_refusals_are_403_pages_and_airlock_events(site: Site) -> None:
    alice = site.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    bob = site.tokens.issue("bob", "127.0.0.1:5901", ttl=timedelta(hours=1))
    mine = site.request("alice", "aaaa000001")
    pending = site.request("alice", "aaaa000001", state="approved", package=None, number=2)
    ended = site.request("alice", "aaaa000001", download_until=NOW - timedelta(seconds=1), number=3)
    swapped = site.request("alice", "aaaa000001", number=4)
    site.store.package_file(swapped).write_bytes(b"PK another archive")  # a writer of SITE/airlock replaced it

    async def scenario() -> dict[str, tuple[int, str]]:
        answers = {}
        async with gateway(site) as base:
            for name, token, request_id in (("bob", bob.token, mine), ("pending", alice.token, pending),
                                            ("ended", alice.token, ended), ("swapped", alice.token, swapped),
                                            ("no token", None, mine), ("unknown id", alice.token,
                                                                       new_request_id("aaaa000001", 9)),
                                            ("bad id", alice.token, "..%2F..%2Fdb")):
                status, body, _ = await fetch(f"{base}/outputs/{request_id}/package.zip", token)
                answers[name] = (status, body.decode(errors="replace"))
            site.tokens.revoke(token_id=alice.token_id, reason="left the project")
            status, body, headers = await fetch(f"{base}/outputs/{mine}/package.zip", alice.token)
            answers["revoked"] = (status, body.decode())
            assert f"{COOKIE}=" in headers.get("Set-Cookie", "")  # a refused cookie is cleared, as the index does
            status, body, _ = await fetch(f"{base}/outputs", alice.token)
            answers["revoked list"] = (status, body.decode())
        return answers

    answers = run(scenario())
    assert all(status == 403 for status, _ in answers.values()), answers
    assert "PK" not in "".join(body for _, body in answers.values())
    assert 'data-reason="not-yours"' in answers["bob"][1]
    assert answers["unknown id"][1] == answers["bob"][1]  # another's request and no request look the same
    assert 'data-reason="not-released"' in answers["pending"][1]
    assert 'data-reason="download-ended"' in answers["ended"][1]
    assert 'data-reason="checksum-mismatch"' in answers["swapped"][1]
    assert 'data-reason="missing"' in answers["no token"][1]
    assert 'data-reason="revoked"' in answers["revoked"][1] and 'data-reason="revoked"' in answers["revoked list"][1]
    refused = events(site, "download-refused")
    by_request = {}
    for event in refused:
        by_request.setdefault(event.request_id, []).append(event)
    assert not events(site, "downloaded")
    (bobs,) = [e for e in by_request[mine] if e.actor == "recipient:bob"]
    assert bobs.recipient == "alice" and bobs.detail["requester"] == "bob" and bobs.detail["token_id"] == bob.token_id
    assert "another recipient" in bobs.detail["reason"]
    assert "not released" in by_request[pending][0].detail["reason"]
    assert "download period ended" in by_request[ended][0].detail["reason"]
    mismatch = by_request[swapped][0].detail
    assert mismatch["reason"] == "checksum mismatch"
    assert mismatch["package_sha256"] == hashlib.sha256(b"PK another archive").hexdigest()
    assert mismatch["recorded_sha256"] == hashlib.sha256(b"PK-zip").hexdigest()
    assert {e.detail["reason"] for e in by_request[mine] if e.actor == "token:refused"} == {"token missing",
                                                                                         "token revoked"}
    # ids that name no request write nothing (no row to tie them to; no flood of rows)
    assert set(by_request) == {mine, pending, ended, swapped} and len(refused) == 6


def test_nothing_is_served_when_the_event_cannot_be_written(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    alice = site.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))
    mine = site.request("alice", "aaaa000001")

    def broken(*args, **kwargs) -> None:
        raise OSError("database is locked")

    monkeypatch.setattr(AirlockRecords, "event", broken)

    async def scenario() -> tuple[int, bytes]:
        async with gateway(site) as base:
            status, body, _ = await fetch(f"{base}/outputs/{mine}/package.zip", alice.token)
            return status, body

    status, body = run(scenario())
    assert status == 503 and b"PK" not in body


def test_without_an_airlock_there_is_no_door_and_the_document_names_it(site: Site) -> None:
    alice = site.tokens.issue("alice", "127.0.0.1:5900", ttl=timedelta(hours=1))

    async def scenario() -> int:
        served = Gateway(TokenStore(site.url), site.root / "sessions", novnc_dir=None)
        port = await served.start("127.0.0.1", 0)
        try:
            status, _, _ = await fetch(f"http://127.0.0.1:{port}/outputs", alice.token)
            return status
        finally:
            await served.close()
            served.store.dispose()

    assert run(scenario()) == 404
    paths = openapi_document()["paths"]
    download = paths["/outputs/{request_id}/package.zip"]["get"]
    assert {"200", "303", "403", "503"} == set(download["responses"]) and "/outputs" in paths
    assert "application/zip" in download["responses"]["200"]["content"]
    with pytest.raises(ValueError):
        Gateway(TokenStore(site.url), site.root / "sessions", novnc_dir=None, airlock=site.root / "elsewhere").app()
