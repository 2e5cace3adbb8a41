"""safeshare.endpoints and safeshare.processes: the one HOST:PORT parser, VNC password reader and process-group
helpers every command uses."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from safeshare.endpoints import parse_host_port, read_vnc_password
from safeshare.processes import group_alive, signal_group


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)),
    (":8080", ("127.0.0.1", 8080)),
    ("[::1]:5900", ("::1", 5900)),
    ("0.0.0.0:0", ("0.0.0.0", 0)),
    ("enclave-app:8000", ("enclave-app", 8000)),
])
def test_host_port(text, expected):
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text, kwargs", [
    ("8080", {}), ("host:", {}), ("host:65536", {}), ("host:-1", {}), ("host:http", {}),
    (":5900", {"default_host": None}), ("host:0", {"allow_port_zero": False}),
])
def test_bad_host_port_names_the_text(text, kwargs):
    with pytest.raises(ValueError, match="HOST:PORT") as error:
        parse_host_port(text, **kwargs)
    assert repr(text) in str(error.value)


def test_upstream_keeps_its_own_message():
    from proxy.session import UpstreamTarget

    assert UpstreamTarget.parse("vnc:5900").describe() == "vnc:5900"
    with pytest.raises(ValueError, match="HOST:PORT or unix:PATH"):
        UpstreamTarget.parse(":5900")


@pytest.mark.parametrize("content, expected", [
    (b"secret\n", b"secret"), (b"secret", b"secret"), (b"secret\r\n", b"secret"),
    (b"full\n__BEGIN_VIEWONLY__\nview\n", b"full"), (b"", b""),
])
def test_vnc_password_is_the_first_line(tmp_path, content, expected):
    (tmp_path / "pw").write_bytes(content)
    assert read_vnc_password(tmp_path / "pw") == expected


def test_a_process_group_is_signalled_whole():
    # a leader in its own session with a child of its own: one signal to the group ends both
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                               "time.sleep(60)"], start_new_session=True)
    try:
        time.sleep(0.5)
        assert group_alive(leader.pid)
        assert signal_group(leader.pid, signal.SIGKILL)
        leader.wait(5)
        deadline = time.monotonic() + 5
        while group_alive(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group_alive(leader.pid)
        assert signal_group(leader.pid, signal.SIGTERM) is False
    finally:
        if leader.poll() is None:
            leader.kill()
