"""A VNC server whose host vanishes (no FIN, no RST: power lost, a Swarm node gone) ends the session by itself, with
a connection error, and the log is sealed: the researcher does not sit in front of a frozen screen until they leave.

The vanished host is made real with the kernel's firewall: every packet from the VNC server's port is dropped, so the
proxy's keepalive probes go unanswered, exactly as when the host is gone.
"""
from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from proxy.eventlog import verify_log
from proxy.transport import UPSTREAM_KEEPALIVE, UPSTREAM_USER_TIMEOUT_MS, UpstreamTarget
from tests.cdp import wait_for
from tests.proxy.rfbtools import FakeVncServer, RfbClient
from tests.proxy.test_proxy_bounds import proxy


def test_upstream_connections_ask_the_kernel_to_notice_a_lost_peer() -> None:
    async def run() -> dict[str, int]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            _, writer = await UpstreamTarget("127.0.0.1", port).open()
            sock = writer.get_extra_info("socket")
            options = {
                "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                "user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
            }
            writer.close()
            return options
        finally:
            server.close()
            await server.wait_closed()

    idle, interval, count = UPSTREAM_KEEPALIVE
    assert asyncio.run(run()) == {"keepalive": 1, "idle": idle, "interval": interval, "count": count,
                                  "user_timeout": UPSTREAM_USER_TIMEOUT_MS}
    assert idle + interval * count <= 10  # the session ends within about 10 s of the host's last word


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def drop_from_port():
    """Drop, on the loopback interface, every packet from a port (the VNC server's) until the test ends."""
    if shutil.which("iptables") is None:
        pytest.skip("iptables is not installed")
    rules: list[list[str]] = []

    def drop(port: int) -> None:
        rule = ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"]
        done = _iptables("-I", *rule)
        if done.returncode != 0:
            pytest.skip(f"cannot add a firewall rule here: {done.stderr.strip()}")
        rules.append(rule)

    yield drop
    for rule in rules:
        _iptables("-D", *rule)


def test_a_vnc_server_that_vanishes_ends_the_session_and_its_log_is_sealed(tmp_path: Path, drop_from_port) -> None:
    fake = FakeVncServer()

    async def run() -> tuple[Path, str, float]:
        fake_port = await fake.start()
        try:
            async with proxy(tmp_path, fake_port) as (port, _, started, ended):
                client = RfbClient()
                await client.connect(port)
                await wait_for(lambda: started and started[0].dir is not None and fake.connections == 1, 5)
                drop_from_port(fake_port)
                lost = time.monotonic()
                await wait_for(lambda: ended, 30)
                seconds = time.monotonic() - lost
                await client.close()
                return *ended[0], seconds
        finally:
            await fake.close()

    session_dir, reason, seconds = asyncio.run(run())
    assert "connection error" in reason and "timed out" in reason.lower(), reason
    idle, interval, count = UPSTREAM_KEEPALIVE
    assert idle <= seconds <= idle + interval * count + 5, seconds
    check = verify_log(session_dir / "events.jsonl")
    assert check.ok, check
