"""Cut text is dropped both ways, and each drop is on record twice: when its header arrives and when its payload has
been read and thrown away.

Logging at the header matters: a peer that announces 2 GiB and stalls is on record although its payload never
completes. The payload arrives in pieces from the framer (`proxy.rfbframe.Data`), so it is hashed, never held.
"""
from __future__ import annotations

import hashlib

from proxy.eventlog import EventLog
from proxy.rfbframe import CutText


class CutTextDrop:
    """One direction's cut texts: `start` at the header, `piece` for each payload piece, `end` at MessageEnd."""

    def __init__(self, log: EventLog, direction: str, counters: dict[str, int]) -> None:
        self.log = log
        self.direction = direction
        self.counters = counters
        self._digest: hashlib._Hash | None = None
        self._size = 0

    def start(self, header: CutText) -> None:
        self.counters["cut_text_dropped"] += 1
        self.log.write("cut_text_dropped", direction=self.direction, length=header.size, extended=header.extended)
        self._digest = hashlib.sha256()
        self._size = 0

    @property
    def active(self) -> bool:
        return self._digest is not None

    def piece(self, data: bytes) -> None:
        assert self._digest is not None
        self._digest.update(data)
        self._size += len(data)

    def end(self) -> None:
        assert self._digest is not None
        self.log.write("cut_text_discarded", direction=self.direction, length=self._size,
                       sha256=self._digest.hexdigest())
        self._digest = None
