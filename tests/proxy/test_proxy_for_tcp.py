"""`safeshare proxy-for RECIPIENT --listen 127.0.0.1:PORT` admits only websockify's user (issue 24, item 7).

The proxy checks no token (websockify's plugin does, and passes nothing on), so whoever reaches it gets a session of
the recipient. A Unix socket's mode keeps other users out; a loopback port did not: any local user's plain RFB client
got a full session. The attack here is exactly that, end to end: the command on a port, a recipient with a usable
token, and an RFB client whose socket another user (nobody, uid 65534) opened. It must get nothing, and nothing is
written to the sessions folder; the proxy's own user (websockify run as it, the documented setup) still gets in.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import sys
from pathlib import Path

import pytest

from deploy.site.folder import Site
from proxy.peer_uid import endpoint, tcp_peer_uid
from proxy.recipient_proxy import RecipientProxy
from proxy.tokens import TokenStore
from safeshare.cli import main as safeshare_main
from tests.proxy.rfbtools import FakeVncServer
from tests.proxy.test_websockify import site  # noqa: F401  (the fixture: a prepared site in a short path)

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="opening a socket as another user needs root")


def connect_as(uid: int, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to host:port whose socket belongs to `uid` (created by a forked child that became `uid`,
    handed back over a socket pair): what another local user's client is, as far as the kernel can tell."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            parent.close()
            os.setgid(uid)
            os.setuid(uid)
            sock = socket.socket(family)
            sock.connect((host, port))
            socket.send_fds(child, [b"s"], [sock.fileno()])
            code = 0
        finally:
            os._exit(code)
    child.close()
    try:
        _, fds, _, _ = socket.recv_fds(parent, 1, 1)
    finally:
        os.waitpid(pid, 0)
        parent.close()
    assert fds, "the child could not connect"
    return socket.socket(fileno=fds[0])


async def rfb_session(sock: socket.socket) -> tuple[int, int] | None:
    """RFB 3.8 with security None over `sock`, up to ServerInit: the framebuffer size, or None when the proxy
    closes the connection first."""
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        async with asyncio.timeout(10):
            version = await reader.read(12)
            if not version:
                return None
            assert version == b"RFB 003.008\n", version
            writer.write(b"RFB 003.008\n")
            (count,) = await reader.readexactly(1)
            assert await reader.readexactly(count) == b"\x01"
            writer.write(b"\x01")
            assert await reader.readexactly(4) == b"\0\0\0\0"
            writer.write(b"\x01")  # ClientInit, shared
            width, height = struct.unpack(">HH", await reader.readexactly(4))
            await reader.readexactly(16)
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            await reader.readexactly(length)
            return width, height
    finally:
        writer.close()


def test_peer_uid_of_a_loopback_connection() -> None:
    """The socket table names the user of the connecting end, not ours; an address nobody connects from is
    unknown."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            accepted, peer = server.accept()
            with accepted:
                ours = endpoint(*accepted.getsockname())
                assert tcp_peer_uid(ours, endpoint(*peer)) == os.getuid()
                assert tcp_peer_uid(ours, endpoint("127.0.0.1", client.getsockname()[1] ^ 1)) is None
                assert tcp_peer_uid(ours, endpoint(*peer), tables=(Path("/nonexistent"),)) is None


@needs_root
def test_another_users_rfb_client_on_the_port_gets_no_session(site: Site) -> None:  # noqa: F811
    fake = FakeVncServer(width=24, height=8)
    store = TokenStore(site.db_url)
    seen: dict[str, object] = {}

    async def run() -> None:
        vnc_port = await fake.start()
        store.issue("ada", f"127.0.0.1:{vnc_port}")  # the recipient holds a usable token
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "safeshare.cli", "proxy-for", "ada", "--site", str(site.root), "--listen",
            "127.0.0.1:0", cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async with asyncio.timeout(20):
                line = (await proc.stdout.readline()).decode()
            assert line.startswith("listening on 127.0.0.1:"), line
            port = int(line.split()[2].rsplit(":", 1)[1])
            seen["nobody"] = await rfb_session(await asyncio.to_thread(connect_as, NOBODY, port))
            seen["folders_after_nobody"] = sorted(p.name for p in site.sessions.iterdir())
            seen["own"] = await rfb_session(socket.create_connection(("127.0.0.1", port)))
            await asyncio.sleep(0.3)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            seen["stderr"] = (await proc.stderr.read()).decode()
            await fake.close()
            store.dispose()

    asyncio.run(run())
    assert seen["nobody"] is None and seen["folders_after_nobody"] == []
    assert f"uid={NOBODY}" in seen["stderr"] and "refused" in seen["stderr"], seen["stderr"]
    assert seen["own"] == (24, 8)  # the proxy's own user (websockify run as it) gets its session
    assert len(list(site.sessions.iterdir())) == 1


@needs_root
def test_peer_user_names_who_is_admitted(site: Site) -> None:  # noqa: F811
    """--peer-user (peer_uids) replaces the default: websockify's user gets in, the proxy's own user no longer."""
    fake = FakeVncServer(width=16, height=4)
    store = TokenStore(site.db_url)
    seen: dict[str, object] = {}

    async def run() -> None:
        vnc_port = await fake.start()
        store.issue("ada", f"127.0.0.1:{vnc_port}")
        proxy = RecipientProxy(store, "ada", site.sessions, name="proxy-for-ada", peer_uids={NOBODY})
        address = await proxy.start("127.0.0.1:0")
        try:
            seen["nobody"] = await rfb_session(await asyncio.to_thread(connect_as, NOBODY, address.port))
            seen["own"] = await rfb_session(socket.create_connection(("127.0.0.1", address.port)))
            seen["refused"] = proxy.refused
        finally:
            await proxy.close()
            await fake.close()
            store.dispose()

    asyncio.run(run())
    assert seen["nobody"] == (16, 4) and seen["own"] is None and seen["refused"] == 1


def test_peer_user_is_for_ports_only_and_must_exist(site: Site, capsys) -> None:  # noqa: F811
    assert safeshare_main(["proxy-for", "ada", "--site", str(site.root), "--peer-user", "0"]) == 2
    assert "--peer-user applies to a TCP --listen only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        safeshare_main(["proxy-for", "ada", "--site", str(site.root), "--listen", "127.0.0.1:0", "--peer-user",
                        "no-such-user-here"])
    assert exited.value.code == 2 and "no user named" in capsys.readouterr().err
