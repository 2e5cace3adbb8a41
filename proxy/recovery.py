"""Sealing the log of a session whose proxy died before it could seal it itself (the gateway recovers them at start).

The gateway that seals such a log did not write it (its predecessor did, and a writer of the folder and of the
database may have rewritten it since), so it vouches only for what it can prove: the lines up to the last checkpoint
its own key signed while the session ran (`proxy.eventlog`). The seal names that checkpoint and counts the lines
after it, which `audit verify` reports as an unverifiable tail; the session's start, limits and front door come from
the log's `connect` line (under that checkpoint), not from meta.json as found.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.eventlog import EventLog, check_checkpoints, file_digest, read_events, verify_log
from proxy.sessiondir import EVENTS, SCREEN, read_meta, write_meta
from safeshare.signing import SigningKey, TrustedKey, TrustStore


def own_trust(key: SigningKey | None) -> TrustStore | None:
    """A trust store holding only `key`: a recovering gateway accepts the checkpoints it can prove it signed."""
    if key is None:
        return None
    return TrustStore([TrustedKey("gateway", key.key_id, key.public_b64, "1970-01-01T00:00:00+00:00")])


def seal_interrupted(folder: Path, reason: str, sealer: Any = None,
                     anchor: tuple[str | None, int | None] = (None, None)) -> str | None:
    """Seal the log of a session whose proxy was killed (the gateway's container or process died): a `disconnect`
    with the reason, then a seal marked `recovered` that names the last checkpoint the sealing key signed
    (`checkpoint`: its line number, hash and time; null when there is none) and the number of lines after it
    (`unverified_lines`), records the recording's hash and size as found, and holds the session's metadata from
    the log's connect line; signed (in the recovered seals' own domain) and chained by `sealer`
    (proxy.anchors.Sealer) when given. Returns the seal hash, or None when the log is missing, damaged, sealed
    already, or does not extend `anchor` (head, lines: what the gateway anchored while the session ran; a log cut
    or rewritten below it must not be signed). Then it stays as found: an auditor's finding, not something to
    repair."""
    from proxy.anchors import extends  # the database layer: only the front ends that recover sessions load it

    try:
        result = verify_log(folder / EVENTS, require_seal=False)
        if not extends(result.hashes, *anchor):
            return None
        log = EventLog.resume(folder / EVENTS)
    except (OSError, ValueError):
        return None
    records = read_events(folder / EVENTS)  # the chain verified: every line is an object
    found = log.lines
    key = sealer.key() if sealer is not None else None
    proven, _ = check_checkpoints(records[:found], folder.name, own_trust(key))
    line = proven[-1] if proven else 0
    checkpoint = {"line": line, "hash": result.hashes[line - 1], "t": records[line - 1].get("t")} if line else None
    fields: dict[str, Any] = {"session": folder.name, "checkpoint": checkpoint, "unverified_lines": found - line}
    screen = folder / SCREEN
    if screen.is_file():
        digest, size = file_digest(screen)
        fields["recording"] = {"file": screen.name, "sha256": digest, "bytes": size, "complete": False}
    connect = records[0] if records and records[0].get("event") == "connect" else {}
    started = connect.get("meta") if isinstance(connect.get("meta"), dict) else None
    meta = dict(started) if started is not None else (read_meta(folder) or {"session": folder.name})
    meta.update(session=folder.name, end=datetime.now(timezone.utc).isoformat(), end_reason=reason, recovered=True)
    meta.pop("log_head", None)
    if "recording" in fields:
        meta["recording"] = fields["recording"]
    fields["meta"] = meta
    log.write("disconnect", reason=reason, recovered=True)
    if sealer is not None:
        fields.update(sealer.fields())
    head = log.close(key, recovered=True, **fields)
    if sealer is not None:
        sealer.sealed(folder.name, head)
    write_meta(folder, {**meta, "log_head": head})
    return head
