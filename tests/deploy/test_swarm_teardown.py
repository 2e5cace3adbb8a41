"""The Swarm test worker leaves nothing behind (issue 24, item 13).

containerd starts each container's shim with `shim start`, which daemonizes: the shim's parent is init, not the
worker's dockerd, and the container's processes are the shim's. A kill or teardown that went by dockerd's process
tree left the enclave's app and kiosk (Chromium) running after the suite. Here a container runs on the worker's own
engine (no swarm needed); the worker is killed as the lost-node test kills it, or stopped as the fixture stops it, and
no process of the node may remain: not the container's, not its shim, not dockerd or containerd."""
from __future__ import annotations

import os

import pytest

from deploy.images.build import image_refs
from tests.deploy.swarm_helpers import WorkerNode, descendants, stray_processes

pytestmark = [pytest.mark.docker, pytest.mark.swarm]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def worker(isolated_engine, offline_images):
    node = WorkerNode()
    try:
        node.start()
        node.load_images([image_refs()["app"]])
        yield node
    finally:
        node.stop()


def _container(node: WorkerNode) -> tuple[int, int]:
    """A container with a child process on the worker's engine; (the container's init pid, its shim's pid)."""
    image = image_refs()["app"]
    cid = node.docker("run", "-d", "--entrypoint", "sh", image, "-c", "sleep 600 & exec sleep 600").stdout.strip()
    pid = int(node.docker("inspect", "--format", "{{.State.Pid}}", cid).stdout.strip())
    with open(f"/proc/{pid}/stat") as handle:
        shim = int(handle.read().rsplit(")", 1)[-1].split()[1])
    return pid, shim


def test_a_killed_worker_leaves_no_container_and_no_shim(worker: WorkerNode) -> None:
    pid, shim = _container(worker)
    assert shim not in descendants(worker.proc.pid)  # why dockerd's process tree was not enough
    inside = [*descendants(shim), shim]
    assert set(inside) <= set(worker.node_processes())
    worker.kill()  # the lost-node test's "the node dies"
    survivors = [p for p in [pid, *inside] if _alive(p)]
    assert not survivors, survivors
    assert not worker.node_processes() and not stray_processes()


def test_a_stopped_worker_leaves_no_process(worker: WorkerNode) -> None:
    pid, shim = _container(worker)
    daemon = worker.proc.pid
    worker.stop()
    assert not [p for p in (pid, shim, daemon) if _alive(p)]
    assert not stray_processes()
    assert not os.path.exists(f"/run/netns/{worker.netns}")
