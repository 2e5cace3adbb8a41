"""Chromium managed policy for the kiosk, generated from `policies/kiosk/chromium-lockdown.yaml` and the app URL.

Managed policies are what a browser user cannot change from inside the browser, unlike command-line flags or
preferences. The lockdown file holds everything that does not depend on the enclave; this module adds the one thing
that does (the app's origin, the only allowed URL, also used as start, home and new-tab page so that Ctrl+T or a
restart lands on the app), and writes the JSON atomically so that Chromium, which watches the directory, never reads
half a file.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

import policies

LOCKDOWN_FILE = Path(policies.__file__).resolve().parent / "kiosk" / "chromium-lockdown.yaml"
SYSTEM_POLICY_DIR = Path("/etc/chromium/policies/managed")
POLICY_FILE_NAME = "safeshare-kiosk.json"

# Policies the kiosk cannot run safely without; a lockdown file that drops one of them is refused, not obeyed.
REQUIRED = {
    "URLBlocklist": None, "DeveloperToolsAvailability": 2, "DownloadRestrictions": 3, "PrintingEnabled": False,
    "AllowFileSelectionDialogs": False, "IncognitoModeAvailability": 1, "BrowserGuestModeEnabled": False,
    "ExtensionInstallBlocklist": ["*"], "PasswordManagerEnabled": False, "AutofillAddressEnabled": False,
    "AutofillCreditCardEnabled": False, "BrowserSignin": 0, "SyncDisabled": True, "TranslateEnabled": False,
    "DefaultPopupsSetting": 2, "DefaultNotificationsSetting": 2,
}
REQUIRED_BLOCKED = ("*", "chrome://*", "chrome-untrusted://*", "view-source:*", "devtools://*")


class BrowserPolicyError(ValueError):
    """The lockdown file or the app URL cannot give a safe policy."""


def app_origin(app_url: str) -> str:
    """`scheme://host:port` of the app, the form URLAllowlist patterns take; the port is always explicit."""
    parts = urlsplit(app_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BrowserPolicyError(f"the app URL must be http(s)://HOST[:PORT]/..., got {app_url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def load_lockdown(path: Path = LOCKDOWN_FILE) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BrowserPolicyError(f"{path}: {exc}") from exc
    if not isinstance(raw, dict) or set(raw) != {"policy"} or not isinstance(raw["policy"], dict):
        raise BrowserPolicyError(f"{path}: expected a mapping with one key, `policy`")
    return dict(raw["policy"])


def build_policy(app_url: str, lockdown: dict[str, Any] | None = None) -> dict[str, Any]:
    """The managed policy for a kiosk showing `app_url`; refuses a lockdown that weakens a required control."""
    policy = dict(load_lockdown() if lockdown is None else lockdown)
    for name, value in REQUIRED.items():
        if name not in policy or (value is not None and policy[name] != value):
            raise BrowserPolicyError(f"lockdown policy must set {name} to {value!r}, has {policy.get(name)!r}")
    blocked = policy["URLBlocklist"]
    missing = [pattern for pattern in REQUIRED_BLOCKED if pattern not in blocked]
    if missing:
        raise BrowserPolicyError(f"lockdown URLBlocklist must contain {missing}")
    if "URLAllowlist" in policy:
        raise BrowserPolicyError("URLAllowlist comes from the app URL only, not from the lockdown file")
    origin = app_origin(app_url)
    policy["URLAllowlist"] = [origin]
    policy["RestoreOnStartup"] = 4
    policy["RestoreOnStartupURLs"] = [app_url]
    policy["HomepageLocation"] = app_url
    policy["NewTabPageLocation"] = app_url
    return policy


def write_policy(policy: dict[str, Any], directory: Path, name: str = POLICY_FILE_NAME) -> Path:
    """Write `directory/name` atomically (temporary file in the same folder, fsync, rename), world-readable
    because the browser runs as an unprivileged user, writable only by the owner."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    target = directory / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(policy, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target
