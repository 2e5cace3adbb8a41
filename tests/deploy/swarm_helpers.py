"""A second Docker engine on this machine, in its own network namespace, as a Swarm worker of the host's engine.

Why a network namespace and not a second container engine in a container: the worker must be a node as the
manager sees any remote host (its own addresses, its own iptables, its own overlay endpoints, traffic between the
two only over a link), while sharing this machine's kernel and filesystem keeps it cheap. The namespace `ssw-<n>`
gets one end of a veth pair; the host keeps the other, and the Swarm is initialised on the host's end, so the only
path between the nodes is that link.

Everything the worker writes is under its own data root (/var/lib/safeshare-swarm/<name>: kept between runs, so
images loaded once stay loaded), exec root, pidfile and socket. `stop()` kills the daemon and everything it
started, removes the namespace and the link; the Swarm is left on both sides (`leave_swarm`), so the host's engine
is as it was before (other tests share it).

"Everything it started" is not dockerd's process tree: containerd starts each container's shim with `shim start`,
which daemonizes (the shim's parent becomes init), and the container's processes are the shim's. A teardown that
killed dockerd's descendants left the enclave's app and kiosk (Chromium) running after the suite (issue 24, item 13).
So the worker's processes are found by what they share, not by parentage (`node_processes`): the network namespace
(dockerd, containerd, the shims), the cgroup parent `/<name>` (every container process) and a command line naming
the worker's own folders, plus their descendants; `stop()` kills them until none is left and fails if one is.
`STARTED` lists the nodes this test session started: the deploy tests' session-end check looks for what is left of
those only (another session's worker on this machine is not this session's to judge or kill).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

STATE_ROOT = Path(os.environ.get("SAFESHARE_SWARM_TEST_ROOT", "/var/lib/safeshare-swarm"))
RUN_ROOT = Path("/run/safeshare-swarm")
WORKER_NAME = re.compile(r"ssw\d+")  # WorkerNode.name: also its namespace and its containers' cgroup parent
ENGINE_PROGRAMS = ("dockerd", "containerd", "runc", "docker-proxy")  # containerd-shim-runc-v2 starts so too
GONE_WITHIN = 15.0  # seconds for killed processes to be gone (an uninterruptible sleep ends, a zombie is reaped)


def run(*argv: str, timeout: float = 120, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, listed by `ps` before any is killed (not the shims: they are init's children)."""
    return _below(_children(), [pid])


def _children() -> dict[int, list[int]]:
    table = run("ps", "-e", "-o", "pid=,ppid=").stdout.split()
    children: dict[int, list[int]] = {}
    for child, parent in zip(table[::2], table[1::2]):
        children.setdefault(int(parent), []).append(int(child))
    return children


def _below(children: dict[int, list[int]], roots: list[int]) -> list[int]:
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:  # the process is gone, or a kernel thread
        return ""


def _netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _cgroups(pid: int | str) -> list[str]:
    """The process's cgroup paths (one per v1 hierarchy, one for v2)."""
    return [line.split(":", 2)[2] for line in _read(f"/proc/{pid}/cgroup").splitlines() if line.count(":") >= 2]


def _alive(pid: int) -> bool:
    """Running, stopped or sleeping: not gone and not a zombie (a zombie holds nothing, its parent reaps it)."""
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _engine_naming(pid: str, paths: tuple[str, ...]) -> bool:
    """An engine's process (dockerd, containerd, a shim, runc) whose command line names one of `paths`; not any
    process that mentions them (an operator's `tail` of the worker's log is not the worker's)."""
    argv = _read(f"/proc/{pid}/cmdline").split("\0")
    if not os.path.basename(argv[0]).startswith(ENGINE_PROGRAMS):
        return False
    line = " ".join(argv)
    return any(path in line for path in paths)


def find_processes(netns_inode: int | None = None, cgroup_parent: str | None = None,
                   paths: tuple[str, ...] = ()) -> list[int]:
    """Live processes in the network namespace `netns_inode`, in a cgroup at or below `cgroup_parent` (`/ssw1`),
    or whose command line names one of `paths`; then every descendant of those. Never this process."""
    roots = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        if netns_inode is not None and _netns_inode(entry) == netns_inode:
            roots.append(int(entry))
        elif cgroup_parent and any(c == cgroup_parent or c.startswith(cgroup_parent + "/") for c in _cgroups(entry)):
            roots.append(int(entry))
        elif paths and _engine_naming(entry, paths):
            roots.append(int(entry))
    found = set(roots) | set(_below(_children(), roots))
    found.discard(os.getpid())
    return sorted(pid for pid in found if _alive(pid))


