"""Provisioning for the airlock (issue 26's leftover, issue 27): the app is told its recipient, gets the site's output
floor (SITE/outputs.yaml, read-only, found by its --site) when there is one, and writes its workspace
(SITE/enclaves/<rid>/workspace) at /state, which the host-side intake reads; the gateway reads the airlock store.
Without an engine: the plan, the workspace folder, what the app makes of /site, and the Swarm translation."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from deploy.plan import (APP_FLOOR, APP_SITE, APP_STATE, APP_UID, OUTPUTS_FLOOR_LABEL, app_argv, plan_enclave,
                         plan_gateway)
from deploy.provision import ensure_workspace
from deploy.site.folder import Site
from outputs.floor import effective_rules, site_folder
from policies.recipient import RecipientPolicy
from tests.deploy.test_plan import IMAGES, SUBNETS, site  # noqa: F401 (site: a fixture)

def policy(recipient: str = "alice") -> RecipientPolicy:
    return RecipientPolicy.model_validate({"recipient": recipient, "release": "adult-k5", "expires": "2099-12-31"})


def plan(site: Site, recipient: str = "alice"):
    return plan_enclave(site, policy(recipient), site.releases / "adult" / "00aa11bb22cc33dd", IMAGES, SUBNETS)


def option(argv, name: str) -> str | None:
    argv = list(argv)
    return argv[argv.index(name) + 1] if name in argv else None


def test_the_app_is_told_its_recipient_and_writes_its_workspace(site: Site) -> None:
    enclave = plan(site)
    assert option(enclave.app.command, "--recipient") == "alice"
    assert option(enclave.app.command, "--state") == APP_STATE == "/state"
    mounts = {m.target: m for m in enclave.app.mounts}
    workspace = mounts[APP_STATE]
    assert workspace.source == str(site.enclaves / enclave.rid / "workspace") == str(site.workspace(enclave.rid))
    assert workspace.read_only is False
    # the one writable mount of the enclave: the release, trust store and kiosk secrets stay read-only
    assert [m.target for m in (*enclave.app.mounts, *enclave.kiosk.mounts) if not m.read_only] == [APP_STATE]
    # a bind mount replaces the tmpfs the app had at /state (the other tmpfs, /tmp, stays)
    assert [path for path, _ in enclave.app.hardening.tmpfs] == ["/tmp"]
    assert enclave.app.hardening.read_only and enclave.app.hardening.cap_drop == ("ALL",)
    # another recipient has another workspace
    other = plan(site, "bob")
    assert {m.target: m.source for m in other.app.mounts}[APP_STATE] != workspace.source


def test_without_an_outputs_floor_the_app_gets_no_site(site: Site) -> None:
    enclave = plan(site)
    assert option(enclave.app.command, "--site") is None
    assert not [m for m in enclave.app.mounts if m.target.startswith(APP_SITE)]
    assert OUTPUTS_FLOOR_LABEL not in dict(enclave.app.labels)


def test_the_site_floor_is_mounted_read_only_and_found_by_the_app(site: Site, tmp_path: Path) -> None:
    site.outputs_floor.write_text("safe_threshold: 15\nzeros_are_disclosive: false\n")
    enclave = plan(site)
    assert option(enclave.app.command, "--site") == APP_SITE
    floor = {m.target: m for m in enclave.app.mounts}[APP_FLOOR]
    assert floor.source == str(site.root / "outputs.yaml") and floor.read_only
    assert APP_FLOOR == f"{APP_SITE}/outputs.yaml"
    # what the app does with --site /site: a folder holding only that file is a site whose floor is the file
    container_site = tmp_path / "container" / APP_SITE.strip("/")
    container_site.mkdir(parents=True)
    (container_site / "outputs.yaml").write_bytes(Path(floor.source).read_bytes())
    assert site_folder(str(container_site)) == container_site
    rules = effective_rules(str(container_site))
    assert rules.rules.safe_threshold == 15 and rules.rules.zeros_are_disclosive is False
    assert rules.origin["safe_threshold"] == "site" and rules.origin["safe_dof_threshold"] == "default"
    # a changed floor is a new spec (the running app read the old one at start): the reconciler replaces it
    before = enclave.app.spec_hash
    site.outputs_floor.write_text("safe_threshold: 20\n")
    assert plan(site).app.spec_hash != before
    site.outputs_floor.write_text("safe_threshold: 15\nzeros_are_disclosive: false\n")
    assert plan(site).app.spec_hash == before


def test_app_argv_options() -> None:
    argv = app_argv(bundle="/release", trust="/trust.json", state="/state", host="0.0.0.0", port=8050,
                    release="adult/1", recipient="alice", site="/site")
    assert option(argv, "--recipient") == "alice" and option(argv, "--site") == "/site"
    assert "--site" not in app_argv(bundle="b", trust="t", state="s", host="h", port=1)


def test_the_gateway_reads_the_airlock_store(site: Site) -> None:
    gateway = plan_gateway(site, IMAGES["gateway"]).gateway
    mounts = {m.target: m for m in gateway.mounts}
    assert mounts[str(site.airlock)].source == str(site.root / "airlock") and mounts[str(site.airlock)].read_only
    assert option(gateway.command, "--airlock") == str(site.airlock)


def test_site_prepare_makes_the_airlock_folder(site: Site) -> None:
    site.prepare()
    assert site.airlock.is_dir() and stat.S_IMODE(site.airlock.stat().st_mode) == 0o755


def test_the_workspace_folder(tmp_path: Path) -> None:
    workspace = tmp_path / "enclaves" / "0123456789" / "workspace"
    assert ensure_workspace(workspace) == workspace
    info = workspace.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    if os.geteuid() == 0:  # the app container's user writes it
        assert (info.st_uid, info.st_gid) == (APP_UID, APP_UID)
    # what the app wrote is kept when provisioning runs again
    (workspace / "outputs").mkdir()
    (workspace / "outputs" / "kept").write_text("x")
    ensure_workspace(workspace)
    assert (workspace / "outputs" / "kept").read_text() == "x"
    # a symlink in its place is removed, never followed into a bind mount
    target = tmp_path / "elsewhere"
    target.mkdir()
    other = tmp_path / "enclaves" / "9876543210" / "workspace"
    other.parent.mkdir(parents=True)
    other.symlink_to(target)
    ensure_workspace(other)
    assert other.is_dir() and not other.is_symlink() and target.is_dir() and not any(target.iterdir())


def test_swarm_keeps_a_tmpfs_workspace_and_ships_the_floor_as_a_config(site: Site) -> None:
    from deploy.swarm.specs import MOVED_TMPFS, NodeFiles, SpecError, service_draft

    site.outputs_floor.write_text("safe_threshold: 15\n")
    app = plan(site).app
    files = NodeFiles(release_volume="vol", trust_config=("tid", "trust"), floor_config=("fid", "ss-abc123-outputs"))
    draft = service_draft(app, image_id="sha256:feed", entrypoint=["tini", "--", "safeshare", "app"], node_id="n",
                          files=files)
    mounts = {m["Target"]: m for m in draft.kwargs["mounts"]}
    # the control host's workspace cannot be mounted on a node: a tmpfs owned as before (moved: deploy/swarm/specs.py)
    assert mounts[f"{MOVED_TMPFS}/state"]["Type"] == "tmpfs" and "/state" not in mounts
    assert option(draft.kwargs["command"], "--state") == f"{MOVED_TMPFS}/state"
    configs = {c["File"]["Name"]: c["ConfigName"] for c in draft.kwargs["configs"]}
    assert configs == {"/trust.json": "trust", APP_FLOOR: "ss-abc123-outputs"}
    assert option(draft.kwargs["command"], "--site") == APP_SITE
    # a floor the plan mounts but no config stands for is refused, never left out (ACRO's defaults may be laxer)
    with pytest.raises(SpecError):
        service_draft(app, image_id="x", entrypoint=[], node_id="n",
                      files=NodeFiles(release_volume="vol", trust_config=("tid", "trust")))


def test_provisioning_refuses_a_broken_floor_and_makes_the_workspace(tmp_path: Path) -> None:
    """Against a stand-in engine (tests/deploy/test_release_copy.py): the floor is checked before anything is
    applied, and the workspace the plan mounts exists, the app's."""
    from deploy.provision import ProvisionError
    from tests.deploy.test_release_copy import StandInEngine, StandInProvisioner
    from tests.engine.test_trust_from_site import sealed

    site = Site(tmp_path / "site")
    site.prepare()
    bundle = sealed(tmp_path, site.releases, dataset="adult")
    policy_file = tmp_path / "alice.yaml"
    policy_file.write_text(f"recipient: alice\nrelease: adult/{bundle.name}\nexpires: 2099-12-31\n")
    provisioner = StandInProvisioner(site)
    provisioner.stand_in = StandInEngine()
    try:
        site.outputs_floor.write_text("safe_threshold: ten\n")
        with pytest.raises(ProvisionError) as refused:
            provisioner.provision(policy_file, "test")
        assert refused.value.bad_input and "outputs.yaml" in str(refused.value) and "safe_threshold" in str(
            refused.value)
        assert provisioner.stand_in.plans == []
        site.outputs_floor.write_text("safe_threshold: 15\n")
        provisioner.provision(policy_file, "test")
        (applied,) = provisioner.stand_in.plans
        workspace = Path({m.target: m.source for m in applied.app.mounts}[APP_STATE])
        assert workspace == site.workspace(applied.rid) and workspace.is_dir() and not workspace.is_symlink()
        assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    finally:
        provisioner.close()
