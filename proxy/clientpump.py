"""Client to server: every client message framed (`proxy.rfbframe`), filtered, logged and forwarded.

Key events pass the keysym allowlist (`proxy.keysyms`), the shortcut filter and the rate limit; pointer presses with
a blocked modifier held are dropped, motion is coalesced and its last position flushed by a timer; SetEncodings is
cut to the allowlist; cut text is dropped. What the server gets is re-encoded from the parsed fields, never the
client's bytes as they came, so padding and flags reach it normalised.

One pixel-format rule goes beyond RFC 6143: once the client has requested updates, a SetPixelFormat that changes the
pixel size ends the session, because updates already in flight use the old size and nothing in the protocol says
where the server switched; losing the framing would lose the cut-text filter. noVNC sets the format once, before
its first request; a viewer that lowers its colour depth later (TigerVNC's AutoSelect on a slow link) ends its
session. Changes that keep the pixel size (shifts, byte order) are allowed at any time.
"""
from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable

from policies.shortcuts import keysym_name
from proxy import rfb
from proxy.cuttext import CutTextDrop
from proxy.eventlog import EventLog
from proxy.keysyms import RELEASE_KEYSYMS
from proxy.limits import BLOCKED, FORWARD, REFUSED, InputFilter
from proxy.recording import Recorder
from proxy.rfb import ProtocolError
from proxy.rfbframe import (
    ClientFramer, CutText, Data, FramebufferUpdateRequest, KeyEvent, MessageEnd, PointerEvent,
    ServerFramer, SetEncodings, SetPixelFormat,
)
from proxy.transport import CHUNK, framed

RESET_DRAIN_TIMEOUT = 2.0
_RELEASE_SET = frozenset(RELEASE_KEYSYMS)