def kill_all(find, what: str, timeout: float = GONE_WITHIN) -> list[int]:
    """SIGKILL whatever `find()` lists, again and again (a dying tree may still fork), until it lists nothing;
    the pids killed. RuntimeError, with their `ps` lines, if some are still there after `timeout`."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        victims = find()
        if not victims:
            return killed
        if time.monotonic() > deadline:
            listing = run("ps", "-o", "pid,ppid,stat,args", "-p", ",".join(map(str, victims)), check=False).stdout
            raise RuntimeError(f"{what}: {len(victims)} process(es) survive SIGKILL:\n{listing}")
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def stray_processes() -> list[int]:
    """Processes of any swarm test worker on this machine, of whichever session, running or left behind: in a cgroup
    named like a worker's (`/ssw1/...`: container processes), or naming the workers' folders on their command line
    (dockerd, containerd and each shim's socket address), and their descendants. Nothing of the host's own engine
    matches. For checks after a node's teardown (a running worker of another session would match too)."""
    cgroups = {c.split("/")[1] for entry in os.listdir("/proc") if entry.isdigit() for c in _cgroups(entry)
               if c.count("/") >= 1 and WORKER_NAME.fullmatch(c.split("/")[1])}
    found: set[int] = set(find_processes(paths=(str(RUN_ROOT), str(STATE_ROOT))))
    for name in cgroups:
        found.update(find_processes(cgroup_parent=f"/{name}"))
    return sorted(found)


STARTED: list["WorkerNode"] = []  # the nodes this process started (session-end check)


@dataclass
class WorkerNode:
    """dockerd #2: `name` is short (interface names allow 15 characters); `index` picks its /30 on the link."""

    name: str = "ssw1"
    index: int = 1
    proc: subprocess.Popen | None = None
    log_path: Path = field(init=False)
    netns_inode: int | None = None  # the namespace's identity, known even after `ip netns del`
    started: bool = False

    def __post_init__(self) -> None:
        self.netns = self.name
        self.host_if, self.node_if = f"{self.name}-h", f"{self.name}-n"
        base = 4 * self.index
        # not 10.213/16 (sites' front subnets) nor 10.214/16 (enclave pools)
        self.host_ip, self.node_ip = f"10.216.250.{base + 1}", f"10.216.250.{base + 2}"
        self.data_root = STATE_ROOT / self.name
        self.exec_root = RUN_ROOT / self.name / "exec"
        self.pidfile = RUN_ROOT / self.name / "dockerd.pid"
        self.socket = RUN_ROOT / self.name / "docker.sock"
        self.log_path = RUN_ROOT / self.name / "dockerd.log"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def docker(self, *args: str, timeout: float = 120, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return run("docker", "-H", self.host, *args, timeout=timeout, check=check, **kwargs)

    # --- the link --------------------------------------------------------------------------------------------------

    def make_link(self) -> None:
        self.remove_link()  # a previous run killed before its teardown
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.node_if)
        run("ip", "link", "set", self.node_if, "netns", self.netns)
        run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        run("ip", "link", "set", self.host_if, "up")
        inside = ("ip", "netns", "exec", self.netns)
        run(*inside, "ip", "addr", "add", f"{self.node_ip}/30", "dev", self.node_if)
        run(*inside, "ip", "link", "set", self.node_if, "up")
        run(*inside, "ip", "link", "set", "lo", "up")
        run(*inside, "ip", "route", "add", "default", "via", self.host_ip)
        self.netns_inode = os.stat(f"/run/netns/{self.netns}").st_ino

    def remove_link(self) -> None:
        run("ip", "link", "del", self.host_if, check=False)
        run("ip", "netns", "del", self.netns, check=False)

    # --- the daemon ------------------------------------------------------------------------------------------------

    def start(self, storage_driver: str | None = None, timeout: float = 60) -> None:
        if not self.started:
            STARTED.append(self)
            self.started = True
        for folder in (self.data_root, self.exec_root):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.data_root / "swarm", ignore_errors=True)  # a killed node's swarm state: join anew
        self.make_link()
        # nsenter, not `ip netns exec`: that remounts /sys in a new mount namespace, which hides the cgroup mounts
        argv = ["nsenter", f"--net=/run/netns/{self.netns}", "dockerd", "--data-root", str(self.data_root),
                "--exec-root", str(self.exec_root), "--pidfile", str(self.pidfile), "-H", self.host,
                "--cgroup-parent", f"/{self.name}", "--bip", "172.31.254.1/24", "--no-new-privileges"]
        if storage_driver:
            argv += ["--storage-driver", storage_driver]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker's dockerd exited: {self.log_tail()}")
            if self.docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=10).returncode == 0:
                self._forget_previous_run()
                return
            time.sleep(0.3)
        raise RuntimeError(f"the worker's dockerd did not answer within {timeout:.0f} s: {self.log_tail()}")

    def _forget_previous_run(self) -> None:
        """Containers and volumes a previous (killed) run left on this node's own engine; its images stay."""
        leftovers = self.docker("ps", "-aq").stdout.split()
        if leftovers:
            self.docker("rm", "-f", *leftovers, check=False)
        self.docker("volume", "prune", "-f", check=False)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def node_processes(self) -> list[int]:
        """Every live process of this node: in its network namespace (dockerd, containerd, the shims), in its
        containers' cgroup parent, or naming its folders; and their descendants (see the module's docstring)."""
        return find_processes(netns_inode=self.netns_inode, cgroup_parent=f"/{self.name}",
                              paths=(str(self.exec_root), str(self.data_root)))

    def kill(self) -> None:
        """The node dies as a host that loses its power does: its link goes first, so nothing it sends reaches the
        manager any more (no FIN or RST from the sockets of its dying processes), then dockerd, its containerd, the
        shims and every container, all at once (SIGKILL)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        run("ip", "link", "set", self.host_if, "down", check=False)
        kill_all(self.node_processes, f"the worker {self.name}")
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop the daemon (its containers with it), kill whatever of the node is left (a killed daemon's shims and
        containers), check that nothing is, then remove the namespace and the link."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        survivors: RuntimeError | None = None
        try:
            kill_all(self.node_processes, f"the worker {self.name}")
        except RuntimeError as exc:  # still cleaned up below; then the teardown fails, naming them
            survivors = exc
        if self.proc is not None and self.proc.poll() is None:
            self.proc.wait(timeout=30)
        # a killed daemon leaves its containers' overlay and secret mounts (and its data root's own) behind
        for root in (self.exec_root, self.data_root):
            for mount in reversed(self._mounts_below(root)):
                run("umount", "-l", mount, check=False)
        self.remove_link()
        shutil.rmtree(self.exec_root.parent, ignore_errors=True)
        if survivors is not None:
            raise survivors  # its namespace stays known: the survivors keep it alive
        self.netns_inode = None  # gone with its last process: the kernel may give the number to another namespace

    @staticmethod
    def _mounts_below(root: Path) -> list[str]:
        found = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1]
            if target.startswith(str(root)):
                found.append(target)
        return found

    # --- images ----------------------------------------------------------------------------------------------------

    def load_images(self, refs: list[str]) -> None:
        """`docker save | docker load` of the images the node lacks (by image id): a node gets images as archives,
        never from a registry."""
        missing = [ref for ref in refs if self._image_id(ref, self.host) != self._image_id(ref, None)]
        if not missing:
            return
        save = subprocess.Popen(["docker", "save", *missing], stdout=subprocess.PIPE)
        try:
            load = subprocess.run(["docker", "-H", self.host, "load", "-q"], stdin=save.stdout, capture_output=True,
                                  text=True, timeout=1800)
        finally:
            assert save.stdout is not None
            save.stdout.close()  # a load that failed early ends the save (EPIPE), instead of leaving it blocked
            try:
                save.wait(timeout=60)
            except subprocess.TimeoutExpired:
                save.kill()
                save.wait()
        if save.returncode != 0 or load.returncode != 0:
            raise RuntimeError(f"docker save | load failed (save {save.returncode}, load {load.returncode}): "
                               f"{load.stderr[-2000:]}")

    @staticmethod
    def _image_id(ref: str, host: str | None) -> str | None:
        argv = ["docker", *(["-H", host] if host else []), "image", "inspect", "--format", "{{.Id}}", ref]
        done = run(*argv, check=False, timeout=60)
        return done.stdout.strip() if done.returncode == 0 else None


def swarm_state(host: str | None = None) -> dict:
    argv = ["docker", *(["-H", host] if host else []), "info", "--format", "{{json .Swarm}}"]
    return json.loads(run(*argv, timeout=30).stdout)


def host_networks() -> set[str]:
    return set(run("docker", "network", "ls", "--format", "{{.Name}}").stdout.split())


def init_swarm(worker: WorkerNode) -> str:
    """The host's engine as the manager (advertised on the link only), `worker` joined; returns the worker's node
    id. Refuses when the host's engine is already in a swarm: that one is not this test's to change."""
    if swarm_state()["LocalNodeState"] != "inactive":
        raise RuntimeError("the host's Docker engine is already in a swarm; these tests make and leave their own")
    # a 1 s heartbeat: a dead node is seen as down in a few seconds instead of the default's ~15
    run("docker", "swarm", "init", "--advertise-addr", worker.host_ip, "--listen-addr", f"{worker.host_ip}:2377",
        "--data-path-addr", worker.host_ip, "--dispatcher-heartbeat", "1s", timeout=60)
    token = run("docker", "swarm", "join-token", "-q", "worker").stdout.strip()
    worker.docker("swarm", "join", "--token", token, "--advertise-addr", worker.node_ip,
                  "--listen-addr", f"{worker.node_ip}:2377", f"{worker.host_ip}:2377", timeout=60)
    return swarm_state(worker.host)["NodeID"]


def leave_swarm(worker: WorkerNode | None, networks_before: set[str]) -> None:
    """Both engines out of the swarm, and the networks swarm mode made on the host (ingress, docker_gwbridge)
    removed when they were not there before."""
    if worker is not None and worker.proc is not None and worker.proc.poll() is None:
        worker.docker("swarm", "leave", "--force", check=False, timeout=60)
    run("docker", "swarm", "leave", "--force", check=False, timeout=60)
    for name in ("docker_gwbridge",):
        if name not in networks_before and name in host_networks():
            run("docker", "network", "rm", name, check=False)
