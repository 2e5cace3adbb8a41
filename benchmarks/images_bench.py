"""Containers: seconds to build the images (cold with an empty cache, and cached), their sizes, seconds for
`docker-compose up` to a researcher URL, the memory of one idle enclave (kiosk + app containers), and how many such
enclaves one host of this size holds.

    .venv/bin/python benchmarks/images_bench.py [--cold] [--settle 10]

--cold builds into an empty cache folder (debootstrap and all packages again: minutes) with new image tags; without
it, the normal cache is used. Needs a running Docker engine (scripts/dockerd.sh) and docker-compose.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "kB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}


def build(cache: str | None) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "safeshare.cli", "images", "build", "--json"]
    if cache:
        argv += ["--cache", cache, "--force"]
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(result.stdout)


def memory_bytes(text: str) -> int:
    match = re.match(r"([\d.]+)\s*([A-Za-z]+)", text.strip())
    return int(float(match.group(1)) * UNITS[match.group(2)]) if match else 0


def compose_round(settle: float) -> dict:
    env = {**os.environ, "COMPOSE_PROJECT_NAME": "ssbench", "SAFESHARE_ENCLAVE_ID": "bench",
           "SAFESHARE_FRONT_SUBNET": "172.31.252.0/24", "SAFESHARE_GATEWAY_IP": "172.31.252.10",
           "SAFESHARE_GATEWAY_PORT": "6097"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker-compose", *args], cwd=REPO, env=env, capture_output=True, text=True)

    run("down", "-v")
    started = time.perf_counter()
    up = run("up", "-d")
    if up.returncode != 0:
        raise SystemExit(f"docker-compose up failed:\n{up.stderr[-2000:]}")
    url = None
    while url is None and time.perf_counter() - started < 180:
        url = next((w for w in run("logs", "--no-color", "token").stdout.split() if w.startswith("http://")), None)
        time.sleep(0.2)
    ready = time.perf_counter() - started
    time.sleep(settle)
    stats = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}"],
                           capture_output=True, text=True).stdout
    memory = {}
    for line in stats.splitlines():
        name, usage = line.split("\t")
        if name.startswith("ssbench_"):
            memory[name.split("_")[1]] = memory_bytes(usage.split("/")[0])
    run("down", "-v")
    enclave = memory.get("kiosk", 0) + memory.get("app", 0)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    reserve = 2 * 1024 ** 3 + memory.get("gateway", 0)  # the host itself and the shared gateway
    return {"compose_up_to_url_s": round(ready, 1), "url_seen": bool(url),
            "memory_mb": {k: round(v / 1e6, 1) for k, v in memory.items()},
            "idle_enclave_mb": round(enclave / 1e6, 1),
            "enclaves_per_host_by_memory": int((total - reserve) // enclave) if enclave else None,
            "host_memory_gib": round(total / 1024 ** 3, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="also build from an empty cache (minutes)")
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    figures: dict = {}
    if args.cold:
        with tempfile.TemporaryDirectory(prefix="images-cold-", dir="/var/tmp") as cache:
            seconds, _ = build(cache)
            figures["cold_build_s"] = round(seconds, 1)
    seconds, images = build(None)
    figures["cached_build_s"] = round(seconds, 1)
    sizes = {}
    for service, image in images.items():
        out = subprocess.run(["docker", "image", "inspect", image["tag"], "--format", "{{.Size}}"],
                             capture_output=True, text=True).stdout.strip()
        sizes[service] = round(int(out or 0) / 1e6)
    figures["image_mb"] = sizes
    figures.update(compose_round(args.settle))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
