"""A custodian's site: the one folder that holds what the enclaves of a host share, and its settings.

    SITE/site.json           settings: the site's id, the gateway's host port and public URL, the front subnet
    SITE/db/safeshare.db     tokens, gateway sessions, recipients, audit events, API keys (SQLite unless --db)
    SITE/releases/           sealed releases (`safeshare release OUT --to SITE/releases --name NAME`)
    SITE/policies/<rid>.yaml each recipient policy as provisioned (the gateway reads limits and expiry from it)
    SITE/secrets/<rid>/      the recipient's VNC password (mounted into that kiosk and the gateway only)
    SITE/sessions/           session folders, written by the gateway; never mounted into an enclave
    SITE/enclaves/<rid>/     what one recipient's enclave mounts that the custodian made for it: release/<dataset>/
                             <id>/, the verified copy of its sealed release (deploy/release_copy.py; a bind mount of
                             SITE/releases itself would show the enclave what that folder's writer adds later),
                             and workspace/, the app's /state (the app's uid, read-write: outputs, airlock drafts and
                             outbox, which the custodian side's intake reads; kept at revocation)
    SITE/airlock/            the airlock store: frozen requests and signed output packages (custodian side writes;
                             read-only in the gateway, which serves released packages at /outputs)
    SITE/outputs.yaml        the floor of the output disclosure rules (optional), read-only in every app
    SITE/keys/               the custodian's private keys (0700): release-signing.key signs release seals
    SITE/secrets/gateway/    signing.key: the gateway's key, signs session seals (the gateway's uid only)
    SITE/trust.json          public keys the site trusts per purpose (release, gateway); mounted read-only into
                             app containers

The gateway container mounts db/, sessions/, secrets/ and policies/ at the same absolute paths as on the host, so
the paths stored in the database (password and policy files) mean the same file on both sides. It runs as uid
10002 (gateway.Dockerfile), which therefore owns db/, sessions/ and the secrets.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import secrets
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from safeshare.sitedb import SiteDatabaseError, site_db_file, site_db_url
from safeshare.signing import GATEWAY_KEY, KEYS_DIR, RELEASE_KEY, TRUST_FILE, KeyFileError, SigningKey, ensure_key
from safeshare.sitefolder import DEFAULT_SITE, SITE_ENV  # one home for where a site is (verifiers need it too)

GATEWAY_UID = 10002  # deploy/docker/gateway.Dockerfile
SETTINGS = "site.json"


class SiteError(ValueError):
    """A site folder or setting that cannot be used (exit 2)."""


def default_site() -> Path:
    return Path(os.environ.get(SITE_ENV) or DEFAULT_SITE)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Whole or absent: a temporary file in the same folder, fsynced, renamed over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class SiteSettings:
    """What stays fixed for a site once chosen (changing the port or subnet recreates the gateway)."""

    site_id: str = field(default_factory=lambda: secrets.token_hex(3))
    gateway_host: str = "127.0.0.1"  # host address the gateway's port is published on
    gateway_port: int = 6080
    public_url: str | None = None  # what researchers open (a TLS proxy in front); default http://HOST:PORT/
    front_subnet: str | None = None  # default derived from the site id, 10.213.X.0/24
    # Each recipient's two internal networks get /27s from this pool, chosen by provisioning. Docker's own default
    # pools hold about 30 networks (one /16 each), far fewer than the enclaves a host runs.
    enclave_pool: str = "10.214.0.0/16"
    # Recorded sessions are kept this many days after they end unless the recipient's policy says otherwise.
    session_retention_days: int = 365

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{6}", self.site_id):
            raise SiteError(f"{SETTINGS}: field 'site_id' must be 6 hex digits, got {self.site_id!r}")
        for name in ("gateway_host", "enclave_pool"):
            if not isinstance(getattr(self, name), str):
                raise SiteError(f"{SETTINGS}: field '{name}' must be a string, got {getattr(self, name)!r}")
        for name in ("public_url", "front_subnet"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise SiteError(f"{SETTINGS}: field '{name}' must be a string, got {getattr(self, name)!r}")
        if isinstance(self.session_retention_days, bool) or not isinstance(self.session_retention_days, int) \
                or self.session_retention_days < 1:
            raise SiteError(f"{SETTINGS}: field 'session_retention_days' must be a whole number of days >= 1, got "
                            f"{self.session_retention_days!r}")
        if isinstance(self.gateway_port, bool) or not isinstance(self.gateway_port, int) \
                or not 0 < self.gateway_port < 65536:
            raise SiteError(f"{SETTINGS}: field 'gateway_port' must be a TCP port, got {self.gateway_port!r}")
        if self.front_subnet is None:
            self.front_subnet = f"10.213.{int(self.site_id[:2], 16)}.0/24"
        if not re.fullmatch(r"\d+\.\d+\.\d+\.0/24", self.front_subnet):
            raise SiteError(f"{SETTINGS}: field 'front_subnet' must be an IPv4 /24 (a.b.c.0/24), got "
                            f"{self.front_subnet!r}")
        try:
            pool = ipaddress.IPv4Network(self.enclave_pool)
        except ValueError:
            pool = None
        if pool is None or pool.prefixlen > 24:
            raise SiteError(f"{SETTINGS}: field 'enclave_pool' must be an IPv4 network of /24 or larger, got "
                            f"{self.enclave_pool!r}")
        if pool.overlaps(ipaddress.IPv4Network(self.front_subnet)):
            raise SiteError(f"{SETTINGS}: fields 'enclave_pool' and 'front_subnet' overlap")

    def enclave_subnets(self) -> list[ipaddress.IPv4Network]:
        """The /27s recipients' networks may use, in order."""
        return list(ipaddress.IPv4Network(self.enclave_pool).subnets(new_prefix=27))

    @property
    def gateway_ip(self) -> str:
        return self.front_subnet.rsplit(".", 1)[0] + ".10"  # type: ignore[union-attr]

    @property
    def url(self) -> str:
        return (self.public_url or f"http://{self.gateway_host}:{self.gateway_port}/").rstrip("/") + "/"


