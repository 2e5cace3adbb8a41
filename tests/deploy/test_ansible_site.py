"""`safeshare site deploy` for real: one control and two enclave hosts, each a container made from the project's
offline base image (safeshare/layer-base: Debian minbase with python3, no systemd), reached through Ansible's
community.docker.docker connection.

What is exercised, end to end: the local apt repository made here and installed from on the hosts (docker.io,
iptables, logrotate, python3-venv: the targets reach no mirror), the control host's virtualenv from shipped wheels,
`safeshare site init` there, the gateway and the custodian service under the roles' supervisor (the image's init is
tini), a Docker engine on every host (dockerd runs inside the target: SYS_ADMIN and NET_ADMIN, /var/lib/docker on a
tmpfs) with the host firewall rule in the host's own netfilter, an offline image shipped as a `docker save` archive
and loaded into that engine, the site's public keys on enclave hosts. To keep the cost down the hosts get the base
image (126 MB) instead of app, kiosk and gateway (1.9 GB): the same tasks, smaller archives. Containers of the
enclaves themselves are not started on the targets (provisioning is another module's test).
"""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.images.rootfs import DEFAULT_CACHE

REPO = Path(__file__).resolve().parents[2]
LABEL = "org.safeshare.test=ansible"
ARTIFACTS = DEFAULT_CACHE.parent / "site-test"  # reused between runs: the .debs and wheels are fetched once
SITE = "/var/lib/safeshare"
HOSTS = ("control", "enclave1", "enclave2")
ansible_installed = (Path(sys.executable).parent / "ansible-playbook").is_file()
needs_ansible = pytest.mark.skipif(not ansible_installed, reason="the site extra (ansible) is not installed: "
                                                                 "scripts/setup.sh")


