"""Which site a command acts for, and so which trust store decides what is genuine: never the folder a bundle lies in.

A writer of a releases folder can put a trust.json next to a bundle (or point a release name at a folder that has
one); a verifier that looked there would trust the writer's key. So verifiers take the trust store from what the
person running them names: `--trust FILE`, else the site: `--site SITE`, else `$SAFESHARE_SITE`, else the default
site folder /var/lib/safeshare when it exists. A command that finds none refuses: there is no fallback to a folder
near the bundle.

A leaf like `safeshare.signing`: the engine, the enclave and deploy resolve the site the same way without importing
each other (deploy.site.folder re-uses these names).
"""
from __future__ import annotations

import os
from pathlib import Path

from .signing import TRUST_FILE, KeyFileError

DEFAULT_SITE = Path("/var/lib/safeshare")
SITE_ENV = "SAFESHARE_SITE"


def named_site(site: str | os.PathLike | None = None) -> Path | None:
    """The site folder: `site` (--site), else $SAFESHARE_SITE, else /var/lib/safeshare if it exists, else None."""
    if site is not None:
        if not str(site).strip():
            raise KeyFileError("--site is empty: name the site folder")
        return Path(site)
    named = os.environ.get(SITE_ENV, "")
    if named.strip():
        return Path(named)
    return DEFAULT_SITE if DEFAULT_SITE.is_dir() else None


def site_trust(trust: str | os.PathLike | None = None, site: str | os.PathLike | None = None) -> Path:
    """The trust store to verify against: `trust` when given, else SITE/trust.json of `named_site(site)`. Raises
    KeyFileError when neither names one (whether the file exists is TrustStore.load's to say)."""
    if trust is not None:
        if not str(trust).strip():
            raise KeyFileError("--trust is empty: name the trust store (SITE/trust.json)")
        return Path(trust)
    folder = named_site(site)
    if folder is None:
        raise KeyFileError(f"no trust store: name it with --trust FILE, or name the site with --site SITE or "
                           f"${SITE_ENV} (there is no site folder at {DEFAULT_SITE}); the folder a bundle lies in "
                           f"never says which keys to trust")
    return folder / TRUST_FILE
