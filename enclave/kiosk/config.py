"""What a kiosk needs to know: the app URL, the screen size, where to keep its state, how to isolate the network.

The screen size can come from the recipient policy (`screen: 1280x800`, or `{width: .., height: ..}`), read through
policies.recipient like every other component reads it. A bad size is an error, never a silent default. So can the
screen watermark (`watermark:`, on unless the policy switches it off) and the recipient it names.
"""
from __future__ import annotations

import ipaddress
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from enclave.kiosk.watermark import WatermarkSettings
from policies.recipient import DEFAULT_SCREEN, PolicyError, WatermarkPolicy, load_recipient_policy, parse_screen

DEFAULT_SIZE = DEFAULT_SCREEN

# Network isolation modes: "netns" (the browser in its own network namespace; needs root), "proxy" (every request
# but the app's goes to a proxy that refuses; the fallback where namespaces are impossible), "auto" (netns if possible).
NETWORK_MODES = ("auto", "netns", "proxy")


class KioskConfigError(ValueError):
    """Bad kiosk input (the command exits with code 2)."""


def parse_size(text: str) -> tuple[int, int]:
    """(width, height) from `WIDTHxHEIGHT` (policies.recipient.parse_screen: the one parser of screen sizes)."""
    try:
        return parse_screen(text)
    except ValueError as exc:
        raise KioskConfigError(str(exc)) from None


def size_from_policy(path: Path) -> tuple[int, int] | None:
    """The `screen` of a recipient policy, or None if it has none; the policy is read as every component reads it."""
    try:
        return load_recipient_policy(path).screen_size
    except PolicyError as exc:
        raise KioskConfigError(str(exc)) from None


def watermark_settings(policy_path: Path | None, recipient: str | None,
                       watermark_json: str | None) -> WatermarkSettings:
    """The watermark to draw: `watermark_json` (the policy's `watermark` setting as JSON, which provisioning passes to
    a kiosk container that has no policy file) or else the policy's, else the default (on); the recipient named is
    `recipient`, else the policy's."""
    setting = WatermarkPolicy()
    if policy_path is not None:
        try:
            policy = load_recipient_policy(policy_path)
        except PolicyError as exc:
            raise KioskConfigError(str(exc)) from None
        setting, recipient = policy.watermark, recipient or policy.recipient
    if watermark_json is not None:
        try:
            setting = WatermarkPolicy.model_validate_json(watermark_json)
        except ValueError as exc:
            raise KioskConfigError(f"--watermark: not a recipient policy's watermark setting: {exc}") from None
    return WatermarkSettings.from_policy(setting, recipient)


def check_app_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KioskConfigError(f"the app URL must be http(s)://HOST:PORT/..., got {url!r}")
    try:
        parts.port
    except ValueError as exc:
        raise KioskConfigError(f"bad port in {url!r}") from exc
    return url


def resolve_app_url(url: str) -> str:
    """The app URL with its host name replaced by the IPv4 address it resolves to now. The browser then needs no
    name resolution at all (every name maps to NOTFOUND), and the managed policy's allowlist names exactly that
    origin: Chromium's URL filter refused a single-label container name such as "app" even when allowlisted."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
        return url
    except ValueError:
        pass
    try:
        address = socket.getaddrinfo(host, parts.port or 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (OSError, IndexError) as exc:
        raise KioskConfigError(f"the app host {host!r} does not resolve: {exc}") from None
    netloc = f"{address}:{parts.port}" if parts.port else address
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, parts.fragment))


def wait_for_app(url: str, timeout: float, interval: float = 0.25) -> str:
    """`resolve_app_url(url)` once the app answers HTTP there (any status), retrying for up to `timeout` seconds.

    Containers of one enclave start together; waiting here lets the display and VNC server come up while the app
    imports its release, instead of the browser opening an error page (which its title watchdog would restart)."""
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an environment proxy
    while True:
        try:
            resolved = resolve_app_url(url)
            try:
                opener.open(resolved, timeout=2).close()
            except urllib.error.HTTPError:
                pass  # an answer is an answer: the app is up
            return resolved
        except (KioskConfigError, OSError) as exc:
            if time.monotonic() + interval > deadline:
                if isinstance(exc, KioskConfigError):
                    raise
                raise KioskConfigError(f"the app at {url} did not answer within {timeout:.0f} s: {exc}") from None
            time.sleep(interval)


@dataclass
class KioskConfig:
    """Everything `Kiosk` needs. `state_dir` holds the VNC socket and password and, by default, the logs."""

    app_url: str
    state_dir: Path
    width: int = DEFAULT_SIZE[0]
    height: int = DEFAULT_SIZE[1]
    network: str = "auto"
    vnc_port: int | None = None  # None: a Unix socket in state_dir/vnc/ (preferred)
    vnc_listen: str = "127.0.0.1"  # with vnc_port: the address x11vnc listens on (a container's network address)
    vnc_password_file: Path | None = None  # a given VNC password (shared with a gateway in another container)
    log_dir: Path | None = None
    chromium: str | None = None
    policy_dir: Path | None = None  # where the managed policy is written when not in a namespace
    app_wait: float = 0.0  # seconds to wait for the app to answer before starting the browser (0: resolve once)
    app_title: str | None = None  # restart the browser if the window title stops starting with this
    user: str | None = None  # browser user when root (default: safeshare-kiosk)
    watermark: WatermarkSettings = WatermarkSettings()  # on by default: a kiosk without it must say so
    extra_flags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_app_url(self.app_url)
        self.state_dir = Path(self.state_dir)
        parse_size(f"{self.width}x{self.height}")
        if self.network not in NETWORK_MODES:
            raise KioskConfigError(f"network must be one of {NETWORK_MODES}, got {self.network!r}")
        if self.log_dir is None:
            self.log_dir = self.state_dir / "logs"
        self.log_dir = Path(self.log_dir)

    @property
    def app_host(self) -> str:
        return urlsplit(self.app_url).hostname or ""

    @property
    def app_port(self) -> int:
        parts = urlsplit(self.app_url)
        return parts.port or (443 if parts.scheme == "https" else 80)
