"""The `limits:` section of a recipient policy: the schema of a session's input limits, with its defaults.

What a policy may say about a session (key and click rates, motion rate, blocked shortcuts and clicks, idle and
total time) is defined here, with the policy's other fields (`policies.recipient`); the proxy that enforces the
limits (`proxy.limits.InputFilter`) reads them from here, so that a policy never depends on the component that
enforces it. The schema is strict (unknown keys are an error) because a misspelt limit silently falling back to a
default would be a control that is not there; shortcut and click texts are checked with their grammar
(`policies.shortcuts`) when the policy is loaded, not when the first key arrives.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.shortcuts import ClickShortcut, Shortcut

# Chromium's shortcuts that leave the app or change the kiosk: new windows and tabs, closing, the address bar, files,
# history/downloads/settings pages, developer tools, the task manager (Shift+Escape), quitting (Ctrl+Shift+Q), the
# menu bar (F10, also Shift+F10's context menu), caret browsing's dialog (F7), reload and full screen; plus the
# desktop's. A shortcut matches whatever other modifiers are held too (F10 also blocks Shift+F10).
DEFAULT_BLOCKED_SHORTCUTS = [
    "Ctrl+N", "Ctrl+T", "Ctrl+W", "Ctrl+L", "Ctrl+O", "Ctrl+S", "Ctrl+P", "Ctrl+J", "Ctrl+H", "Ctrl+U",
    "Ctrl+Shift+I", "Ctrl+Shift+J", "Ctrl+Shift+C", "Ctrl+Shift+N", "Ctrl+Shift+Delete", "Ctrl+Shift+Q",
    "Ctrl+Alt+Delete", "Ctrl+Alt+BackSpace", "Ctrl+F4", "Alt+F4", "Alt+Tab", "Alt+Left", "Alt+Right", "Alt+Home",
    "Shift+Escape", "F1", "F5", "F6", "F7", "F10", "F11", "F12", "Super",
]

# Clicks with a modifier held open links elsewhere (Shift: new window, Ctrl or middle button: new tab, Alt: download,
# Shift+right: the browser's own context menu); the button press is dropped while such a modifier is held.
DEFAULT_BLOCKED_CLICKS = [
    f"{modifier}+{button}" for modifier in ("Ctrl", "Shift", "Alt", "Super")
    for button in ("Click", "MiddleClick", "RightClick")
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KeyLimits(_Strict):
    rate: float = Field(10.0, gt=0, description="key presses per second (releases always pass)")
    burst: int = Field(30, ge=1)


class PointerLimits(_Strict):
    motion_rate: float = Field(60.0, gt=0, description="forwarded motion events per second; extra motion coalesces")
    click_rate: float = Field(10.0, gt=0, description="button presses per second (releases always pass)")
    click_burst: int = Field(20, ge=1)


class SessionLimits(_Strict):
    keys: KeyLimits = KeyLimits()
    pointer: PointerLimits = PointerLimits()
    blocked_shortcuts: list[str] = Field(default_factory=lambda: list(DEFAULT_BLOCKED_SHORTCUTS))
    blocked_clicks: list[str] = Field(default_factory=lambda: list(DEFAULT_BLOCKED_CLICKS),
                                      description="MODIFIERS+Click|MiddleClick|RightClick: button presses dropped "
                                                  "while the modifiers are held")
    idle_seconds: float = Field(900.0, gt=0)
    max_session_seconds: float = Field(8 * 3600.0, gt=0)

    @field_validator("blocked_shortcuts")
    @classmethod
    def _shortcuts_parse(cls, value: list[str]) -> list[str]:
        for text in value:
            Shortcut.parse(text)  # raises ValueError, which pydantic reports with the field
        return value

    @field_validator("blocked_clicks")
    @classmethod
    def _clicks_parse(cls, value: list[str]) -> list[str]:
        for text in value:
            ClickShortcut.parse(text)
        return value

    def shortcuts(self) -> list[Shortcut]:
        return [Shortcut.parse(text) for text in self.blocked_shortcuts]

    def click_shortcuts(self) -> list[ClickShortcut]:
        return [ClickShortcut.parse(text) for text in self.blocked_clicks]


__all__ = ["DEFAULT_BLOCKED_CLICKS", "DEFAULT_BLOCKED_SHORTCUTS", "KeyLimits", "PointerLimits", "SessionLimits"]
