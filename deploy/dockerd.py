"""The Docker engine the enclaves run on: start Debian's `dockerd` when none answers, and say what it can do.

Why a module and not only a shell script: tests, `safeshare images build` and the provisioning code all need the same
answers (is there an engine, which storage driver, does it manage iptables, is the host rule for enclave bridges in
place), and a failure must come back as a reason a test can skip on. `scripts/dockerd.sh` runs this module.

Only the standard library is used, so the script works before the project's virtualenv exists.

What "works" means here:
- an engine answers `docker info`; if none does, `dockerd` is started detached (its own session, so it outlives the
  caller), logging to a file, first with the driver dockerd picks itself (overlay2 where the kernel allows), then with
  `vfs` (slow and large but works everywhere, e.g. nested in an overlay filesystem), and if dockerd cannot set up its
  iptables chains at all, once more with `--iptables=false` (images build and run, but networks are not isolated);
- network isolation (`networks_isolated`): dockerd manages iptables (internal networks really drop forwarded
  traffic) AND the host rule `iptables -I INPUT -i ss-+ -j DROP` is in place, because an internal network only stops
  forwarding: packets addressed to the host itself still arrive through INPUT. Every enclave bridge is therefore named
  with ENCLAVE_BRIDGE_PREFIX (`com.docker.network.bridge.name`).

The engine is shared (other people's containers may run on it): nothing here stops it or removes anything.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from safeshare.exitcodes import EXIT_NO_ENGINE, EXIT_NOT_ISOLATED, EXIT_OK

DEFAULT_LOG = Path(os.environ.get("SAFESHARE_DOCKERD_LOG", "/var/log/safeshare-dockerd.log"))
# Bridges of enclave networks are named ss-<something> (at most 15 characters in all, a Linux interface name).
ENCLAVE_BRIDGE_PREFIX = "ss-"
START_TIMEOUT = 60.0


class EngineUnavailable(RuntimeError):
    """No Docker engine answers and none could be started; the message says why (tests skip with it)."""


@dataclass
class EngineStatus:
    """What the running engine is and can do. `problems` lists, in words, why networks are not isolated."""

    server_version: str
    storage_driver: str
    iptables: bool  # dockerd manages iptables (its DOCKER chains exist): internal networks drop forwarded packets
    host_firewall: bool  # the INPUT rule that keeps enclave bridges (ss-*) off the host's own services
    cgroup_version: str = ""
    started_now: bool = False
    dockerd_args: list[str] = field(default_factory=list)
    log: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def networks_isolated(self) -> bool:
        return self.iptables and self.host_firewall

    def as_dict(self) -> dict:
        return {**asdict(self), "networks_isolated": self.networks_isolated}


def _docker_info(docker: str = "docker", timeout: float = 20) -> dict | None:
    """`docker info` as a dict, or None when no engine answers."""
    if shutil.which(docker) is None:
        return None
    try:
        result = subprocess.run([docker, "info", "--format", "{{json .}}"], capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        return None
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None
    # A client that cannot reach the server still prints client-side fields; ServerVersion is the server's.
    return info if info.get("ServerVersion") else None


def _iptables(*args: str) -> subprocess.CompletedProcess | None:
    if shutil.which("iptables") is None:
        return None
    try:
        return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None


def _docker_manages_iptables() -> bool:
    """dockerd creates the DOCKER-ISOLATION-STAGE-1 chain when (and only when) it manages iptables."""
    result = _iptables("-S", "DOCKER-ISOLATION-STAGE-1")
    return result is not None and result.returncode == 0


def host_firewall_rule() -> list[str]:
    """The rule (as iptables arguments without -A/-I/-C) that drops what enclave bridges send to the host."""
    return ["INPUT", "-i", ENCLAVE_BRIDGE_PREFIX + "+", "-j", "DROP"]


def ensure_host_firewall() -> str | None:
    """Install the host rule for enclave bridges if missing (idempotent); None on success, else why not."""
    rule = host_firewall_rule()
    check = _iptables("-C", *rule)
    if check is None:
        return "iptables is not installed or does not answer"
    if check.returncode == 0:
        return None
    insert = _iptables("-I", *rule)
    if insert is None or insert.returncode != 0:
        return f"iptables -I {' '.join(rule)} failed: {(insert.stderr if insert else '').strip()}"
    return None


def status(docker: str = "docker", firewall: bool = True) -> EngineStatus | None:
    """The running engine's status (installing the host rule when `firewall`), or None when no engine answers."""
    info = _docker_info(docker)
    if info is None:
        return None
    problems: list[str] = []
    iptables = _docker_manages_iptables()
    if not iptables:
        problems.append("dockerd does not manage iptables (started with --iptables=false, or iptables does not work "
                        "here): internal networks do not drop forwarded traffic")
    host_rule = False
    if firewall:
        reason = ensure_host_firewall()
        host_rule = reason is None
        if reason:
            problems.append(f"no host rule for enclave bridges ({reason}): enclaves could reach the host's services")
    else:
        check = _iptables("-C", *host_firewall_rule())
        host_rule = check is not None and check.returncode == 0
    return EngineStatus(server_version=str(info.get("ServerVersion", "")), storage_driver=str(info.get("Driver", "")),
                        iptables=iptables, host_firewall=host_rule, cgroup_version=str(info.get("CgroupVersion", "")),
                        problems=problems)


