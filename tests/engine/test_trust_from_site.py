"""Issue 24, item 1: the trust store comes from the site (or --trust), never from where a bundle lies, and a bundle
is the release its signed seal names only where it lies as RELEASES/<dataset>/<id>.

The attacks are those of a writer of the releases folder, end to end through `safeshare verify-release` and
`safeshare app`: a bundle of raw data signed with the attacker's own key at SITE/releases/sub/<dataset>/<id> with the
attacker's trust.json at SITE/releases/trust.json (which `RELEASES/../trust.json` of the bundle's path named), a
release name's link pointing there or at the attacker's own releases folder, and a genuine bundle copied under
another release's id or dataset. Provisioning's resolver (which passes the site's trust store) refuses the copies
as well."""
from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from engine.bundle import SEAL_FORMAT, BundleError, resolve_release, site_release_key
from safeshare.cli import main
from safeshare.signing import canonical
from tests.enclave.test_app_support import SAFESHARE, small_frame, write_output

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_ambient_site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No $SAFESHARE_SITE and no default site folder from the machine running the tests."""
    import safeshare.sitefolder

    monkeypatch.delenv("SAFESHARE_SITE", raising=False)
    monkeypatch.delenv("SAFESHARE_TRUST", raising=False)
    monkeypatch.setattr(safeshare.sitefolder, "DEFAULT_SITE", tmp_path / "no-default-site")


def sealed(root: Path, releases: Path, frame=None, dataset: str = "synth") -> Path:
    """A deid-style output of `frame` as a bundle RELEASES/<dataset>/<id> whose seal is signed, in the format
    `safeshare release` writes, with the release key of the site `releases/..` (made and trusted there on first
    use). Written here rather than by seal_release: these tests are about what verifiers trust, not the gate."""
    out = root / f"out-{dataset}-{len(list(root.glob('out-*')))}"
    manifest = write_output(out, small_frame() if frame is None else frame, dataset)
    key = site_release_key(releases)
    bundle = releases / dataset / manifest["data_sha256"][:16]
    shutil.copytree(out, bundle)
    seal = {"format": SEAL_FORMAT, "dataset": dataset, "release": bundle.name,
            "manifest_sha256": hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest(),
            "data_sha256": manifest["data_sha256"], "sealed_at": "2026-01-01T00:00:00+00:00"}
    seal["signature"] = key.sign(canonical(seal))
    (bundle / "seal.json").write_text(json.dumps(seal, indent=2) + "\n")
    return bundle


def raw_frame():
    """What the attacker wants served: records with nothing generalized (the 'raw records' of the issue)."""
    frame = small_frame()
    frame["age"] = [str(20 + i) for i in range(len(frame))]
    return frame


def app_outcome(bundle: Path, tmp_path: Path, env: dict[str, str], *extra: str) -> tuple[str, str]:
    """Run `safeshare app` on `bundle`: ('served', '') when it printed its ready line (then it is stopped), else
    (exit code, stderr)."""
    proc = subprocess.Popen([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(tmp_path / "state"),
                             "--port", "0", *extra], cwd=REPO, env={**os.environ, **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                if lines.get(timeout=0.1).startswith("app ready: "):
                    return "served", ""
            except queue.Empty:
                if proc.poll() is not None:
                    return str(proc.wait()), proc.stderr.read()
        raise AssertionError("safeshare app neither served nor exited")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def plant_own_key_bundle(tmp_path: Path, site: Path) -> tuple[Path, Path]:
    """The attack: a raw-data bundle signed by the attacker's own key (sealed at the attacker's own 'site', which
    trusts that key), copied to SITE/releases/sub/<dataset>/<id>, and the attacker's trust.json put at
    SITE/releases/trust.json. Returns (the planted bundle, the attacker's own bundle)."""
    own = sealed(tmp_path / "attacker", tmp_path / "attacker" / "releases", raw_frame())
    planted = site / "releases" / "sub" / own.parent.name / own.name
    shutil.copytree(own, planted)
    shutil.copy2(tmp_path / "attacker" / "trust.json", site / "releases" / "trust.json")
    return planted, own


def test_own_key_bundle_with_its_own_trust_json_in_the_releases_folder_is_refused(tmp_path: Path, capsys,
                                                                                  monkeypatch) -> None:
    site = tmp_path / "site"
    genuine = sealed(tmp_path, site / "releases")  # the site's key and trust store, made on first use
    planted, _ = plant_own_key_bundle(tmp_path, site)

    # named by $SAFESHARE_SITE and by --site alike: the site's trust store does not trust the attacker's key
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    assert main(["verify-release", str(planted)]) == 1
    assert f"which the site does not trust for release ({site / 'trust.json'})" in capsys.readouterr().err
    monkeypatch.delenv("SAFESHARE_SITE")
    assert main(["verify-release", str(planted), "--site", str(site)]) == 1
    assert "which the site does not trust for release" in capsys.readouterr().err
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    # the genuine release still verifies against the same site
    assert main(["verify-release", str(genuine)]) == 0
    assert f"trusted in {site / 'trust.json'}" in capsys.readouterr().out

    # the app, through its command line, refuses it before importing a record
    outcome, err = app_outcome(planted, tmp_path, {"SAFESHARE_SITE": str(site)})
    assert outcome == "2" and "which the site does not trust for release" in err, err
    assert not (tmp_path / "state" / "release.sqlite").exists()


def test_a_release_name_pointing_at_an_own_key_bundle_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    sealed(tmp_path, site / "releases")
    planted, own = plant_own_key_bundle(tmp_path, site)
    releases = site / "releases"
    (releases / "adult-k5").symlink_to(planted.relative_to(releases))  # into the planted sub-folder
    (releases / "adult-k6").symlink_to(own)  # to the attacker's own releases folder, whose ../trust.json is theirs
    for name in ("adult-k5", "adult-k6"):
        assert main(["verify-release", str(releases / name)]) == 1
        assert "which the site does not trust for release" in capsys.readouterr().err
        outcome, err = app_outcome(releases / name, tmp_path, {"SAFESHARE_SITE": str(site)})
        assert outcome == "2" and "which the site does not trust for release" in err, err


def test_without_a_named_site_nothing_is_trusted(tmp_path: Path, capsys) -> None:
    """No --trust, no --site, no $SAFESHARE_SITE and no default site: refused, even for a genuine bundle whose
    RELEASES/../trust.json would have trusted it (a bundle's own folder never says which keys to trust)."""
    genuine = sealed(tmp_path, tmp_path / "site" / "releases")
    assert main(["verify-release", str(genuine)]) == 2
    assert "no trust store" in capsys.readouterr().err
    outcome, err = app_outcome(genuine, tmp_path, {"SAFESHARE_SITE": "", "SAFESHARE_TRUST": ""})
    assert outcome == "2" and "no trust store" in err, err
    # named, it verifies
    assert main(["verify-release", str(genuine), "--trust", str(tmp_path / "site" / "trust.json")]) == 0


def test_a_genuine_bundle_copied_under_another_release_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    releases = site / "releases"
    genuine = sealed(tmp_path, releases)
    other_id = releases / genuine.parent.name / ("0" * 16)
    other_dataset = releases / "adult" / genuine.name
    for copy in (other_id, other_dataset):
        shutil.copytree(genuine, copy)
        assert main(["verify-release", str(copy)]) == 1
        err = capsys.readouterr().err
        assert f"sealed as release {genuine.parent.name}/{genuine.name}" in err, err
        assert f"read as {copy.parent.name}/{copy.name}" in err
        # what provisioning resolves a recipient policy's `release:` with
        with pytest.raises(BundleError, match="sealed as release"):
            resolve_release(releases, f"{copy.parent.name}/{copy.name}", trust=site / "trust.json")
    outcome, err = app_outcome(other_id, tmp_path, {"SAFESHARE_SITE": str(site)})
    assert outcome == "2" and "sealed as release" in err, err
    # a name whose link leads to a copy is refused as well; one to the genuine folder verifies
    (releases / "copied").symlink_to(other_id.relative_to(releases))
    assert main(["verify-release", str(releases / "copied")]) == 1
    from engine.bundle import name_release
    name_release(releases, "named", genuine, trust=site / "trust.json")   # a name's binding is signed
    assert main(["verify-release", str(releases / "named")]) == 0
    assert resolve_release(releases, "named", trust=site / "trust.json") == genuine.resolve()
    # a bundle deeper than RELEASES/<dataset>/<id> is no release of the site, even a genuine copy
    deeper = releases / "sub" / genuine.parent.name / genuine.name
    shutil.copytree(genuine, deeper)
    with pytest.raises(BundleError, match="not a bundle RELEASES/<dataset>/<id>"):
        resolve_release(releases, f"sub/{genuine.parent.name}/{genuine.name}", trust=site / "trust.json")


def test_a_folder_that_names_no_release_needs_the_release_named(tmp_path: Path, capsys) -> None:
    """A container mounts the bundle at /release, which says nothing: the app is told which release it is
    (provisioning passes --release DATASET/ID), and a wrong one is refused. Any folder name works the same way."""
    site = tmp_path / "site"
    genuine = sealed(tmp_path, site / "releases")
    mounted = tmp_path / "mnt" / "release"
    shutil.copytree(genuine, mounted)
    ref = f"{genuine.parent.name}/{genuine.name}"
    assert main(["verify-release", str(mounted), "--site", str(site)]) == 1
    assert main(["verify-release", str(mounted), "--site", str(site), "--release", ref]) == 0
    assert main(["verify-release", str(mounted), "--site", str(site), "--release", "synth/" + "1" * 16]) == 1
    capsys.readouterr()
    assert main(["verify-release", str(mounted), "--site", str(site), "--release", "no-slash"]) == 2
    assert "give it as DATASET/ID" in capsys.readouterr().err
    outcome, err = app_outcome(mounted, tmp_path, {"SAFESHARE_SITE": str(site)}, "--release", "synth/" + "1" * 16)
    assert outcome == "2" and "sealed as release" in err, err
    outcome, _ = app_outcome(mounted, tmp_path, {"SAFESHARE_SITE": str(site)}, "--release", ref)
    assert outcome == "served"
