"""Sealing the log of a session whose proxy died before it could seal it itself (the gateway recovers them at start).
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.eventlog import EventLog, file_digest, verify_log
from proxy.sessiondir import EVENTS, SCREEN, read_meta, write_meta


def seal_interrupted(folder: Path, reason: str, sealer: Any = None,
                     anchor: tuple[str | None, int | None] = (None, None)) -> str | None:
    """Seal the log of a session whose proxy was killed (the gateway's container or process died): a `disconnect`
    with the reason, then a seal marked `recovered` that records the recording's hash and size as found, signed
    and chained by `sealer` (proxy.anchors.Sealer) when given. Returns the seal hash, or None when the log is
    missing, damaged, sealed already, or does not extend `anchor` (head, lines: what the gateway anchored while the
    session ran; a log cut or rewritten below it must not be signed). Then it stays as found: an auditor's finding,
    not something to repair."""
    from proxy.anchors import extends  # the database layer: only the front ends that recover sessions load it

    try:
        if not extends(verify_log(folder / EVENTS, require_seal=False).hashes, *anchor):
            return None
        log = EventLog.resume(folder / EVENTS)
    except (OSError, ValueError):
        return None
    fields: dict[str, Any] = {"session": folder.name}
    screen = folder / SCREEN
    if screen.is_file():
        digest, size = file_digest(screen)
        fields["recording"] = {"file": screen.name, "sha256": digest, "bytes": size, "complete": False}
    log.write("disconnect", reason=reason, recovered=True)
    if sealer is not None:
        fields.update(sealer.fields())
    head = log.close(sealer.key() if sealer is not None else None, recovered=True, **fields)
    if sealer is not None:
        sealer.sealed(folder.name, head)
    meta = read_meta(folder) or {"session": folder.name}
    meta.update(end=datetime.now(timezone.utc).isoformat(), end_reason=reason, log_head=head, recovered=True,
                **fields)
    write_meta(folder, meta)
    return head
