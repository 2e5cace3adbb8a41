"""A plan's ContainerSpec (deploy/plan.py) as a Swarm service, for deploy/swarm/reconcile.py.

The plan is written for one engine; three things in it a Swarm service cannot say the same way, and each is
translated here rather than planned twice:

- Files from the control host. A task may run on another host, so a bind mount of SITE/... would mount whatever
  that host has at the path (or nothing). Each of the plan's mounts is mapped by its target: the sealed release
  (/release) to a node-local volume that deploy/swarm/ship.py filled and verified on that node, the trust store
  (/trust.json) and the site's output floor (/site/outputs.yaml) to Swarm configs, the kiosk's secrets folder to a
  Swarm secret holding its VNC password, and the app's read-write workspace (/state) to a tmpfs (no intake reads
  a workspace on another node, so nothing leaves through the airlock there yet). Any other bind mount is refused:
  nothing is mounted from a path that may not hold what the plan meant.
- Fixed addresses. A task cannot be given an address on an overlay network, and the kiosk's VNC server must listen
  on its VNC network's address only (not on the enclave network the app shares). The launcher below finds the
  container's own address in the planned subnet at start and puts it after `--vnc-listen`.
- no-new-privileges. Service specs of API 1.41 (Docker 20.10) cannot set it, so the launcher sets it with prctl
  before it execs the image's entrypoint; everything the entrypoint starts inherits it. tmpfs options other than
  size and mode are not expressible either: tmpfs mounts get mode 0777 instead of an owner (a task's tmpfs is
  its own; Swarm reads the mode as a Go FileMode, so no sticky bit), and one the plan gives an owner moves to where
  the image has no folder (MOVED_TMPFS), since Docker would copy the image folder's owner and mode into it.

Anything in a spec that cannot be translated raises SpecError: a service that would be weaker than the container
is never created.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy.plan import APP_FLOOR, APP_STATE, APP_TRUST, KIOSK_SECRETS, ContainerSpec

NODE_LABEL = "org.safeshare.node"
SWARM_SPEC_LABEL = "org.safeshare.swarm-spec"  # the plan's spec hash plus what only Swarm adds (node, volume, ...)
RELEASE_TARGET = "/release"
NO_NEW_PRIVS = "no-new-privileges:true"
MOVED_TMPFS = "/run/ss-tmpfs"  # where tmpfs mounts that need an owner go (see service_draft)
SWARM_WORKSPACE_TMPFS = "size=512m,uid=10001,gid=10001"  # the app's /state on Swarm (see service_draft)

# Run by the image's python3 as the service's command: no-new-privileges for the whole task, then (when a subnet is
# given) the container's own address in that subnet after --vnc-listen, then exec the image's entrypoint.
LAUNCHER = r"""
import ctypes, fcntl, ipaddress, os, socket, struct, sys, time
PR_SET_NO_NEW_PRIVS = 38
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    sys.exit("launcher: prctl(PR_SET_NO_NEW_PRIVS) failed")
subnet, argv = sys.argv[1], sys.argv[3:]
if subnet:
    net, found = ipaddress.IPv4Network(subnet), None
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for attempt in range(50):
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            address = ipaddress.IPv4Address(raw[20:24])
            if address in net:
                found = str(address)
        if found:
            break
        time.sleep(0.1)
    if not found:
        sys.exit(f"launcher: no address in {subnet}")
    argv[argv.index("--vnc-listen") + 1] = found
os.execvp(argv[0], argv)
"""


class SpecError(Exception):
    """A plan's container cannot be a Swarm service with the same guarantees."""


@dataclass(frozen=True)
class NodeFiles:
    """What stands in for the control host's files on the node: names of Swarm objects and of the release volume."""

    release_volume: str | None = None
    trust_config: tuple[str, str] | None = None  # (id, name)
    vnc_secret: tuple[str, str] | None = None  # (id, name)
    floor_config: tuple[str, str] | None = None  # (id, name): SITE/outputs.yaml, when the plan mounts it


@dataclass(frozen=True)
class ServiceDraft:
    """Keyword arguments for `client.services.create`, and the hash that says whether a running service is it."""

    kwargs: dict[str, Any] = field(hash=False)
    swarm_hash: str


