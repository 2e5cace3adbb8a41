"""The airlock's intake where enclaves run: which workspaces it reads, for the custodian service and `safeshare up`.

The intake itself (outputs.airlock.intake) freezes what an app submitted from its workspace into the site's airlock
store. It runs on the custodian's side, never in an enclave: the app only writes files in its workspace (drafts and
an outbox entry), and a host process reads them with the safe-IO helpers, so the enclave keeps having no network to
the host and nothing else carries anything out.

- At a site (the custodian service, deploy/custodian/api.py): every ACTIVE recipient's workspace,
  SITE/enclaves/<rid>/workspace (the app's /state, deploy/plan.py), re-read from the site database each round, so
  a newly provisioned recipient is picked up and a revoked or expired one is not read any more (their requests stay
  in SITE/airlock; revocation keeps the workspace).
- In `safeshare up` (deploy/local.py): HOME/app, the app's --state, as the demo recipient, with HOME as the site.

Whose workspace it is, and which release (with its seal's hash) it was given, come from the custodian's records and
the release the custodian verified, never from anything in the workspace.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy.plan import release_ref
from deploy.records import ACTIVE, Records
from deploy.site.folder import Site

log = logging.getLogger("safeshare.airlock.intake")


def seal_sha256(bundle: Path) -> str | None:
    """The hash of a sealed release's seal as the app computes it (canonical JSON of seal.json), or None when the
    seal cannot be read (the intake then checks the release by its dataset/id only)."""
    try:
        seal = json.loads((Path(bundle) / "seal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("%s: seal not readable for the intake: %s", bundle, exc)
        return None
    return hashlib.sha256(json.dumps(seal, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def site_workspaces(site: Site, records: Records) -> list[Any]:
    """The workspaces of the site's active recipients that exist (an enclave never started has none yet)."""
    from outputs.airlock.workspace import Workspace

    found = []
    for recipient in records.recipients(status=ACTIVE):
        path = site.workspace(recipient.rid)
        if path.is_dir() and not path.is_symlink():
            found.append(Workspace(path, recipient.name, recipient.rid, recipient.release,
                                   seal_sha256(site.release_copy(recipient.rid, recipient.release))))
    return found


def run_site_intake(site: Site, records: Records) -> Any:
    """One round of the site's intake over every active recipient's workspace (what the service loop does)."""
    from outputs.airlock.intake import run_intake

    return run_intake(site.root, site_workspaces(site, records), db_url=site.db_url)


def start_intake(site_root: Path, db_url: str, workspaces: Callable[[], list[Any]], interval: float) -> Any:
    """A started IntakeLoop over `workspaces()` (called each round); `.stop()` ends it."""
    from outputs.airlock.intake import IntakeLoop

    return IntakeLoop(site_root, workspaces, interval=interval, db_url=db_url).start()


def site_intake(site: Site, records: Records, interval: float = 1.0) -> Any:
    """The custodian service's intake: every active recipient's workspace, found anew each round."""
    return start_intake(site.root, site.db_url, lambda: site_workspaces(site, records), interval)


def local_intake(home: Path, db_url: str, recipient: str, bundle: Path, interval: float = 1.0) -> Any:
    """`safeshare up`'s intake: HOME/app as `recipient`'s workspace, given the sealed release `bundle`. HOME is laid
    out as a site; its settings file is written if missing so that the recipient's id (the store's
    SITE/airlock/<rid>/ folder) stays the same across runs."""
    from outputs.airlock.workspace import Workspace

    site = Site(home, db_url=db_url)
    if not (site.root / "site.json").exists():
        site.save_settings()
    workspace = Workspace(Path(home) / "app", recipient, site.recipient_id(recipient), release_ref(Path(bundle)),
                          seal_sha256(Path(bundle)))
    return start_intake(site.root, db_url, lambda: [workspace], interval)


__all__ = ["local_intake", "run_site_intake", "seal_sha256", "site_intake", "site_workspaces", "start_intake"]
