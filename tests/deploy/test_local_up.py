"""`safeshare up` / `status` / `down` without the browser stack: refusals before anything starts, state handling,
and the stray-process sweep (run in a child interpreter, since it makes its process a subreaper)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from deploy.children import Child, ComponentFailed, pid_alive
from deploy.local import read_state, status, write_state
from tests.cli_inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]


def safeshare(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def test_status_and_down_when_nothing_runs(tmp_path: Path) -> None:
    result = safeshare("status", "--home", str(tmp_path))
    assert result.returncode == 1 and "nothing runs" in result.stdout
    report = json.loads(run_cli("status", "--home", str(tmp_path), "--json").stdout)
    assert report == {"home": str(tmp_path), "running": False, "components": {}}
    result = safeshare("down", "--home", str(tmp_path))
    assert result.returncode == 1 and "nothing runs" in result.stderr


def test_stale_state_is_not_running(tmp_path: Path) -> None:
    """A state file left by a killed `up` (its pid gone) reads as not running, and does not block a new `up`."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_state(tmp_path, {"pid": dead.pid, "components": {"app": {"pid": dead.pid, "log": "x"}},
                           "gateway": "http://127.0.0.1:1/", "app": "http://127.0.0.1:1/"})
    assert oct((tmp_path / "up.json").stat().st_mode & 0o777) == "0o600"
    report = status(tmp_path)
    assert report["running"] is False and report["healthy"] is False
    assert report["components"]["app"]["alive"] is False
    assert read_state(tmp_path)["pid"] == dead.pid


def test_a_release_whose_gate_fails_starts_nothing(tmp_path: Path) -> None:
    """adult-pu5 keeps ADULT as it is; its gate fails for Los Angeles, so `up` refuses before any component."""
    home = tmp_path / "home"
    result = safeshare("up", "--home", str(home), "--policy", str(REPO / "policies/examples/adult-pu5.yaml"))
    assert result.returncode == 1, result.stderr
    assert "refused" in result.stderr and "gate" in result.stderr
    assert not list((home / "releases").rglob("seal.json"))
    assert not (home / "logs" / "app.log").exists() and not (home / "up.json").exists()


def test_bad_input_exits_2(tmp_path: Path) -> None:
    missing = run_cli("up", "--home", str(tmp_path), "--policy", str(tmp_path / "nope.yaml"))  # refused before a signal
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr
    bad = tmp_path / "recipient.yaml"
    bad.write_text("recipient: r\nrelease: x\nexpires: 2030-01-01\nlimits: {keys: {rate: -1}}\n")
    result = safeshare("up", "--home", str(tmp_path / "h"), "--recipient-policy", str(bad))
    assert result.returncode == 2 and "recipient.yaml" in result.stderr, result.stderr


def test_child_that_exits_before_ready_names_its_log(tmp_path: Path) -> None:
    child = Child("app", [sys.executable, "-c", "print('boom: no bundle'); raise SystemExit(2)"], tmp_path / "a.log")
    child.start()
    try:
        child.wait_for(lambda text: "ready" in text, 10, "the ready line")
    except ComponentFailed as exc:
        message = str(exc)
    else:
        raise AssertionError("no failure")
    assert "app exited with 2" in message and str(tmp_path / "a.log") in message and "boom: no bundle" in message


def test_orphaned_grandchildren_are_swept(tmp_path: Path) -> None:
    """A component that dies leaves its own children (Xvfb, Chromium) behind; `up` adopts and stops them."""
    script = textwrap.dedent(f"""
        import subprocess, sys, time, json
        from deploy.children import Child, become_subreaper, reap_strays, adopted_children
        assert become_subreaper()
        child = Child("kiosk", ["sh", "-c", "sleep 300 & sleep 300 & echo started; exit 0"], __import__("pathlib").Path({str(tmp_path / 'k.log')!r}))
        child.start()
        child.proc.wait()
        time.sleep(0.3)
        orphans = adopted_children()
        swept = reap_strays()
        print(json.dumps({{"orphans": orphans, "swept": swept, "left": adopted_children()}}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report["orphans"]) == 2 and sorted(report["swept"]) == sorted(report["orphans"])
    assert report["left"] == []
    assert not any(pid_alive(pid) for pid in report["orphans"])
    assert os.getpid() not in report["orphans"]


def test_exited_orphans_are_collected_while_running(tmp_path: Path) -> None:
    """Orphans that exit on their own must not stay zombies under `up` (a zombie keeps its process group alive, and
    the kiosk then waits seconds for its groups to empty when stopping)."""
    script = textwrap.dedent(f"""
        import json, time, pathlib
        from deploy.children import Child, OrphanReaper, adopted_children, become_subreaper
        assert become_subreaper()
        child = Child("kiosk", ["sh", "-c", "sleep 0.2 & sleep 0.2 & exit 0"], pathlib.Path({str(tmp_path / 'k.log')!r}))
        child.start()
        child.proc.wait()
        reaper = OrphanReaper(lambda: {{child.pid}}, interval=0.05)
        reaper.start()
        time.sleep(1.0)
        reaper.stop()
        print(json.dumps({{"zombies": adopted_children(zombies=True), "code": child.proc.returncode}}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"zombies": [], "code": 0}