def _memory(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _tmpfs_size(options: str) -> int | None:
    for option in options.split(","):
        key, _, value = option.partition("=")
        if key == "size":
            return _memory(value)
    return None


def _argument(spec: ContainerSpec, option: str) -> str:
    try:
        return spec.command[spec.command.index(option) + 1]
    except (ValueError, IndexError):
        raise SpecError(f"{spec.name}: its command has no {option}") from None


def launcher_command(entrypoint: Sequence[str], args: Sequence[str], listen_subnet: str | None) -> list[str]:
    return ["python3", "-c", LAUNCHER, listen_subnet or "", "--", *entrypoint, *args]


def service_draft(spec: ContainerSpec, *, image_id: str, entrypoint: Sequence[str], node_id: str,
                  files: NodeFiles, listen_subnet: str | None = None,
                  extra_labels: Mapping[str, str] | None = None) -> ServiceDraft:
    """The service that runs `spec` on `node_id`, one task, restarted there (never moved: its files are there).

    The image is named by its id (`image_id`, the same on every node that loaded the same archive): a node then
    never tries a registry first, which for a tag costs a node without one a timeout (~30 s) per task start."""
    import docker

    types = docker.types
    hardening = spec.hardening
    unknown = [opt for opt in hardening.security_opt if opt != NO_NEW_PRIVS]
    if unknown:
        raise SpecError(f"{spec.name}: security options {unknown} cannot be set on a Swarm service")
    if spec.ports:
        raise SpecError(f"{spec.name}: published ports are not planned for enclave services")
    # Docker fills a tmpfs from the image's folder at its target (mode and owner included), so a tmpfs that the
    # plan gives an owner (uid=...) would stay root's: it is mounted where the image has nothing, and the command
    # is told the new path.
    # The app's workspace is a bind mount of the control host's SITE/enclaves/<rid>/workspace, which a node cannot
    # mount: on Swarm the app keeps its tmpfs workspace, as before the airlock (its outputs cannot be submitted
    # from another node: no intake reads them, so nothing leaves).
    tmpfs = dict(hardening.tmpfs)
    spec_mounts = []
    for mount in spec.mounts:
        if mount.target == APP_STATE and not mount.read_only:
            tmpfs.setdefault(APP_STATE, SWARM_WORKSPACE_TMPFS)
        else:
            spec_mounts.append(mount)
    moved = {path: f"{MOVED_TMPFS}{path}" for path, options in tmpfs.items() if "uid=" in options}
    mounts = [types.Mount(moved.get(path, path), "", type="tmpfs", tmpfs_size=_tmpfs_size(options),
                          tmpfs_mode=0o777) for path, options in tmpfs.items()]
    if hardening.shm_size:
        mounts.append(types.Mount("/dev/shm", "", type="tmpfs", tmpfs_size=_memory(hardening.shm_size),
                                  tmpfs_mode=0o777))
    secrets, configs = [], []
    for mount in spec_mounts:
        if mount.target == RELEASE_TARGET and files.release_volume:
            mounts.append(types.Mount(RELEASE_TARGET, files.release_volume, type="volume", read_only=True))
        elif mount.target == APP_TRUST and files.trust_config:
            config_id, name = files.trust_config
            configs.append(types.ConfigReference(config_id, name, filename=APP_TRUST, mode=0o444))
        elif mount.target == APP_FLOOR and files.floor_config:
            config_id, name = files.floor_config
            configs.append(types.ConfigReference(config_id, name, filename=APP_FLOOR, mode=0o444))
        elif mount.target == KIOSK_SECRETS and files.vnc_secret:
            secret_id, name = files.vnc_secret
            secrets.append(types.SecretReference(secret_id, name, filename=_argument(spec, "--vnc-password-file"),
                                                 mode=0o400))
        else:
            raise SpecError(f"{spec.name}: {mount.source} -> {mount.target} is a path on the control host; a "
                            f"service on another node cannot mount it")
        if not mount.read_only:
            raise SpecError(f"{spec.name}: {mount.target} must be read-only")
    command = launcher_command(entrypoint, [moved.get(arg, arg) for arg in spec.command], listen_subnet)
    labels = {**spec.engine_labels(), NODE_LABEL: node_id, **(extra_labels or {})}
    swarm_hash = hashlib.sha256(json.dumps([spec.spec_hash, image_id, node_id, files.release_volume, files.trust_config,
                                            files.vnc_secret, files.floor_config, command, sorted(labels.items())],
                                           sort_keys=True).encode()).hexdigest()[:16]
    labels[SWARM_SPEC_LABEL] = swarm_hash
    resources = types.Resources(mem_limit=spec.resources.memory_limit,
                                mem_reservation=spec.resources.memory_reservation)
    kwargs: dict[str, Any] = {
        "image": image_id, "command": command, "name": spec.name, "labels": labels, "container_labels": labels,
        "env": [f"{key}={value}" for key, value in spec.env] or None, "user": spec.user,
        "read_only": hardening.read_only, "cap_drop": list(hardening.cap_drop) or None,
        "cap_add": list(hardening.cap_add) or None, "mounts": mounts, "secrets": secrets or None,
        "configs": configs or None, "constraints": [f"node.id=={node_id}"], "resources": resources,
        "restart_policy": types.RestartPolicy(condition="any", delay=1_000_000_000),
        "stop_grace_period": 1_000_000_000,  # one engine removes enclaves with SIGKILL: no 10 s of SIGTERM grace
        "endpoint_spec": types.EndpointSpec(mode="dnsrr"),  # no IPVS (absent on many kernels, and not needed)
        "networks": [types.NetworkAttachmentConfig(a.network, aliases=list(a.aliases) or None)
                     for a in spec.networks],
        "mode": types.ServiceMode("replicated", replicas=1),
        # Swarm adds a task to its network's DNS only once its health check passed, the first check comes after
        # the images' 10 s interval, and the kiosk resolves `app` (the gateway the kiosk) at once: 10-20 s of
        # waiting per enclave. Readiness is the kiosk's ready event instead (app answering, X, VNC, browser), as
        # on one engine, where the health check restarts nothing either.
        "healthcheck": {"Test": ["NONE"]}}
    return ServiceDraft({k: v for k, v in kwargs.items() if v is not None}, swarm_hash)
