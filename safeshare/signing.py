"""Ed25519 signatures and the site's trust store: what makes a seal mean something to someone who can write folders.

A seal that is only a hash stored next to what it hashes proves nothing against a writer of that folder: the writer
recomputes it. A signature does, as long as the private key is out of the writer's reach. Two kinds of key sign at a
site, each held by the component that signs and readable by nobody else:

* the **release key** (`SITE/keys/release-signing.key`, mode 0600, the custodian's user) signs release seals;
* the **gateway key** (`SITE/secrets/gateway/signing.key`, mode 0600, the gateway's uid) signs session seals;
* the **outputs key** (`SITE/keys/outputs-signing.key`, mode 0600, the custodian's user) signs the airlock's output
  packages (outputs.airlock.package), made on first use (`ensure_outputs_key`).

Verifiers read only public keys, from the **trust store** (`SITE/trust.json`, written by the custodian, mounted
read-only into the app container). Rotating a key adds a new one and retires the old one, recording in the trust
store what the old key had signed by then (`TrustedKey.signed`: the fingerprints of its signatures found at the
site). A retired key verifies only those: the `signed_at` of a signature is chosen by whoever signs, so a copy of
the old key could date a new signature before the rotation; a fingerprint recorded by the custodian cannot be
made to match a signature made afterwards.

This module is a leaf: it depends on `cryptography` only, so the engine, the proxy, the enclave and deploy can all
use it without depending on each other.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

# Where a site folder keeps its keys (deploy.site.folder.Site, `safeshare up`'s home folder, RELEASES/..): the one
# home of these names, since the engine, the proxy and deploy all need them and do not import each other.
KEYS_DIR = Path("keys")
RELEASE_KEY = KEYS_DIR / "release-signing.key"
GATEWAY_KEY = Path("secrets") / "gateway" / "signing.key"
OUTPUTS_KEY = KEYS_DIR / "outputs-signing.key"
TRUST_FILE = Path("trust.json")

ALGORITHM = "ed25519"
TRUST_FORMAT = "safeshare-trust/1"
PURPOSES = ("release", "gateway", "outputs")


class SignatureError(ValueError):
    """A signature that does not prove what it should: missing, by an unknown or retired key, or not matching."""


class KeyFileError(ValueError):
    """A key or trust file that cannot be used (unreadable, wrong permissions, malformed)."""


def canonical(document: Any) -> bytes:
    """The bytes a signature covers: sorted keys, no spaces, ASCII, no NaN/Infinity (json.dumps raises on them)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise SignatureError(f"{what} is not base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SignatureError(f"{what} is not valid base64") from None


def key_id_of(public_raw: bytes) -> str:
    """16 hex digits naming a public key (the start of the SHA-256 of its 32 raw bytes)."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _parse_time(text: Any, what: str) -> datetime:
    try:
        value = datetime.fromisoformat(str(text))
    except ValueError:
        raise SignatureError(f"{what} is not an ISO time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _write_atomic(path: Path, data: bytes, mode: int, uid: int | None = None) -> None:
    """Whole or absent. The temporary file is created 0600 by mkstemp and gets `mode` (and owner `uid`, when run as
    root) before the rename, so a private key is never readable by others, not even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if uid is not None and os.geteuid() == 0:
            os.chown(tmp, uid, uid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class SigningKey:
    """A private Ed25519 key loaded from its PEM file."""

    private: Ed25519PrivateKey
    path: Path | None = None

    @property
    def public_raw(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> str:
        return key_id_of(self.public_raw)

    @property
    def public_b64(self) -> str:
        return _b64(self.public_raw)

    @classmethod
    def generate(cls, path: str | Path, uid: int | None = None) -> "SigningKey":
        """Create a new key at `path` (0600; owned by `uid` when run as root), replacing any key there."""
        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        _write_atomic(Path(path), pem, 0o600, uid)
        return cls(private, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> "SigningKey":
        """Load a key, refusing one that others can read (a key readable by the folder's writers signs for them)."""
        path = Path(path)
        try:
            mode = path.stat().st_mode
            data = path.read_bytes()
        except OSError as exc:
            raise KeyFileError(f"{path}: signing key not readable: {exc.strerror or exc}") from None
        if mode & 0o077:
            raise KeyFileError(f"{path}: signing key is readable or writable by others (mode {mode & 0o777:o}); "
                            f"chmod 600 it, or rotate it if others may have read it")
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise KeyFileError(f"{path}: not a PEM private key") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise KeyFileError(f"{path}: not an Ed25519 key")
        return cls(private, path)

    def sign(self, message: bytes, signed_at: str | None = None) -> dict[str, str]:
        """A signature record: {alg, key_id, signed_at, signature}. `signed_at` is covered by the signature but
        chosen by the signer, so it cannot say whether a retired key made the signature before its retirement: the
        trust store's record of the key's signatures does (`TrustedKey.signed`)."""
        signed_at = signed_at or _now()
        signature = self.private.sign(_signed_bytes(message, self.key_id, signed_at))
        return {"alg": ALGORITHM, "key_id": self.key_id, "signed_at": signed_at, "signature": _b64(signature)}


LEDGER_SUFFIX = ".signed"


def ledger_path(key_path: str | Path) -> Path:
    """The record of what the key at `key_path` signed, kept beside it: in the signer's own folder (SITE/keys, 0700),
    which a writer of the folders the signatures end up in cannot write. A rotation records what the ledger lists,
    not what it finds in those folders, where a copy of a leaked key could have planted seals before the rotation."""
    return Path(f"{key_path}{LEDGER_SUFFIX}")


def append_to_ledger(key: SigningKey, records: Iterable[dict[str, Any]], **context: Any) -> None:
    """Append signature records made by `key` to its ledger (created 0600), flushed to disk before returning: a
    signature the ledger does not hold would stop verifying at the key's retirement, so a failure here must stop the
    signer (OSError) rather than let it publish."""
    if key.path is None:
        return
    lines = b"".join(json.dumps({"signature": record, **context}, sort_keys=True).encode("utf-8") + b"\n"
                     for record in records)
    if not lines:
        return
    descriptor = os.open(ledger_path(key.path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, lines)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def ledger_signatures(key_path: str | Path) -> list[dict[str, Any]] | None:
    """The signature records in the ledger of the key at `key_path`, or None when it keeps none (a site whose key
    signed nothing since ledgers exist). A damaged line is a KeyFileError naming the file and the line: a rotation
    must not retire a key with a record it could not read whole."""
    path = ledger_path(key_path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KeyFileError(f"{path}: signature ledger not readable: {exc.strerror or exc}") from None
    records: list[dict[str, Any]] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise KeyFileError(f"{path}: line {number}: not JSON") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("signature"), dict):
            raise KeyFileError(f"{path}: line {number}: field 'signature' must be a signature record")
        records.append(entry["signature"])
    return records


def _signed_bytes(message: bytes, key_id: str, signed_at: str) -> bytes:
    return b"safeshare-signature/1\n" + key_id.encode("ascii") + b"\n" + signed_at.encode("ascii") + b"\n" + message


FINGERPRINT_BYTES = 16  # 128 bits: matching a recorded one with a new signature takes ~2**128 / recorded tries


def fingerprint(record: Any) -> bytes | None:
    """What a retired key's record of its signatures holds: the first 16 bytes of the SHA-256 of the signature's 64
    bytes (None for something that is no signature). An Ed25519 signature (R, S) fixes H(R, A, message) mod the
    group order, so one signature verifies for one message only: recording signatures records what was signed,
    without knowing each format's message bytes (release seals, session seals, checkpoints)."""
    if not isinstance(record, dict):
        return None
    try:
        raw = _unb64(record.get("signature"), "signature")
    except SignatureError:
        return None
    return hashlib.sha256(raw).digest()[:FINGERPRINT_BYTES]


def _pack(fingerprints: Iterable[bytes]) -> str:
    """Fingerprints as trust.json keeps them: sorted, concatenated, base64 (a gateway key signs a checkpoint every
    few seconds of a session, so a retired key's record can hold many; packed, each costs about 22 characters)."""
    return _b64(b"".join(sorted(set(fingerprints))))


def _packed_contains(packed: bytes, wanted: bytes) -> bool:
    """Binary search in a sorted concatenation of FINGERPRINT_BYTES-long fingerprints."""
    low, high = 0, len(packed) // FINGERPRINT_BYTES
    while low < high:
        middle = (low + high) // 2
        probe = packed[middle * FINGERPRINT_BYTES:(middle + 1) * FINGERPRINT_BYTES]
        if probe == wanted:
            return True
        if probe < wanted:
            low = middle + 1
        else:
            high = middle
    return False


@dataclass
class TrustedKey:
    purpose: str
    key_id: str
    public_key: str  # base64 of the 32 raw bytes
    created: str
    retired: str | None = None  # when it was retired (signatures dated after it are refused)
    comment: str = ""
    # Retired keys: the fingerprints of the signatures the key had made when it was retired (packed, see _pack), the
    # only ones it still verifies. None for a live key, and for a key retired before this record existed (it then
    # verifies nothing).
    signed: str | None = None
    _packed: bytes | None = field(default=None, init=False, repr=False, compare=False)  # `signed`, decoded once

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"purpose": self.purpose, "key_id": self.key_id, "public_key": self.public_key,
                                    "created": self.created, "retired": self.retired, "comment": self.comment}
        if self.signed is not None:
            document["signed"] = self.signed
        return document

    def retire(self, at: str, records: Iterable[Any] = ()) -> None:
        """Retire the key at `at`; `records` are signature records found where the site keeps what its keys signed
        (those of other keys are ignored). What the key signed and nobody found is refused from now on."""
        self.retired = at
        found = (fingerprint(r) for r in records if isinstance(r, dict) and r.get("key_id") == self.key_id)
        self.signed = _pack(f for f in found if f is not None)
        self._packed = None

    def _fingerprints(self) -> bytes:
        if self._packed is None:
            self._packed = base64.b64decode(self.signed) if self.signed else b""
        return self._packed

    @property
    def signed_count(self) -> int:
        """How many signatures the retirement recorded (0 for a live key or one retired without a record)."""
        return len(self._fingerprints()) // FINGERPRINT_BYTES

    def recorded(self, record: Any) -> bool:
        """Whether `record` is one of the signatures this (retired) key had made when it was retired."""
        wanted = fingerprint(record)
        return self.signed is not None and wanted is not None and _packed_contains(self._fingerprints(), wanted)


@dataclass
class TrustStore:
    """The public keys a site trusts, per purpose. Verification never needs a private key."""

    keys: list[TrustedKey] = field(default_factory=list)
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path) -> "TrustStore":
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyFileError(f"{path}: trust store missing (no key is trusted)") from None
        except (OSError, ValueError) as exc:
            raise KeyFileError(f"{path}: trust store not readable JSON: {exc}") from None
        if not isinstance(raw, dict) or raw.get("format") != TRUST_FORMAT or not isinstance(raw.get("keys"), list):
            raise KeyFileError(f"{path}: not a trust store (want {{'format': '{TRUST_FORMAT}', 'keys': [...]}})")
        keys = []
        for number, entry in enumerate(raw["keys"]):
            where = f"{path}: keys[{number}]"
            if not isinstance(entry, dict):
                raise KeyFileError(f"{where}: not an object")
            try:
                key = TrustedKey(**entry)
            except TypeError as exc:
                raise KeyFileError(f"{where}: {exc}") from None
            if key.purpose not in PURPOSES:
                raise KeyFileError(f"{where}: field 'purpose' must be one of {', '.join(PURPOSES)}")
            try:
                raw_key = _unb64(key.public_key, "public_key")
            except SignatureError as exc:
                raise KeyFileError(f"{where}: {exc}") from None
            if len(raw_key) != 32 or key_id_of(raw_key) != key.key_id:
                raise KeyFileError(f"{where}: field 'key_id' does not match the public key")
            if key.signed is not None:
                try:
                    packed = _unb64(key.signed, "signed")
                except SignatureError as exc:
                    raise KeyFileError(f"{where}: field 'signed': {exc}") from None
                if len(packed) % FINGERPRINT_BYTES or key.retired is None:
                    raise KeyFileError(f"{where}: field 'signed' must be a retired key's packed "
                                       f"{FINGERPRINT_BYTES}-byte fingerprints")
            keys.append(key)
        return cls(keys, path)

    @classmethod
    def load_or_empty(cls, path: str | Path) -> "TrustStore":
        return cls.load(path) if Path(path).exists() else cls([], Path(path))

    def save(self, path: str | Path | None = None) -> None:
        path = Path(path or self.path or "trust.json")
        document = {"format": TRUST_FORMAT, "keys": [key.as_dict() for key in self.keys]}
        _write_atomic(path, (json.dumps(document, indent=2) + "\n").encode("utf-8"), 0o644)
        self.path = path

    def trusted(self, purpose: str) -> list[TrustedKey]:
        return [key for key in self.keys if key.purpose == purpose]

    def current(self, purpose: str) -> TrustedKey | None:
        live = [key for key in self.trusted(purpose) if key.retired is None]
        return live[-1] if live else None

    def add(self, purpose: str, key: SigningKey, comment: str = "", signed: Iterable[Any] = ()) -> TrustedKey:
        """Trust `key` for `purpose`; the purpose's other live keys are retired now (rotation), each keeping the
        fingerprints of its signatures among `signed` (see `TrustedKey.retire`)."""
        if purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {PURPOSES}")
        now = _now()
        retiring = [other for other in self.trusted(purpose) if other.retired is None and other.key_id != key.key_id]
        records = list(signed) if retiring else []
        for other in retiring:
            other.retire(now, records)
        existing = [k for k in self.trusted(purpose) if k.key_id == key.key_id]
        if existing:
            return existing[0]
        entry = TrustedKey(purpose, key.key_id, key.public_b64, now, None, comment)
        self.keys.append(entry)
        return entry

    def verify(self, purpose: str, message: bytes, record: Any) -> TrustedKey:
        """Return the key that made `record` over `message`, or raise SignatureError saying why not."""
        if not record:
            raise SignatureError("unsigned")
        if not isinstance(record, dict):
            raise SignatureError("signature is not an object")
        if record.get("alg") != ALGORITHM:
            raise SignatureError(f"signature algorithm {record.get('alg')!r} is not {ALGORITHM}")
        key_id, signed_at = record.get("key_id"), record.get("signed_at")
        if not isinstance(key_id, str) or not isinstance(signed_at, str):
            raise SignatureError("signature lacks key_id or signed_at")
        if not key_id.isascii() or not signed_at.isascii():  # both are signed as ASCII text (_signed_bytes)
            raise SignatureError(f"signature's key_id or signed_at is not ASCII text: {key_id!r}, {signed_at!r}")
        matches = [key for key in self.trusted(purpose) if key.key_id == key_id]
        if not matches:
            where = f" ({self.path})" if self.path else ""
            raise SignatureError(f"signed by key {key_id}, which the site does not trust for {purpose}{where}")
        key = matches[0]
        public = Ed25519PublicKey.from_public_bytes(_unb64(key.public_key, "public_key"))
        try:
            public.verify(_unb64(record.get("signature"), "signature"), _signed_bytes(message, key_id, signed_at))
        except InvalidSignature:
            raise SignatureError(f"signature by key {key_id} does not match (the signed content was changed)") \
                from None
        if key.retired is not None:
            if _parse_time(signed_at, "signed_at") > _parse_time(key.retired, "retired"):
                raise SignatureError(f"signed by key {key_id} at {signed_at}, after it was retired at {key.retired}")
            # signed_at is the signer's word: only the record made at the retirement says what the key had signed
            if key.signed is None:
                raise SignatureError(f"signed by key {key_id}, retired at {key.retired} without a record of what it "
                                     f"had signed, so nothing it signs verifies (re-seal with the current key)")
            if not key.recorded(record):
                raise SignatureError(f"signed by key {key_id}, retired at {key.retired}, but not among the "
                                     f"{key.signed_count} signature(s) it had made by then: a copy of a retired key "
                                     f"signs nothing new")
        return key


def ensure_key(key_path: str | Path, trust_path: str | Path, purpose: str, uid: int | None = None,
               comment: str = "", signed: Iterable[Any] = ()) -> SigningKey:
    """The key at `key_path`, created (and trusted in `trust_path`) on first use. A key made or found there that the
    trust store does not know yet retires the purpose's live key, keeping a record of its signatures among `signed`
    (read only then), as a rotation does."""
    key_path = Path(key_path)
    if key_path.exists():
        key = SigningKey.load(key_path)
    else:
        key = SigningKey.generate(key_path, uid)
    trust = TrustStore.load_or_empty(trust_path)
    if not any(k.key_id == key.key_id for k in trust.trusted(purpose)):
        trust.add(purpose, key, comment, signed=signed)
        trust.save(trust_path)
    return key


def ensure_outputs_key(site_root: str | Path, uid: int | None = None) -> SigningKey:
    """The site's outputs key (SITE/keys/outputs-signing.key, 0600, in the 0700 keys folder), made and trusted in
    SITE/trust.json on first use. A replaced key file retires the old key with the signatures its ledger lists (every
    package it signed is appended there), so the packages it released keep verifying."""
    site_root = Path(site_root)
    keys = site_root / KEYS_DIR
    keys.mkdir(parents=True, exist_ok=True)
    os.chmod(keys, 0o700)
    key_path = site_root / OUTPUTS_KEY
    trust_path = site_root / TRUST_FILE

    def signed() -> Iterable[Any]:
        return ledger_signatures(key_path) or []

    trust = TrustStore.load_or_empty(trust_path)
    if key_path.exists():
        key = SigningKey.load(key_path)
        if any(k.key_id == key.key_id for k in trust.trusted("outputs")):
            return key
    live = trust.current("outputs")
    records = signed() if live is not None else []
    return ensure_key(key_path, trust_path, "outputs", uid=uid, comment="outputs key of the site (airlock)",
                      signed=records)


def rotate_key(key_path: str | Path, trust_path: str | Path, purpose: str, uid: int | None = None,
               comment: str = "", signed: Iterable[Any] = ()) -> tuple[SigningKey, list[str]]:
    """A new key replaces the one at `key_path`; the old keys of the purpose stay trusted for the signatures among
    `signed` (the signature records of everything the site keeps signed: release seals, session logs), and for
    nothing else. `signed` is read after the new key is in place (pass a generator), so that a signer that re-reads
    its key file (the gateway) has switched before the old key's signatures are collected. Returns the new key and
    the ids retired."""
    trust = TrustStore.load_or_empty(trust_path)
    retiring = [k.key_id for k in trust.trusted(purpose) if k.retired is None]
    key = SigningKey.generate(key_path, uid)
    trust.add(purpose, key, comment, signed=signed)
    trust.save(trust_path)
    return key, retiring


def key_ids(keys: Iterable[TrustedKey]) -> list[str]:
    return [key.key_id for key in keys]
