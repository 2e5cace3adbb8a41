"""The keysym allowlist and the input defaults as data (their effect on a real X server is in test_input_filter.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from policies.recipient import PolicyError, load_recipient_policy
from proxy import keysyms
from proxy.limits import (BLOCKED, DEFAULT_BLOCKED_CLICKS, DEFAULT_BLOCKED_SHORTCUTS, FORWARD, REFUSED, InputFilter,
                          SessionLimits)

DEMO_POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "recipient-demo.yaml"


@pytest.mark.parametrize("keysym", [
    0x61, 0x41, 0x20, 0x7E, 0xE9, 0xFF,  # ASCII and Latin-1
    0x1B5, 0x6C1, 0x7E1, 0xCE0, 0x20AC,  # Latin-2, Cyrillic, Greek, Hebrew, EuroSign (legacy sets)
    0x010020AC, 0x01004E2D, 0x0101F600,  # Unicode keysyms (noVNC's form for everything else)
    0xFF08, 0xFF09, 0xFF0D, 0xFF1B, 0xFFFF, 0xFF50, 0xFF57, 0xFF63, 0xFE20,  # editing and navigation
    0xFFBE, 0xFFC9, 0xFF8D, 0xFFB0, 0xFFBD,  # F1, F12, keypad
    0xFFE1, 0xFFE3, 0xFFE9, 0xFFEB, 0xFE03, 0xFFE5, 0xFF7F,  # modifiers, AltGr, Caps_Lock, Num_Lock
])
def test_allowed(keysym: int) -> None:
    assert keysyms.allowed(keysym)


@pytest.mark.parametrize("keysym, reason", [
    (0xFE75, "XKB/AccessX"),  # StickyKeys_Enable
    (0xFED5, "XKB/AccessX"),  # Terminate_Server
    (0xFE01, "XKB/AccessX"),  # ISO_Lock
    (0xFE50, "XKB/AccessX"),  # dead_grave
    (0x1008FE01, "XFree86"),  # XF86Switch_VT_1
    (0x1008FE21, "XFree86"),  # XF86ClearGrab
    (0x1008FF2E, "XFree86"),  # XF86WWW
    (0x1005FF10, "vendor"),  # Sun
    (0xFD05, "3270"),
    (0xFFE6, "outside the allowlist"),  # Shift_Lock
    (0xFF15, "outside the allowlist"),  # Sys_Req
    (0xFF67, "outside the allowlist"),  # Menu
    (0xFFCA, "outside the allowlist"),  # F13
    (0xFF20, "outside the allowlist"),  # Multi_key
    (0x00, "control"), (0x1B, "control"), (0x7F, "control"), (0x9B, "control"),
    (0x0100D800, "not a keysym"), (0x01000041, "not a keysym"), (0x20000000, "not a keysym"),
])
def test_refused(keysym: int, reason: str) -> None:
    assert reason in (keysyms.refusal(keysym) or "")


def test_release_keysyms_are_allowed_once_each() -> None:
    assert all(keysyms.allowed(keysym) for keysym in keysyms.RELEASE_KEYSYMS)
    assert len(set(keysyms.RELEASE_KEYSYMS)) == len(keysyms.RELEASE_KEYSYMS)
    assert keysyms.RELEASE_KEYSYMS[:4] == (0xFFE1, 0xFFE2, 0xFFE3, 0xFFE4)  # modifiers first


def test_refused_keysyms_never_pass_the_filter_in_either_direction() -> None:
    input_filter = InputFilter(SessionLimits(blocked_shortcuts=[]))
    assert input_filter.key(True, 0xFED5)[0] == REFUSED
    assert input_filter.key(False, 0xFED5)[0] == REFUSED
    assert input_filter.key(True, 0x61) == (FORWARD, None)
    assert input_filter.pressed_keys == [0x61]
    assert input_filter.key(False, 0x61) == (FORWARD, None)
    assert input_filter.pressed_keys == []


@pytest.mark.parametrize("modifiers, key, shortcut", [
    ((0xFFE3,), 0xFFC1, "Ctrl+F4"), ((0xFFE4, 0xFFE2), 0x51, "Ctrl+Shift+Q"), ((0xFFE1,), 0xFF1B, "Shift+Escape"),
    ((), 0xFFC7, "F10"), ((0xFFE1,), 0xFFC7, "F10"), ((), 0xFFC4, "F7"),
])
def test_new_default_shortcuts(modifiers: tuple[int, ...], key: int, shortcut: str) -> None:
    input_filter = InputFilter(SessionLimits())
    assert [input_filter.key(True, modifier)[0] for modifier in modifiers] == [FORWARD] * len(modifiers)
    assert input_filter.key(True, key) == (BLOCKED, shortcut)


def test_clicks_with_a_modifier_held_are_dropped_until_released() -> None:
    input_filter = InputFilter(SessionLimits())
    input_filter.key(True, 0xFFE1)  # Shift
    verdict = input_filter.pointer(1)
    assert (verdict.mask, verdict.blocked_buttons, verdict.blocked_by) == (0, 1, "Shift+Click")
    input_filter.key(False, 0xFFE1)
    assert input_filter.pointer(1).mask == 0  # the same press stays dropped while the button is held
    assert input_filter.pointer(0).mask == 0
    verdict = input_filter.pointer(1)  # a new plain click passes
    assert (verdict.mask, verdict.blocked_buttons) == (1, 0)
    input_filter.pointer(0)
    input_filter.key(True, 0xFE03)  # AltGr counts as Alt
    assert input_filter.pointer(2).blocked_by == "Alt+MiddleClick"


def test_demo_policy_blocks_at_least_the_defaults() -> None:
    limits = load_recipient_policy(DEMO_POLICY).limits
    assert set(DEFAULT_BLOCKED_SHORTCUTS) <= set(limits.blocked_shortcuts)
    assert set(DEFAULT_BLOCKED_CLICKS) <= set(limits.blocked_clicks)


def test_bad_blocked_click_is_a_policy_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipient: x\nlimits:\n  blocked_clicks: [Shift+DoubleClick]\n")
    with pytest.raises(PolicyError, match="blocked_clicks"):
        load_recipient_policy(bad)
    bad.write_text("recipient: x\nlimits:\n  blocked_clicks: [Click]\n")
    with pytest.raises(PolicyError, match="blocked_clicks"):
        load_recipient_policy(bad)
