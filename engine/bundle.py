"""Sealed release bundles and their verification by every consumer.

`seal_release` copies a `safeshare deid` output folder into RELEASES/<dataset>/<id>/ only when its manifest verifies
and its gate passed, and adds `seal.json` holding the SHA-256 of the manifest, **signed** with the custodian's release
key (Ed25519, `safeshare.signing`). `verify_bundle` is what consumers (the analytics app, provisioning, `safeshare
up`, `verify-release`) call before touching data: an unsigned seal, a signature by a key the site's trust store does
not trust for releases, a signature that does not match the seal, a seal that does not match the manifest, a missing
file, a changed byte or a failed gate raises `BundleError`. The copy is made in a temporary folder and renamed into
place, so a bundle is either whole or absent.

Why a signature: a hash stored next to what it hashes proves nothing to someone who can write the folder (they
recompute it). The signature can only be made with the private key, which lives in SITE/keys (0700, the custodian's
user) and never in the releases folder; the public keys live in SITE/trust.json. Sealing (`seal_release`, the
custodian's `safeshare release --to RELEASES`) defaults to the site whose releases folder the custodian names:
RELEASES/../keys/release-signing.key and RELEASES/../trust.json. Verifying never looks near the bundle for the trust
store: a writer of the releases folder could put one there. Consumers name it (`--trust`, or the site:
`safeshare.sitefolder.site_trust`), and a bundle is what its signed seal says it is only where it lies as
RELEASES/<dataset>/<id> with the seal's dataset and id (or where the consumer names the release it expects): a
genuine bundle copied under another release's name is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from safeshare.signing import (KEYS_DIR, RELEASE_KEY, TRUST_FILE, KeyFileError, SignatureError, SigningKey,
                               TrustedKey, TrustStore, append_to_ledger, canonical, ensure_key, ledger_path)

from .bundle_common import PURPOSE, BundleError
from .manifest import MANIFEST, Manifest, ManifestError, load_manifest

if TYPE_CHECKING:
    from .policy import DatasetPolicy

SEAL = "seal.json"
SEAL_FORMAT = "safeshare-seal/2"  # /1 was an unsigned hash; it no longer verifies


def site_of_releases(releases: str | Path) -> Path:
    """The site folder a releases store belongs to (RELEASES/..)."""
    return Path(releases).absolute().parent


def default_signing_key(releases: str | Path) -> Path:
    return site_of_releases(releases) / RELEASE_KEY


def default_trust(releases: str | Path) -> Path:
    return site_of_releases(releases) / TRUST_FILE


def location_of(folder: str | Path) -> str | None:
    """The release a folder holds by where it lies: `<dataset>/<id>` of its real path (a release name's link
    followed), or None for a folder directly under / (a container's mount point such as /release, which says
    nothing: provisioning names the release it mounted there)."""
    real = Path(folder).resolve()
    return f"{real.parent.name}/{real.name}" if real.parent.name else None


def parse_release_ref(text: str) -> str:
    """`DATASET/ID` as given on a command line, checked; raises BundleError."""
    parts = str(text).split("/")
    if len(parts) != 2 or not all(parts) or any(part.startswith(".") for part in parts):
        raise BundleError(f"release {text!r}: give it as DATASET/ID (RELEASES/<dataset>/<id>)")
    return str(text)


def site_release_key(releases: str | Path, trust: str | Path | None = None, uid: int | None = None) -> SigningKey:
    """The site's release key, created (SITE/keys 0700, the key 0600) and trusted in `trust` (default
    SITE/trust.json) on first use."""
    site = site_of_releases(releases)
    keys = site / KEYS_DIR
    try:
        keys.mkdir(parents=True, exist_ok=True)
        if keys.stat().st_mode & 0o077:
            os.chmod(keys, 0o700)
    except OSError as exc:
        raise KeyFileError(f"{keys}: cannot make the keys folder private: {exc.strerror or exc}") from None
    return ensure_key(site / RELEASE_KEY, trust or site / TRUST_FILE, PURPOSE, uid, comment="release key of the site")


def _trust_store(trust: TrustStore | str | Path) -> TrustStore:
    if isinstance(trust, TrustStore):
        return trust
    try:
        return TrustStore.load(trust)
    except KeyFileError as exc:
        raise BundleError(f"no release can be verified: {exc}") from None


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_manifest(folder: Path, raw: bytes | None = None) -> Manifest:
    """The manifest, parsed from `raw` when given (the very bytes whose hash was checked against the seal)."""
    path = folder / MANIFEST
    if raw is None and not path.is_file():
        raise BundleError(f"{path}: missing")
    try:
        return load_manifest(path, raw)
    except ManifestError as exc:
        raise BundleError(str(exc)) from None


DATASET_PART = re.compile(r"data/part-[0-9]{5}\.parquet")


def dataset_digest(parts: dict[str, str]) -> str:
    """The data_sha256 of a partitioned release: the sha256 of its parts' listing ("NAME SHA256\n" in name order),
    so the seal's one data hash covers every part and their names."""
    listing = "".join(f"{name} {parts[name]}\n" for name in sorted(parts))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def data_files(manifest: Manifest) -> list[str]:
    """The release's data files in row order: data.parquet, or a partitioned release's data/part-NNNNN.parquet."""
    if manifest.is_dataset:
        return sorted(name for name in manifest.files if DATASET_PART.fullmatch(name))
    return ["data.parquet"]


