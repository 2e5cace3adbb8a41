"""websockify as the front door: safeshare's token plugin against a real site folder and database, the per-recipient
proxy (`safeshare proxy-for`) on a Unix socket with the gateway's records (signed seal, anchors, sessions table,
`safeshare audit verify`), revocation of live sessions, and the real `websockify` package run as a process with the
plugin, carrying RFB over its WebSocket. noVNC in headless Chromium through websockify: tests/e2e/test_websockify.py.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import pytest

from deploy.site.folder import Site
from proxy.listen_address import ListenAddress, default_listen, listing_path, publish, read_listing
from proxy.recipient_proxy import RecipientProxy, usable_grants
from proxy.tokens import SessionBook, TokenStore
from safeshare.cli import main as safeshare_main
from safeshare.websockify import TokenPlugin
from tests.cdp import wait_for
from tests.proxy.rfbtools import FakeVncServer, RfbClient, free_port, wait_port
from tests.proxy.test_gateway import raw_update, ws_rfb_connect

REPO = Path(__file__).resolve().parents[2]
HAVE_WEBSOCKIFY = subprocess.run([sys.executable, "-c", "import websockify"], capture_output=True).returncode == 0
needs_websockify = pytest.mark.skipif(not HAVE_WEBSOCKIFY, reason="websockify is in the test extra (./dev test)")


@pytest.fixture
def site(tmp_path: Path) -> Site:
    """A prepared site folder in a short path (a Unix socket path is limited to 107 bytes)."""
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"ss-ws-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    site = Site(root)
    site.prepare()
    yield site
    shutil.rmtree(root, ignore_errors=True)


def events(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


# --- the token plugin against the site's database ------------------------------------------------------------------

def test_plugin_resolves_only_usable_tokens_to_the_recipients_published_proxy(site: Site) -> None:
    store = TokenStore(site.db_url)
    ok = store.issue("ada", "127.0.0.1:5999")
    other = store.issue("bo", "127.0.0.1:5998")
    revoked = store.issue("ada", "127.0.0.1:5999")
    store.revoke(token_id=revoked.token_id)
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    expiring = store.issue("ada", "127.0.0.1:5999", expires_at=later)
    plugin = TokenPlugin(str(site.root))

    assert plugin.lookup(ok.token) is None  # no proxy of ada is listening yet
    socket_path = site.root / "proxies" / "ada.sock"
    publish(listing_path(site, "ada"), "ada", ListenAddress.parse(f"unix:{socket_path}"))
    assert plugin.lookup(ok.token) == ["unix_socket", str(socket_path)]
    assert store.list_tokens("ada")[0].last_used_at is not None  # marked used: the proxy runs under it
    assert default_listen(site, "ada") == f"unix:{site.root}/proxies/{site.recipient_id('ada')}.sock"

    for refused in ("", "x" * 300, "not-a-token-at-all-0123456789", revoked.token, other.token):
        assert plugin.lookup(refused) is None, refused  # bo has no proxy; ada's listing is not bo's
    # a listing copied under another recipient's name is not followed
    listing_path(site, "bo").write_text(listing_path(site, "ada").read_text())
    assert plugin.lookup(other.token) is None
    publish(listing_path(site, "bo"), "bo", ListenAddress.parse("127.0.0.1:7001"))
    assert plugin.lookup(other.token) == ["127.0.0.1", "7001"]

    time.sleep(max(0.0, (later - datetime.now(timezone.utc)).total_seconds()) + 0.05)
    assert plugin.lookup(expiring.token) is None  # expired
    listing_path(site, "ada").write_text("{not json")
    assert plugin.lookup(ok.token) is None


def test_plugin_fails_closed_on_any_error(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    store = TokenStore(site.db_url)
    issued = store.issue("ada", "127.0.0.1:5999")
    publish(listing_path(site, "ada"), "ada", ListenAddress.parse("127.0.0.1:7000"))
    plugin = TokenPlugin(str(site.root))
    assert plugin.lookup(issued.token) == ["127.0.0.1", "7000"]
    store.dispose()
    for file in site.db_dir.iterdir():  # the database becomes garbage
        file.write_bytes(b"not a database" * 100)
    with caplog.at_level("INFO", "safeshare.websockify"):
        assert plugin.lookup(issued.token) is None
    assert "no target" in caplog.text and issued.token not in caplog.text
    with pytest.raises(ValueError):
        TokenPlugin(str(site.root / "missing"))


def test_listen_addresses_are_unix_or_loopback() -> None:
    assert ListenAddress.parse("unix:/run/x.sock").websockify_target() == ["unix_socket", "/run/x.sock"]
    assert ListenAddress.parse("127.0.0.1:0").port == 0
    assert str(ListenAddress.parse("[::1]:6000")) == "[::1]:6000"
    for bad in ("0.0.0.0:6000", "10.1.2.3:6000", "example.org:6000", "unix:", "6000", "127.0.0.1:99999"):
        with pytest.raises(ValueError):
            ListenAddress.parse(bad)


# --- the per-recipient proxy ---------------------------------------------------------------------------------------

@asynccontextmanager
async def recipient_proxy(site: Site, recipient: str, listen: str | None = None, **kwargs) \
        -> AsyncIterator[RecipientProxy]:
    from proxy.eventlog import KeySource

    ended: list[tuple[Path, str]] = []
    proxy = RecipientProxy(TokenStore(site.db_url), recipient, site.sessions, name=f"proxy-for-{recipient}",
                           signing_key=KeySource(site.gateway_signing_key), listing=listing_path(site, recipient),
                           on_session_end=lambda c, reason: ended.append((c.session.dir, reason)), **kwargs)
    proxy.ended = ended  # type: ignore[attr-defined]
    await proxy.start(listen or default_listen(site, recipient))
    try:
        yield proxy
    finally:
        await proxy.close()


def test_proxy_records_seals_and_ends_sessions_on_revocation(site: Site) -> None:
    """On a loopback port: the recipient's token's limits and every control apply, the session is recorded, signed,
    anchored and accepted by `audit verify`; revoking the recipient ends it within a second, and then the proxy
    refuses connections without writing anything."""
    fake = FakeVncServer(width=32, height=16, script=raw_update(0, 0, 32, 16, b"\x10\x20\x30\x00"))
    store = TokenStore(site.db_url)
    seen: dict[str, object] = {}

    async def run() -> None:
        port = await fake.start()
        issued = store.issue("ada", f"127.0.0.1:{port}", target_name="ada-enclave",
                             limits='{"keys": {"rate": 2, "burst": 3}}')
        async with recipient_proxy(site, "ada", "127.0.0.1:0") as proxy:
            seen["listing"] = read_listing(listing_path(site, "ada"), "ada")
            client = RfbClient()
            await client.connect(proxy.address.port)
            await client.request()
            await client.read_message()
            seen["pixel"] = client.pixel(3, 3)
            for _ in range(10):  # a burst of ten presses against a bucket of three
                await client.key(0x61, True)
                await client.key(0x61, False)
            await client.cut_text(b"secret-from-the-researcher")
            await wait_for(lambda: proxy.connections and next(iter(proxy.connections)).session.counters[
                "cut_text_dropped"] >= 1, 5)
            (connection,) = proxy.connections
            seen["counters"] = dict(connection.session.counters)
            revoked_at = time.monotonic()
            await asyncio.to_thread(store.revoke, recipient="ada")
            await wait_for(lambda: proxy.ended, 3)
            seen["revoke_seconds"] = time.monotonic() - revoked_at
            seen["closed"] = await asyncio.wait_for(client.reader.read(), 3) == b""
            # no usable token: a connection that reaches the socket gets nothing, and nothing is written
            folders = set(site.sessions.iterdir())
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.address.port)
            seen["refused"] = await asyncio.wait_for(reader.read(), 3)
            writer.close()
            seen["new_folders"] = set(site.sessions.iterdir()) - folders
            seen["token"] = issued.token_id
        seen["listing_after"] = listing_path(site, "ada").exists()
        await fake.close()

    asyncio.run(run())
    assert seen["listing"] == ListenAddress(host="127.0.0.1", port=seen["listing"].port) and seen["listing"].port
    assert seen["pixel"] == (0x30, 0x20, 0x10)
    counters = seen["counters"]
    # three presses of the burst and every release pass; the other seven presses are dropped
    assert counters["keys_forwarded"] == 13 and counters["keys_dropped"] == 7 and counters["cut_text_dropped"] == 1
    assert seen["revoke_seconds"] < 1.0 and seen["closed"], seen
    assert seen["refused"] == b"" and seen["new_folders"] == set()
    assert not seen["listing_after"]
    (folder,) = site.sessions.iterdir()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["via"] == "websockify" and meta["recipient"] == "ada" and meta["token_id"] == seen["token"]
    assert meta["end_reason"] == "token revoked" and meta["limits"]["keys"]["rate"] == 2
    assert b"secret-from-the-researcher" not in (folder / "events.jsonl").read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["events.jsonl", "meta.json", "screen.rfbrec"]
    book = {info.session_id: info for info in SessionBook(store).list()}
    assert book[folder.name].gateway == "proxy-for-ada" and not book[folder.name].live
    # the seal is signed by the site's gateway key and anchored: `audit verify` with the database accepts it
    code = safeshare_main(["audit", "verify", str(site.sessions), "--db", site.db_url, "--site", str(site.root)])
    assert code == 0


def test_usable_grants_most_recently_used_first(site: Site) -> None:
    store = TokenStore(site.db_url)
    first = store.issue("ada", "127.0.0.1:5999")
    second = store.issue("ada", "127.0.0.1:5998")
    store.issue("bo", "127.0.0.1:5997")
    assert [g.token_id for g in usable_grants(store, "ada")] == [second.token_id, first.token_id]
    store.mark_used(first.token_id)
    grants = usable_grants(store, "ada")
    assert [g.token_id for g in grants] == [first.token_id, second.token_id]
    assert grants[0].upstream == "127.0.0.1:5999" and grants[0].recipient == "ada"
    store.revoke(token_id=first.token_id)
    assert [g.token_id for g in usable_grants(store, "ada")] == [second.token_id]


# --- the real websockify with the plugin --------------------------------------------------------------------------

@asynccontextmanager
async def websockify(site: Site, web: Path | None = None) -> AsyncIterator[str]:
    """`python -m websockify` with safeshare's token plugin on a free loopback port; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "websockify", "--token-plugin", "safeshare.websockify.TokenPlugin",
               "--token-source", str(site.root), *(["--web", str(web)] if web else []), f"127.0.0.1:{port}"]
    log = open(site.root / "websockify.log", "wb")
    proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        await asyncio.to_thread(wait_port, port, 20, proc)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


