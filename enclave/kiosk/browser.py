"""Launching Chromium for the kiosk: which binary, as which user, with which flags.

The real binary (`/usr/lib/chromium/chromium`) is started directly: Debian's `/usr/bin/chromium` is a shell wrapper
that adds flags from `/etc/chromium.d/` and the environment, which would make what runs depend on files the kiosk
does not control. As root, the browser runs as the unprivileged system user `safeshare-kiosk` (created on first use
with `useradd`), which keeps Chromium's own sandbox on; only if no such user can exist does it run as root with
`--no-sandbox`, and the log says so. The profile is new at every start (`--user-data-dir` in a fresh folder), so
nothing a researcher did survives a restart; it starts with a few preferences no policy covers (PROFILE_PREFERENCES).
"""
from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("safeshare.kiosk")

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser",
                       "/opt/google/chrome/chrome")
KIOSK_USER = "safeshare-kiosk"

# Features that phone home, pop up UI outside the page, or offer to leave the page.
DISABLED_FEATURES = (
    "Translate", "MediaRouter", "DialMediaRouteProvider", "OptimizationHints", "AutofillServerCommunication",
    "InterestFeedContentSuggestions", "CertificateTransparencyComponentUpdater", "GlobalMediaControls",
    "DownloadBubble", "DownloadBubbleV2", "HttpsUpgrades", "PrivacySandboxSettings4", "SidePanelPinning",
    "LensOverlay", "TabHoverCardImages", "ReadAnything", "SpareRendererForSitePerProcess", "BackForwardCache",
)


# Preferences every new profile starts with, for what no managed policy covers. F7 (caret browsing) otherwise opens a
# dialog, a window of its own that takes the keyboard until it is answered; without the dialog F7 only toggles a text
# caret in the page.
PROFILE_PREFERENCES: dict = {"settings": {"a11y": {"caretbrowsing": {"enabled": False, "show_dialog": False}}}}


def write_profile_preferences(profile: Path, uid: int | None = None, gid: int | None = None) -> Path:
    """`profile/Default/Preferences` with PROFILE_PREFERENCES (Chromium adds its defaults to it on first start),
    owned by the browser's user when that is another user."""
    default = profile / "Default"
    default.mkdir(parents=True, exist_ok=True)
    target = default / "Preferences"
    target.write_text(json.dumps(PROFILE_PREFERENCES))
    if uid is not None:
        for path in (default, target):
            os.chown(path, uid, gid if gid is not None else -1)
    return target


class BrowserError(RuntimeError):
    """No usable Chromium, or the kiosk user cannot be set up."""


def find_chromium(explicit: str | None = None) -> str:
    for candidate in ([explicit] if explicit else list(CHROMIUM_CANDIDATES)):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            with open(candidate, "rb") as handle:
                if handle.read(2) == b"#!":
                    raise BrowserError(f"{candidate} is a wrapper script; give the real Chromium binary")
            return candidate
    raise BrowserError("Chromium not found (Debian: apt-get install chromium; the binary is /usr/lib/chromium/chromium)")


@dataclass(frozen=True)
class BrowserUser:
    """Who the browser runs as. `uid is None` means the kiosk's own user (no switch)."""

    name: str
    uid: int | None
    gid: int | None
    sandbox: bool

    def describe(self) -> str:
        mode = "sandbox on" if self.sandbox else "sandbox OFF (--no-sandbox)"
        return f"{self.name} ({mode})"

    def prefix(self) -> list[str]:
        """Command prefix that drops to this user (setpriv keeps the environment we pass, clears groups)."""
        if self.uid is None:
            return []
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]