def _try_dockerd(args: list[str], log: Path, docker: str, timeout: float) -> tuple[bool, str]:
    """Start `dockerd ARGS` detached; (True, "") once `docker info` answers, else (False, the log since start)."""
    start = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} safeshare: dockerd {' '.join(args)}\n".encode())
        out.flush()
        # start_new_session: dockerd must outlive this process and its terminal (it is shared, and stays up).
        proc = subprocess.Popen(["dockerd", *args], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _docker_info(docker, timeout=5) is not None:
            return True, ""
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    if proc.poll() is None:  # neither answering nor gone: stop it so that the next attempt does not collide
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    with open(log, "rb") as handle:
        handle.seek(start)
        return False, handle.read().decode(errors="replace")


def _iptables_failure(text: str) -> bool:
    lowered = text.lower()
    return "iptables" in lowered and ("failed" in lowered or "error" in lowered or "unable" in lowered)


def start(log: Path = DEFAULT_LOG, docker: str = "docker", timeout: float = START_TIMEOUT,
          firewall: bool = True) -> EngineStatus:
    """The engine's status, starting `dockerd` first if none answers (idempotent). Raises EngineUnavailable."""
    current = status(docker, firewall)
    if current is not None:
        return current
    if shutil.which("dockerd") is None or shutil.which(docker) is None:
        raise EngineUnavailable("dockerd/docker are not installed (scripts/setup.sh installs Debian's docker.io)")
    if os.geteuid() != 0:
        raise EngineUnavailable("no Docker engine answers, and starting dockerd needs root")
    log.parent.mkdir(parents=True, exist_ok=True)
    attempts: list[list[str]] = [[], ["--storage-driver", "vfs"]]
    failures: list[str] = []
    tried: list[list[str]] = []
    while attempts:
        args = attempts.pop(0)
        tried.append(args)
        ok, output = _try_dockerd(args, log, docker, timeout)
        if ok:
            result = status(docker, firewall)
            if result is None:  # answered once, then went away
                failures.append(f"dockerd {' '.join(args)}: answered, then stopped")
                continue
            result.started_now, result.dockerd_args, result.log = True, args, str(log)
            return result
        last = "\n".join(output.strip().splitlines()[-6:])
        failures.append(f"dockerd {' '.join(args) or '(defaults)'}:\n{last}")
        if _iptables_failure(output) and "--iptables=false" not in args:
            # Images still build and run without iptables; networks will say they are not isolated.
            attempts.insert(0, [*args, "--iptables=false", "--ip-masq=false"])
    raise EngineUnavailable(f"no Docker engine could start here (log {log}):\n" + "\n".join(failures))


def register(subparsers: argparse._SubParsersAction) -> None:
    engine = subparsers.add_parser("engine", help="start the Docker engine if none runs, and report what it can do")
    sub = engine.add_subparsers(dest="engine_command", metavar="SUBCOMMAND")
    sub.required = True
    for name, text in (("start", "start dockerd when no engine answers (idempotent), then report"),
                       ("status", "report on the running engine; start nothing")):
        p = sub.add_parser(name, help=text,
                           description=text + f". Exit 0: engine up and its networks isolated; {EXIT_NOT_ISOLATED}: "
                                              f"engine up, networks NOT isolated; {EXIT_NO_ENGINE}: no engine.")
        p.add_argument("--log", default=str(DEFAULT_LOG), help=f"dockerd's log file (default {DEFAULT_LOG})")
        p.add_argument("--json", action="store_true", help="print the status as JSON")
        p.set_defaults(func=_cmd_start if name == "start" else _cmd_status)


def _report(result: EngineStatus | None, as_json: bool) -> int:
    if result is None:
        print("engine: no Docker engine answers", file=sys.stderr)
        return EXIT_NO_ENGINE
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        state = "started now" if result.started_now else "already running"
        print(f"engine: Docker {result.server_version} ({state}), storage driver {result.storage_driver}, "
              f"iptables {'managed' if result.iptables else 'NOT managed'}, host rule for {ENCLAVE_BRIDGE_PREFIX}* "
              f"bridges {'in place' if result.host_firewall else 'MISSING'}")
    for problem in result.problems:
        print(f"engine: {problem}", file=sys.stderr)
    return EXIT_OK if result.networks_isolated else EXIT_NOT_ISOLATED


def _cmd_start(args: argparse.Namespace) -> int:
    try:
        result = start(Path(args.log))
    except EngineUnavailable as exc:
        print(f"engine: {exc}", file=sys.stderr)
        return EXIT_NO_ENGINE
    return _report(result, args.json)


def _cmd_status(args: argparse.Namespace) -> int:
    return _report(status(firewall=False), args.json)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m deploy.dockerd start|status` (what scripts/dockerd.sh runs)."""
    parser = argparse.ArgumentParser(prog="deploy.dockerd")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    argv = list(argv if argv is not None else sys.argv[1:]) or ["start"]
    args = parser.parse_args(["engine", *argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
