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

    @property
    def matches_seal(self) -> bool:
        return self.sealed_sha256 is not None and self.decoded_sha256 == self.sealed_sha256

    @property
    def verified(self) -> bool:
        return self.session_ok and self.matches_seal

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "decoded_sha256": self.decoded_sha256,
                "sealed_sha256": self.sealed_sha256, "matches_seal": self.matches_seal, "findings": self.findings}


def judge(folder: str | Path, check: Any, decoded_sha256: str) -> Shown:
    """The verdict on frames decoded from bytes hashing to `decoded_sha256`, given the session's verification
    `check` (a `proxy.audit.verify.SessionCheck`)."""
    folder = Path(folder)
    sealed = verified_seal_recording(folder, check.head) if check.sealed else None
    findings = [str(finding) for finding in check.findings]
    shown = Shown(folder.name, decoded_sha256, sealed, check.ok, findings)
    if sealed is None:
        findings.append(f"{folder / SCREEN}: no verified seal names a recording hash for these frames (decoded from "
                        f"bytes with SHA-256 {decoded_sha256})")
    elif not shown.matches_seal:
        findings.append(f"{folder / SCREEN}: tampered: the frames were decoded from bytes with SHA-256 "
                        f"{decoded_sha256}, the seal names {sealed} (the recording changed while it was read)")
    return shown


__all__ = ["Shown", "judge", "verified_seal_recording"]
