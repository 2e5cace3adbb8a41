"""Issue 24, item 5: a copy of a retired key signs nothing new.

The attack, end to end through the command line: someone copies the site's release (or gateway) key, the custodian
rotates it (`safeshare custodian key rotate`), and the copy then signs a new seal with a `signed_at` before the
rotation. `signed_at` is written by the signer, so it cannot decide: the rotation records in trust.json the
signatures the old key had made (the seals under SITE/releases, the signed lines of the logs under SITE/sessions)
and a retired key verifies those only. What it signed before the rotation keeps verifying."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from engine.bundle import SEAL_FORMAT
from proxy.eventlog import seal_message
from safeshare.cli import main
from safeshare.signing import SignatureError, SigningKey, TrustStore, canonical
# no_ambient_site: an autouse fixture (no $SAFESHARE_SITE or default site of the machine running the tests)
from tests.engine.test_trust_from_site import app_outcome, no_ambient_site, raw_frame, sealed  # noqa: F401
from tests.enclave.test_app_support import write_output
from tests.proxy.test_seals import SiteFiles, lines_of, record_sessions


def rotate(site: Path, purpose: str, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["custodian", "key", "rotate", "--purpose", purpose, "--site", str(site), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def before(retired: str) -> str:
    """A signing time the thief chooses: the day before the rotation."""
    from datetime import datetime, timedelta

    return (datetime.fromisoformat(retired) - timedelta(days=1)).isoformat(timespec="seconds")


def test_a_copied_release_key_cannot_sign_after_the_rotation(tmp_path: Path, capsys, monkeypatch) -> None:
    site = tmp_path / "site"
    monkeypatch.setenv("SAFESHARE_SITE", str(site))
    genuine = sealed(tmp_path, site / "releases")
    stolen = SigningKey.load(shutil.copy2(site / "keys" / "release-signing.key", tmp_path / "stolen.key"))

    report = rotate(site, "release", capsys)
    assert report["retired"] == [stolen.key_id]
    retired = TrustStore.load(site / "trust.json").trusted("release")[0]
    assert retired.key_id == stolen.key_id and retired.retired
    # what the old key signed before the rotation still verifies
    assert main(["verify-release", str(genuine)]) == 0

    # the thief seals raw records with the copy, dated the day before the rotation, where the site's releases are
    out = tmp_path / "raw"
    manifest = write_output(out, raw_frame(), "synth")
    forged = site / "releases" / "synth" / manifest["data_sha256"][:16]
    shutil.copytree(out, forged)
    seal = {"format": SEAL_FORMAT, "dataset": "synth", "release": forged.name,
            "manifest_sha256": hashlib.sha256((forged / "manifest.json").read_bytes()).hexdigest(),
            "data_sha256": manifest["data_sha256"], "sealed_at": before(retired.retired)}
    seal["signature"] = stolen.sign(canonical(seal), signed_at=before(retired.retired))
    (forged / "seal.json").write_text(json.dumps(seal))
    capsys.readouterr()
    assert main(["verify-release", str(forged)]) == 1
    err = capsys.readouterr().err
    assert f"signed by key {stolen.key_id}, retired at {retired.retired}, but not among the 1 signature(s)" in err
    outcome, err = app_outcome(forged, tmp_path, {"SAFESHARE_SITE": str(site)})
    assert outcome == "2" and "a copy of a retired key signs nothing new" in err, err

    # the rotation recorded the one seal the old key had signed
    assert report["recorded"] == {stolen.key_id: 1}
    assert TrustStore.load(site / "trust.json").trusted("release")[0].signed_count == 1

    # nor can it re-sign the genuine seal's very content with another date (a new signature is a new signature)
    genuine_seal = json.loads((genuine / "seal.json").read_text())
    content = {k: v for k, v in genuine_seal.items() if k != "signature"}
    (genuine / "seal.json").write_text(json.dumps(
        {**content, "signature": stolen.sign(canonical(content), signed_at=before(retired.retired))}))
    assert main(["verify-release", str(genuine)]) == 1
    (genuine / "seal.json").write_text(json.dumps(genuine_seal))
    assert main(["verify-release", str(genuine)]) == 0

    # a second rotation keeps the first record and records what the second key signed
    rotate(site, "release", capsys)
    keys = TrustStore.load(site / "trust.json").trusted("release")
    assert [(k.retired is None, k.signed_count) for k in keys] == [(False, 1), (False, 0), (True, 0)]
    assert main(["verify-release", str(genuine)]) == 0


def test_a_copied_gateway_key_cannot_reseal_a_session_after_the_rotation(tmp_path: Path, capsys) -> None:
    site = SiteFiles.create(tmp_path / "site")
    (folder,) = record_sessions(site, 1)
    stolen = SigningKey.load(shutil.copy2(site.key, tmp_path / "stolen.key"))
    signed_lines = sum(1 for line in lines_of(folder) if b'"signature"' in line)

    report = rotate(site.root, "gateway", capsys)
    assert report["retired"] == [stolen.key_id]
    retired = site.trust().trusted("gateway")[0]
    assert main(["audit", "verify", str(site.sessions), "--site", str(site.root)]) == 0  # still verifies

    # the thief drops the blocked shortcut from the log, chains the lines again and seals them with the copy of
    # the retired key, dated the day before the rotation (meta.json follows the new seal, as the gateway writes it)
    records = [json.loads(line) for line in lines_of(folder)]
    records = [r for r in records if r["event"] != "key_blocked"]
    prev, lines = "0" * 64, []
    for index, record in enumerate(records):
        record["seq"], record["prev"] = index, prev
        if record["event"] in ("checkpoint", "seal"):
            record["lines"] = index
            message = seal_message if record["event"] == "seal" else _checkpoint_message()
            body = {k: v for k, v in record.items() if k != "signature"}
            record = {**body, "signature": stolen.sign(message(body), signed_at=before(retired.retired))}
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        prev = hashlib.sha256(line).hexdigest()
        lines.append(line)
    (folder / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "log_head": prev}, indent=2, sort_keys=True))

    capsys.readouterr()
    assert main(["audit", "verify", str(site.sessions), "--site", str(site.root)]) != 0
    out = capsys.readouterr()
    assert f"signed by key {stolen.key_id}, retired at {retired.retired}, but not among" in out.out + out.err
    # what the rotation recorded: every signed line of the log (its checkpoints and its seal)
    assert report["recorded"] == {stolen.key_id: signed_lines}


def _checkpoint_message():
    """The message function of signed checkpoints (proxy.eventlog; absent from logs written before them)."""
    from proxy import eventlog

    return getattr(eventlog, "checkpoint_message", seal_message)


def test_seals_kept_only_in_an_auditors_checkpoint_are_recorded_when_named(tmp_path: Path, capsys) -> None:
    """Retention deleted a session after the auditor exported a checkpoint (which keeps its signed seal line): the
    rotation does not find that seal under SITE/sessions, so it is recorded only from the file the custodian names
    with --also-signed; otherwise the retired key no longer verifies it."""
    site = SiteFiles.create(tmp_path / "site")
    (folder,) = record_sessions(site, 1)
    checkpoint = tmp_path / "auditor" / "checkpoint.json"
    checkpoint.parent.mkdir()
    assert main(["audit", "checkpoint", str(site.sessions), "--site", str(site.root), "--db", site.db,
                 "--out", str(checkpoint)]) == 0
    seal = json.loads(lines_of(folder)[-1])
    shutil.copytree(site.root, tmp_path / "unnamed")
    for root in (site.root, tmp_path / "unnamed"):
        shutil.rmtree(root / "sessions" / folder.name)  # what retention deletes
    assert main(["custodian", "key", "rotate", "--purpose", "gateway", "--site", str(tmp_path / "unnamed")]) == 0
    with pytest.raises(SignatureError, match="not among the 0 signature"):
        TrustStore.load(tmp_path / "unnamed" / "trust.json").verify("gateway", seal_message(seal), seal["signature"])

    report = rotate(site.root, "gateway", capsys, "--also-signed", str(checkpoint))
    assert list(report["recorded"].values()) == [1]
    assert site.trust().verify("gateway", seal_message(seal), seal["signature"]).key_id == seal["signature"]["key_id"]
    capsys.readouterr()
    assert main(["custodian", "key", "rotate", "--site", str(site.root), "--also-signed", str(tmp_path)]) == 2
    assert "--also-signed" in capsys.readouterr().err


def test_a_key_file_made_again_by_site_init_keeps_what_the_lost_key_signed(tmp_path: Path, capsys) -> None:
    """A release key file that is gone is made again by `safeshare site init`: the lost key is retired like a
    rotated one, with the seals it had signed recorded, so the site's releases stay valid and nothing new it would
    sign is."""
    site = tmp_path / "site"
    assert main(["site", "init", "--site", str(site)]) == 0
    genuine = sealed(tmp_path, site / "releases")
    lost = SigningKey.load(site / "keys" / "release-signing.key")
    (site / "keys" / "release-signing.key").unlink()
    assert main(["site", "init", "--site", str(site)]) == 0
    keys = TrustStore.load(site / "trust.json").trusted("release")
    assert [(k.key_id == lost.key_id, k.retired is None, k.signed_count) for k in keys] == [(True, False, 1),
                                                                                            (False, True, 0)]
    assert main(["verify-release", str(genuine), "--site", str(site)]) == 0
    seal = json.loads((genuine / "seal.json").read_text())
    content = {k: v for k, v in seal.items() if k != "signature"}
    resigned = lost.sign(canonical(content), signed_at="2001-01-01T00:00:00+00:00")  # a new signature, back-dated
    (genuine / "seal.json").write_text(json.dumps({**content, "signature": resigned}))
    assert main(["verify-release", str(genuine), "--site", str(site)]) == 1
