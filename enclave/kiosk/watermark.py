"""The screen watermark: who and when, faint and tiled, in every frame the researcher sees and in the recording.

Blocking the clipboard leaves a photograph or screenshot of the researcher's own screen as the way out; a stamp with
the recipient, the kiosk and the time in every corner of it names where such a picture came from. It is drawn on the
kiosk's X display, outside the browser's reach (no page can draw over, hide or move it), in an override-redirect
window above the browser (overlay.py) whose SHAPE is the glyph pixels of the text, tiled over the whole screen, and
whose input shape is empty: clicks go through to the page, and it never takes the keyboard focus. The VNC server
reads the screen the X server composed, so the proxy, the researcher's browser and the session recording all get
it, and the proxy does not change (its throughput neither): rewriting framebuffer updates at the proxy would mean
decoding and re-encoding every encoding.

Faint without a compositor: the stamp's colour is drawn solid, but only on the glyph pixels an ordered (Bayer)
dither keeps (`opacity` 0.5: every other pixel, a checkerboard), which a camera or a scaled screenshot averages into a
light tint (#c8c8c8 at half density: about 11 % grey on white) and which leaves half of what lies under a glyph
visible. The text is sparse: with the defaults it covers about 1.6 % of a 1280x800 screen's pixels and changes under
3 % of a page's text pixels; OCR reads 60 of 61 words of a test page with it, 61 without (test_watermark.py).

The kiosk's id (random per kiosk start) stands for the session: the kiosk is never told which session is watching
(that would need a channel from the gateway into the enclave, which the design does not have and this does not add),
but x11vnc announces the id as its desktop name, the proxy writes that name into every session's hash-chained log
(`upstream_ready`), and a kiosk serves one session at a time (x11vnc -nevershared; the gateway replaces an older
session): recipient, kiosk id and minute name one session. The watchdog calls `keep` at every poll (0.1 s): it redraws
the text when the minute changes, maps the window again if anything unmapped or destroyed it, and raises it again
when anything (a menu, a new browser window) was mapped above it.
"""
from __future__ import annotations

import logging
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np

from policies.recipient import WatermarkPolicy

if TYPE_CHECKING:
    from enclave.kiosk.overlay import Overlay
    from enclave.kiosk.xlib import TopLevel, XConnection

log = logging.getLogger("safeshare.kiosk")

_DEFAULT = WatermarkPolicy()  # the one place the defaults are written is the policy model
NO_RECIPIENT = "recipient not given"
LINE_GAP = 3  # font pixels between the lines of the stamp
# Distance between stamps: at least this much empty screen around each (screen pixels), more for a large stamp.
GAP_X, GAP_Y = 160, 110
# The 4x4 Bayer matrix: a pixel is drawn when its entry is below opacity * 16 (0.5: a checkerboard).
BAYER4 = np.array([[0, 8, 2, 10], [12, 4, 14, 6], [3, 11, 1, 9], [15, 7, 13, 5]])


