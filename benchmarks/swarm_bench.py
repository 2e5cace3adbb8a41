"""Provisioning on a Docker Swarm: seconds to provision a recipient (target under 15 s: shipping the release to the
node and verifying it there included), to provision it again (nothing changes), where placement by free memory put
each recipient, the memory of an idle enclave and how many fit per node, and the seconds from `revoke` to the end
of a live session whose kiosk runs on the other node than the gateway (target under 1 s).

    .venv/bin/python benchmarks/swarm_bench.py [--recipients 4]

Makes its own two-node swarm as the tests do (the host's engine as manager, a second dockerd in a network namespace
as worker: tests/deploy/swarm_helpers.py) and leaves it, and removes everything it created. Refuses when the host's
engine is already in a swarm. Overlay encryption is opted out of when this kernel cannot do it (it says so).
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
from benchmarks.provision_bench import cli  # noqa: E402


def enclave_memory(site_id: str, hosts: list[str | None]) -> dict[str, int]:
    """Container name -> bytes in use, from every node's engine."""
    found: dict[str, int] = {}
    for host in hosts:
        argv = ["docker", *(["-H", host] if host else []), "stats", "--no-stream", "--format",
                "{{.Name}}\t{{.MemUsage}}"]
        for line in subprocess.run(argv, capture_output=True, text=True).stdout.splitlines():
            name, usage = line.split("\t")
            if name.startswith(f"ss-{site_id}-"):
                found[name] = memory_bytes(usage.split("/")[0])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipients", type=int, default=4, help="recipients provisioned one after the other")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds idle before memory is read")
    args = parser.parse_args()

    from deploy.images.build import build_all, image_refs
    from deploy.site.folder import Site
    from deploy.swarm.reconcile import ENCLAVE_BYTES
    from deploy.swarm.crypto import control_host_check
    from deploy.swarm.provision import SwarmProvisioner
    from tests.deploy.swarm_helpers import WorkerNode, host_networks, init_swarm, leave_swarm, swarm_state
    from tests.deploy.test_provision import revoke_during_session

    build_all()
    if swarm_state()["LocalNodeState"] != "inactive":
        raise SystemExit("the host's Docker engine is already in a swarm; this benchmark makes and leaves its own")
    encryption = control_host_check()
    before, worker = host_networks(), WorkerNode(name="ssb1", index=2)
    figures: dict[str, object] = {"overlay_encrypted": encryption.ok, "encryption_check": encryption.reason}
    with tempfile.TemporaryDirectory(prefix="swarm-bench-", dir="/var/tmp") as folder:
        try:
            started = time.perf_counter()
            worker.start()
            worker_id = init_swarm(worker)
            images = image_refs()
            worker.load_images([images["app"], images["kiosk"]])
            figures["swarm_up_s"] = round(time.perf_counter() - started, 1)
            root = Path(folder) / "site"
            cli("deid", "policies/examples/adult-k5.yaml", "--out", f"{folder}/out", "--quiet")
            cli("release", f"{folder}/out", "--to", str(root / "releases"), "--name", "adult-k5")
            root.mkdir(parents=True, exist_ok=True)
            (root / "site.json").write_text(json.dumps({"enclave_pool": "10.215.0.0/16", "gateway_port": 6097}))
            site = Site(root)
            site.prepare()
            provisioner = SwarmProvisioner(site, allow_unencrypted=not encryption.ok, images=images)
            figures.update(run(provisioner, Path(folder), args, worker_id, revoke_during_session))
            memory = enclave_memory(site.site_id, [None, worker.host])
            kiosks = [v for k, v in memory.items() if k.endswith("-kiosk")]
            apps = [v for k, v in memory.items() if k.endswith("-app")]
            gateway = next((v for k, v in memory.items() if k.endswith("-gateway")), 0)
            enclave = statistics.median(kiosks) + statistics.median(apps) if kiosks and apps else ENCLAVE_BYTES
            nodes = provisioner.engine.nodes()
            reserve = 2 * 1024 ** 3
            figures["idle_enclave_mb"] = round(enclave / 1e6, 1)
            figures["enclaves_per_node_by_memory"] = {
                n.label: int((n.memory - reserve - (gateway if n.id == swarm_state()["NodeID"] else 0)) // enclave)
                for n in nodes}
            figures["note"] = ("both nodes share this machine's memory: each figure is what a host of that size "
                               "holds, not what the two hold together here")
            for index in range(args.recipients):
                provisioner.revoke(f"bench-{index}", "bench:cleanup")
            provisioner.close()
        finally:
            leave_swarm(worker, before)
            worker.stop()
            client = __import__("docker").from_env()
            for container in client.containers.list(all=True, filters={"label": "org.safeshare.role=gateway"}):
                if container.labels.get("org.safeshare.site") == Site(Path(folder) / "site").site_id:
                    container.remove(force=True)
            for net in client.networks.list(names=[f"ssf-{Site(Path(folder) / 'site').site_id}"]):
                net.remove()
            client.close()
    figures["host_memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024 ** 3, 1)
    print(json.dumps(figures, indent=2))
    return 0


def run(provisioner, folder: Path, args: argparse.Namespace, worker_id: str, revoke_during_session) -> dict:
    """Provision the recipients (placement decides), provision each again, then revoke a live session on the
    worker."""
    seconds, again, placed = [], [], {}
    for index in range(args.recipients):
        policy = folder / f"r{index}.yaml"
        policy.write_text(f"recipient: bench-{index}\nrelease: adult-k5\nexpires: 2099-12-31\nscreen: 1280x800\n")
        started = time.perf_counter()
        result = provisioner.provision(policy, "bench:provision")
        seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert provisioner.provision(policy, "bench:provision").status == "unchanged"
        again.append(time.perf_counter() - started)
        placed[f"bench-{index}"] = {"node": provisioner.engine.container_states()[result.rid]["node"],
                                    "url": result.url}
    time.sleep(args.settle)
    on_worker = [name for name, row in placed.items() if row["node"].endswith(worker_id[:12])]
    revocation = None
    if on_worker:
        name = on_worker[0]
        token = placed[name]["url"].split("token=", 1)[1]
        base = f"http://127.0.0.1:{provisioner.site.settings.gateway_port}"
        state = revoke_during_session(base, token, provisioner, name, lambda: provisioner.revoke(name, "bench"))
        revocation = round(state["closed_after"], 3)
    return {"first_provision_s": round(seconds[0], 2), "provision_s": [round(s, 2) for s in seconds],
            "provision_median_s": round(statistics.median(seconds), 2),
            "reprovision_unchanged_s": round(statistics.median(again), 2),
            "placement": {name: row["node"] for name, row in placed.items()},
            "revocation_ends_session_on_worker_s": revocation}


if __name__ == "__main__":
    sys.exit(main())
