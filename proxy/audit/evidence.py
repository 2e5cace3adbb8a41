"""Whether what an auditor is shown (the web player) or exports (`audit export`) is the sealed recording.

`audit verify` reads the recording to compare its hash with the signed seal; the player reads it again to decode it.
Between the two reads a writer of the sessions folder can swap the file (forged bytes while the player decodes, the
genuine bytes back, with the old modification time, when verify reads). So the verdict shown with a player is not
the verification's alone: the player's frames were decoded from bytes read once and hashed in that same read
(`proxy.audit.player.prepare`), and they count as verified only if that hash is the recording hash in the very seal
the verification checked (the log's last line, whose hash must be the verified head). Anything else is a finding
that names both hashes: what is shown is then not what the gateway sealed.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.sessiondir import EVENTS, SCREEN


def verified_seal_recording(folder: Path, head: str | None) -> str | None:
    """The recording hash in the seal line whose hash is `head` (the seal a verification checked), read now; None
    when the log's last line is no longer that seal or holds no recording hash."""
    if not head:
        return None
    try:
        last = (folder / EVENTS).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    except OSError:
        return None
    if hashlib.sha256(last).hexdigest() != head:
        return None
    try:
        seal = json.loads(last)
    except ValueError:
        return None
    recording = seal.get("recording") if isinstance(seal, dict) else None
    sha = recording.get("sha256") if isinstance(recording, dict) else None
    return sha if isinstance(sha, str) else None


@dataclass
class Shown:
    """The verdict on a prepared player: `verified` only if the session verifies and the frames were decoded from
    the bytes its verified seal names."""

    session: str
    decoded_sha256: str
    sealed_sha256: str | None
    session_ok: bool
    findings: list[str] = field(default_factory=list)
    log_matches: bool = True   # the key log, markers and metadata shown were read from the verified log

    @property
    def matches_seal(self) -> bool:
        return self.sealed_sha256 is not None and self.decoded_sha256 == self.sealed_sha256

    @property
    def verified(self) -> bool:
        return self.session_ok and self.matches_seal and self.log_matches

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "decoded_sha256": self.decoded_sha256,
                "sealed_sha256": self.sealed_sha256, "matches_seal": self.matches_seal, "findings": self.findings}


_NOT_GIVEN = object()


def judge(folder: str | Path, check: Any, decoded_sha256: str, log_head: Any = _NOT_GIVEN) -> Shown:
    """The verdict on frames decoded from bytes hashing to `decoded_sha256`, given the session's verification
    `check` (a `proxy.audit.verify.SessionCheck`). `log_head`: the head of the log the player's key log, markers
    and metadata were read from (`Player.log_head`); unless it is the verified log's head they are not verified."""
    folder = Path(folder)
    sealed = verified_seal_recording(folder, check.head) if check.sealed else None
    findings = [str(finding) for finding in check.findings]
    shown = Shown(folder.name, decoded_sha256, sealed, check.ok, findings,
                  log_matches=log_head is _NOT_GIVEN or log_head == check.head)
    if not shown.log_matches:
        findings.append(f"{folder / 'events.jsonl'}: tampered: the key log, markers and metadata shown were read "
                        f"from a log ending in {log_head}, the verified log ends in {check.head} (the log changed "
                        f"while it was read)")
    if sealed is None:
        findings.append(f"{folder / SCREEN}: no verified seal names a recording hash for these frames (decoded from "
                        f"bytes with SHA-256 {decoded_sha256})")
    elif not shown.matches_seal:
        findings.append(f"{folder / SCREEN}: tampered: the frames were decoded from bytes with SHA-256 "
                        f"{decoded_sha256}, the seal names {sealed} (the recording changed while it was read)")
    return shown


def proven_seconds(folder: str | Path, decoded_sha256: str, proven: dict[str, Any] | None) -> float | None:
    """How many seconds of a recovered session's recording its last signed checkpoint proves: the session time of
    the last record within the first `proven["bytes"]` bytes. Read from the file only when it still hashes to
    `decoded_sha256` (the bytes the player decoded) and its start to the checkpoint's hash; None otherwise, or when
    no checkpoint names a recording start (then no second of the video is proven)."""
    from proxy.recording import read_recording

    if not proven:
        return None
    try:
        data = (Path(folder) / SCREEN).read_bytes()
    except OSError:
        return None
    size = proven.get("bytes")
    if not isinstance(size, int) or hashlib.sha256(data).hexdigest() != decoded_sha256 or \
            hashlib.sha256(data[:size]).hexdigest() != proven.get("sha256"):
        return None
    try:
        records = list(read_recording(data[:size], tolerate_cut_end=True))
    except ValueError:
        return None
    return records[-1][1] if records else 0.0


__all__ = ["Shown", "judge", "proven_seconds", "verified_seal_recording"]
