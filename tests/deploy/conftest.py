"""Fixtures for the tests that need a real Docker engine: the engine (started if none answers; the module is skipped
with the reason only when none can start here) and the offline images (built once per test session, then cached by
content: the first build on a fresh machine takes a few minutes, later ones a second or two).

Everything here is session-scoped so that every deploy test module shares one engine check and one build.

The suite leaves no process behind (issue 24, item 13): a Docker engine it started itself is stopped at the end when
no container is left on it (an engine that already ran, e.g. started by scripts/dockerd.sh, is shared and stays),
and the session ends with a check that no process of a Swarm test worker (its dockerd, containerd, shims and
containers: tests/deploy/swarm_helpers.py) is left; any such process is killed and the session fails.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from deploy import dockerd
from deploy.images.build import BuildResult, build_all
from deploy.images.rootfs import DEFAULT_CACHE, ImageBuildError


HOST_PIDFILE = Path("/var/run/docker.pid")  # dockerd's default, as deploy/dockerd.py starts it


@pytest.fixture(scope="session", autouse=True)
def no_swarm_worker_left_behind():
    """After every deploy test: no process of a Swarm test worker this session started may remain (they are killed,
    then the session fails). Another session's worker running meanwhile is left alone."""
    yield
    from tests.deploy.swarm_helpers import STARTED, kill_all, run

    def left() -> list[int]:
        return sorted({pid for node in STARTED for pid in node.node_processes()})

    found = left()
    if found:
        listing = run("ps", "-o", "pid,ppid,stat,args", "-p", ",".join(map(str, found)), check=False).stdout
        for node in STARTED:  # its processes, mounts, namespace and link
            try:
                node.stop()
            except RuntimeError:
                pass
        kill_all(left, "Swarm test worker processes left behind")
        pytest.fail(f"{len(found)} process(es) of a Swarm test worker were left behind (now killed):\n{listing}")


@pytest.fixture(scope="session")
def docker_engine():
    """The running engine's status; skips when no engine can start (not installed, not root, dockerd fails). An
    engine this session started is stopped when the session ends, unless containers (not the suite's to remove)
    are still on it."""
    try:
        status = dockerd.start()
    except dockerd.EngineUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")
    pid = _host_dockerd_pid() if status.started_now else None
    yield status
    if pid is not None:
        _stop_started_engine(pid)


def _host_dockerd_pid() -> int | None:
    try:
        pid = int(HOST_PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if comm == "dockerd" else None


def _stop_started_engine(pid: int, timeout: float = 60.0) -> None:
    """SIGTERM the dockerd this session started (it stops its containerd with it) and wait for it to be gone; left
    running, with a note, while containers remain on it."""
    done = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or done.stdout.split():
        print(f"\nthe Docker engine this session started (pid {pid}) keeps running: containers remain on it")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:  # this process started it (deploy/dockerd.py): reap it here, or it lingers as a zombie
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not our child (or reaped already): gone once /proc says so
            if not Path(f"/proc/{pid}").exists():
                return
        time.sleep(0.2)
    pytest.fail(f"the Docker engine this session started (pid {pid}) did not stop within {timeout:.0f} s")


@pytest.fixture(scope="session")
def isolated_engine(docker_engine: dockerd.EngineStatus) -> dockerd.EngineStatus:
    """An engine whose networks can keep enclaves in; skips (with what is missing) otherwise."""
    if not docker_engine.networks_isolated:
        pytest.skip("the Docker engine cannot isolate networks here: " + "; ".join(docker_engine.problems))
    return docker_engine


@pytest.fixture(scope="session")
def offline_images(docker_engine: dockerd.EngineStatus) -> BuildResult:
    """app, gateway and kiosk images from the offline build (a failure is a test failure, not a skip: the engine
    is there, so the build must work)."""
    try:
        return build_all(DEFAULT_CACHE, say=lambda text: print(text, flush=True))
    except ImageBuildError as exc:
        pytest.fail(f"offline image build failed: {exc}")
