"""Which keysyms the proxy forwards to the enclave's VNC server, and which ones it releases when a session starts or
ends.

Why an allowlist: a KeyEvent names a keysym, not a key. The VNC server maps it onto a key of the X server's keymap
and, for a keysym the keymap lacks, x11vnc adds it to a spare keycode. Some keysyms are actions rather than
characters, and the X server carries them out for the whole display as soon as such a key is pressed:
`Terminate_Server` (0xfed5) makes Xvfb exit (the enclave stops), `StickyKeys_Enable` (0xfe75) turns StickyKeys on
for this and every later session (after which a tapped Ctrl latches onto the next key, beyond what the shortcut
filter can see), `XF86Switch_VT_*`, `XF86Ungrab` and `XF86ClearGrab` (0x1008fe01..) switch consoles or break and
kill grabs. A denylist of such keysyms would be as good as the list; the proxy therefore forwards only what a
researcher needs to type and move around in a web application, and drops and logs everything else:

* characters: printable Latin-1 (0x20-0x7e, 0xa0-0xff), the legacy character sets (0x100-0x20ff: Latin-2..9,
  Cyrillic, Greek, Hebrew, Thai, Korean, currency, ...; no function keysym lives there) and Unicode keysyms
  (0x01000100-0x0110ffff, surrogates excluded), which is what noVNC sends for everything else a keyboard can type;
* editing and navigation: BackSpace, Tab, Return, Escape, Delete, Insert, Home, End, Page Up/Down, the arrows, the
  numeric keypad (without KP_F1-KP_F4), ISO_Left_Tab (Shift+Tab on some clients);
* F1-F12 (the blocked ones among them are the shortcut filter's business, see `proxy.limits`);
* modifiers: Shift, Control, Alt, Meta, Super, Hyper, AltGr (ISO_Level3_Shift, the one keysym allowed from the XKB
  range 0xfe00-0xfeff: it only selects a keymap level), Caps_Lock and Num_Lock.

Not forwarded (examples): every other 0xfe00-0xfeff keysym (AccessX, XKB latches and locks, pointer keys,
Terminate_Server, dead keys), Shift_Lock (a Shift the filter could not see being held), Sys_Req, Print, Pause,
Break, Menu, Help, Multi_key, Mode_switch, F13-F35, the 3270 keys (0xfd..), and every vendor keysym 0x1000xxxx
(XF86 0x1008ffxx and 0x1008fexx, Sun, DEC, HP).

Releasing: the VNC server keeps keys pressed in X when a client leaves, so a Ctrl held when one session ended would
still be held when the next one began, unseen by that session's filter. `RELEASE_KEYSYMS` are the keys a session
releases towards the server when it starts and when it ends, so that it begins and ends with nothing held. They are
all in the X server's standard (US) keymap on purpose: x11vnc adds a missing keysym to the keymap even for a release,
and the release must not change the keymap.
"""
from __future__ import annotations

# --- the allowlist -------------------------------------------------------------------------------------------------

MODIFIER_KEYSYMS: frozenset[int] = frozenset({
    0xFFE1, 0xFFE2,  # Shift_L, Shift_R
    0xFFE3, 0xFFE4,  # Control_L, Control_R
    0xFFE5,  # Caps_Lock (a lock, but of letters' case only)
    0xFFE7, 0xFFE8,  # Meta_L, Meta_R
    0xFFE9, 0xFFEA,  # Alt_L, Alt_R
    0xFFEB, 0xFFEC,  # Super_L, Super_R
    0xFFED, 0xFFEE,  # Hyper_L, Hyper_R
    0xFE03,  # ISO_Level3_Shift (AltGr)
    0xFF7F,  # Num_Lock
})