class ClientPump:
    """`await pump.run()` until the client closes (returns the end reason) or breaks the protocol (raises)."""

    def __init__(self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, log: EventLog,
                 input_filter: InputFilter, counters: dict[str, int], server: ServerFramer,
                 recorder: Recorder | None, stop: asyncio.Event, terminate: Callable[[str], None],
                 start: float) -> None:
        self.reader = reader
        self.upstream = upstream
        self.log = log
        self.filter = input_filter
        self.counters = counters
        self.server = server  # its pixel format follows the client's SetPixelFormat
        self.recorder = recorder
        self.stop = stop
        self.terminate = terminate
        self.last_input = start  # for the idle timeout
        self.pointer_xy = (0, 0)
        self._framer = ClientFramer(chunk=CHUNK)
        self._cut_text = CutTextDrop(log, "client_to_server", counters)
        self._updates_requested = False
        self._motion_timer: asyncio.TimerHandle | None = None

    async def run(self) -> str:
        async for event in framed(self.reader, self._framer):
            self._message(event)
            if isinstance(event, MessageEnd):
                await self.upstream.drain()
        return "client closed"

    def _message(self, event: object) -> None:
        log = self.log
        if isinstance(event, KeyEvent):
            down, keysym = event.down, event.keysym
            self.last_input = time.monotonic()
            verdict, shortcut = self.filter.key(down, keysym)
            name = keysym_name(keysym)
            if verdict == FORWARD:
                self.upstream.write(struct.pack(">BBxxI", rfb.C_KEY_EVENT, 1 if down else 0, keysym))
                self.counters["keys_forwarded"] += 1
                log.write("key", down=down, keysym=keysym, name=name)
            elif verdict == REFUSED:  # outside the keysym allowlist (proxy.keysyms), pressed or released
                self.counters["keys_refused"] += 1
                log.write("key_blocked", down=down, keysym=keysym, name=name, shortcut=None, refused=shortcut)
            elif verdict == BLOCKED:
                self.counters["keys_blocked"] += 1
                log.write("key_blocked", down=True, keysym=keysym, name=name, shortcut=shortcut)
            else:
                self.counters["keys_dropped"] += 1
                log.write("key_dropped", down=True, keysym=keysym, name=name, limit="keys")
        elif isinstance(event, PointerEvent):
            self._pointer(event)
        elif isinstance(event, FramebufferUpdateRequest):
            self._updates_requested = True
            self.upstream.write(event.raw)
        elif isinstance(event, SetEncodings):
            requested = list(event.encodings)
            kept = rfb.filter_encodings(requested)
            self.upstream.write(struct.pack(f">BxH{len(kept)}i", rfb.C_SET_ENCODINGS, len(kept), *kept))
            log.write("set_encodings", requested=requested, forwarded=kept)
            if self.recorder is not None:
                self.recorder.encodings(kept)
        elif isinstance(event, SetPixelFormat):
            pixel_format = event.pixel_format
            if self._updates_requested and pixel_format.framing != self.server.pixel_format.framing:
                # Updates in flight would still use the old pixel size, and the proxy cannot tell where the server
                # switched: it would lose the framing of the server stream (and with it the cut-text filter).
                raise ProtocolError("SetPixelFormat changing the pixel size after updates were requested")
            self.server.pixel_format = pixel_format
            self.upstream.write(bytes([rfb.C_SET_PIXEL_FORMAT]) + b"\0\0\0" + pixel_format.pack())
            log.write("set_pixel_format", **pixel_format.as_dict())
        elif isinstance(event, CutText):
            self._cut_text.start(event)
        elif isinstance(event, Data):
            self._cut_text.piece(event.data)
        elif isinstance(event, MessageEnd) and self._cut_text.active:
            self._cut_text.end()

    def _pointer(self, event: PointerEvent) -> None:
        mask, x, y = event.mask, event.x, event.y
        self.last_input = time.monotonic()
        self.pointer_xy = (x, y)
        verdict = self.filter.pointer(mask)
        if verdict.blocked_buttons:
            self.counters["clicks_blocked"] += 1
            self.log.write("click_dropped", buttons=verdict.blocked_buttons, x=x, y=y, shortcut=verdict.blocked_by,
                           modifiers=sorted(self.filter.held_modifiers))
        if verdict.dropped_buttons:
            self.counters["clicks_dropped"] += 1
            self.log.write("click_dropped", buttons=verdict.dropped_buttons, x=x, y=y, limit="clicks")
        if verdict.action == FORWARD:
            self.cancel_motion_timer()
            self.upstream.write(struct.pack(">BBHH", rfb.C_POINTER_EVENT, verdict.mask, x, y))
            self.counters["pointer_forwarded"] += 1
            self.log.write("pointer", mask=verdict.mask, x=x, y=y, coalesced=verdict.coalesced)
        else:
            self.counters["pointer_coalesced"] += 1
            self._schedule_motion_flush()

    # --- coalesced motion ------------------------------------------------------------------------------------------

    def cancel_motion_timer(self) -> None:
        if self._motion_timer is not None:
            self._motion_timer.cancel()
            self._motion_timer = None

    def _schedule_motion_flush(self) -> None:
        if self._motion_timer is None:
            delay = self.filter.motion.wait_time()
            self._motion_timer = asyncio.get_running_loop().call_later(delay, self._flush_motion)

    def _flush_motion(self) -> None:
        """Forward the latest coalesced pointer position so the pointer ends where the user left it."""
        self._motion_timer = None
        if self.stop.is_set() or self.upstream.is_closing():
            return
        coalesced = self.filter.take_pending_motion()
        if coalesced is None:
            self._schedule_motion_flush()
            return
        x, y = self.pointer_xy
        mask = self.filter.server_mask
        try:
            self.upstream.write(struct.pack(">BBHH", rfb.C_POINTER_EVENT, mask, x, y))
            self.counters["pointer_forwarded"] += 1
            self.log.write("pointer", mask=mask, x=x, y=y, coalesced=coalesced)
        except Exception as exc:  # fail closed from a timer callback too
            self.terminate(f"internal error: {exc.__class__.__name__}: {exc}")

    # --- releasing every key ---------------------------------------------------------------------------------------

    async def reset_input(self, when: str) -> None:
        """Release every key and button towards the server: the standard keys (`proxy.keysyms.RELEASE_KEYSYMS`),
        then any other key this session let through pressed, then the buttons (a PointerEvent with mask 0, at the
        researcher's last position; at the start, where nothing is known, at 0,0). The VNC server keeps keys
        pressed in X when its client leaves, so without this a modifier held when one session ended (or its proxy
        was killed) would still be held in the next, unseen by that session's shortcut filter. Best effort at the
        end: a server that has gone needs no releasing."""
        if self.upstream.is_closing():
            return
        extra = [keysym for keysym in self.filter.pressed_keys if keysym not in _RELEASE_SET]
        held_buttons = self.filter.server_mask
        x, y = self.pointer_xy if when == "end" else (0, 0)
        data = b"".join(struct.pack(">BBxxI", rfb.C_KEY_EVENT, 0, keysym) for keysym in (*RELEASE_KEYSYMS, *extra))
        data += struct.pack(">BBHH", rfb.C_POINTER_EVENT, 0, x, y)
        try:
            self.upstream.write(data)
            await asyncio.wait_for(self.upstream.drain(), RESET_DRAIN_TIMEOUT)
        except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
            if when == "start":
                raise ConnectionResetError(f"releasing the keys failed: {exc}") from exc
            return
        if not self.log.closed:
            self.log.write("input_reset", when=when, keys=len(RELEASE_KEYSYMS) + len(extra), extra=extra,
                           buttons=held_buttons, x=x, y=y)
