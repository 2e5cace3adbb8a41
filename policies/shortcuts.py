"""The grammar of the shortcuts and clicks a recipient policy blocks (`limits.blocked_shortcuts`, `blocked_clicks`):
"Ctrl+Shift+I", "F12", "Shift+Click", and the X11 keysym names and modifier groups they are written in.

It lives in policies/ because it is part of what a policy says: the policy's schema (`policies.limits`) validates
the texts with it, and the proxy (`proxy.limits.InputFilter`) matches key and pointer events against the parsed
`Shortcut` and `ClickShortcut`. Pure data and parsing; `proxy.rfb` re-exports these names for the proxy's code.
"""
from __future__ import annotations

from dataclasses import dataclass

MODIFIER_GROUPS: dict[str, frozenset[int]] = {
    "ctrl": frozenset({0xFFE3, 0xFFE4}),
    "shift": frozenset({0xFFE1, 0xFFE2}),
    "alt": frozenset({0xFFE9, 0xFFEA, 0xFFE7, 0xFFE8, 0xFE03}),  # Alt, Meta, AltGr
    "super": frozenset({0xFFEB, 0xFFEC, 0xFFED, 0xFFEE}),  # Super, Hyper
}
MODIFIER_ALIASES = {"ctrl": "ctrl", "control": "ctrl", "shift": "shift", "alt": "alt", "meta": "alt",
                    "super": "super", "win": "super", "cmd": "super"}

_NAMED_KEYSYMS: dict[int, str] = {
    0xFF08: "BackSpace", 0xFF09: "Tab", 0xFF0D: "Return", 0xFF1B: "Escape", 0xFFFF: "Delete", 0xFF50: "Home",
    0xFF51: "Left", 0xFF52: "Up", 0xFF53: "Right", 0xFF54: "Down", 0xFF55: "Page_Up", 0xFF56: "Page_Down",
    0xFF57: "End", 0xFF63: "Insert", 0xFF67: "Menu", 0xFF61: "Print", 0xFF13: "Pause", 0xFF14: "Scroll_Lock",
    0xFF7F: "Num_Lock", 0xFFE5: "Caps_Lock", 0xFF8D: "KP_Enter",
    0xFFE1: "Shift_L", 0xFFE2: "Shift_R", 0xFFE3: "Control_L", 0xFFE4: "Control_R", 0xFFE7: "Meta_L",
    0xFFE8: "Meta_R", 0xFFE9: "Alt_L", 0xFFEA: "Alt_R", 0xFFEB: "Super_L", 0xFFEC: "Super_R", 0xFFED: "Hyper_L",
    0xFFEE: "Hyper_R", 0xFE03: "ISO_Level3_Shift", 0x0020: "space",
}
for _n in range(1, 36):
    _NAMED_KEYSYMS[0xFFBE + _n - 1] = f"F{_n}"
_KEYSYMS_BY_NAME = {name.lower(): sym for sym, name in _NAMED_KEYSYMS.items()}
_KEYSYMS_BY_NAME["super"] = 0xFFEB
_KEYSYMS_BY_NAME["esc"] = 0xFF1B


def keysym_name(keysym: int) -> str:
    """A readable name for the log: X11 names for function keys, the character for printable ones."""
    if keysym in _NAMED_KEYSYMS:
        return _NAMED_KEYSYMS[keysym]
    if 0x20 < keysym < 0x7F or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    if 0x01000100 <= keysym <= 0x0110FFFF:
        return chr(keysym - 0x01000000)
    return f"0x{keysym:04x}"


def modifier_of(keysym: int) -> str | None:
    for group, syms in MODIFIER_GROUPS.items():
        if keysym in syms:
            return group
    return None


def keysyms_for_key(name: str) -> frozenset[int]:
    """All keysyms that a shortcut's key name stands for (both cases of a letter, both sides of a modifier)."""
    lowered = name.strip().lower()
    if lowered in MODIFIER_ALIASES:
        return MODIFIER_GROUPS[MODIFIER_ALIASES[lowered]]
    if len(name.strip()) == 1 and 0x20 < ord(name.strip()) < 0x7F:
        ch = name.strip()
        return frozenset({ord(ch.lower()), ord(ch.upper())})
    if lowered in _KEYSYMS_BY_NAME:
        return frozenset({_KEYSYMS_BY_NAME[lowered]})
    raise ValueError(f"unknown key name {name!r}")


def parse_modifiers(names: list[str], where: str) -> frozenset[str]:
    """Modifier names as written in a policy ("Ctrl", "control", "Shift", ...) to their canonical names."""
    modifiers = set()
    for name in names:
        alias = MODIFIER_ALIASES.get(name.strip().lower())
        if alias is None:
            raise ValueError(f"unknown modifier {name!r} in {where}")
        modifiers.add(alias)
    return frozenset(modifiers)


@dataclass(frozen=True)
class Shortcut:
    """A key combination to block: every listed modifier held (others may be held too) plus the key."""

    text: str
    modifiers: frozenset[str]
    keysyms: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> "Shortcut":
        parts = [p for p in text.split("+")]
        if not parts or any(not p.strip() for p in parts):
            raise ValueError(f"bad shortcut {text!r}")
        *mods, key = parts
        return cls(text=text, modifiers=parse_modifiers(mods, f"shortcut {text!r}"), keysyms=keysyms_for_key(key))

    def matches(self, keysym: int, held: frozenset[str] | set[str]) -> bool:
        return keysym in self.keysyms and self.modifiers <= set(held)


# PointerEvent button-mask bits by the names a blocked click uses.
CLICK_BUTTONS = {"click": 1, "leftclick": 1, "middleclick": 2, "rightclick": 4}


@dataclass(frozen=True)
class ClickShortcut:
    """A button press to drop while modifiers are held: "Shift+Click", "Ctrl+MiddleClick", "Alt+RightClick". As with
    shortcuts, other modifiers may be held too; at least one modifier is required (a plain click is not a shortcut)."""

    text: str
    modifiers: frozenset[str]
    button: int

    @classmethod
    def parse(cls, text: str) -> "ClickShortcut":
        parts = text.split("+")
        if len(parts) < 2 or any(not p.strip() for p in parts):
            raise ValueError(f"bad blocked click {text!r} (MODIFIERS+Click|MiddleClick|RightClick)")
        *mods, button = parts
        bit = CLICK_BUTTONS.get(button.strip().lower())
        if bit is None:
            raise ValueError(f"unknown button {button!r} in blocked click {text!r} (Click, MiddleClick, RightClick)")
        return cls(text=text, modifiers=parse_modifiers(mods, f"blocked click {text!r}"), button=bit)
