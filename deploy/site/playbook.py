"""Running the site playbook (deploy/site/ansible/site.yml) with the ansible-playbook of this virtualenv.

Why through the virtualenv: the `site` extra pins ansible-core, and the `ansible` package next to it bundles the
collections the site needs (community.docker for hosts that are containers); nothing comes from Ansible Galaxy,
which an enclave site's network may not reach. The inventory is checked first with `ansible-inventory` (the same
parser the playbook uses, so YAML and INI inventories both work), so that a wrong file fails with its name and the
problem before anything is prepared or touched.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PLAYBOOK_DIR = Path(__file__).resolve().parent / "ansible"
PLAYBOOK = PLAYBOOK_DIR / "site.yml"
CONTROL_GROUP = "safeshare_control"
ENCLAVE_GROUP = "safeshare_enclave"
RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
                   r"\s+failed=(?P<failed>\d+)")


class InventoryError(ValueError):
    """An inventory that cannot describe a site; the message names the file and the problem (exit 2)."""


class AnsibleMissing(RuntimeError):
    """ansible-playbook is not installed in this virtualenv (the `site` extra)."""


@dataclass
class SiteInventory:
    """The hosts of a site and the images each needs, as Ansible reads the inventory."""

    path: Path
    control: list[str]
    enclaves: list[str]
    images: dict[str, list[str]] = field(default_factory=dict)  # host -> image names

    @property
    def image_names(self) -> set[str]:
        return {name for names in self.images.values() for name in names}


def tool(name: str) -> Path:
    """An Ansible command of this interpreter's environment."""
    path = Path(sys.executable).parent / name
    if not os.access(path, os.X_OK):
        raise AnsibleMissing(f"{name} is not installed next to {sys.executable}: install the site extra "
                             "(pip install -e '.[site]', or scripts/setup.sh)")
    return path


def environment() -> dict[str, str]:
    """The caller's environment (an operator's ANSIBLE_* settings, such as a key file or vault password file, still
    apply) with ansible.cfg next to the playbook instead of whichever ansible.cfg the current folder has."""
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(PLAYBOOK_DIR / "ansible.cfg")
    env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "True"
    env["ANSIBLE_FORCE_COLOR"] = env.get("ANSIBLE_FORCE_COLOR", "0")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # ansible-playbook runs from this virtualenv: its bin first, so the modules run locally find the same Python
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _ansible_message(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("[WARNING]: Skipping")]
    return " ".join(lines)[-1500:] or "ansible-inventory failed"


def load_inventory(path: Path, default_images: dict[str, tuple[str, ...]] | None = None) -> SiteInventory:
    """Parse and check an inventory: exactly one host in safeshare_control (the site's keys and database live there),
    any number in safeshare_enclave, no host in both. `default_images` (group -> names) applies where a host sets no
    `safeshare_images`."""
    if not path.is_file():
        raise InventoryError(f"{path}: no such inventory file")
    try:
        done = subprocess.run([str(tool("ansible-inventory")), "-i", str(path), "--list"], capture_output=True,
                              text=True, env=environment(), timeout=120)
    except subprocess.TimeoutExpired:
        raise InventoryError(f"{path}: ansible-inventory did not finish in 120 s") from None
    if done.returncode != 0:
        raise InventoryError(f"{path}: {_ansible_message(done.stderr or done.stdout)}")
    try:
        listing = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise InventoryError(f"{path}: ansible-inventory printed no inventory") from None

    def hosts(group: str) -> list[str]:
        """A group's hosts, those of its child groups included."""
        entry = listing.get(group) or {}
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            found += [host for host in hosts(child) if host not in found]
        return found

    control, enclaves = hosts(CONTROL_GROUP), hosts(ENCLAVE_GROUP)
    if len(control) != 1:
        raise InventoryError(f"{path}: group {CONTROL_GROUP!r} must hold exactly one host (the site's database and "
                             f"private keys live there), it holds {len(control)}"
                             + (f": {', '.join(control)}" if control else ""))
    both = sorted(set(control) & set(enclaves))
    if both:
        raise InventoryError(f"{path}: host {both[0]!r} is in both {CONTROL_GROUP!r} and {ENCLAVE_GROUP!r}")
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    defaults = default_images or {}
    images: dict[str, list[str]] = {}
    for group, members in ((CONTROL_GROUP, control), (ENCLAVE_GROUP, enclaves)):
        for host in members:
            names = hostvars.get(host, {}).get("safeshare_images", list(defaults.get(group, ())))
            if isinstance(names, str) or not all(isinstance(name, str) for name in names):
                raise InventoryError(f"{path}: host {host!r}: safeshare_images must be a list of image names, got "
                                     f"{names!r}")
            images[host] = list(names)
    return SiteInventory(path, control, enclaves, images)


def playbook_command(inventory: Path, extra_vars: Path, check: bool = False, limit: str | None = None,
                     verbose: int = 0) -> list[str]:
    argv = [str(tool("ansible-playbook")), "-i", str(inventory), str(PLAYBOOK), "-e", f"@{extra_vars}"]
    if check:
        argv += ["--check", "--diff"]
    if limit:
        argv += ["--limit", limit]
    if verbose:
        argv.append("-" + "v" * verbose)
    return argv


def run_playbook(argv: list[str]) -> tuple[int, dict[str, dict[str, int]]]:
    """Run ansible-playbook with its output passed through; (exit code, PLAY RECAP per host)."""
    recap: dict[str, dict[str, int]] = {}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
                          cwd=PLAYBOOK_DIR) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            match = RECAP.match(line.strip())
            if match:
                recap[match["host"]] = {key: int(value) for key, value in match.groupdict().items() if key != "host"}
        sys.stdout.flush()
    return process.returncode, recap
