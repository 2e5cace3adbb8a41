"""The signed output package: deterministic bytes, and `verify-output` failing for any changed byte or an untrusted
key (issue 27)."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from outputs.airlock.package import (PackageError, PackageInputError, build_package, verify_package,
                                     verify_package_bytes)
from safeshare.cli import main
from safeshare.signing import SigningKey, TrustStore, ensure_outputs_key
from tests.outputs.airlock_helpers import frozen_output, open_airlock, submit


@pytest.fixture()
def released(tmp_path: Path):
    site = tmp_path / "site"
    airlock = open_airlock(site)
    record = submit(airlock, [frozen_output("1"), frozen_output("2"),
                              frozen_output("3", "fail", justification="the small cell is a structural zero")])
    rid = record.request_id
    for oid in ("1", "3"):
        airlock.vote(rid, oid, "bob", "approve", "fine")
        airlock.vote(rid, oid, "carol", "approve")
    airlock.vote(rid, "2", "bob", "reject")
    airlock.vote(rid, "2", "carol", "reject")
    key = ensure_outputs_key(site)
    airlock.release(rid, key, "cli:custodian")
    yield site, airlock, rid, key
    airlock.close()


def test_package_holds_the_approved_outputs_and_verifies(released) -> None:
    site, airlock, rid, key = released
    path = airlock.store.package_file(rid)
    manifest = verify_package(path, site / "trust.json")
    assert manifest["request_id"] == rid and manifest["key_id"] == key.key_id
    assert [o["output_id"] for o in manifest["outputs"]] == ["1", "3"]  # the rejected output stays
    assert manifest["outputs"][1]["justification"] == "the small cell is a structural zero"
    assert [(v["checker"], v["vote"]) for v in manifest["outputs"][0]["votes"]] == [("bob", "approve"),
                                                                                   ("carol", "approve")]
    assert manifest["context"].startswith("Counts") and manifest["controls"]
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        assert names == ["manifest.json", "files/1/data.csv", "files/1/meta.json", "files/3/data.csv",
                         "files/3/meta.json", "signature.json"]
        assert all(i.compress_type == zipfile.ZIP_STORED and i.date_time == (1980, 1, 1, 0, 0, 0)
                   for i in archive.infolist())
        assert archive.read("files/1/data.csv") == airlock.store.read_output_file(rid, "1", "data.csv")
    assert airlock.get(rid).package_sha256 == __import__("hashlib").sha256(path.read_bytes()).hexdigest()


def test_package_is_byte_identical_when_rebuilt(released) -> None:
    site, airlock, rid, key = released
    data = airlock.store.package_file(rid).read_bytes()
    manifest = verify_package_bytes(data, TrustStore.load(site / "trust.json"))
    frozen = airlock.frozen(rid)
    contents = {oid: {n: airlock.store.read_output_file(rid, oid, n) for n in ("data.csv", "meta.json")}
                for oid in ("1", "3")}
    votes = {o["output_id"]: o["votes"] for o in manifest["outputs"]}
    again = build_package(frozen, contents, votes, SigningKey.load(key.path), manifest["released_at"])
    assert again == data
    assert build_package(frozen, contents, votes, key, manifest["released_at"]) == again


def test_any_changed_byte_fails(released) -> None:
    site, airlock, rid, _ = released
    data = airlock.store.package_file(rid).read_bytes()
    trust = TrustStore.load(site / "trust.json")
    for position in range(len(data)):  # every byte of the archive: members, headers, directory, signature
        changed = bytearray(data)
        changed[position] ^= 0x01
        with pytest.raises(PackageError):
            verify_package_bytes(bytes(changed), trust)
    for tail in (b"\0", b"PK\x05\x06" + b"\0" * 18):
        with pytest.raises(PackageError):
            verify_package_bytes(data + tail, trust)


def test_a_repacked_package_with_a_new_file_fails(released) -> None:
    site, airlock, rid, _ = released
    source = zipfile.ZipFile(airlock.store.package_file(rid))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        for info in source.infolist():
            out.writestr(info, source.read(info))
            if info.filename == "files/3/meta.json":
                out.writestr("files/3/extra.csv", b"a\n1\n")
    with pytest.raises(PackageError, match="members differ"):
        verify_package_bytes(buffer.getvalue(), TrustStore.load(site / "trust.json"))


def test_untrusted_key_fails(released, tmp_path: Path) -> None:
    site, airlock, rid, _ = released
    other = TrustStore([])
    other.add("outputs", SigningKey.generate(tmp_path / "other.key"))
    other.save(tmp_path / "other-trust.json")
    with pytest.raises(PackageError, match="does not trust"):
        verify_package(airlock.store.package_file(rid), tmp_path / "other-trust.json")
    # the same key trusted for another purpose does not count either
    release_only = TrustStore([])
    release_only.add("release", SigningKey.load(site / "keys" / "outputs-signing.key"))
    release_only.save(tmp_path / "release-trust.json")
    with pytest.raises(PackageError):
        verify_package(airlock.store.package_file(rid), tmp_path / "release-trust.json")
    # a package signed by a key the site never trusted, with the manifest naming it, fails too
    rogue = SigningKey.generate(tmp_path / "rogue.key")
    frozen = airlock.frozen(rid)
    contents = {"1": {"data.csv": airlock.store.read_output_file(rid, "1", "data.csv")}}
    forged = build_package(frozen, contents, {}, rogue, "2026-11-26T00:00:00+00:00")
    with pytest.raises(PackageError, match="does not trust"):
        verify_package_bytes(forged, TrustStore.load(site / "trust.json"))


def test_verify_output_command(released, tmp_path: Path, capsys) -> None:
    site, airlock, rid, _ = released
    package = airlock.store.package_file(rid)
    assert main(["verify-output", str(package), "--site", str(site), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verified"] is True and out["request_id"] == rid
    assert out["approved_by"] == {"1": ["bob", "carol"], "3": ["bob", "carol"]}
    assert main(["verify-output", str(package), "--trust", str(site / "trust.json")]) == 0
    changed = tmp_path / "changed.zip"
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 0xFF
    changed.write_bytes(bytes(data))
    assert main(["verify-output", str(changed), "--site", str(site)]) == 1
    assert "NOT VERIFIED" in capsys.readouterr().err
    other = TrustStore([])
    other.add("outputs", SigningKey.generate(tmp_path / "other.key"))
    other.save(tmp_path / "other.json")
    assert main(["verify-output", str(package), "--trust", str(tmp_path / "other.json")]) == 1
    assert main(["verify-output", str(tmp_path / "missing.zip"), "--site", str(site)]) == 2
    assert main(["verify-output", str(package), "--trust", str(tmp_path / "no-trust.json")]) == 2
    with pytest.raises(PackageInputError):
        verify_package(tmp_path / "missing.zip", site / "trust.json")
