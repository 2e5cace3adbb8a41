"""The release key's signature ledger (SITE/keys/release-signing.key.signed): what `safeshare release` signed, which a
rotation records as all the retiring key may still verify (issue 24, item 5; the leaked-key planting attack is in
tests/test_adversarial_round2.py)."""
from __future__ import annotations

import json
from pathlib import Path

from engine.bundle import seal_release
from safeshare.cli import main
from safeshare.signing import ledger_signatures
from tests.engine.test_trust_from_site import no_ambient_site, sealed  # noqa: F401
from tests.enclave.test_app_support import small_frame, write_output


def _site(root: Path) -> Path:
    site = root / "site"
    (site / "releases").mkdir(parents=True)
    return site


def _release(root: Path, site: Path, name: str) -> Path:
    out = root / name
    frame = small_frame()
    frame["site"] = frame["site"].astype(str) + name  # another table, another release id
    write_output(out, frame)
    return seal_release(out, site / "releases")


def test_a_site_s_first_ledger_adopts_the_seals_already_there_and_rotation_keeps_them(tmp_path: Path, capsys,
                                                                                    monkeypatch) -> None:
    site = _site(tmp_path)
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    older = sealed(tmp_path, site / "releases")          # sealed before ledgers existed: no ledger yet
    key_path = site / "keys" / "release-signing.key"
    assert ledger_signatures(key_path) is None
    newer = _release(tmp_path, site, "b")
    recorded = ledger_signatures(key_path)
    assert recorded is not None and len(recorded) == 2     # the older seal adopted, then the new one
    assert main(["custodian", "key", "rotate", "--purpose", "release", "--site", str(site), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["recorded"].values()) == [2]
    for bundle in (older, newer):
        assert main(["verify-release", str(bundle)]) == 0
    capsys.readouterr()
    # the new key writes to the same ledger; its own records are told apart by key id at the next rotation
    _release(tmp_path, site, "c")
    assert len(ledger_signatures(key_path) or []) == 3


def test_a_damaged_ledger_stops_the_rotation_with_the_key_unchanged(tmp_path: Path, capsys, monkeypatch) -> None:
    site = _site(tmp_path)
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    bundle = _release(tmp_path, site, "a")
    key_path = site / "keys" / "release-signing.key"
    before = key_path.read_bytes()
    with open(f"{key_path}.signed", "ab") as ledger:
        ledger.write(b"not json\n")
    capsys.readouterr()
    assert main(["custodian", "key", "rotate", "--purpose", "release", "--site", str(site)]) == 2
    err = capsys.readouterr().err
    assert "release-signing.key.signed: line 2: not JSON" in err
    assert key_path.read_bytes() == before
    assert main(["verify-release", str(bundle)]) == 0
