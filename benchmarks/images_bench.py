"""Containers: seconds to build the images (cold with an empty cache, and cached), their sizes, seconds for
`docker-compose up` to a researcher URL, the memory of one idle enclave (kiosk + app containers), and how many such
enclaves one host of this size holds.

    .venv/bin/python benchmarks/images_bench.py [--cold] [--no-compose] [--settle 10]

--cold also builds as on a fresh machine: an empty cache folder, no pip cache, images under another repository name
(so nothing of the normal build is reused or replaced: debootstrap, Debian packages, wheels, every docker build),
removed afterwards. Then the normal cached build, each step's seconds, the image sizes and the disk the three images
take together (their big layers are shared). Needs a running Docker engine (scripts/dockerd.sh); the compose round
also needs docker-compose (--no-compose skips it).
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


def build(cache: str | None, repository: str | None = None) -> tuple[float, dict]:
    """Seconds and the result of `safeshare images build`; `cache` and `repository` make it a cold build."""
    argv = [sys.executable, "-c", "import json, sys; from pathlib import Path; "
            "from deploy.images.build import build_all, DEFAULT_CACHE, image_sizes; "
            "r = build_all(Path(sys.argv[1]) if sys.argv[1] else DEFAULT_CACHE, say=lambda t: print(t, file=sys.stderr)); "
            "sizes = image_sizes(r.images); d = r.as_dict(); "
            "[d['images'][k].update(size_bytes=v) for k, v in sizes.items()]; print(json.dumps(d))", cache or ""]
    env = dict(os.environ)
    if repository:
        env.update(SAFESHARE_IMAGE_REPOSITORY=repository, PIP_NO_CACHE_DIR="1")
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise SystemExit(f"image build failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started, json.loads(result.stdout)


def steps(result: dict) -> dict:
    return {step["service"]: step["seconds"] for step in result["steps"]}


def disk_mb(result: dict) -> int:
    """What the three images take on disk together: the kiosk's layers plus the app's and gateway's own ones on top
    of the shared runtime."""
    def size(ref: str) -> int:
        out = subprocess.run(["docker", "image", "inspect", ref, "--format", "{{.Size}}"], capture_output=True,
                             text=True).stdout.strip()
        return int(out or 0)

    runtime = next(step["tag"] for step in result["steps"] if step["service"] == "runtime")
    images = result["images"]
    total = images["kiosk"]["size_bytes"] + sum(images[s]["size_bytes"] - size(runtime) for s in ("app", "gateway"))
    return round(total / 1e6)


def remove_repository(repository: str) -> None:
    refs = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                          text=True).stdout.split()
    mine = [ref for ref in refs if ref.startswith(repository + "/")]
    if mine:
        subprocess.run(["docker", "image", "rm", *mine], capture_output=True)


def memory_bytes(text: str) -> int:
    match = re.match(r"([\d.]+)\s*([A-Za-z]+)", text.strip())
    return int(float(match.group(1)) * UNITS[match.group(2)]) if match else 0


def compose_round(settle: float) -> dict:
    env = {**os.environ, "COMPOSE_PROJECT_NAME": "ssbench", "SAFESHARE_ENCLAVE_ID": "bench",
           "SAFESHARE_FRONT_SUBNET": "10.215.210.0/24", "SAFESHARE_GATEWAY_IP": "10.215.210.10",
           "SAFESHARE_ENCLAVE_SUBNET": "10.215.211.0/27", "SAFESHARE_VNC_SUBNET": "10.215.211.32/27",
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
    parser.add_argument("--no-compose", action="store_true", help="only the images (no docker-compose round)")
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    figures: dict = {}
    if args.cold:
        repository = f"ssbench-cold-{os.getpid()}"
        with tempfile.TemporaryDirectory(prefix="images-cold-", dir="/var/tmp") as cache:
            try:
                seconds, cold = build(cache, repository)
            finally:
                remove_repository(repository)
        figures["cold_build_s"] = round(seconds, 1)
        figures["cold_steps_s"] = steps(cold)
    seconds, result = build(None)
    figures["cached_build_s"] = round(seconds, 1)
    figures["cached_steps_s"] = steps(result)
    figures["image_mb"] = {service: round(image["size_bytes"] / 1e6) for service, image in result["images"].items()}
    figures["all_three_on_disk_mb"] = disk_mb(result)
    if not args.no_compose:
        figures.update(compose_round(args.settle))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
