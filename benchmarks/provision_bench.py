"""Custodian provisioning: seconds to provision one recipient with the images present (target under 10 s), to
provision it again (nothing changes), to revoke it; the memory of one idle enclave (kiosk + app containers) and of
the shared gateway; and how many enclaves one host of this size (and one of 24 GiB) holds.

    .venv/bin/python benchmarks/provision_bench.py [--recipients 3] [--settle 15]

Needs a running Docker engine (scripts/dockerd.sh) and the images (`safeshare images build`; built here if
missing, which is not timed). Works in a throwaway site folder and removes everything it created.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.images_bench import memory_bytes  # noqa: E402


def cli(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"safeshare {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def container_memory(site_id: str) -> dict[str, int]:
    stats = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}"],
                           capture_output=True, text=True).stdout
    return {name: memory_bytes(usage.split("/")[0]) for name, usage in
            (line.split("\t") for line in stats.splitlines()) if name.startswith(f"ss-{site_id}-")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", type=int, default=3, help="recipients provisioned one after the other")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds idle before memory is read")
    args = parser.parse_args()

    from deploy.images.build import build_all
    from deploy.provision import Provisioner
    from deploy.site.folder import Site

    build_all()  # a cache hit when the images are there
    with tempfile.TemporaryDirectory(prefix="provision-bench-", dir="/var/tmp") as folder:
        root = Path(folder) / "site"
        cli("deid", "policies/examples/adult-k5.yaml", "--out", f"{folder}/out", "--quiet")
        cli("release", f"{folder}/out", "--to", str(root / "releases"), "--name", "adult-k5")
        site = Site(root)
        site.configure(gateway_port=6098)
        site.prepare()
        provisioner = Provisioner(site)
        first, later, again, revoke = None, [], [], []
        try:
            for index in range(args.recipients):
                policy = Path(folder) / f"r{index}.yaml"
                policy.write_text(f"recipient: bench-{index}\nrelease: adult-k5\nexpires: 2099-12-31\n")
                started = time.perf_counter()
                result = provisioner.provision(policy, "bench:provision")
                seconds = time.perf_counter() - started
                if first is None:
                    first = seconds  # includes creating the site's gateway and front network
                else:
                    later.append(seconds)
                started = time.perf_counter()
                assert provisioner.provision(policy, "bench:provision").status == "unchanged"
                again.append(time.perf_counter() - started)
                assert result.url
            time.sleep(args.settle)
            memory = container_memory(site.site_id)
            kiosks = [v for k, v in memory.items() if k.endswith("-kiosk")]
            apps = [v for k, v in memory.items() if k.endswith("-app")]
            gateway = next((v for k, v in memory.items() if k.endswith("-gateway")), 0)
            for index in range(args.recipients):
                started = time.perf_counter()
                provisioner.revoke(f"bench-{index}", "bench:revoke")
                revoke.append(time.perf_counter() - started)
        finally:
            for index in range(args.recipients):
                try:
                    provisioner.revoke(f"bench-{index}", "bench:cleanup")
                except Exception:
                    pass
            client = provisioner.client
            for container in client.containers.list(all=True, filters={"label": f"org.safeshare.site={site.site_id}"}):
                container.remove(force=True)
            for net in client.networks.list(filters={"label": f"org.safeshare.site={site.site_id}"}):
                net.remove()
            provisioner.close()

    enclave = statistics.median(kiosks) + statistics.median(apps)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    reserve = 2 * 1024 ** 3 + gateway  # the host itself and the shared gateway
    figures = {
        "first_provision_s": round(first or 0, 2),
        "provision_s": [round(s, 2) for s in later],
        "provision_median_s": round(statistics.median(later), 2) if later else None,
        "reprovision_unchanged_s": round(statistics.median(again), 2),
        "revoke_s": round(statistics.median(revoke), 2),
        "memory_mb": {"kiosk_median": round(statistics.median(kiosks) / 1e6, 1),
                      "app_median": round(statistics.median(apps) / 1e6, 1), "gateway": round(gateway / 1e6, 1)},
        "idle_enclave_mb": round(enclave / 1e6, 1),
        "host_memory_gib": round(total / 1024 ** 3, 1),
        "enclaves_per_host_by_memory": int((total - reserve) // enclave),
        "enclaves_per_24gib_host": int((24 * 1024 ** 3 - reserve) // enclave),
        "recipients": args.recipients,
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
