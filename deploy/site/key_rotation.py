"""What a site's signing key has signed, collected when `safeshare custodian key rotate` retires it.

A retired key verifies only the signatures recorded at its retirement (`safeshare.signing.TrustedKey.signed`): the
`signed_at` in a signature is the signer's word, so a copy of the old key could otherwise date new seals before the
rotation. What the site keeps signed, per purpose:

* release key: the seals `safeshare release` made, from the key's ledger (SITE/keys/release-signing.key.signed,
  which only the custodian can write; a site with no ledger yet: every SITE/releases/<dataset>/<id>/seal.json);
* gateway key: every signed line of every session log in SITE/sessions/<id>/events.jsonl (seals and the
  checkpoints signed while a session runs), whatever its event, so that a format adding signed lines is covered.

Collected after the new key is in place (`rotate_key` reads the generator then): a running gateway re-reads its key
file and signs with the new key from its next line, so what the old key signs is on disk before the scan (which
waits a second for a line signed an instant before the rotation). Signatures
kept only outside the site folder are not found, and a retired key no longer verifies them: the seals in an
auditor's `audit checkpoint` file of sessions that retention has deleted since are the case that matters, so the
custodian can name such files (`--also-signed FILE`, `file_signatures`), which are read for signature records too.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from deploy.site.folder import Site
from engine.bundle import release_signatures
from safeshare.signing import ledger_signatures
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


def _records_in(value: Any) -> Iterator[dict[str, Any]]:
    """Signature records anywhere in a JSON value, also inside text that is itself a JSON object (a checkpoint
    file keeps each seal as the very line the log holds)."""
    if isinstance(value, dict):
        if "key_id" in value and "signature" in value and isinstance(value.get("signature"), str):
            yield value
        for item in value.values():
            yield from _records_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _records_in(item)
    elif isinstance(value, str) and value.startswith("{") and '"key_id"' in value:
        try:
            yield from _records_in(json.loads(value))
        except ValueError:
            return


def file_signatures(path: str | Path) -> list[dict[str, Any]]:
    """Every signature record in a JSON file or a file of JSON lines (an `audit checkpoint` export, a session log
    kept elsewhere). Raises ValueError naming the file when it is neither."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not readable: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        documents = [json.loads(text)]
    except ValueError:
        try:
            documents = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            raise ValueError(f"{path}: neither JSON nor JSON lines") from None
    return [record for document in documents for record in _records_in(document)]


GATEWAY_SETTLE = 1.0  # seconds for a line signed with the old key just before the new key appeared to be written


def site_signatures(site: Site, purpose: str, settle: float = GATEWAY_SETTLE) -> Iterable[dict[str, Any]]:
    """What the site keeps signed by its key for `purpose` (release or gateway).

    Release: what `safeshare release` signed, from the ledger beside the key (a seal that a copy of a leaked key
    planted in RELEASES is not in it); a site that has released nothing since ledgers exist has only the folder to go
    by. Read now, before the rotation replaces the key, so that a damaged ledger (KeyFileError) stops the rotation
    with the old key still in place.

    Gateway: read lazily, after the new key is in place; the scan waits `settle` seconds first: a running gateway that
    read the old key an instant before the rotation replaced it may still be writing the line it signed, which must
    be on disk to be recorded."""
    if purpose == "release":
        recorded = ledger_signatures(site.release_signing_key)
        return recorded if recorded is not None else list(release_signatures(site.releases))
    return _gateway_signatures(site, settle)


def _gateway_signatures(site: Site, settle: float) -> Iterator[dict[str, Any]]:
    time.sleep(settle)
    yield from session_signatures(site.sessions)
