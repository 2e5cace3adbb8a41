"""Issue 25, item 1: a clone of the repository with nothing next to it runs the demo path.

The repository's HEAD is cloned into a folder with no `../shared` (and no $SAFESHARE_BENCHMARK_DATA), then, from the
clone and with the clone's own code (PYTHONPATH; the packages are the ones this venv has, as ./dev would install
from requirements.lock): `safeshare deid` on the demo policy as `./dev demo` runs it, and `safeshare up` as `./dev up`
runs it, until its ready line; Ctrl+C then stops it and no process of it is left. Before the demo data was in the
repository both failed: the policy read ../shared/data/adult/adult.csv.

What is tested is HEAD (what a clone gets), not uncommitted changes of the working tree.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HAVE_STACK = all(shutil.which(t) for t in ("Xvfb", "x11vnc", "chromium")) and Path("/usr/share/novnc/core/rfb.js").is_file()

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail(f"{REPO} is not a git checkout (this test clones it)", pytrace=False)
    place = tmp_path_factory.mktemp("alone")
    target = place / "safeshare"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(target)], check=True, timeout=300)
    assert not (place / "shared").exists() and not (target.parent.parent / "shared").exists()
    return target


def clone_env(clone: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SAFESHARE_BENCHMARK_DATA", "PYTHONPATH", "PYTHONSAFEPATH")}
    return {**env, "PYTHONPATH": str(clone), **extra}


def test_the_clone_runs_its_own_code(clone: Path) -> None:
    probe = subprocess.run([sys.executable, "-c", "import engine, deploy.local, safeshare; "
                            "print(engine.__file__); print(deploy.local.DEFAULT_POLICY)"],
                           capture_output=True, text=True, cwd=clone, env=clone_env(clone), timeout=60)
    assert probe.returncode == 0, probe.stderr
    engine_file, default_policy = probe.stdout.split()
    assert Path(engine_file).is_relative_to(clone) and Path(default_policy).is_relative_to(clone)


def test_deid_on_the_demo_policy(clone: Path, tmp_path: Path) -> None:
    """`./dev demo`: safeshare deid policies/examples/adult-k5.yaml --out out/adult-k5, from the clone."""
    site = tmp_path / "site"
    site.mkdir()  # an empty site: the built-in gate floor, never this machine's own site
    result = subprocess.run([sys.executable, "-m", "safeshare.cli", "deid", "policies/examples/adult-k5.yaml",
                             "--out", "out/adult-k5"], capture_output=True, text=True, cwd=clone,
                            env=clone_env(clone, SAFESHARE_SITE=str(site)), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "30162" in result.stdout.replace(",", "") and "written to" in result.stdout, result.stdout
    manifest = json.loads((clone / "out" / "adult-k5" / "manifest.json").read_text())
    assert manifest["records"] == 30_162 and manifest["gate"]["passed"] is True


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@pytest.mark.skipif(not HAVE_STACK, reason="Xvfb, x11vnc, chromium and novnc come from scripts/setup.sh")
def test_up_reaches_its_ready_line(clone: Path, tmp_path: Path) -> None:
    """`./dev up`: safeshare up with its defaults (the demo policy and recipient), from the clone, to its URL."""
    from tests.proxy.rfbtools import free_port

    home = tmp_path / "home"
    home.mkdir()
    log = open(tmp_path / "up.stderr", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--listen",
                             f"127.0.0.1:{free_port()}", "--json"], cwd=clone, env=clone_env(clone),
                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    lines: list[dict] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        ready = None
        while ready is None and time.monotonic() < deadline and (proc.poll() is None or reader.is_alive()):
            ready = next((line for line in lines if line.get("event") == "ready"), None)
            time.sleep(0.2)
        log.flush()
        assert ready is not None, (tmp_path / "up.stderr").read_text(errors="replace")[-4000:]
        assert "token=" in ready["url"] and ready["url"].startswith("http://127.0.0.1:")
        # the release it serves was made from the clone's demo table
        manifest = json.loads((Path(ready["release"]) / "manifest.json").read_text())
        assert manifest["dataset"] == "adult" and manifest["records"] == 30_162
        assert Path(ready["release"]).is_relative_to(home)
        proc.send_signal(signal.SIGINT)  # Ctrl+C, as a person stops ./dev up
        assert proc.wait(90) == 0, (tmp_path / "up.stderr").read_text(errors="replace")[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
    reader.join(10)
    assert _processes_mentioning(str(home)) == []
