"""A site's signing keys and trust store (issue 12, item 1) without a Docker engine: `safeshare site init` and
`Site.prepare` make both keys private and trust their public halves; provisioning refuses a release whose seal a
writer of the releases folder forged before any container starts; `safeshare up` signs with its home's key."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.provision import ProvisionError, Provisioner
from deploy.site.folder import Site
from engine.bundle import verify_bundle
from safeshare.signing import SigningKey, TrustStore
from tests.cli_inprocess import run_cli
from tests.enclave.test_app_support import small_frame, synthetic_bundle

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_site_init_makes_private_keys_and_trusts_them(tmp_path: Path) -> None:
    root = tmp_path / "site"
    done = run_cli("site", "init", "--site", str(root), "--json")  # in process; a real run: the tests below
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    site = Site(root)
    release, gateway = SigningKey.load(site.release_signing_key), SigningKey.load(site.gateway_signing_key)
    assert (report["release_key"]["key_id"], report["gateway_key"]["key_id"]) == (release.key_id, gateway.key_id)
    assert site.keys.stat().st_mode & 0o777 == 0o700
    assert site.gateway_signing_key.parent.stat().st_mode & 0o777 == 0o700
    for key in (site.release_signing_key, site.gateway_signing_key):
        assert key.stat().st_mode & 0o777 == 0o600
    assert site.trust_file.stat().st_mode & 0o777 == 0o644
    trust = TrustStore.load(site.trust_file)
    assert [(k.purpose, k.key_id) for k in trust.keys] == [("release", release.key_id), ("gateway", gateway.key_id)]
    assert "PRIVATE" not in site.trust_file.read_text()
    # idempotent: the keys stay, the text form names them
    again = run_cli("site", "init", "--site", str(root))
    assert again.returncode == 0 and release.key_id in again.stdout and gateway.key_id in again.stdout
    assert len(TrustStore.load(site.trust_file).keys) == 2
    # a release sealed into the site's store is signed with the site's key
    sealed = synthetic_bundle(tmp_path / "work", small_frame())
    done = run_cli("release", str(sealed.parent.parent.parent / "out"), "--to", str(site.releases))
    assert done.returncode == 0, done.stderr
    bundle = Path(done.stdout.strip())
    assert json.loads((bundle / "seal.json").read_text())["signature"]["key_id"] == release.key_id
    assert verify_bundle(bundle, site.trust_file)["dataset"] == "synth"


def test_site_init_refuses_a_key_others_can_read(tmp_path: Path) -> None:
    root = tmp_path / "site"
    assert run_cli("site", "init", "--site", str(root)).returncode == 0
    Site(root).release_signing_key.chmod(0o640)
    done = cli("site", "init", "--site", str(root))
    assert done.returncode == 2 and "release-signing.key" in done.stderr and "readable" in done.stderr


def test_site_down_needs_a_site(tmp_path: Path) -> None:
    done = cli("site", "down", "--site", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "not a site folder" in done.stderr


def test_provisioning_refuses_a_forged_release_before_any_container(tmp_path: Path) -> None:
    """A writer of SITE/releases points a release name at a bundle signed by a key the site does not trust:
    provisioning refuses it (exit 2, naming the field and the reason) before it talks to the Docker engine."""
    site = Site(tmp_path / "site")
    site.prepare()
    sealed = synthetic_bundle(tmp_path / "work", small_frame())
    done = cli("release", str(tmp_path / "work" / "out"), "--to", str(site.releases), "--name", "synth-ok")
    assert done.returncode == 0, done.stderr
    forged = site.releases / "synth" / "0000000000000000"
    shutil.copytree(sealed, forged)  # signed by the work folder's own key, which this site does not trust
    (site.releases / "synth-forged").symlink_to("synth/0000000000000000")
    # and signs the name's record with a key of theirs (engine.release_names: a name's binding is signed)
    from engine.release_names import sign_name, write_record
    from safeshare.signing import SigningKey
    write_record(site.releases, sign_name(SigningKey.generate(tmp_path / "eve.key"), "synth-forged", "synth",
                                          "0000000000000000"))
    policy = tmp_path / "eve.yaml"
    policy.write_text("recipient: eve\nrelease: synth-forged\nexpires: 2099-12-31\n")

    provisioner = Provisioner(site)  # its Docker client is made on first use: a refusal before it needs none
    try:
        with pytest.raises(ProvisionError, match="field 'release'.*which the site does not trust") as info:
            provisioner.provision(policy, "test")
        assert info.value.bad_input and provisioner._client is None
    finally:
        provisioner.close()
    done = run_cli("provision", str(policy), "--site", str(site.root))  # real runs: test_custodian_units.py
    assert done.returncode == 2 and "signature refused" in done.stderr


def test_up_signs_with_its_home_key_and_refuses_an_exposed_one(tmp_path: Path) -> None:
    """`safeshare up` seals into HOME/releases with HOME/keys/release-signing.key, trusted in HOME/trust.json (a
    site's layout); a key that others can read is bad input (exit 2) before any component starts."""
    from deploy.local import DEFAULT_POLICY, seal_demo_release

    home = tmp_path / "home"
    bundle = seal_demo_release(DEFAULT_POLICY, home, lambda text: None)
    key = SigningKey.load(home / "keys" / "release-signing.key")
    assert json.loads((bundle / "seal.json").read_text())["signature"]["key_id"] == key.key_id
    assert verify_bundle(bundle, home / "trust.json")["dataset"] == "adult"
    key.path.chmod(0o644)
    done = cli("up", "--home", str(home))
    assert done.returncode == 2 and "release-signing.key" in done.stderr, done.stderr
    assert not (home / "logs" / "app.log").exists() and not (home / "up.json").exists()