@needs_websockify
def test_real_websockify_with_the_plugin(site: Site) -> None:
    """A valid token reaches the recipient's proxy through websockify (RFB over its WebSocket); unknown, revoked and
    other recipients' tokens get no WebSocket; revoking ends the live session within a second."""
    fake = FakeVncServer(width=32, height=16, script=raw_update(0, 0, 32, 16, b"\x01\x02\x03\x00"))
    store = TokenStore(site.db_url)
    seen: dict[str, object] = {}

    async def refused(http: aiohttp.ClientSession, url: str) -> bool:
        try:
            ws = await http.ws_connect(url, protocols=("binary",))
        except (aiohttp.WSServerHandshakeError, aiohttp.ClientError):
            return True
        await ws.close()
        return False

    async def run() -> None:
        port = await fake.start()
        issued = store.issue("ada", f"127.0.0.1:{port}")
        other = store.issue("bo", f"127.0.0.1:{port}")  # bo has no proxy running
        async with recipient_proxy(site, "ada") as proxy, websockify(site) as address, \
                aiohttp.ClientSession() as http:
            seen["mode"] = proxy.address.unix_path.stat().st_mode & 0o777
            client, stream = await ws_rfb_connect(http, f"ws://{address}/websockify?token={issued.token}")
            await client.request()
            await client.read_message()
            seen["pixel"] = client.pixel(1, 1)
            seen["live"] = len(proxy.connections)
            seen["unknown"] = await refused(http, f"ws://{address}/websockify?token=not-a-token-0123456789abc")
            seen["missing"] = await refused(http, f"ws://{address}/websockify")
            seen["other"] = await refused(http, f"ws://{address}/websockify?token={other.token}")
            revoked_at = time.monotonic()
            await asyncio.to_thread(store.revoke, token_id=issued.token_id)
            await wait_for(lambda: stream.close_code is not None, 3)
            seen["revoke_seconds"] = time.monotonic() - revoked_at
            seen["after"] = await refused(http, f"ws://{address}/websockify?token={issued.token}")
            await wait_for(lambda: proxy.ended, 3)
        await fake.close()

    asyncio.run(run())
    assert seen["pixel"] == (0x03, 0x02, 0x01) and seen["live"] == 1 and seen["mode"] == 0o600
    assert seen["unknown"] and seen["missing"] and seen["other"] and seen["after"], seen
    assert seen["revoke_seconds"] < 1.0, seen
    (folder,) = site.sessions.iterdir()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["end_reason"] == "token revoked" and meta["peer"].startswith("unix pid=")  # websockify's process
    assert "connecting to unix socket" in (site.root / "websockify.log").read_text()