class Site:
    """Paths and settings of one site folder; `prepare()` creates what is missing with the right owners."""

    def __init__(self, root: str | Path, db_url: str | None = None) -> None:
        self.root = Path(root).absolute()
        self.settings = self._load_settings()
        try:  # the one place that says where a site's database is (an old `up` home's file is refused there)
            self.db_url = db_url or site_db_url(self.root)
        except SiteDatabaseError as exc:
            raise SiteError(str(exc)) from None

    # --- layout ----------------------------------------------------------------------------------------------------

    @property
    def db_dir(self) -> Path:
        return site_db_file(self.root).parent

    @property
    def db_file(self) -> Path:
        """The default SQLite database (safeshare.sitedb: the same file for `safeshare up` homes)."""
        return site_db_file(self.root)

    @property
    def releases(self) -> Path:
        return self.root / "releases"

    @property
    def policies(self) -> Path:
        return self.root / "policies"

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def enclaves(self) -> Path:
        """Per recipient, what the custodian made for its enclave to mount (the custodian's user; 0755)."""
        return self.root / "enclaves"

    def enclave_dir(self, rid: str) -> Path:
        return self.enclaves / rid

    def workspace(self, rid: str) -> Path:
        """The app's workspace (its /state: saved analyses, outputs, airlock drafts and outbox), owned by the app's
        uid; the airlock's host-side intake reads submissions from it. Revocation keeps it (the requests it made
        stay in SITE/airlock either way)."""
        return self.enclave_dir(rid) / "workspace"

    @property
    def outputs_floor(self) -> Path:
        """SITE/outputs.yaml: the floor of the output disclosure rules (outputs.floor), mounted into every app."""
        return self.root / "outputs.yaml"

    @property
    def airlock(self) -> Path:
        """SITE/airlock: the airlock store (outputs.airlock.store), frozen requests and released packages; written by
        the custodian's side only, mounted read-only into the gateway (which serves the packages)."""
        from outputs.airlock.store import AirlockStore

        return AirlockStore(self.root).root

    def release_copy(self, rid: str, release: str) -> Path:
        """Where the verified copy of release `DATASET/ID` that recipient `rid`'s app mounts lies."""
        from deploy.release_copy import copy_path

        return copy_path(self.enclave_dir(rid), release)

    @property
    def player_cache(self) -> Path:
        """Prepared players (keyframes) of recorded sessions: derived data, safe to delete."""
        return self.root / "player-cache"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    @property
    def keys(self) -> Path:
        """The custodian's private keys (0700, the custodian's user): never mounted into any container."""
        return self.root / KEYS_DIR

    @property
    def release_signing_key(self) -> Path:
        """Signs release seals (`safeshare release`); 0600, the custodian's user."""
        return self.root / RELEASE_KEY

    @property
    def gateway_signing_key(self) -> Path:
        """Signs session seals; 0600, owned by the gateway's uid (SITE/secrets is mounted into the gateway)."""
        return self.root / GATEWAY_KEY

    @property
    def trust_file(self) -> Path:
        """The public keys the site trusts per purpose (0644, written by the custodian; read-only in containers)."""
        return self.root / TRUST_FILE

    @property
    def site_id(self) -> str:
        return self.settings.site_id

    def recipient_id(self, recipient: str) -> str:
        """10 hex digits, stable per site and recipient: Linux bridge names (ss-e-<rid>) allow 15 characters."""
        return hashlib.sha256(f"{self.site_id}:{recipient}".encode()).hexdigest()[:10]

    def policy_file(self, rid: str) -> Path:
        return self.policies / f"{rid}.yaml"

    def password_file(self, rid: str) -> Path:
        return self.secrets / rid / "vnc-password"

    # --- settings --------------------------------------------------------------------------------------------------

    def _load_settings(self) -> SiteSettings:
        path = self.root / SETTINGS
        if not path.exists():
            return SiteSettings()
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SiteError(f"{path}: not readable JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise SiteError(f"{path}: must be a JSON object")
        unknown = set(raw) - set(SiteSettings.__dataclass_fields__)
        if unknown:
            raise SiteError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
        return SiteSettings(**raw)

    def save_settings(self) -> None:
        write_atomic(self.root / SETTINGS, (json.dumps(asdict(self.settings), indent=2) + "\n").encode())

    def configure(self, **changes: Any) -> bool:
        """Apply given (non-None) settings; True when something changed."""
        current = asdict(self.settings)
        wanted = {**current, **{key: value for key, value in changes.items() if value is not None}}
        if wanted == current:
            return False
        self.settings = SiteSettings(**wanted)
        return True

    def prepare(self) -> None:
        """Create the folders (idempotent) and hand the gateway what it writes. Needs root for the ownership (as
        the Docker engine does); without it the folders stay the caller's, which works when the caller is uid
        10002 or the gateway is not containerised."""
        for folder, mode in ((self.root, 0o755), (self.db_dir, 0o750), (self.releases, 0o755),
                             (self.policies, 0o755), (self.secrets, 0o711), (self.sessions, 0o750),
                             (self.enclaves, 0o755), (self.airlock, 0o755)):
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, mode)
        self.save_settings()
        for folder in (self.db_dir, self.sessions):
            give_to_gateway(folder)
        self.ensure_keys()

    def ensure_keys(self) -> tuple[SigningKey, SigningKey]:
        """The release key and the gateway key, created on first use and trusted in trust.json (idempotent).

        SITE/keys (0700) holds the release key of the custodian's user and is never mounted anywhere; the gateway
        key sits in SITE/secrets/gateway (0700, both owned by the gateway's uid when run as root), which only the
        gateway container mounts. trust.json (0644) holds the public halves only. An unusable key (readable by
        others, not a key) is a SiteError naming it."""
        try:
            return self._ensure_keys()
        except KeyFileError as exc:
            raise SiteError(str(exc)) from None

    def _ensure_keys(self) -> tuple[SigningKey, SigningKey]:
        # A key file that is gone (or replaced) is a new key: the one it replaces is retired with a record of what
        # it signed here, as `custodian key rotate` does (the scans run only then).
        from deploy.site.key_rotation import site_signatures

        self.keys.mkdir(parents=True, exist_ok=True)
        os.chmod(self.keys, 0o700)
        release = ensure_key(self.release_signing_key, self.trust_file, "release", comment="release key of the site",
                             signed=site_signatures(self, "release"))
        gateway_dir = self.gateway_signing_key.parent
        gateway_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(gateway_dir, 0o700)
        gateway = ensure_key(self.gateway_signing_key, self.trust_file, "gateway", uid=GATEWAY_UID,
                             comment="gateway key of the site", signed=site_signatures(self, "gateway"))
        for path in (gateway_dir, self.gateway_signing_key):
            give_to_gateway(path)
        return release, gateway

    def db_files_to_gateway(self) -> None:
        """The database file and its WAL side files belong to the gateway's uid (SQLite run as root keeps that
        owner for files it creates later)."""
        for path in self.db_dir.iterdir():
            give_to_gateway(path)


def give_to_gateway(path: Path, uid: int = GATEWAY_UID) -> None:
    """Owner: the gateway container's uid (root only; otherwise the path stays the caller's)."""
    if os.geteuid() != 0:
        return
    try:
        os.chown(path, uid, uid)
    except OSError:
        pass
