"""The kiosk display's keyboard: no key may act on the X server itself, whatever keysym reaches it.

A VNC client sends keysyms, not keys. x11vnc by default adds a keysym that the keymap lacks to a spare keycode, and
the X server then gives that key the action its compatibility map names for the keysym: `Terminate_Server` ends Xvfb
(and with it the whole enclave), `StickyKeys_Enable` switches StickyKeys on for everyone (a tapped Ctrl then turns the
next `n` into Ctrl+N, past the proxy's shortcut filter). The proxy drops such keysyms, and this module makes sure
they would do nothing even if one got through:

- x11vnc runs with `-noadd_keysyms` (vnc.py): a keysym that is not on the keyboard is dropped, not added;
- every keyboard device of the server (the core keyboard, the XTEST keyboard the VNC server types with, Xvfb's own;
  the core keyboard takes over the keymap of whichever one typed last) gets a compatibility map whose every rule that
  would give a key an action other than modifiers or groups says "no action", and the keys' actions are recomputed:
  no key can terminate the server, lock or set a control, move or click the pointer, or switch screens;
- the AccessX controls (StickyKeys, SlowKeys, BounceKeys, MouseKeys, the AccessX keyboard gestures, overlays) are
  off, Xvfb starts with `-accessx` (no Shift-five-times gesture), and the watchdog (`KeyboardGuard`) switches any of
  them off again and re-disarms a keymap that regained an action, logging it.

`harden_keyboard` runs after Xvfb starts and before any other client (the VNC server, the browser) connects, and
refuses to let the kiosk start if the result does not check out.

Chromium's own shortcuts that leave the app or open something of the browser's (KIOSK_SHORTCUTS: new windows and
tabs, closing, browser pages, developer tools, files, the task manager, caret browsing, menus, full screen) are also
taken off the keyboard here, at the X server: the watchdog holds passive grabs on them (`grab_shortcuts`), as a window
manager holds its global shortcuts, so the key press goes to the watchdog, which discards and logs it, never to the
browser. The X server knows which modifiers are really down, whichever VNC session pressed them: a Ctrl left held by a
session that ended, or latched by StickyKeys, still makes the next `n` a Ctrl+N that is caught here. The proxy's
filter stays the first line (and the one that logs per session).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from itertools import combinations

from enclave.kiosk.xlib import ACCESSX_CONTROLS, MODIFIER_BITS, XKB_CONTROLS, XConnection

log = logging.getLogger("safeshare.kiosk")

CHECK_CONTROLS_SECONDS = 0.5  # how often the watchdog looks at the controls (a few small requests)
CHECK_KEYMAP_SECONDS = 5.0  # and at the keymaps' actions (larger replies)


# (keysym, modifiers that must be held, modifiers that may be held as well). The lock states (CapsLock, NumLock) and
# Mod3/Mod5 (AltGr) may always be on too. Keys the app needs (Ctrl+C/V/X/A/Z/F, Ctrl+W which the watchdog itself sends
# to close a wrong tab, Alt+Left/Right within the app) are not taken.
_ANY = ("Shift", "Ctrl", "Alt", "Super")
_NOT_CTRL = ("Shift", "Alt", "Super")
KIOSK_SHORTCUTS: tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...] = (
    *((0xFFBE + n - 1, (), _ANY) for n in (1, 6, 7, 10, 11, 12)),  # help, focus the toolbar, caret browsing, menu...
    (0xFF1B, ("Shift",), ("Ctrl", "Alt", "Super")),  # Shift+Escape: the task manager
    *((ord(c), ("Ctrl",), _NOT_CTRL) for c in "nthjosupl"),  # windows, tabs, history, downloads, files, source...
    *((ord(c), ("Ctrl", "Shift"), ("Alt", "Super")) for c in "qwicbmo"),  # quit, close, devtools, bookmarks, people
    (0xFFFF, ("Ctrl", "Shift"), ("Alt", "Super")),  # Ctrl+Shift+Delete: clear browsing data
    (0xFFC1, ("Ctrl",), _NOT_CTRL),  # Ctrl+F4: close the tab
    (0xFFC1, ("Alt",), ("Shift", "Super")),  # Alt+F4: close the window
    (0xFF50, ("Alt",), ("Shift", "Ctrl", "Super")),  # Alt+Home: the home page in this tab
    *((ord(c), ("Alt",), ("Shift", "Super")) for c in "fed"),  # the browser's menu, the address bar
)
_ALWAYS_IGNORED = ("Lock", "Mod2", "Mod3", "Mod5")


def shortcut_masks(required: tuple[str, ...], optional: tuple[str, ...]) -> list[int]:
    """Every modifier mask under which a shortcut counts: the required bits plus any subset of the optional ones and
    of the lock states."""
    base = sum(MODIFIER_BITS[name] for name in required)
    extra = [MODIFIER_BITS[name] for name in (*optional, *_ALWAYS_IGNORED)]
    return sorted({base | sum(subset) for size in range(len(extra) + 1) for subset in combinations(extra, size)})


def grab_shortcuts(conn: XConnection) -> int:
    """Take KIOSK_SHORTCUTS off the keyboard (passive grabs on the root window held by `conn`); returns how many
    key combinations were grabbed. The grabs last as long as the connection: the watchdog's."""
    grabbed = 0
    for keysym, required, optional in KIOSK_SHORTCUTS:
        masks = shortcut_masks(required, optional)
        if conn.grab_key(keysym, masks):
            grabbed += len(masks)
    return grabbed


