"""The enclave mounts the custodian's verified copy of its release (deploy/release_copy.py), not the live bundle
folder in SITE/releases: what a writer of that folder adds or replaces after provisioning never reaches /release.
Provisioning runs here against a stand-in engine (no Docker), which records the plan it was asked to apply."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from deploy.plan import EnclavePlan
from deploy.provision import Provisioner
from deploy.reconcile import Applied, Removed
from deploy.release_copy import copy_release
from deploy.site.folder import Site
from engine.bundle import BundleError, check_bundle
# no_ambient_site: an autouse fixture (no $SAFESHARE_SITE or default site of the machine running the tests)
from tests.engine.test_trust_from_site import no_ambient_site, raw_frame, sealed  # noqa: F401


class StandInEngine:
    """What Provisioner asks of a reconciler, without an engine: the plans it applied."""

    def __init__(self) -> None:
        self.plans: list[EnclavePlan] = []

    def allocate(self, names, pool):   # noqa: ANN001 - the reconciler's signature
        from deploy.plan import EnclaveSubnets
        return EnclaveSubnets(enclave="10.214.0.0/27", vnc="10.214.0.32/27")

    def ensure_gateway(self, plan) -> list[str]:   # noqa: ANN001
        return []

    def apply(self, plan: EnclavePlan) -> Applied:
        self.plans.append(plan)
        return Applied("created", {"app": "a", "kiosk": "k"})

    def find(self, kind: str, **labels: str) -> list:
        return []

    def remove_enclave(self, rid: str) -> Removed:
        return Removed([], [])


class StandInProvisioner(Provisioner):
    stand_in = StandInEngine()

    @property
    def engine(self):  # type: ignore[override]
        return self.stand_in


def _mounted(plan: EnclavePlan) -> Path:
    return Path(next(m.source for m in plan.app.mounts if m.target == "/release"))


@pytest.fixture
def site(tmp_path: Path) -> Site:
    site = Site(tmp_path / "site")
    site.prepare()
    return site


def test_provisioning_mounts_a_verified_copy_that_the_releases_writer_cannot_change(site: Site,
                                                                                      tmp_path: Path) -> None:
    bundle = sealed(tmp_path, site.releases, dataset="adult")
    other = sealed(tmp_path, site.releases, frame=raw_frame().iloc[:30], dataset="adult")
    policy = tmp_path / "alice.yaml"
    policy.write_text(f"recipient: alice\nrelease: adult/{bundle.name}\nexpires: 2099-12-31\n")
    provisioner = StandInProvisioner(site)
    provisioner.stand_in = StandInEngine()
    try:
        provisioner.provision(policy, "test")
        (plan,) = provisioner.stand_in.plans
        copy = _mounted(plan)
        assert not copy.resolve().is_relative_to(site.releases.resolve())
        assert copy == site.enclaves / plan.rid / "release" / "adult" / bundle.name
        check_bundle(copy, site.trust_file, f"adult/{bundle.name}")
        assert all(not os.stat(p).st_mode & 0o222 for p in copy.rglob("*") if p.is_file())  # 0444
        assert not copy.stat().st_mode & stat.S_IWOTH and not copy.stat().st_mode & stat.S_IWGRP
        # the releases folder's writer adds the raw table and replaces the data after provisioning: the enclave's
        # /release is the copy, which holds neither
        raw_frame().to_parquet(bundle / "raw.parquet")
        (bundle / "data.parquet").write_bytes(b"not the released data")
        assert not (copy / "raw.parquet").exists()
        check_bundle(copy, site.trust_file, f"adult/{bundle.name}")
        # provisioning again: the bundle no longer verifies, so nothing new is mounted
        with pytest.raises(Exception, match="field 'release'"):
            provisioner.provision(policy, "test")
        assert len(provisioner.stand_in.plans) == 1
        # another release: a new copy (a new mount, a new spec), the old one removed once applied
        policy.write_text(f"recipient: alice\nrelease: adult/{other.name}\nexpires: 2099-12-31\n")
        provisioner.provision(policy, "test")
        new_plan = provisioner.stand_in.plans[-1]
        assert _mounted(new_plan).name == other.name and new_plan.app.spec_hash != plan.app.spec_hash
        assert not copy.exists() and _mounted(new_plan).is_dir()
        provisioner.revoke("alice", "test")
        # every release copy goes; the app's workspace (outputs, airlock drafts) stays (tests/deploy/test_plan_airlock)
        assert not (site.enclaves / plan.rid / "release").exists()
        assert [p.name for p in (site.enclaves / plan.rid).iterdir()] == ["workspace"]
    finally:
        provisioner.close()


def test_a_copy_is_kept_while_it_verifies_and_made_again_when_it_does_not(site: Site, tmp_path: Path) -> None:
    bundle = sealed(tmp_path, site.releases, dataset="adult")
    release = f"adult/{bundle.name}"
    copy = site.release_copy("0123456789", release)
    copy_release(bundle, copy, site.trust_file, release)
    inode = (copy / "data.parquet").stat().st_ino
    copy_release(bundle, copy, site.trust_file, release)   # provisioning again changes nothing
    assert (copy / "data.parquet").stat().st_ino == inode
    os.chmod(copy / "data.parquet", 0o644)
    (copy / "data.parquet").write_bytes(b"damaged")
    copy_release(bundle, copy, site.trust_file, release)   # a damaged copy is made again from the bundle
    check_bundle(copy, site.trust_file, release)
    # a bundle holding a file its manifest does not list is not copied (nothing half-made is left)
    raw_frame().to_parquet(bundle / "raw.parquet")
    other = site.release_copy("9876543210", release)
    with pytest.raises(BundleError, match="not a file of this release"):
        copy_release(bundle, other, site.trust_file, release)
    assert not other.exists()
