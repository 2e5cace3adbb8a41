"""safeshare.signing: Ed25519 keys that refuse to be readable by others, a trust store per purpose, and rotation that
keeps old signatures valid only for what was signed before the retirement."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from safeshare.signing import (KeyFileError, SignatureError, SigningKey, TrustStore, canonical, ensure_key,
                               key_id_of, rotate_key)


def test_canonical_is_stable_and_refuses_non_finite_numbers() -> None:
    assert canonical({"b": 1, "a": [1.5, "é"]}) == b'{"a":[1.5,"\\u00e9"],"b":1}'
    assert canonical({"a": 1, "b": 2}) == canonical({"b": 2, "a": 1})
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError):
            canonical({"x": bad})


def test_generated_key_is_private_and_loads_back(tmp_path: Path) -> None:
    key = SigningKey.generate(tmp_path / "k" / "signing.key")
    assert (tmp_path / "k" / "signing.key").stat().st_mode & 0o777 == 0o600
    loaded = SigningKey.load(tmp_path / "k" / "signing.key")
    assert loaded.key_id == key.key_id == key_id_of(key.public_raw) and len(key.key_id) == 16
    assert not [p for p in (tmp_path / "k").iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_key_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    key = SigningKey.generate(tmp_path / "signing.key")
    os.chmod(key.path, mode)
    with pytest.raises(KeyFileError, match="readable or writable by others"):
        SigningKey.load(key.path)


def test_unusable_key_files(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="not readable"):
        SigningKey.load(tmp_path / "missing.key")
    junk = tmp_path / "junk.key"
    junk.write_text("not a key")
    junk.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a PEM private key"):
        SigningKey.load(junk)


def test_signature_verifies_only_for_the_same_message_and_a_trusted_key(tmp_path: Path) -> None:
    key = SigningKey.generate(tmp_path / "a.key")
    other = SigningKey.generate(tmp_path / "b.key")
    trust = TrustStore()
    trust.add("release", key)
    record = key.sign(b"message")
    assert trust.verify("release", b"message", record).key_id == key.key_id
    with pytest.raises(SignatureError, match="does not match"):
        trust.verify("release", b"messagE", record)
    with pytest.raises(SignatureError, match="does not match"):
        trust.verify("release", b"message", {**record, "signed_at": "2020-01-01T00:00:00+00:00"})
    with pytest.raises(SignatureError, match="does not trust for gateway"):
        trust.verify("gateway", b"message", record)  # trusted for releases only
    with pytest.raises(SignatureError, match="does not trust"):
        trust.verify("release", b"message", other.sign(b"message"))
    # a signature copied onto another key id is not that key's
    forged = {**other.sign(b"message"), "key_id": key.key_id}
    with pytest.raises(SignatureError, match="does not match"):
        trust.verify("release", b"message", forged)
    for bad, reason in ((None, "unsigned"), ({}, "unsigned"), ("x", "not an object"),
                        ({**record, "alg": "rsa"}, "algorithm"), ({**record, "signature": "@@"}, "base64"),
                        ({"alg": "ed25519"}, "lacks key_id")):
        with pytest.raises(SignatureError, match=reason):
            trust.verify("release", b"message", bad)


def test_trust_store_round_trip_and_validation(tmp_path: Path) -> None:
    key = SigningKey.generate(tmp_path / "a.key")
    store = TrustStore()
    store.add("gateway", key, comment="gw")
    store.save(tmp_path / "trust.json")
    assert (tmp_path / "trust.json").stat().st_mode & 0o777 == 0o644
    loaded = TrustStore.load(tmp_path / "trust.json")
    assert [(k.purpose, k.key_id, k.comment) for k in loaded.keys] == [("gateway", key.key_id, "gw")]
    assert loaded.verify("gateway", b"m", key.sign(b"m")).key_id == key.key_id
    with pytest.raises(KeyFileError, match="trust store missing"):
        TrustStore.load(tmp_path / "none.json")
    assert TrustStore.load_or_empty(tmp_path / "none.json").keys == []
    document = json.loads((tmp_path / "trust.json").read_text())
    for change, reason in (({"purpose": "root"}, "purpose"), ({"key_id": "0" * 16}, "key_id"),
                           ({"public_key": "###"}, "base64"), ({"extra": 1}, "unexpected")):
        broken = {**document, "keys": [{**document["keys"][0], **change}]}
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        with pytest.raises(KeyFileError, match=reason):
            TrustStore.load(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("{\"format\": \"other\"}")
    with pytest.raises(KeyFileError, match="not a trust store"):
        TrustStore.load(tmp_path / "bad.json")


def test_ensure_key_creates_once_and_trusts(tmp_path: Path) -> None:
    first = ensure_key(tmp_path / "keys" / "r.key", tmp_path / "trust.json", "release")
    again = ensure_key(tmp_path / "keys" / "r.key", tmp_path / "trust.json", "release")
    assert first.key_id == again.key_id
    trust = TrustStore.load(tmp_path / "trust.json")
    assert [(k.purpose, k.key_id, k.retired) for k in trust.keys] == [("release", first.key_id, None)]


def test_rotation_retires_the_old_key_with_a_record_of_what_it_signed(tmp_path: Path) -> None:
    """The old key's signatures found at the rotation stay valid; any other it makes is refused, dated after the
    retirement or before it (the signer writes signed_at), and the signing time cannot be moved without breaking
    the signature."""
    key_path, trust_path = tmp_path / "r.key", tmp_path / "trust.json"
    old = ensure_key(key_path, trust_path, "release")
    before = old.sign(b"old release", signed_at="2000-01-01T00:00:00+00:00")
    unfound = old.sign(b"never shown to the rotation", signed_at="2000-01-01T00:00:00+00:00")
    other = SigningKey.generate(tmp_path / "other.key").sign(b"another key's")
    new, retired = rotate_key(key_path, trust_path, "release", signed=(r for r in (before, other, {"junk": 1})))
    assert retired == [old.key_id] and new.key_id != old.key_id
    assert SigningKey.load(key_path).key_id == new.key_id
    trust = TrustStore.load(trust_path)
    assert trust.current("release").key_id == new.key_id
    assert trust.trusted("release")[0].signed_count == 1  # only its own signature is recorded
    assert trust.verify("release", b"old release", before).key_id == old.key_id
    with pytest.raises(SignatureError, match="after it was retired"):
        trust.verify("release", b"late", old.sign(b"late", signed_at="2999-01-01T00:00:00+00:00"))
    with pytest.raises(SignatureError, match="not among the 1 signature"):
        trust.verify("release", b"back-dated", old.sign(b"back-dated", signed_at="2000-01-01T00:00:00+00:00"))
    with pytest.raises(SignatureError, match="not among the 1 signature"):
        trust.verify("release", b"never shown to the rotation", unfound)
    with pytest.raises(SignatureError, match="does not match"):  # the recorded signature, another message
        trust.verify("release", b"old releasE", before)
    assert trust.verify("release", b"new", new.sign(b"new")).key_id == new.key_id
    # rotating again keeps both old keys, each retired once, the first one's record untouched
    rotate_key(key_path, trust_path, "release")
    keys = TrustStore.load(trust_path).trusted("release")
    assert len(keys) == 3 and [k.retired is None for k in keys] == [False, False, True]
    assert keys[0].retired <= keys[1].retired and [k.signed_count for k in keys] == [1, 0, 0]
    assert TrustStore.load(trust_path).verify("release", b"old release", before).key_id == old.key_id


def test_a_key_retired_without_a_record_verifies_nothing(tmp_path: Path) -> None:
    """A trust store written before retirements recorded signatures: its retired keys verify nothing (fail closed;
    `safeshare release` can re-seal a bundle with the current key), and a malformed record is refused on load."""
    key = SigningKey.generate(tmp_path / "old.key")
    record = key.sign(b"m", signed_at="2000-01-01T00:00:00+00:00")
    entry = {"purpose": "release", "key_id": key.key_id, "public_key": key.public_b64,
             "created": "1999-01-01T00:00:00+00:00", "retired": "2001-01-01T00:00:00+00:00", "comment": ""}
    (tmp_path / "trust.json").write_text(json.dumps({"format": "safeshare-trust/1", "keys": [entry]}))
    with pytest.raises(SignatureError, match="without a record of what it had signed"):
        TrustStore.load(tmp_path / "trust.json").verify("release", b"m", record)
    for bad in ("not base64!", "AAAA"):  # not base64; not whole 16-byte fingerprints
        (tmp_path / "trust.json").write_text(json.dumps({"format": "safeshare-trust/1",
                                                         "keys": [{**entry, "signed": bad}]}))
        with pytest.raises(KeyFileError, match="field 'signed'"):
            TrustStore.load(tmp_path / "trust.json")