def deploy(inventory: Path, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, float, dict]:
    """Run `safeshare site deploy --json`; (process, seconds, the JSON summary of its last line)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "safeshare.cli", "site", "deploy", str(inventory), "--json",
                           "--artifacts", str(ARTIFACTS), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)
    seconds = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        summary = {}
    return done, seconds, summary


def in_host(name: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", name, *argv], capture_output=True, text=True, timeout=60)


def write_inventory(path: Path, names: dict[str, str], base_image: str) -> Path:
    inventory = {"all": {
        "vars": {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
                 "safeshare_site": SITE, "safeshare_images": [base_image]},
        "children": {
            # the gateway service is off by default (provisioning runs the gateway as a container): on here, to test it
            "safeshare_control": {"hosts": {"control": {"ansible_host": names["control"],
                                                        "safeshare_gateway_service": True}}},
            "safeshare_enclave": {"hosts": {host: {"ansible_host": names[host]} for host in ("enclave1", "enclave2")}},
        }}}
    path.write_text(json.dumps(inventory, indent=2))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def site_hosts(offline_images, tmp_path_factory):
    """Three running target containers (removed afterwards, with their anonymous volumes) and their inventory."""
    base = next((step for step in offline_images.steps if step.service == "layer-base"), None)
    assert base is not None, "the offline build has no layer-base step"
    suffix = secrets.token_hex(3)
    names = {host: f"ss-ansible-{suffix}-{host}" for host in HOSTS}
    try:
        for host, name in names.items():
            subprocess.run(["docker", "run", "-d", "--name", name, "--hostname", host, "--label", LABEL,
                            # dockerd inside the target: mounts (overlay2 on the tmpfs) and its own iptables
                            "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN",
                            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
                            "--tmpfs", "/run", "--tmpfs", "/var/lib/docker",
                            base.tag, "tini", "--", "sleep", "infinity"], check=True, capture_output=True, text=True)
        inventory = write_inventory(tmp_path_factory.mktemp("ansible") / "inventory.yml", names, "layer-base")
        yield {"names": names, "inventory": inventory, "base": base}
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", *names.values()], capture_output=True)


@pytest.fixture(scope="module")
def first_deploy(site_hosts):
    # --check on a host nothing was deployed to: it says what would change and leaves the host as it is
    done, seconds, summary = deploy(site_hosts["inventory"], "--check", "--limit", "enclave1")
    print(f"\ncheck of a bare host: {seconds:.1f} s, recap {summary.get('recap')}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert summary["recap"]["enclave1"]["changed"] > 0
    assert in_host(site_hosts["names"]["enclave1"], "test", "-e", "/etc/safeshare").returncode != 0

    done, seconds, summary = deploy(site_hosts["inventory"], "--prepared")  # what the check prepared, nothing newer
    print(f"\nfirst deploy: {seconds:.1f} s, recap {summary.get('recap')}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return {"seconds": seconds, "summary": summary}


def _get(name: str, url: str) -> dict:
    probe = (f"import json, urllib.request; "
             f"print(urllib.request.urlopen({url!r}, timeout=5).read().decode())")
    done = in_host(name, "python3", "-c", probe)
    assert done.returncode == 0, f"{url} from {name}: {done.stderr}"
    return json.loads(done.stdout)


@needs_ansible
@pytest.mark.docker
@pytest.mark.ansible
def test_deploy_brings_up_control_and_enclave_hosts(site_hosts, first_deploy):
    names = site_hosts["names"]
    assert first_deploy["summary"]["changed"] > 0
    control = names["control"]
    # the custodian service and the gateway answer on the control host, from the virtualenv the roles made
    assert _get(control, "http://127.0.0.1:8070/healthz")["status"] == "ok"
    gateway = _get(control, "http://127.0.0.1:6080/healthz")
    assert gateway["status"] == "ok" and gateway["database"] is True
    assert in_host(control, "/opt/safeshare/bin/safeshare", "--help").returncode == 0
    assert in_host(control, "test", "-f", "/usr/share/novnc/core/rfb.js").returncode == 0
    base = site_hosts["base"]
    for host in HOSTS:
        name = names[host]
        # the engine runs inside the host, the image came as an archive (same id as built here), the rule is there
        image = in_host(name, "docker", "image", "inspect", "--format", "{{.Id}}", base.tag)
        assert image.returncode == 0 and image.stdout.strip() == base.id, (host, image.stderr)
        latest = in_host(name, "docker", "image", "inspect", "--format", "{{.Id}}", "safeshare/layer-base:latest")
        assert latest.stdout.strip() == base.id, (host, latest.stderr)  # what provisioning runs without images.json
        assert in_host(name, "iptables", "-C", "INPUT", "-i", "ss-+", "-j", "DROP").returncode == 0, host
        assert in_host(name, "logrotate", "--debug", "/etc/logrotate.d/safeshare").returncode == 0, host
        assert in_host(name, "ls", "/var/cache/safeshare/image-layer-base.tar").returncode != 0  # archives removed
        services = in_host(name, "sh", "-c", "for s in dockerd logrotate; do safeshare-supervise status $s; done")
        assert services.returncode == 0, (host, services.stdout)


@needs_ansible
@pytest.mark.docker
@pytest.mark.ansible
def test_only_public_keys_reach_enclave_hosts(site_hosts, first_deploy):
    names = site_hosts["names"]
    control_trust = in_host(names["control"], "cat", f"{SITE}/trust.json").stdout
    trusted = {key["purpose"] for key in json.loads(control_trust)["keys"]}
    assert {"release", "gateway"} <= trusted
    # the private keys exist on the control host, readable by their owners only
    for path in (f"{SITE}/keys/release-signing.key", f"{SITE}/secrets/gateway/signing.key"):
        mode = in_host(names["control"], "stat", "-c", "%a", path)
        assert mode.stdout.strip() == "600", (path, mode.stderr)
    for host in ("enclave1", "enclave2"):
        name = names[host]
        assert in_host(name, "cat", f"{SITE}/trust.json").stdout == control_trust
        listing = in_host(name, "find", SITE).stdout.split()
        assert sorted(listing) == [SITE, f"{SITE}/trust.json"], listing
        private = in_host(name, "grep", "-rl", "PRIVATE KEY", SITE, "/etc/safeshare", "/var/cache/safeshare",
                          "/usr/local/lib/safeshare", "/tmp", "/root")
        assert private.stdout.strip() == "", private.stdout
        assert in_host(name, "test", "-e", "/opt/safeshare").returncode != 0  # no custodian software either


@needs_ansible
@pytest.mark.docker
@pytest.mark.ansible
def test_second_deploy_changes_nothing_and_check_shows_a_drift(site_hosts, first_deploy):
    # --prepared: exactly what the first run shipped (other people's source edits in between would otherwise make
    # a new project wheel, which a deploy rightly installs)
    done, seconds, summary = deploy(site_hosts["inventory"], "--prepared")
    print(f"\nsecond deploy: {seconds:.1f} s (first {first_deploy['seconds']:.1f} s), recap {summary.get('recap')}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert set(summary["recap"]) == set(HOSTS)
    assert {host: recap["changed"] for host, recap in summary["recap"].items()} == {host: 0 for host in HOSTS}, \
        done.stdout[-6000:]

    # a drift on one host: --check reports it and leaves it; --limit keeps the other hosts out
    name = site_hosts["names"]["enclave1"]
    assert in_host(name, "rm", "/etc/logrotate.d/safeshare").returncode == 0
    done, seconds, summary = deploy(site_hosts["inventory"], "--prepared", "--check", "--limit", "enclave1")
    print(f"check: {seconds:.1f} s, recap {summary.get('recap')}")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert set(summary["recap"]) == {"enclave1"}
    assert summary["recap"]["enclave1"]["changed"] >= 1
    task = done.stdout.split("TASK [safeshare_host : Log rotation] ", 1)[1].split("TASK [", 1)[0]
    assert "changed: [enclave1]" in task, done.stdout[-4000:]
    assert in_host(name, "test", "-e", "/etc/logrotate.d/safeshare").returncode != 0


@needs_ansible
@pytest.mark.ansible
@pytest.mark.parametrize("text, problem", [
    ("all:\n  children:\n    safeshare_enclave:\n      hosts:\n        e1:\n",
     "'safeshare_control' must hold exactly one host"),
    ("all:\n  children:\n    safeshare_control:\n      hosts:\n        c1:\n        c2:\n", "holds 2: c1, c2"),
    ("all:\n  children:\n    safeshare_control:\n      hosts:\n        c1:\n"
     "    safeshare_enclave:\n      hosts:\n        c1:\n", "host 'c1' is in both"),
    ("all:\n  children: [unclosed\n", "inventory.yml"),
])
def test_a_bad_inventory_is_named_with_its_problem(tmp_path, text, problem):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(text)
    done, _, _ = deploy(inventory, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(inventory) in done.stderr and problem in done.stderr, done.stderr
    assert not done.stdout.strip(), "nothing is prepared or run for a bad inventory"


@needs_ansible
@pytest.mark.ansible
def test_a_missing_inventory_is_bad_input(tmp_path):
    done, _, _ = deploy(tmp_path / "nowhere.yml", timeout=60)
    assert done.returncode == 2 and "nowhere.yml: no such inventory file" in done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("service, after_docker", [("gateway", False), ("custodian", True)])
def test_the_systemd_units_verify(tmp_path, service, after_docker):
    """The systemd path is not run here (the targets have no systemd): its units at least pass systemd's checker."""
    import jinja2

    templates = REPO / "deploy" / "site" / "ansible" / "roles" / "safeshare_host" / "templates"
    run = tmp_path / f"{service}.run"
    run.write_text("#!/bin/sh\nexec true\n")
    run.chmod(0o755)
    unit = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined) \
        .get_template("service.unit.j2").render(ansible_managed="Ansible managed", service_name=service,
                                                 safeshare_logs="/var/log/safeshare", service_after_docker=after_docker)
    assert "ExecStart=/usr/local/lib/safeshare/" in unit
    path = tmp_path / f"safeshare-{service}.service"
    path.write_text(unit.replace(f"/usr/local/lib/safeshare/{service}.run", str(run)))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


@needs_ansible
@pytest.mark.ansible
def test_the_example_inventory_is_one_control_and_two_enclave_hosts():
    from deploy.site.artifacts import CONTROL_IMAGES, ENCLAVE_IMAGES
    from deploy.site.playbook import load_inventory

    site = load_inventory(REPO / "deploy" / "site" / "ansible" / "inventory.example.yml",
                          {"safeshare_control": CONTROL_IMAGES, "safeshare_enclave": ENCLAVE_IMAGES})
    assert site.control == ["control.site.example"]
    assert site.enclaves == ["enclave-1.site.example", "enclave-2.site.example"]
    assert site.image_names == {"gateway", "app", "kiosk"}
