"""Time from `safeshare up` to a ready researcher URL, memory of one running enclave, and time to stop.

Runs `safeshare up --json` with a throwaway home folder (as the README does, minus the install step), waits for its
ready line, lets the kiosk settle, then sums PSS and RSS per component over each component's process tree: the app,
the kiosk (Xvfb, x11vnc, Chromium and the kiosk supervisor), the gateway. Targets: ready in under 30 s once packages
are installed; Xvfb + VNC server + Chromium + app under 500 MB. Prints one JSON object per run.

    .venv/bin/python benchmarks/up_bench.py [--runs 3] [--settle 5]
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiosk_bench import _memory

REPO = Path(__file__).resolve().parent.parent


def descendants(root: int) -> list[int]:
    """root and every process below it (by parent pid)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, []))
    return found


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def one_run(settle: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="up-bench-") as tmp:
        home = Path(tmp) / "home"
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--json",
                                 "--listen", "127.0.0.1:0"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        assert proc.stdout is not None
        ready = None
        for line in proc.stdout:
            if line.startswith("{") and json.loads(line).get("event") == "ready":
                ready = json.loads(line)
                break
        if ready is None:
            raise SystemExit(f"safeshare up did not become ready (exit {proc.wait()}); see {home}/logs")
        ready_s = time.perf_counter() - started
        time.sleep(settle)
        result: dict = {"ready_s": round(ready_s, 2), "ready_s_reported": ready["seconds"]}
        parts: dict[str, list[int]] = {}
        for component, pid in ready["pids"].items():
            tree = descendants(pid)
            if component == "kiosk":
                for member in tree:
                    name = process_name(member)
                    key = ("Xvfb" if name == "Xvfb" else "x11vnc" if name == "x11vnc"
                           else "chromium" if name.startswith("chrom") else "kiosk-supervisor")
                    parts.setdefault(key, []).append(member)
            else:
                parts[component] = tree
        enclave_pss = 0.0
        total_pss = 0.0
        for name, pids in sorted(parts.items()):
            rss, pss, count = _memory(pids)
            result[f"{name}_pss_mb"] = round(pss, 1)
            result[f"{name}_rss_mb"] = round(rss, 1)
            result[f"{name}_procs"] = count
            total_pss += pss
            if name in ("Xvfb", "x11vnc", "chromium", "app"):
                enclave_pss += pss
        result["xvfb_vnc_chromium_app_pss_mb"] = round(enclave_pss, 1)
        result["all_components_pss_mb"] = round(total_pss, 1)
        stop_started = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        result["exit"] = proc.wait(120)
        result["stop_s"] = round(time.perf_counter() - stop_started, 2)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait after ready before measuring")
    args = parser.parse_args()
    for _ in range(args.runs):
        print(json.dumps(one_run(args.settle)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