EDITING_KEYSYMS: frozenset[int] = frozenset({
    0xFF08, 0xFF09, 0xFF0D, 0xFF1B, 0xFFFF,  # BackSpace, Tab, Return, Escape, Delete
    0xFF50, 0xFF51, 0xFF52, 0xFF53, 0xFF54,  # Home, Left, Up, Right, Down
    0xFF55, 0xFF56, 0xFF57,  # Prior (Page Up), Next (Page Down), End
    0xFF63,  # Insert
    0xFE20,  # ISO_Left_Tab (Shift+Tab as some clients send it)
})

KEYPAD_KEYSYMS: frozenset[int] = frozenset(
    {0xFF80, 0xFF89, 0xFF8D}  # KP_Space, KP_Tab, KP_Enter
    | set(range(0xFF95, 0xFFA0))  # KP_Home .. KP_Delete
    | set(range(0xFFAA, 0xFFBA))  # KP_Multiply, KP_Add, KP_Separator, KP_Subtract, KP_Decimal, KP_Divide, KP_0..KP_9
    | {0xFFBD}  # KP_Equal
)

FUNCTION_KEYSYMS: frozenset[int] = frozenset(range(0xFFBE, 0xFFCA))  # F1 .. F12

ALLOWED_KEYS: frozenset[int] = MODIFIER_KEYSYMS | EDITING_KEYSYMS | KEYPAD_KEYSYMS | FUNCTION_KEYSYMS


def is_character(keysym: int) -> bool:
    """A keysym that stands for a printable character (see the module docstring for the ranges)."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return True
    if 0x100 <= keysym <= 0x20FF:
        return True
    if 0x01000100 <= keysym <= 0x0110FFFF:
        return not 0x0100D800 <= keysym <= 0x0100DFFF
    return False


def refusal(keysym: int) -> str | None:
    """None when the proxy forwards `keysym`; otherwise why it does not (a short phrase for the session log)."""
    if is_character(keysym) or keysym in ALLOWED_KEYS:
        return None
    if keysym <= 0x1F or 0x7F <= keysym <= 0x9F:
        return "control character"
    if 0xFE00 <= keysym <= 0xFEFF:
        return "XKB/AccessX keysym (0xfe00-0xfeff)"
    if 0xFD00 <= keysym <= 0xFDFF:
        return "3270 terminal keysym"
    if 0x1008FE00 <= keysym <= 0x1008FFFF:
        return "XFree86 vendor keysym (0x1008fexx-0x1008ffxx)"
    if 0x10000000 <= keysym <= 0x1FFFFFFF:
        return "vendor keysym"
    if 0xFF00 <= keysym <= 0xFFFF:
        return "function or special key outside the allowlist"
    return "not a keysym the proxy forwards"


def allowed(keysym: int) -> bool:
    return refusal(keysym) is None


# --- releasing everything ------------------------------------------------------------------------------------------

# Modifiers first (they turn a later key into a shortcut), then every printable ASCII character, then the editing,
# navigation, function and keypad keys. Only keysyms of the standard keymap (Hyper_R, KP_Space, KP_Tab and
# KP_Separator are not in it).
RELEASE_KEYSYMS: tuple[int, ...] = (
    (0xFFE1, 0xFFE2, 0xFFE3, 0xFFE4, 0xFFE9, 0xFFEA, 0xFFE7, 0xFFE8, 0xFFEB, 0xFFEC, 0xFFED, 0xFE03)
    + tuple(range(0x20, 0x7F))
    + (0xFF08, 0xFF09, 0xFE20, 0xFF0D, 0xFF1B, 0xFFFF, 0xFF63, 0xFF50, 0xFF51, 0xFF52, 0xFF53, 0xFF54, 0xFF55,
       0xFF56, 0xFF57)
    + tuple(range(0xFFBE, 0xFFCA))
    + (0xFF8D, *range(0xFF95, 0xFFA0), *range(0xFFAA, 0xFFAC), *range(0xFFAD, 0xFFBA), 0xFFBD)
    + (0xFFE5, 0xFF7F)
)