@dataclass(frozen=True)
class WatermarkSettings:
    """What the kiosk draws: the recipient policy's `watermark` plus who the recipient is."""

    enabled: bool = _DEFAULT.enabled
    rgb: tuple[int, int, int] = _DEFAULT.rgb
    opacity: float = _DEFAULT.opacity
    text: str = _DEFAULT.text
    scale: int = _DEFAULT.scale
    recipient: str = NO_RECIPIENT

    @classmethod
    def from_policy(cls, policy: WatermarkPolicy, recipient: str | None) -> WatermarkSettings:
        return cls(enabled=policy.enabled, rgb=policy.rgb, opacity=policy.opacity, text=policy.text,
                   scale=policy.scale, recipient=recipient or NO_RECIPIENT)

    def lines(self, kiosk_id: str, now: datetime) -> list[str]:
        """The stamp's lines at `now` (UTC, to the minute). Control characters in the recipient become spaces."""
        recipient = "".join(c if c.isprintable() else " " for c in self.recipient)
        text = string.Formatter().vformat(self.text, (), {
            "recipient": recipient, "kiosk": kiosk_id,
            "time": now.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")})
        return text.split("\n")


def text_block(lines: list[np.ndarray], scale: int) -> np.ndarray:
    """Rendered lines (boolean arrays) one below the other, left-aligned, enlarged `scale` times."""
    height = sum(line.shape[0] for line in lines) + LINE_GAP * (len(lines) - 1)
    width = max(line.shape[1] for line in lines)
    block = np.zeros((height, width), bool)
    y = 0
    for line in lines:
        block[y:y + line.shape[0], :line.shape[1]] = line
        y += line.shape[0] + LINE_GAP
    return np.repeat(np.repeat(block, scale, axis=0), scale, axis=1)


def tile_mask(block: np.ndarray, width: int, height: int, opacity: float) -> np.ndarray:
    """The whole screen's mask: `block` repeated in rows, every other row shifted by half a step (so that no column
    of the screen is free of it), thinned by the ordered dither for `opacity`."""
    bh, bw = block.shape
    step_x, step_y = bw + max(GAP_X, bw // 2), bh + max(GAP_Y, bh)
    mask = np.zeros((height, width), bool)
    for row, top in enumerate(range(GAP_Y // 2 - bh // 2, height, step_y)):
        for left in range(-(row % 2) * step_x // 2 + GAP_X // 4, width, step_x):
            y0, x0 = max(top, 0), max(left, 0)
            y1, x1 = min(top + bh, height), min(left + bw, width)
            if y0 < y1 and x0 < x1:
                mask[y0:y1, x0:x1] |= block[y0 - top:y1 - top, x0 - left:x1 - left]
    keep = BAYER4[np.arange(height)[:, None] % 4, np.arange(width)[None, :] % 4] < opacity * 16
    return mask & keep


class Watermark:
    """The watermark on one X display; every method runs on the watchdog's X thread, on its connection."""

    def __init__(self, settings: WatermarkSettings, kiosk_id: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.settings = settings
        self.kiosk_id = kiosk_id
        self.clock = clock
        self.overlay: Overlay | None = None
        self.lines: list[str] = []
        self.mask: np.ndarray | None = None
        self.raises = 0  # times something was mapped or raised above it and it went back on top
        self.redraws = 0  # times the window was gone or unmapped and was shown again

    def start(self, conn: XConnection) -> None:
        """Create the window and draw the stamp; XError if the display cannot show it (the kiosk then refuses)."""
        from enclave.kiosk.overlay import Overlay

        started = time.monotonic()
        self.overlay = Overlay(conn, self.settings.rgb)
        self._draw(conn, self.settings.lines(self.kiosk_id, self.clock()))
        self.overlay.show()
        assert self.mask is not None
        log.info("watermark on: %r, %.2f %% of the screen, in %.0f ms", "/".join(self.lines),
                 100 * self.mask.mean(), 1000 * (time.monotonic() - started))

    def _draw(self, conn: XConnection, lines: list[str]) -> None:
        from enclave.kiosk.overlay import render_text

        assert self.overlay is not None
        block = text_block([render_text(conn, line) for line in lines], self.settings.scale)
        self.mask = tile_mask(block, self.overlay.width, self.overlay.height, self.settings.opacity)
        self.overlay.set_mask(self.mask)
        self.lines = lines

    def keep(self, conn: XConnection, windows: list[TopLevel]) -> list[str]:
        """Keep the stamp current and on top (`windows`: the root's children, bottom to top, as just listed: what is
        decided here is decided on that one look). Returns what had to be repaired, for the watchdog's log."""
        assert self.overlay is not None
        notes = []
        mine = next((w for w in windows if w.window == self.overlay.window), None)
        if mine is None and not self.overlay.exists()[0]:
            from enclave.kiosk.overlay import Overlay

            notes.append(f"the watermark window 0x{self.overlay.window:x} was destroyed: drawn again")
            self.overlay = Overlay(conn, self.settings.rgb)
            self.lines = []
        lines = self.settings.lines(self.kiosk_id, self.clock())
        if lines != self.lines:
            self._draw(conn, lines)
        shown = [w.window for w in windows if w.viewable]
        if mine is None or not mine.viewable:
            if mine is not None:
                notes.append(f"the watermark window 0x{self.overlay.window:x} was unmapped: shown again")
            self.redraws += 1
            self.overlay.show()
        elif shown and shown[-1] != self.overlay.window:
            self.raises += 1
            self.overlay.show()
        return notes

    def raise_(self) -> None:
        """Back on top after the watchdog raised the kiosk window."""
        if self.overlay is not None:
            self.overlay.show()
            self.raises += 1

    def stop(self) -> None:
        if self.overlay is not None:
            self.overlay.destroy()
            self.overlay = None


__all__ = ["Watermark", "WatermarkSettings", "text_block", "tile_mask"]
