"""Signed release names (engine/release_names.py): a writer of the releases folder cannot make a name serve another
genuine release, a name without a signed record is refused with the way to fix it, and a rotation keeps names
verifying."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.bundle import BundleError, check_bundle, name_release, resolve_release
from engine.release_names import record_path
from safeshare.cli import main
from safeshare.signing import ledger_path, ledger_signatures, rotate_key
# no_ambient_site: an autouse fixture (no $SAFESHARE_SITE or default site of the machine running the tests)
from tests.engine.test_trust_from_site import no_ambient_site, raw_frame, sealed  # noqa: F401


@pytest.fixture
def two(tmp_path: Path, monkeypatch) -> tuple[Path, Path, Path]:
    """A site with two genuine releases, adult (the named one) and census (raw-like, what an attacker wants)."""
    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    releases = site / "releases"
    wanted = sealed(tmp_path, releases, dataset="adult")
    other = sealed(tmp_path, releases, frame=raw_frame().iloc[:30], dataset="census")
    return site, wanted, other


def _repoint(link: Path, target: Path) -> None:
    link.unlink()
    link.symlink_to(Path(target.parent.name) / target.name)


def test_a_re_pointed_name_is_refused_by_every_consumer(two, capsys) -> None:
    site, wanted, other = two
    releases, trust = site / "releases", site / "trust.json"
    link = name_release(releases, "adult-k5", wanted, trust=trust)
    assert resolve_release(releases, "adult-k5", trust=trust) == wanted.resolve()
    assert main(["verify-release", str(link)]) == 0
    _repoint(link, other)
    with pytest.raises(BundleError, match=rf"points at census/{other.name}, but its signed name record"):
        resolve_release(releases, "adult-k5", trust=trust)
    with pytest.raises(BundleError, match="signed name record"):   # the app's check (enclave.app.release.verify)
        check_bundle(link, trust)
    capsys.readouterr()
    assert main(["verify-release", str(link)]) == 1
    assert "signed name record" in capsys.readouterr().err


def test_a_forged_or_borrowed_record_is_refused(two) -> None:
    site, wanted, other = two
    releases, trust = site / "releases", site / "trust.json"
    name_release(releases, "adult-k5", wanted, trust=trust)
    name_release(releases, "census-raw", other, trust=trust)
    link = releases / "adult-k5"
    _repoint(link, other)
    record = record_path(releases, "adult-k5")
    # edited by hand: the signature no longer matches
    document = json.loads(record.read_text())
    document.update(dataset="census", release=other.name)
    record.write_text(json.dumps(document))
    with pytest.raises(BundleError, match="signature refused"):
        resolve_release(releases, "adult-k5", trust=trust)
    # another name's genuine record
    shutil.copy(record_path(releases, "census-raw"), record)
    with pytest.raises(BundleError, match="a record of another name"):
        resolve_release(releases, "adult-k5", trust=trust)
    # a genuine seal of the release, signed by the same key, is no name record
    shutil.copy(other / "seal.json", record)
    with pytest.raises(BundleError, match="signature refused|not a name record"):
        resolve_release(releases, "adult-k5", trust=trust)


def test_a_name_without_a_record_is_refused_until_named_again(two, capsys) -> None:
    site, wanted, _ = two
    releases, trust = site / "releases", site / "trust.json"
    (releases / "old-name").symlink_to(Path("adult") / wanted.name)   # a name made before names were signed
    with pytest.raises(BundleError, match=r"no signed record.*safeshare release RELEASES/<dataset>/<id> --to "
                                          r"RELEASES --name old-name"):
        resolve_release(releases, "old-name", trust=trust)
    capsys.readouterr()
    assert main(["verify-release", str(releases / "old-name")]) == 1
    assert "no signed record" in capsys.readouterr().err
    # naming the sealed bundle again (no deid output needed) signs the record
    assert main(["release", str(wanted), "--to", str(releases), "--name", "old-name"]) == 0
    assert resolve_release(releases, "old-name", trust=trust) == wanted.resolve()


def test_name_records_are_in_the_ledger_and_survive_a_rotation(two) -> None:
    site, wanted, other = two
    releases, trust = site / "releases", site / "trust.json"
    key_file = site / "keys" / "release-signing.key"
    name_release(releases, "adult-k5", wanted, trust=trust)
    signature = json.loads(record_path(releases, "adult-k5").read_text())["signature"]
    recorded = ledger_signatures(key_file)
    assert recorded is not None and signature in recorded
    lines = [json.loads(line) for line in ledger_path(key_file).read_text().splitlines()]
    assert any(line.get("name") == "adult-k5" and line["signature"] == signature for line in lines)
    # the first ledger adopted the seals already in RELEASES (sealed() writes no ledger)
    seal_signature = json.loads((other / "seal.json").read_text())["signature"]
    assert seal_signature in recorded
    rotate_key(key_file, trust, "release", signed=iter(ledger_signatures(key_file)))
    assert resolve_release(releases, "adult-k5", trust=trust) == wanted.resolve()


def test_an_older_record_of_the_name_restored_with_its_link_is_refused_by_the_custodian(two) -> None:
    """The name moved from adult to census (say a release sealed for a more trusted recipient was renamed away);
    a writer of the folder kept the old record and restores it with the old link: the record verifies, but the
    release key's ledger (SITE/keys, the custodian's) says it is not the name's newest, so provisioning refuses."""
    site, wanted, other = two
    releases, trust = site / "releases", site / "trust.json"
    record = record_path(releases, "shared")
    name_release(releases, "shared", wanted, trust=trust)
    old_record = record.read_bytes()
    name_release(releases, "shared", other, trust=trust)
    record.write_bytes(old_record)
    _repoint(releases / "shared", wanted)
    with pytest.raises(BundleError, match="not the newest record"):
        resolve_release(releases, "shared", trust=trust)
    # the newest record and its link are served
    name_release(releases, "shared", wanted, trust=trust)
    assert resolve_release(releases, "shared", trust=trust) == wanted.resolve()
