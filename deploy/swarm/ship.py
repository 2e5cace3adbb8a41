"""Putting a sealed release on the node an enclave will run on, for deploy/swarm/reconcile.py.

Why not the other ways: a Swarm config or secret holds at most 500 KB and lives in every manager's Raft log (a
release is megabytes to gigabytes); a bind mount needs the bundle at the same path on the node, which the control
host cannot see or check. So the release travels once per (recipient, bundle) as a tar stream between two one-off
services on a network of their own (internal, encrypted like the enclave's):

    ss-<site>-<rid>-ship-src   on the control node: the bundle's folder bind-mounted read-only, served once as tar
    ss-<site>-<rid>-ship       a job on the enclave's node: fetches it into the node-local volume
                               ss-r-<rid>-<manifest sha256[:12]>, then runs `safeshare verify-release` against the
                               site's trust store (a Swarm config) there, as the release DATASET/ID the control
                               host resolved (/release names none), and fails unless the seal verifies

Only a verified copy is mounted (read-only) into the app, which checks the seal again when it starts. The volume's
name carries the manifest's hash, so a changed release is a new volume; `wipe` empties a recipient's volumes on
revocation (the manager cannot remove a volume on a node; the empty name stays until the node's `docker volume
prune`).
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy.plan import LABEL, release_ref
from deploy.swarm.crypto import NODE_PROBE
from deploy.swarm.specs import launcher_command

SHIP_PORT = 8099
SHIP_TIMEOUT = 300.0
# The images' health checks ask a service that these one-off tasks do not run; Swarm would kill them as unhealthy.
NO_HEALTHCHECK = {"Test": ["NONE"]}

# The job on the node: the encryption probe (when asked), fetch, unpack plain files and folders only, verify.
JOB = r"""
import os, shutil, subprocess, sys, tarfile, time, urllib.request
url, probe, release = sys.argv[1], sys.argv[2], sys.argv[3]
if probe:
    exec(probe)
deadline = time.monotonic() + 90
while True:
    try:
        stream = urllib.request.urlopen(url, timeout=30)
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"ship: the release source did not answer: {exc}")
        time.sleep(0.3)
for entry in os.listdir("/release"):
    path = os.path.join("/release", entry)
    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
with tarfile.open(fileobj=stream, mode="r|") as tar:
    for member in tar:
        name = os.path.normpath(member.name)
        if name.startswith(("/", "..")) or not (member.isfile() or member.isdir()):
            sys.exit(f"ship: refused tar member {member.name!r}")
        member.mode = 0o755 if member.isdir() else 0o644
        tar.extract(member, "/release")
os.chmod("/release", 0o755)
sys.exit(subprocess.run(["safeshare", "verify-release", "/release", "--trust", "/trust.json",
                         "--release", release]).returncode)