def test_proxy_for_command(site: Site) -> None:
    """`safeshare proxy-for` listens on the site's default socket, publishes it, signs with the site's key, and
    withdraws the listing on SIGTERM; a non-loopback --listen is bad input."""
    assert safeshare_main(["proxy-for", "ada", "--site", str(site.root), "--listen", "0.0.0.0:7000"]) == 2

    async def run() -> tuple[str, bool, int]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "safeshare.cli", "proxy-for", "ada", "--site", str(site.root), cwd=REPO,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async with asyncio.timeout(20):
                line = (await proc.stdout.readline()).decode()
            listed = listing_path(site, "ada").is_file()
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return line, listed, code

    line, listed, code = asyncio.run(run())
    assert line.strip() == f"listening on {default_listen(site, 'ada')} for ada" and listed and code == 0
    assert not listing_path(site, "ada").exists()
    assert not Path(default_listen(site, "ada")[5:]).exists()


def test_a_stale_socket_is_replaced_and_a_live_one_is_not(site: Site) -> None:
    """A socket left behind by a killed proxy is replaced; a live one is not taken over."""
    async def run() -> tuple[bool, str]:
        path = Path(default_listen(site, "ada")[5:])
        path.parent.mkdir(parents=True, exist_ok=True)
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(path))
        stale.close()  # bound, never listened: nobody answers
        async with recipient_proxy(site, "ada") as proxy:
            replaced = proxy.address.unix_path == path
            second = RecipientProxy(TokenStore(site.db_url), "ada", site.sessions, name="second")
            try:
                await second.start(f"unix:{path}")
            except OSError as exc:
                return replaced, str(exc)
            finally:
                await second.close()
        return replaced, ""

    replaced, error = asyncio.run(run())
    assert replaced and "another process listens" in error