class KeyboardHardeningError(RuntimeError):
    """The display's keyboard could not be made safe: the kiosk must not start."""


def control_names(mask: int) -> list[str]:
    return [name for name, bit in XKB_CONTROLS.items() if mask & bit]


def keyboard_problems(conn: XConnection) -> list[str]:
    """What is wrong with the display's keyboards now (empty when safe): AccessX controls that are on, actions a key
    could trigger that act on the server."""
    problems: list[str] = []
    for device in conn.keyboards():
        on = conn.xkb_enabled_controls(device) & ACCESSX_CONTROLS
        if on:
            problems.append(f"keyboard {device}: {', '.join(control_names(on))} on")
        armed = conn.xkb_armed_actions(device)
        if armed:
            problems.append(f"keyboard {device}: {len(armed)} server actions ({', '.join(armed[:3])}...)")
    return problems


def disarm(conn: XConnection) -> dict[int, int]:
    """Neutralise every keyboard device's compatibility map and switch the AccessX controls off; returns how many
    rules were changed per device."""
    changed = {}
    for device in conn.keyboards():
        changed[device] = conn.xkb_disarm_compat_map(device)
        conn.xkb_disable_controls(ACCESSX_CONTROLS, device)
    return changed


def harden_keyboard(display: str, cookie: bytes) -> dict[int, int]:
    """Make the display's keyboard safe (see the module docstring) and check it; raises KeyboardHardeningError."""
    try:
        with XConnection(display, cookie) as conn:
            changed = disarm(conn)
            problems = keyboard_problems(conn)
    except Exception as exc:  # no XKB, no XInput, X errors: a keyboard we cannot vouch for
        raise KeyboardHardeningError(f"cannot harden the keyboard of {display}: {exc}") from exc
    if problems:
        raise KeyboardHardeningError(f"the keyboard of {display} is still unsafe: {'; '.join(problems)}")
    log.info("kiosk keyboard hardened: %s", ", ".join(f"device {d}: {n} actions removed" for d, n in changed.items()))
    return changed


@dataclass
class KeyboardGuard:
    """The watchdog's periodic check: undo anything that switched a control on or gave a key a server action."""

    last_controls: float = 0.0
    last_keymap: float = 0.0
    fixes: list[str] = field(default_factory=list)

    def check(self, conn: XConnection, now: float | None = None) -> list[str]:
        """Returns what was found and fixed this time (empty almost always)."""
        now = time.monotonic() if now is None else now
        found: list[str] = []
        if now - self.last_controls >= CHECK_CONTROLS_SECONDS:
            self.last_controls = now
            for device in conn.keyboards():
                on = conn.xkb_enabled_controls(device) & ACCESSX_CONTROLS
                if on:
                    conn.xkb_disable_controls(ACCESSX_CONTROLS, device)
                    found.append(f"keyboard {device}: switched {', '.join(control_names(on))} off again")
        if now - self.last_keymap >= CHECK_KEYMAP_SECONDS:
            self.last_keymap = now
            for device in conn.keyboards():
                armed = conn.xkb_armed_actions(device)
                if armed:
                    conn.xkb_disarm_compat_map(device)
                    found.append(f"keyboard {device}: removed {len(armed)} server actions again")
        self.fixes += found
        return found
