"""The input controls built from a recipient's session limits: their enforcement.

The limits come from the `limits:` section of a recipient policy YAML (`policies.recipient`, examples in
`policies/examples/recipient-*.yaml`); their schema and defaults are the policy's (`policies.limits.SessionLimits`,
re-exported here). `InputFilter` holds the decision logic for key and pointer events without any I/O, so it
can be tested on its own and the proxy session only has to act on its verdicts.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from policies.limits import (  # noqa: F401 - the schema, re-exported: the proxy's code and tests name it here
    DEFAULT_BLOCKED_CLICKS, DEFAULT_BLOCKED_SHORTCUTS, KeyLimits, PointerLimits, SessionLimits,
)
from policies.shortcuts import modifier_of
from proxy import keysyms


class TokenBucket:
    """Classic token bucket, full at start: `burst` events at once, then `rate` per second."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self) -> bool:
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def wait_time(self) -> float:
        """Seconds until one token is available."""
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self.rate)


# Verdicts of InputFilter.
FORWARD = "forward"
DROPPED = "dropped"  # over the rate limit
BLOCKED = "blocked"  # a blocked shortcut
REFUSED = "refused"  # a keysym outside the allowlist (proxy.keysyms)
COALESCED = "coalesced"


@dataclass
class PointerVerdict:
    action: str  # FORWARD or COALESCED
    mask: int  # mask to forward (client's mask minus suppressed presses)
    dropped_buttons: int = 0  # button bits whose press was dropped by the click limit
    coalesced: int = 0  # motion events folded into this forwarded one
    blocked_buttons: int = 0  # button bits whose press was dropped because a blocked modifier was held
    blocked_by: str | None = None  # the blocked click's text, e.g. "Shift+Click"


@dataclass
class InputFilter:
    """Per-session decisions on key and pointer events: keysym allowlist, shortcut and modified-click blocking, press
    limits, motion coalescing. It also knows which keys it let through pressed (`pressed_keys`), so that the
    session can release them when it ends.

    Modifier state: the filter only knows the modifiers it saw pressed. That is sound only because the session
    releases every key towards the server before the first event is forwarded (`proxy.keysyms.RELEASE_KEYSYMS`):
    a modifier held in X by an earlier client would otherwise be invisible here."""

    limits: SessionLimits
    clock: Callable[[], float] = time.monotonic
    _held: dict[int, str] = field(default_factory=dict)
    _pressed: dict[int, None] = field(default_factory=dict)  # forwarded down, not yet released (ordered set)
    _client_mask: int = 0
    _suppressed: int = 0
    _server_mask: int = 0
    _coalesced: int = 0

    def __post_init__(self) -> None:
        self.shortcuts = self.limits.shortcuts()
        self.click_shortcuts = self.limits.click_shortcuts()
        self.keys = TokenBucket(self.limits.keys.rate, self.limits.keys.burst, self.clock)
        self.clicks = TokenBucket(self.limits.pointer.click_rate, self.limits.pointer.click_burst, self.clock)
        # Motion: a small burst so that a quick drag start is smooth, then the configured rate.
        self.motion = TokenBucket(self.limits.pointer.motion_rate, max(1.0, self.limits.pointer.motion_rate / 10),
                                  self.clock)

    @property
    def held_modifiers(self) -> set[str]:
        return set(self._held.values())

    @property
    def pressed_keys(self) -> list[int]:
        """Keysyms forwarded pressed and not released since, in the order they were pressed."""
        return list(self._pressed)

    def key(self, down: bool, keysym: int) -> tuple[str, str | None]:
        """Return (verdict, detail): the blocked shortcut's text for BLOCKED, why the keysym is not forwarded for
        REFUSED. Refused keysyms never pass, pressed or released; other releases always pass so that no key sticks
        on the server."""
        refused = keysyms.refusal(keysym)
        if refused is not None:
            return REFUSED, refused
        group = modifier_of(keysym)
        if not down:
            self._held.pop(keysym, None)
            self._pressed.pop(keysym, None)
            return FORWARD, None
        if group is not None:
            self._held[keysym] = group
        held = self.held_modifiers
        for shortcut in self.shortcuts:
            if shortcut.matches(keysym, held):
                return BLOCKED, shortcut.text
        if not self.keys.take():
            return DROPPED, None
        self._pressed[keysym] = None
        return FORWARD, None

    def pointer(self, mask: int) -> PointerVerdict:
        """Button presses use the click bucket (a dropped press stays suppressed until released); pure motion uses
        the motion bucket and coalesces when it is empty, the caller keeping the latest position pending."""
        pressed = mask & ~self._client_mask
        self._client_mask = mask
        self._suppressed &= mask  # a released button is no longer suppressed
        new_press = pressed & ~self._suppressed
        blocked, blocked_by = 0, None
        if new_press:
            held = self.held_modifiers
            for click in self.click_shortcuts:
                if new_press & click.button and click.modifiers <= held:
                    blocked |= click.button
                    blocked_by = blocked_by or click.text
            self._suppressed |= blocked
            new_press &= ~blocked
        dropped = 0
        if new_press and not self.clicks.take():
            self._suppressed |= new_press
            dropped = new_press
        forward_mask = mask & ~self._suppressed
        if forward_mask != self._server_mask:
            self._server_mask = forward_mask
            coalesced, self._coalesced = self._coalesced, 0
            return PointerVerdict(FORWARD, forward_mask, dropped, coalesced, blocked, blocked_by)
        if self.motion.take():
            coalesced, self._coalesced = self._coalesced, 0
            return PointerVerdict(FORWARD, forward_mask, dropped, coalesced, blocked, blocked_by)
        self._coalesced += 1
        return PointerVerdict(COALESCED, forward_mask, dropped, 0, blocked, blocked_by)

    def take_pending_motion(self) -> int | None:
        """For the coalescing timer: a token for the pending motion, returning how many events it stands for."""
        if self._coalesced and self.motion.take():
            coalesced, self._coalesced = self._coalesced, 0
            return coalesced
        return None

    @property
    def server_mask(self) -> int:
        return self._server_mask

    def limits_dict(self) -> dict[str, Any]:
        return self.limits.model_dump()