def verify_output(folder: str | Path, manifest_bytes: bytes | None = None) -> Manifest:
    """Check a deid output folder: every listed file matches its hash, data matches data_sha256, gate passed.
    `manifest_bytes`: the manifest as already read (and checked against a seal), so that it is not read twice.
    A partitioned release (`layout: dataset`, engine.parallel.release) lists its parts as data/part-NNNNN.parquet
    and its data_sha256 is their listing's hash (`dataset_digest`)."""
    folder = Path(folder)
    manifest = _load_manifest(folder, manifest_bytes)
    files = manifest.files
    layout = manifest.layout or "table"
    if layout not in ("table", "dataset"):
        raise BundleError(f"{folder / MANIFEST}: field 'layout' is {layout!r}, not 'table' or 'dataset'")
    if layout == "dataset":
        if not data_files(manifest):
            raise BundleError(f"{folder / MANIFEST}: field 'files' must list data/part-NNNNN.parquet with their sha256")
        parts = {name: files[name] for name in data_files(manifest)}
        if dataset_digest(parts) != manifest.data_sha256:
            raise BundleError(f"{folder / MANIFEST}: data_sha256 does not match the listing of the data parts")
    else:
        if "data.parquet" not in files:
            raise BundleError(f"{folder / MANIFEST}: field 'files' must list data.parquet with its sha256")
        if files["data.parquet"] != manifest.data_sha256:
            raise BundleError(f"{folder / MANIFEST}: data_sha256 does not match files['data.parquet']")
    for name, expected in files.items():
        path = folder / name
        if Path(name).name != name and not (layout == "dataset" and DATASET_PART.fullmatch(name)):
            raise BundleError(f"{folder / MANIFEST}: file name {name!r} is not a plain file name")
        if not path.is_file():
            raise BundleError(f"{path}: listed in the manifest but missing")
        actual = _sha256_file(path)
        if actual != expected:
            raise BundleError(f"{path}: sha256 {actual} does not match the manifest's {expected}")
    gate = manifest.gate
    if gate is None or gate.passed is not True:
        reasons = gate.reasons if gate is not None else ["no gate verdict in the manifest"]
        raise BundleError(f"{folder}: the release gate did not pass: {'; '.join(reasons)}")
    return manifest


def _refuse_unlisted(folder: Path, manifest: Manifest) -> None:
    """A sealed bundle holds its manifest, its seal and the files the manifest lists, nothing else: provisioning
    mounts (or ships) the whole folder into the enclave, so a file a writer of the releases folder adds to a genuine
    bundle (the raw table beside the released one) would enter it, covered by no hash. Raises BundleError."""
    listed = {MANIFEST, SEAL, *manifest.files}
    folders = {parent.as_posix() for name in listed for parent in Path(name).parents if parent != Path(".")}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if name in folders and path.is_dir() and not path.is_symlink():
            continue
        if name not in listed:
            raise BundleError(f"{path}: not a file of this release (the manifest does not list it): a sealed bundle "
                              f"holds only its manifest, seal and listed files")