def test_a_new_connection_replaces_the_recipients_session(site: Site) -> None:
    """As the gateway does per token: the older session ends (and releases its keys) before the new one starts."""
    fake = FakeVncServer(width=16, height=16)
    store = TokenStore(site.db_url)

    async def run() -> list[tuple[Path, str]]:
        port = await fake.start()
        store.issue("ada", f"127.0.0.1:{port}")
        async with recipient_proxy(site, "ada", "127.0.0.1:0") as proxy:
            first = RfbClient()
            await first.connect(proxy.address.port)
            await first.key(0x61, True)  # held when it is replaced
            await wait_for(lambda: proxy.connections and next(iter(proxy.connections)).session.counters[
                "keys_forwarded"] == 1, 5)
            second = RfbClient()
            await second.connect(proxy.address.port)
            await wait_for(lambda: len(proxy.ended) == 1 and len(proxy.connections) == 1, 5)
            await second.close()
            await wait_for(lambda: len(proxy.ended) == 2, 5)
            await first.close()
            ended = list(proxy.ended)
        await fake.close()
        return ended

    (older, reason), (newer, _) = asyncio.run(run())
    assert reason == "replaced by a new connection of the same recipient"
    first_events = [e["event"] for e in events(older)]
    assert first_events.count("input_reset") == 2  # at its start and at its end, when the held key was released
    assert events(newer)[0]["event"] == "connect"


def test_a_killed_proxy_for_is_recovered_at_its_next_start(site: Site) -> None:
    """`proxy-for` killed mid-session: its next start closes the row and seals the log as recovered, signed and
    anchored, as the gateway's next start does; `audit verify --db --allow-partial` accepts it (proven up to its
    last signed checkpoint)."""
    fake = FakeVncServer(width=16, height=16)
    store = TokenStore(site.db_url)
    command = [sys.executable, "-m", "safeshare.cli", "proxy-for", "ada", "--site", str(site.root), "--listen"]

    async def start(listen: str) -> tuple[asyncio.subprocess.Process, str]:
        proc = await asyncio.create_subprocess_exec(*command, listen, cwd=REPO, stdout=asyncio.subprocess.PIPE)
        async with asyncio.timeout(20):
            line = (await proc.stdout.readline()).decode()
        return proc, line

    async def run() -> None:
        port = await fake.start()
        store.issue("ada", f"127.0.0.1:{port}")
        proc, line = await start("127.0.0.1:0")
        try:
            client = RfbClient()
            await client.connect(int(line.split()[2].rsplit(":", 1)[1]))
            await client.key(0x61, True)
            await client.key(0x61, False)
            async with asyncio.timeout(10):
                assert (await proc.stdout.readline()).startswith(b"session ")
            await asyncio.sleep(0.3)
            proc.kill()
            await proc.wait()
            await client.close()
            proc, line = await start("127.0.0.1:0")
            assert line.startswith("listening on ")
        finally:
            proc.terminate()
            await proc.wait()
            await fake.close()

    asyncio.run(run())
    (folder,) = site.sessions.iterdir()
    seal = events(folder)[-1]
    assert seal["recovered"] is True and seal["gateway"] == f"proxy-for-{site.recipient_id('ada')}"
    assert not SessionBook(store).list("ada", live_only=True)
    # proven up to the last checkpoint the killed proxy signed: partial, accepted with --allow-partial only
    args = ["audit", "verify", str(site.sessions), "--db", site.db_url, "--site", str(site.root)]
    assert safeshare_main(args) == 1 and safeshare_main([*args, "--allow-partial"]) == 0
