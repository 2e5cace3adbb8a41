"""Recipient policies (`policies/examples/recipient-*.yaml`): who may see which sealed release, until when, through
which session limits, on what screen, and how long their sessions are kept.

The one home of the file's schema (shipped as policies/schemas/recipient-policy.schema.json): the gateway, the proxy,
the kiosk, provisioning, retention and `safeshare up` all read it through `load_recipient_policy`. The schema is
strict (unknown keys are an error) because a misspelt limit silently falling back to a default would be a control
that is not there. The screen is parsed here, once; the session limits' schema is `policies.limits.SessionLimits`
(enforced by the proxy's `proxy.limits.InputFilter`).
"""
from __future__ import annotations

import json
import re
import string
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from policies.limits import SessionLimits

DEFAULT_SCREEN = (1280, 800)
MIN_SCREEN = (320, 240)
MAX_SCREEN = (7680, 4320)


class PolicyError(ValueError):
    """A recipient policy file that cannot be used (the caller exits with code 2)."""


def parse_screen(text: str) -> tuple[int, int]:
    """(width, height) from `WIDTHxHEIGHT`, within the sizes Xvfb and noVNC handle. Raises ValueError."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not match:
        raise ValueError(f"screen size must be WIDTHxHEIGHT, got {text!r}")
    width, height = int(match.group(1)), int(match.group(2))
    if not (MIN_SCREEN[0] <= width <= MAX_SCREEN[0] and MIN_SCREEN[1] <= height <= MAX_SCREEN[1]):
        raise ValueError(f"screen size {width}x{height} outside {MIN_SCREEN} .. {MAX_SCREEN}")
    return width, height


WATERMARK_FIELDS = ("recipient", "kiosk", "time")
DEFAULT_WATERMARK_TEXT = "{recipient}  kiosk {kiosk}\n{time} UTC"


class WatermarkPolicy(BaseModel):
    """The faint, tiled stamp drawn over the kiosk's screen (enclave/kiosk/watermark.py): who and when, in every frame
    the researcher sees and in the recording, so that a photograph or screenshot of the screen names its source.

    On unless a policy switches it off. `colour` is drawn solid on the glyph pixels that `opacity` keeps (an ordered
    dither: the kiosk's X display has no compositor, so screen-door transparency stands in for alpha). `text` is a
    template over WATERMARK_FIELDS: the recipient, the kiosk's id (which the proxy's session log records as the VNC
    server's desktop name, so that a stamp names its session) and the UTC time to the minute; a newline starts a
    second line. `scale` enlarges the X server's built-in 6x13 font."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    colour: str = Field("#c8c8c8", pattern=r"^#[0-9a-fA-F]{6}$")
    opacity: float = Field(0.5, gt=0.0, le=1.0)
    text: str = Field(DEFAULT_WATERMARK_TEXT, min_length=1, max_length=160)
    scale: int = Field(2, ge=1, le=4)

    @field_validator("text")
    @classmethod
    def _known_fields(cls, value: str) -> str:
        try:
            parsed = list(string.Formatter().parse(value))
        except ValueError as exc:
            raise ValueError(f"watermark text {value!r}: {exc}") from None
        for _literal, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in WATERMARK_FIELDS:
                raise ValueError(f"watermark text {value!r}: {{{name}}} is not one of "
                                 + ", ".join(f"{{{f}}}" for f in WATERMARK_FIELDS))
            if spec or conversion:
                raise ValueError(f"watermark text {value!r}: {{{name}}} takes no format spec or conversion")
        if not any(name for _literal, name, _spec, _conv in parsed):
            raise ValueError(f"watermark text {value!r} names none of "
                             + ", ".join(f"{{{f}}}" for f in WATERMARK_FIELDS))
        return value

    @property
    def rgb(self) -> tuple[int, int, int]:
        return int(self.colour[1:3], 16), int(self.colour[3:5], 16), int(self.colour[5:7], 16)


def end_of_day(day: date) -> datetime:
    """A policy's `expires: 2027-06-30` means access through that day (UTC)."""
    return datetime.combine(day + timedelta(days=1), time(0, 0), tzinfo=timezone.utc)


class RecipientPolicy(BaseModel):
    """A recipient's access: the sealed release they see, until when, with which session limits, on what screen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipient: str = Field(min_length=1)
    release: str | None = None
    expires: date | None = None
    limits: SessionLimits = SessionLimits()
    # The kiosk's screen: "1280x800" or {width: 1280, height: 800}; None: DEFAULT_SCREEN.
    screen: str | dict[str, int] | None = None
    # Days the recorded sessions of this recipient are kept after they end (then deleted, the deletion logged);
    # None: the site's default (site.json `session_retention_days`).
    retention_days: int | None = Field(None, ge=1, le=36500)
    # The screen watermark (recipient, kiosk id, time); on when the policy does not say.
    watermark: WatermarkPolicy = WatermarkPolicy()

    @field_validator("screen")
    @classmethod
    def _screen_parses(cls, value: str | dict[str, int] | None) -> str | dict[str, int] | None:
        if isinstance(value, dict) and set(value) != {"width", "height"}:
            raise ValueError("screen must have exactly width and height")
        if value is not None:
            cls._parsed(value)
        return value

    @staticmethod
    def _parsed(value: str | dict[str, int]) -> tuple[int, int]:
        if isinstance(value, dict):
            return parse_screen(f"{value['width']}x{value['height']}")
        return parse_screen(value)

    @property
    def screen_size(self) -> tuple[int, int] | None:
        """(width, height) the policy asks for, None when it does not say."""
        return None if self.screen is None else self._parsed(self.screen)

    @property
    def screen_text(self) -> str:
        """The screen as `WIDTHxHEIGHT`, the default when the policy does not say."""
        width, height = self.screen_size or DEFAULT_SCREEN
        return f"{width}x{height}"

    @property
    def access_ends(self) -> datetime | None:
        """When access ends (the end of the `expires` day, UTC), None when it does not."""
        return end_of_day(self.expires) if self.expires else None


def load_recipient_policy(path: str | Path) -> RecipientPolicy:
    """The policy in `path`; PolicyError naming the file and the problem."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{path}: a recipient policy is a mapping")
    try:
        return RecipientPolicy.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(f"{path}: {exc}") from exc


def recipient_policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of recipient policies (shipped as policies/schemas/recipient-policy.schema.json)."""
    return RecipientPolicy.model_json_schema(mode="validation")


__all__ = ["DEFAULT_SCREEN", "PolicyError", "RecipientPolicy", "WATERMARK_FIELDS", "WatermarkPolicy", "end_of_day",
           "load_recipient_policy", "parse_screen", "recipient_policy_json_schema"]

if __name__ == "__main__":  # pragma: no cover - regenerates the shipped schema
    print(json.dumps(recipient_policy_json_schema(), indent=2))