@dataclass(frozen=True)
class VerifiedBundle:
    """What a verified bundle is: its manifest, its seal and the trusted key that signed the seal."""

    manifest: Manifest
    seal: dict
    key: TrustedKey


def check_bundle(folder: str | Path, trust: TrustStore | str | Path, release: str | None = None) -> VerifiedBundle:
    """Verify a sealed bundle: the seal's signature by a key `trust` trusts for releases, the seal's dataset and id
    against `release` (`DATASET/ID`; default: where the folder lies, `location_of`), the seal against the manifest,
    the manifest against every file, and the gate verdict. Raises BundleError naming the reason."""
    folder = Path(folder)
    store = _trust_store(trust)
    seal_path = folder / SEAL
    if not seal_path.is_file():
        raise BundleError(f"{seal_path}: missing: the bundle is not sealed")
    try:
        seal = json.loads(seal_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{seal_path}: not readable JSON: {exc}") from None
    if not isinstance(seal, dict):
        raise BundleError(f"{seal_path}: not a JSON object")
    signed = {name: value for name, value in seal.items() if name != "signature"}
    try:
        message = canonical(signed)
    except ValueError as exc:
        raise BundleError(f"{seal_path}: cannot be signed content: {exc}") from None
    try:
        key = store.verify(PURPOSE, message, seal.get("signature"))
    except SignatureError as exc:
        hint = " (sealed without a signature: re-seal it with `safeshare release`)" if str(exc) == "unsigned" else ""
        raise BundleError(f"{seal_path}: signature refused: {exc}{hint}") from None
    if seal.get("format") != SEAL_FORMAT:
        raise BundleError(f"{seal_path}: field 'format' is {seal.get('format')!r}, not {SEAL_FORMAT!r}")
    # Read once: the bytes hashed against the signed seal are the bytes parsed (a swap between two reads by a
    # writer of the folder would otherwise slip an unsigned manifest past the check).
    try:
        manifest_bytes = (folder / MANIFEST).read_bytes()
    except OSError:
        manifest_bytes = None
    if manifest_bytes is None or seal.get("manifest_sha256") != hashlib.sha256(manifest_bytes).hexdigest():
        raise BundleError(f"{folder / MANIFEST}: does not match the seal (edited after sealing?)")
    manifest = verify_output(folder, manifest_bytes)
    _refuse_unlisted(folder, manifest)
    data_sha = manifest.data_sha256
    for name, expected in (("data_sha256", data_sha), ("dataset", manifest.dataset),
                           ("release", str(data_sha)[:16])):
        if seal.get(name) != expected:
            raise BundleError(f"{seal_path}: field '{name}' is {seal.get(name)!r}, the manifest says {expected!r}")
    # The signed seal names the release; the folder must be that release (a genuine bundle copied under another
    # release's id or dataset would otherwise be served as that release).
    wanted = release
    if wanted is None:
        from .release_names import check_name, is_name_link
        # a release name (RELEASES/<name>) is the release its signed name record says, wherever the link points
        wanted = check_name(folder, store) if is_name_link(folder) else location_of(folder)
    sealed_as = f"{seal['dataset']}/{seal['release']}"
    if wanted is None:
        raise BundleError(f"{folder}: lies where no release is named ({folder.resolve()}); name the release it must "
                          f"be (--release {sealed_as}, if that is the one)")
    if sealed_as != wanted:
        raise BundleError(f"{seal_path}: sealed as release {sealed_as}, but read as {wanted}: a bundle copied or "
                          f"moved under another release's name is refused")
    return VerifiedBundle(manifest, seal, key)


def release_signatures(releases: str | Path) -> Iterator[dict]:
    """The signature record of every sealed bundle RELEASES/<dataset>/<id>/seal.json and every release name's record
    RELEASES/<name>.name.json (readable or not, verified or not): what a release key's retirement records as the
    signatures it made (`safeshare.signing.rotate_key`)."""
    releases = Path(releases)
    if not releases.is_dir():
        return
    for seal_path in sorted(releases.glob(f"*/*/{SEAL}")):
        if seal_path.parent.name.startswith(".") or seal_path.parent.is_symlink():
            continue
        try:
            seal = json.loads(seal_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(seal, dict) and isinstance(seal.get("signature"), dict):
            yield seal["signature"]
    from .release_names import name_signatures
    yield from name_signatures(releases)   # the release key signs name records too


def verify_bundle(folder: str | Path, trust: TrustStore | str | Path, release: str | None = None) -> dict:
    """Verify a sealed bundle (signature, where it lies, seal, manifest, data, gate) against the trust store `trust`
    (a TrustStore or the path of a trust.json); return its manifest as the JSON object it is, or raise BundleError.
    (`check_bundle` gives the typed manifest, the seal and the key.)"""
    return check_bundle(folder, trust, release).manifest.document()


def _signing_key(releases: Path, signing_key: SigningKey | str | Path | None,
                 trust: TrustStore | str | Path | None) -> SigningKey:
    if isinstance(signing_key, SigningKey):
        return signing_key
    if signing_key is None:
        return site_release_key(releases, trust.path if isinstance(trust, TrustStore) else trust)
    if not Path(signing_key).is_file():
        raise KeyFileError(f"{signing_key}: no such signing key (`safeshare site init` creates the site's key)")
    return SigningKey.load(signing_key)


def _record_release_signature(key: SigningKey, releases: Path, seal: dict, **context: str) -> None:
    """Keep the signature of a seal (or of a name record, `context` saying which name) in the release key's ledger
    (SITE/keys, beside the key), what the key's retirement records as the seals and names the site made. The ledger
    a site's first release after upgrading creates first adopts the seals and name records of this key already in
    RELEASES, once, as the rotation scan did before ledgers existed."""
    context = context or {"dataset": seal["dataset"], "release": seal["release"]}
    try:
        if key.path is not None and not ledger_path(key.path).exists():
            adopted = [record for record in release_signatures(releases) if record.get("key_id") == key.key_id]
            append_to_ledger(key, adopted, adopted=True)
        append_to_ledger(key, [seal["signature"]], **context)
    except OSError as exc:
        raise KeyFileError(f"{ledger_path(key.path or '')}: the release key's signature ledger cannot be written "
                           f"({exc.strerror or exc}); nothing was released or named") from None


def seal_release(output: str | Path, releases: str | Path, signing_key: SigningKey | str | Path | None = None,
                 trust: TrustStore | str | Path | None = None, policy: DatasetPolicy | str | Path | None = None
                 ) -> Path:
    """Copy a verified deid output into RELEASES/<dataset>/<id>/ with a signed seal; raise BundleError when refused.

    `signing_key` defaults to the site's release key (RELEASES/../keys/release-signing.key, created and trusted on
    first use) and `trust` to RELEASES/../trust.json. The sealed bundle is verified against `trust` before it is
    renamed into place, so a key the site does not trust is refused here rather than by every consumer. Raises
    KeyFileError (bad input) for an unusable key or trust file.

    The gate is that of the site that releases (RELEASES/../gate.yaml, else the built-in floor; an unusable one is
    InputError): the manifest's record must meet it, and the gate evaluated again on the released data files must
    pass and reproduce every risk figure the manifest records (engine.release_gate), before anything is written.

    `policy` is the dataset policy the output was made with (a file, or one loaded; its sha256 must be the manifest's
    `policy_sha256`): the released columns and which are quasi-identifiers are taken from it, never from the
    manifest. Without it every released column must be a quasi-identifier the manifest names (engine.release_gate);
    an unusable policy file is InputError."""
    output, releases = Path(output), Path(releases)
    if releases.exists() and not releases.is_dir():
        raise BundleError(f"{releases}: not a folder (--to names the releases store)")
    try:   # read once: the bytes checked here (record and data) are the bytes sealed, whatever the folder holds later
        manifest_bytes = (output / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise BundleError(f"{output / MANIFEST}: missing") from None
    except OSError as exc:
        raise BundleError(f"{output / MANIFEST}: cannot be read: {exc.strerror or exc}") from None
    manifest = verify_output(output, manifest_bytes)
    dataset = manifest.dataset
    if not dataset or Path(dataset).name != dataset or dataset.startswith("."):
        raise BundleError(f"{output / MANIFEST}: field 'dataset' is not a usable name: {dataset!r}")
    # The gate of the site that releases (RELEASES/../gate.yaml; InputError, bad input, when it is unusable): first on
    # the manifest's record, then evaluated again on the released data itself (engine.release_gate), so a verdict or
    # a risk figure edited by hand cannot be sealed.
    from .policy import load_policy
    from .release_gate import recheck_release
    from .sitegate import load_site_gate, manifest_violations
    if isinstance(policy, (str, os.PathLike)):   # the file the custodian names (InputError when unusable)
        policy = load_policy(policy)
    # the same site folder as the key and the trust store (RELEASES/.., links not followed): a releases folder that
    # is a link to storage elsewhere must not take its gate from beside the link's target
    site_gate = load_site_gate(site_of_releases(releases))
    if below := manifest_violations(manifest.document(), site_gate):
        raise BundleError(f"{output / MANIFEST}: does not meet the site gate: {'; '.join(below)}")
    if refused := recheck_release(output, manifest, site_gate, data_files(manifest), policy):
        raise BundleError(f"{output}: the release gate evaluated on the released data refuses it: "
                          f"{'; '.join(refused)}")
    key = _signing_key(releases, signing_key, trust)
    store = trust if isinstance(trust, TrustStore) else TrustStore.load(trust or default_trust(releases))
    release_id = manifest.data_sha256[:16]
    target = releases / dataset / release_id
    if target.exists():
        try:
            verify_bundle(target, store)
            return target  # sealing the same data twice changes nothing
        except BundleError:
            pass  # an unsigned (older) or broken bundle of the same data: replaced below by a good one
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{release_id}.", dir=target.parent))
    old: Path | None = None
    try:
        (staging / MANIFEST).write_bytes(manifest_bytes)
        for name in manifest.files:
            (staging / name).parent.mkdir(exist_ok=True)
            shutil.copy2(output / name, staging / name)
        verify_output(staging)  # what was copied is what was verified (the data against the manifest checked)
        seal = {
            "format": SEAL_FORMAT,
            "dataset": dataset,
            "release": release_id,
            "manifest_sha256": _sha256_file(staging / MANIFEST),
            "data_sha256": manifest.data_sha256,
            "sealed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        seal["signature"] = key.sign(canonical(seal))
        _record_release_signature(key, releases, seal)
        (staging / SEAL).write_text(json.dumps(seal, indent=2) + "\n", encoding="utf-8")
        for path in staging.rglob("*"):
            if path.is_dir():
                os.chmod(path, 0o755)
                continue
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        os.chmod(staging, 0o755)
        try:
            verify_bundle(staging, store, release=f"{dataset}/{release_id}")  # staging lies under a temporary name
        except BundleError as exc:
            raise BundleError(f"the sealed copy does not verify against {store.path or 'the trust store'} "
                              f"(is --signing-key trusted there?): {exc}") from None
        if target.exists():
            old = target.with_name(f".{release_id}.old.{os.getpid()}")
            os.replace(target, old)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target


_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def name_release(releases: str | Path, name: str, bundle: str | Path,
                 trust: TrustStore | str | Path | None = None,
                 signing_key: SigningKey | str | Path | None = None) -> Path:
    """Point RELEASES/<name> (a relative symlink) at a sealed bundle, replacing an older one atomically, and sign
    the binding: RELEASES/<name>.name.json (engine.release_names), signed with the release key (`signing_key`,
    default the site's), its signature kept in the key's ledger.

    Recipient policies name releases (`release: adult-k5`); the name moves to a new bundle when the custodian seals
    a new one, while sessions keep recording the bundle id they actually saw. The bundle must verify against `trust`
    (default RELEASES/../trust.json). The record is written before the link: a crash between the two leaves a name
    that is refused (its link and record disagree) until it is named again, never one that serves another
    release."""
    from .release_names import sign_name, write_record

    releases, bundle = Path(releases), Path(bundle)
    if not name or set(name) - _NAME_CHARS or name.startswith(".") or len(name) > 100 \
            or name.endswith(".json"):
        raise BundleError(f"release name {name!r}: use letters, digits, '-', '_' and '.' (not first), at most 100, "
                          f"not ending in .json")
    link = releases / name
    if link.exists() and not link.is_symlink():
        raise BundleError(f"{link}: exists and is not a release name (a dataset folder has that name)")
    store = _trust_store(trust if trust is not None else default_trust(releases))
    verified = check_bundle(bundle, store)
    try:
        relative = bundle.resolve().relative_to(releases.resolve())
    except ValueError:
        raise BundleError(f"{bundle}: not inside the releases store {releases}") from None
    dataset, release_id = verified.seal["dataset"], verified.seal["release"]
    if relative.as_posix() != f"{dataset}/{release_id}":
        raise BundleError(f"{bundle}: not the bundle RELEASES/{dataset}/{release_id} its seal names")
    key = _signing_key(releases, signing_key, store)
    record = sign_name(key, name, dataset, release_id)
    try:
        store.verify(PURPOSE, canonical({k: v for k, v in record.items() if k != "signature"}), record["signature"])
    except SignatureError as exc:
        raise BundleError(f"the name record does not verify against {store.path or 'the trust store'} (is "
                          f"--signing-key trusted there?): {exc}") from None
    _record_release_signature(key, releases, record, name=name, dataset=dataset, release=release_id)
    write_record(releases, record)
    temporary = releases / f".{name}.{os.getpid()}.link"
    temporary.unlink(missing_ok=True)
    os.symlink(relative, temporary)
    os.replace(temporary, link)
    return link


def resolve_release(releases: str | Path, reference: str, trust: TrustStore | str | Path | None = None) -> Path:
    """The sealed bundle a policy's `release` names: `<dataset>/<id>`, a name made by `name_release`, or a dataset
    that holds exactly one bundle; it must verify against `trust` (default RELEASES/../trust.json). Raises
    BundleError naming what exists when the reference fits nothing."""
    releases = Path(releases)
    trust = trust if trust is not None else default_trust(releases)  # loaded once a candidate is found
    if not reference or reference.startswith(("/", ".")) or ".." in Path(reference).parts:
        raise BundleError(f"release {reference!r}: not a release reference")
    candidate = releases / reference
    if candidate.is_symlink() or (candidate / SEAL).is_file():
        target = candidate.resolve()
        try:
            where = target.relative_to(releases.resolve())
        except ValueError:
            raise BundleError(f"release {reference!r}: {candidate} points outside {releases}") from None
        if len(where.parts) != 2:
            raise BundleError(f"release {reference!r}: {candidate} is not a bundle RELEASES/<dataset>/<id>")
        # a name (one component) is the release its signed name record says, and its link must point there; a
        # <dataset>/<id> reference is that release, never what a link lying there points at (a writer of the folder
        # could link either to another genuine bundle)
        if len(Path(reference).parts) == 2:
            verify_bundle(target, trust, release=reference)
        else:
            from .release_names import check_name
            store = _trust_store(trust)
            verify_bundle(target, store, release=check_name(candidate, store))
        return target
    if candidate.is_dir():
        bundles = sorted(p for p in candidate.iterdir() if (p / SEAL).is_file())
        if len(bundles) == 1:
            verify_bundle(bundles[0], trust, release=f"{reference}/{bundles[0].name}")
            return bundles[0].resolve()
        if len(bundles) > 1:
            choices = ", ".join(f"{reference}/{p.name}" for p in bundles)
            raise BundleError(f"release {reference!r} is ambiguous: {choices} (name one with safeshare release "
                              f"--name, or give dataset/id)")
    known = sorted(p.name for p in releases.iterdir()) if releases.is_dir() else []
    raise BundleError(f"release {reference!r}: no such sealed release in {releases} "
                      f"(there: {', '.join(known) or 'nothing'})")
