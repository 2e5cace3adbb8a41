"""Units of the engine start-up and of the image build that need no Docker engine: dockerd's fallbacks (driver, then
iptables) against a fake dockerd, the layer diff that ships only what apt changed, the pinned wheel list, and the
content keys that make the cache work."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from deploy import dockerd
from deploy.images import rootfs, wheels

FAKE_DOCKER = """#!/bin/sh
# answers `docker info` once the fake dockerd has written its marker
[ -f "$FAKE_DIR/up" ] || { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
echo '{"ServerVersion": "fake-1", "Driver": "'"$(cat "$FAKE_DIR/up")"'", "CgroupVersion": "2"}'
"""
FAKE_DOCKERD = """#!/bin/sh
echo "$*" >> "$FAKE_DIR/calls"
echo $$ >> "$FAKE_DIR/pids"
case " $* " in
  *" --storage-driver vfs "*) ;;
  *) echo "failed to start daemon: error initializing graphdriver: driver not supported: overlay2"; exit 1 ;;
esac
if [ -n "$FAKE_NO_IPTABLES" ]; then
  case " $* " in
    *" --iptables=false "*) ;;
    *) echo 'failed to start daemon: Error initializing network controller: iptables failed: iptables -t nat -N DOCKER'; exit 1 ;;
  esac
fi
echo vfs > "$FAKE_DIR/up"
exec sleep 120
"""
FAKE_IPTABLES = """#!/bin/sh
# -w 5 first; DOCKER-ISOLATION-STAGE-1 exists only when dockerd manages iptables; rules are remembered in a file
shift 2
case "$1" in
  -S) [ -z "$FAKE_NO_IPTABLES" ] ;;
  -C) shift; grep -qxF -- "$*" "$FAKE_DIR/rules" 2>/dev/null ;;
  -I) shift; echo "$*" >> "$FAKE_DIR/rules" ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if os.geteuid() != 0:
        pytest.skip("dockerd.start() refuses to start dockerd unless root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("dockerd", FAKE_DOCKERD), ("iptables", FAKE_IPTABLES)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    yield tmp_path
    for line in (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []:
        try:
            os.kill(int(line), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_start_falls_back_to_vfs_and_installs_the_host_rule(fake_engine: Path) -> None:
    status = dockerd.start(log=fake_engine / "dockerd.log", timeout=10)
    assert status.started_now and status.storage_driver == "vfs" and status.server_version == "fake-1"
    assert status.dockerd_args == ["--storage-driver", "vfs"]
    assert status.iptables and status.host_firewall and status.networks_isolated and not status.problems
    assert (fake_engine / "rules").read_text().split() == dockerd.host_firewall_rule()
    assert "driver not supported" in (fake_engine / "dockerd.log").read_text()
    again = dockerd.start(log=fake_engine / "dockerd.log", timeout=10)  # idempotent: nothing started, no second rule
    assert not again.started_now and len((fake_engine / "calls").read_text().splitlines()) == 2
    assert len((fake_engine / "rules").read_text().splitlines()) == 1


def test_without_iptables_the_engine_runs_but_says_networks_are_not_isolated(fake_engine: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NO_IPTABLES", "1")
    status = dockerd.start(log=fake_engine / "dockerd.log", timeout=10)
    assert "--iptables=false" in status.dockerd_args
    assert not status.iptables and not status.networks_isolated
    assert any("iptables" in problem for problem in status.problems)
    assert dockerd._report(status, as_json=True) == dockerd.EXIT_NOT_ISOLATED


def test_no_dockerd_is_a_reason_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(dockerd.EngineUnavailable, match="not installed"):
        dockerd.start(log=tmp_path / "log", timeout=1)


def test_changes_are_what_was_added_changed_or_removed_after_the_copy(tmp_path: Path) -> None:
    parent, child = tmp_path / "parent", tmp_path / "child"
    for root in (parent, child):
        (root / "etc").mkdir(parents=True)
        (root / "etc" / "same").write_text("x")
        (root / "etc" / "edited").write_text("old")
        (root / "gone").mkdir()
        (root / "gone" / "file").write_text("x")
        (root / "etc" / "removed").write_text("x")
    time.sleep(0.05)
    since = time.time_ns()
    time.sleep(0.05)
    (child / "etc" / "edited").write_text("new")
    (child / "etc" / "removed").unlink()
    (child / "gone" / "file").unlink()
    (child / "gone").rmdir()
    (child / "usr" / "lib").mkdir(parents=True)
    (child / "usr" / "lib" / "new").write_text("x")
    os.symlink("new", child / "usr" / "lib" / "link")
    added, removed = rootfs.changes(parent, child, since)
    assert added == ["./etc", "./etc/edited", "./usr", "./usr/lib", "./usr/lib/link", "./usr/lib/new"]
    assert removed == ["/etc/removed", "/gone"]


def test_layer_keys_follow_their_inputs() -> None:
    base = rootfs.Layer("base", ("python3",))
    kiosk = rootfs.Layer("kiosk", ("xvfb",), parent=base)
    key = kiosk.key("http://m/debian", "http://m/debian-security")
    assert key == rootfs.Layer("kiosk", ("xvfb",), parent=rootfs.Layer("base", ("python3",))).key(
        "http://m/debian", "http://m/debian-security")
    assert key != rootfs.Layer("kiosk", ("xvfb",), parent=rootfs.Layer("base", ("python3", "tini"))).key(
        "http://m/debian", "http://m/debian-security")  # a parent's change reaches its children
    assert key != kiosk.key("http://other/debian", "http://m/debian-security")


def test_dependency_pins_are_the_installed_runtime_closure() -> None:
    pins = dict(line.split("==") for line in wheels.pinned_requirements())
    from importlib import metadata

    for name in ("fastapi", "pyarrow", "starlette", "pydantic-core"):  # direct and transitive
        assert pins[name] == metadata.version(name)
    assert "pytest" not in pins and "hypothesis" not in pins and "safeshare" not in pins  # no test extras, no self
    assert "docker" not in pins and "httpx" not in pins   # the servers' extra only: no host tools, no test client