"""

SOURCE = r"""
import http.server, sys, tarfile
class Once(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.end_headers()
        with tarfile.open(fileobj=self.wfile, mode="w|") as tar:
            tar.add("/bundle", arcname=".")
http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), Once).serve_forever()
"""

WIPE = "import os, shutil\nfor e in os.listdir('/release'):\n    shutil.rmtree(os.path.join('/release', e), True)\n"


class ShipError(Exception):
    """The release could not be put on the node, or did not verify there."""


def release_volume(rid: str, bundle: Path) -> str:
    digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()[:12]
    return f"ss-r-{rid}-{digest}"


def _labels(site_id: str, rid: str, role: str) -> dict[str, str]:
    return {f"{LABEL}.site": site_id, f"{LABEL}.rid": rid, f"{LABEL}.role": role}


def run_job(client: Any, name: str, *, image: str, node_id: str, command: list[str], mounts: list[Any],
            labels: dict[str, str], networks: list[str] | None = None, configs: list[Any] | None = None,
            user: str | None = None, timeout: float = SHIP_TIMEOUT,
            while_waiting: Callable[[], None] | None = None) -> None:
    """One replicated-job task on `node_id`; returns when it completed, raises ShipError with its log otherwise.
    The job service is removed either way."""
    import docker

    types = docker.types
    service = client.services.create(
        image, command=command, name=name, labels=labels, container_labels=labels, user=user,
        read_only=True, cap_drop=["ALL"], constraints=[f"node.id=={node_id}"], configs=configs,
        mounts=[*mounts, types.Mount("/tmp", "", type="tmpfs", tmpfs_size=64 << 20, tmpfs_mode=0o777)],
        networks=[types.NetworkAttachmentConfig(n) for n in networks or []],
        endpoint_spec=types.EndpointSpec(mode="dnsrr"),
        mode=types.ServiceMode("replicated-job", concurrency=1), healthcheck=NO_HEALTHCHECK,
        restart_policy=types.RestartPolicy(condition="none"))
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if while_waiting is not None:
                while_waiting()
            states = [(t["Status"]["State"], t["Status"].get("Err", "")) for t in service.tasks()]
            if any(state == "complete" for state, _ in states):
                return
            failed = [err for state, err in states if state in ("failed", "rejected", "orphaned")]
            if failed:
                raise ShipError(f"{name} failed on node {node_id}: {failed[0]}\n{_logs(service)}")
            time.sleep(0.2)
        raise ShipError(f"{name} did not finish on node {node_id} within {timeout:.0f} s\n{_logs(service)}")
    finally:
        service.remove()


def _logs(service: Any) -> str:
    try:
        return b"".join(service.logs(stdout=True, stderr=True, tail=20)).decode(errors="replace")
    except Exception as exc:  # noqa: BLE001 - logs are a courtesy for the error message, never the error
        return f"(no logs: {exc})"


def ship(client: Any, *, site_id: str, rid: str, bundle: Path, images: dict[str, str], node_id: str,
         control_node_id: str, trust_config: tuple[str, str], network_options: dict[str, str],
         probe_encryption: bool, timeout: float = SHIP_TIMEOUT) -> str:
    """The bundle in a verified node-local volume on `node_id`; returns the volume's name."""
    import docker

    types = docker.types
    volume = release_volume(rid, bundle)
    prefix = f"ss-{site_id}-{rid}-ship"
    net_name = f"ss-s-{rid}"
    for leftover in client.services.list(filters={"name": prefix}):  # a previous attempt killed half-way
        leftover.remove()
    for leftover in client.networks.list(names=[net_name]):
        _remove_network(leftover)
    net = client.networks.create(net_name, driver="overlay", internal=True, attachable=False,
                                 options=network_options or None, labels=_labels(site_id, rid, "ship-net"))
    source = None
    try:
        source = client.services.create(
            images["gateway"], name=f"{prefix}-src", labels=_labels(site_id, rid, "ship-src"),
            command=launcher_command(["python3", "-c", SOURCE, str(SHIP_PORT)], [], None),
            read_only=True, cap_drop=["ALL"], constraints=[f"node.id=={control_node_id}"],
            mounts=[types.Mount("/bundle", str(bundle), type="bind", read_only=True)],
            networks=[types.NetworkAttachmentConfig(net_name)], endpoint_spec=types.EndpointSpec(mode="dnsrr"),
            restart_policy=types.RestartPolicy(condition="none"), healthcheck=NO_HEALTHCHECK)
        config_id, config_name = trust_config
        run_job(client, prefix, image=images["app"], node_id=node_id, user="0",
                command=launcher_command(["python3", "-c", JOB, f"http://{prefix}-src:{SHIP_PORT}/",
                                          NODE_PROBE if probe_encryption else "", release_ref(bundle)], [], None),
                mounts=[types.Mount("/release", volume, type="volume",
                                    labels=_labels(site_id, rid, "release-volume"))],
                configs=[types.ConfigReference(config_id, config_name, filename="/trust.json")],
                networks=[net_name], labels=_labels(site_id, rid, "ship"), timeout=timeout)
    finally:
        if source is not None:
            source.remove()
        _remove_network(net)
    return volume


def wipe(client: Any, *, site_id: str, rid: str, volume: str, image: str, node_id: str,
         timeout: float = 60) -> None:
    """Empty a recipient's release volume on its node (revocation)."""
    import docker

    run_job(client, f"ss-{site_id}-{rid}-wipe", image=image, node_id=node_id, user="0",
            command=launcher_command(["python3", "-c", WIPE], [], None),
            mounts=[docker.types.Mount("/release", volume, type="volume")],
            labels=_labels(site_id, rid, "wipe"), timeout=timeout)


def _remove_network(net: Any, timeout: float = 20) -> None:
    """A network is in use until the manager has seen its last task go; retry until then."""
    import docker

    deadline = time.monotonic() + timeout
    while True:
        try:
            net.remove()
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