def sandbox_unavailable_reason() -> str | None:
    """Chromium's Linux sandbox needs unprivileged user namespaces (Debian builds have no setuid helper)."""
    checks = (("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone is 0"),
              ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces is 0"),
              ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
               "AppArmor restricts unprivileged user namespaces"))
    for path, bad, reason in checks:
        try:
            if open(path).read().strip() == bad:
                return reason
        except OSError:
            continue
    # A container's seccomp profile refuses new user namespaces whatever the sysctls say: try one.
    unshare = shutil.which("unshare")
    if unshare is not None:
        try:
            probe = subprocess.run([unshare, "--user", "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"no user namespace could be created ({exc})"
        if probe.returncode != 0:
            return f"no user namespace could be created ({probe.stderr.decode(errors='replace').strip()})"
    return None


def ensure_kiosk_user(name: str = KIOSK_USER) -> BrowserUser:
    """Choose the browser's user: ourselves when not root; else `name`, created if missing; root as a last resort."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid()).pw_name
        reason = sandbox_unavailable_reason()
        if reason:
            log.warning("%s: the kiosk browser runs WITHOUT Chromium's sandbox", reason)
        return BrowserUser(me, None, None, sandbox=reason is None)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None or shutil.which("setpriv") is None:
            log.warning("no useradd/setpriv: the kiosk browser runs as root WITHOUT Chromium's sandbox")
            return BrowserUser("root", None, None, sandbox=False)
        result = subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                                 "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True, timeout=30)
        if result.returncode != 0 and "already exists" not in result.stderr:
            log.warning("useradd %s failed (%s): the kiosk browser runs as root WITHOUT Chromium's sandbox",
                        name, result.stderr.strip())
            return BrowserUser("root", None, None, sandbox=False)
        entry = pwd.getpwnam(name)
        log.info("created system user %s for the kiosk browser", name)
    if shutil.which("setpriv") is None:
        log.warning("no setpriv: the kiosk browser runs as root WITHOUT Chromium's sandbox")
        return BrowserUser("root", None, None, sandbox=False)
    reason = sandbox_unavailable_reason()
    if reason:
        log.warning("%s: the kiosk browser runs as %s WITHOUT Chromium's sandbox", reason, name)
    return BrowserUser(name, entry.pw_uid, entry.pw_gid, sandbox=reason is None)


def chromium_flags(app_url: str, width: int, height: int, profile_dir: Path, *, sandbox: bool,
                   proxy_fallback: str | None = None, bypass: str | None = None) -> list[str]:
    """Kiosk flags. `proxy_fallback` (used only when no network namespace is possible) sends every request except
    the app's to a proxy that refuses everything, so that a page cannot reach other local ports."""
    flags = [
        "--kiosk", f"--user-data-dir={profile_dir}", "--no-first-run", "--no-default-browser-check",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--noerrdialogs",
        "--disable-default-apps", "--disable-extensions", "--disable-crash-reporter", "--disable-breakpad",
        "--disable-client-side-phishing-detection", "--disable-domain-reliability", "--no-pings",
        "--disable-session-crashed-bubble", "--hide-crash-restore-bubble", "--disable-infobars",
        "--disable-pinch", "--overscroll-history-navigation=0", "--disable-features=" + ",".join(DISABLED_FEATURES),
        "--password-store=basic", "--use-mock-keychain", "--ozone-platform=x11", "--force-device-scale-factor=1",
        "--window-position=0,0", f"--window-size={width},{height}", "--disable-gpu", "--disable-dev-shm-usage",
        "--renderer-process-limit=1", "--lang=en-US",
    ]
    if not sandbox:
        flags.append("--no-sandbox")
    if proxy_fallback:
        # No name resolves but the app's own host (by name in a container network, e.g. "app"); everything else
        # goes to the refusing proxy anyway.
        app_host = bypass.rsplit(":", 1)[0] if bypass else "127.0.0.1"
        excluded = "EXCLUDE 127.0.0.1" + (f", EXCLUDE {app_host}" if app_host not in ("127.0.0.1", "") else "")
        flags += [f"--proxy-server={proxy_fallback}", f"--proxy-bypass-list=<-loopback>;{bypass}",
                  f"--host-resolver-rules=MAP * ~NOTFOUND, {excluded}"]
    return flags + [app_url]


def browser_env(display_env: dict[str, str], home: Path) -> dict[str, str]:
    """A small, explicit environment: nothing from the caller's environment reaches the browser."""
    return {
        **display_env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8",
        "PATH": "/usr/bin:/bin", "DBUS_SESSION_BUS_ADDRESS": "disabled:", "CHROME_LOG_FILE": "/dev/null",
    }
