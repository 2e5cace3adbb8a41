"""What the provisioning tests (one engine: test_provision.py; Swarm: test_swarm.py) set a site up with."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# (dataset policy, release name): the two sealed releases the provisioning tests give their recipients
RELEASES = (("adult-k5.yaml", "adult-k5"), ("fars-subset-k5.yaml", "fars-k5"))


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def seal_releases(root: Path) -> None:
    """De-identify each example policy next to `root` and seal it into ROOT/releases under its name."""
    for policy, name in RELEASES:
        out = root.parent / f"deid-{name}"
        done = cli("deid", f"policies/examples/{policy}", "--out", str(out), "--quiet")
        assert done.returncode == 0, done.stderr[-2000:]
        done = cli("release", str(out), "--to", str(root / "releases"), "--name", name)
        assert done.returncode == 0, done.stderr[-2000:]
