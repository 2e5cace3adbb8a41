"""What a site's signing key has signed, collected when `safeshare custodian key rotate` retires it.

A retired key verifies only the signatures recorded at its retirement (`safeshare.signing.TrustedKey.signed`): the
`signed_at` in a signature is the signer's word, so a copy of the old key could otherwise date new seals before the
rotation. What the site keeps signed, per purpose:

* release key: the seal of every bundle in SITE/releases/<dataset>/<id>/seal.json;
* gateway key: every signed line of every session log in SITE/sessions/<id>/events.jsonl (seals and the
  checkpoints signed while a session runs), whatever its event, so that a format adding signed lines is covered.

Collected after the new key is in place (`rotate_key` reads the generator then): a running gateway re-reads its key
file and signs with the new key from its next line, so what the old key signs is on disk before the scan. Signatures
kept outside the site folder (copies handed to auditors) are not found, and a retired key no longer verifies them.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deploy.site import Site
from engine.bundle import release_signatures
from proxy.sessiondir import EVENTS, session_folders


def _signature_records(line: bytes) -> Iterator[dict[str, Any]]:
    if b'"key_id"' not in line:  # most lines are input events: skip them without parsing
        return
    try:
        record = json.loads(line)
    except ValueError:
        return
    if isinstance(record, dict):
        for value in record.values():
            if isinstance(value, dict) and "key_id" in value and "signature" in value:
                yield value


def session_signatures(sessions: str | Path) -> Iterator[dict[str, Any]]:
    """Every signature record on a line of a session log under `sessions` (seals, checkpoints)."""
    sessions = Path(sessions)
    if not sessions.is_dir():
        return
    for folder in session_folders(sessions):
        try:
            with open(folder / EVENTS, "rb") as handle:
                for line in handle:
                    yield from _signature_records(line)
        except OSError:
            continue


def site_signatures(site: Site, purpose: str) -> Iterator[dict[str, Any]]:
    """What the site keeps signed by its key for `purpose` (release or gateway)."""
    if purpose == "release":
        return release_signatures(site.releases)
    return session_signatures(site.sessions)
