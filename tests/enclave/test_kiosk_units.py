"""Kiosk parts that need no display: the managed policy, the watchdog's decisions, configuration, command lines."""
from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import pytest

from enclave.kiosk.browser import chromium_flags, find_chromium, write_profile_preferences
from enclave.kiosk.browser_policy import (REQUIRED, BrowserPolicyError, app_origin, build_policy, load_lockdown,
                                          write_policy)
from enclave.kiosk.config import KioskConfig, KioskConfigError, parse_size, size_from_policy
from enclave.kiosk.display import write_xauthority
from enclave.kiosk.vnc import CLIPBOARD_OFF_FLAGS, x11vnc_command
from enclave.kiosk.watchdog import (CLOSE_TAB_SECONDS, MAX_TAB_CLOSES, POLL_SECONDS, STARTUP_GRACE_SECONDS,
                                    TITLE_GRACE_SECONDS, TitleTracker, Watchdog, assess, page_title, title_checker)
from enclave.kiosk.xlib import TopLevel

APP = "http://127.0.0.1:8765/"
CHROMIUM = "/usr/lib/chromium/chromium"


def test_policy_has_every_required_control() -> None:
    policy = build_policy(APP)
    for name, value in REQUIRED.items():
        if value is not None:
            assert policy[name] == value, name
    for pattern in ("*", "chrome://*", "chrome-untrusted://*", "view-source:*", "devtools://*"):
        assert pattern in policy["URLBlocklist"]
    assert policy["URLAllowlist"] == ["http://127.0.0.1:8765"]
    assert policy["RestoreOnStartupURLs"] == [APP] and policy["NewTabPageLocation"] == APP
    assert policy["DeveloperToolsAvailability"] == 2 and policy["DownloadRestrictions"] == 3
    assert policy["DefaultClipboardSetting"] == 2  # third layer of "no clipboard"


@pytest.mark.skipif(not os.path.isfile(CHROMIUM), reason="Chromium is installed by scripts/setup.sh")
def test_policy_names_are_known_to_the_installed_chromium() -> None:
    """A misspelt policy is silently ignored by Chromium: a control that is not there. Chromium's binary holds the
    name of every policy it supports as a NUL-terminated string."""
    with open(CHROMIUM, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as binary:
        unknown = [name for name in build_policy(APP) if binary.find(b"\0" + name.encode() + b"\0") < 0]
    assert unknown == []


def test_weakened_lockdown_is_refused(tmp_path: Path) -> None:
    lockdown = load_lockdown()
    for name, bad in (("DeveloperToolsAvailability", 1), ("DownloadRestrictions", 0), ("PrintingEnabled", True)):
        with pytest.raises(BrowserPolicyError, match=name):
            build_policy(APP, {**lockdown, name: bad})
    with pytest.raises(BrowserPolicyError, match="URLBlocklist"):
        build_policy(APP, {**lockdown, "URLBlocklist": ["chrome://*"]})
    with pytest.raises(BrowserPolicyError, match="URLAllowlist"):
        build_policy(APP, {**lockdown, "URLAllowlist": ["*"]})
    lockdown.pop("IncognitoModeAvailability")
    with pytest.raises(BrowserPolicyError, match="IncognitoModeAvailability"):
        build_policy(APP, lockdown)


def test_app_origin_forms() -> None:
    assert app_origin("http://127.0.0.1:8000/x?y") == "http://127.0.0.1:8000"
    assert app_origin("https://enclave.example/") == "https://enclave.example:443"
    assert app_origin("http://[::1]:9/") == "http://[::1]:9"
    with pytest.raises(BrowserPolicyError):
        app_origin("file:///etc/passwd")


def test_policy_written_atomically(tmp_path: Path) -> None:
    target = write_policy(build_policy(APP), tmp_path / "managed")
    assert json.loads(target.read_text())["URLAllowlist"] == ["http://127.0.0.1:8765"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary file left behind


def test_sizes_and_config(tmp_path: Path) -> None:
    assert parse_size("1280x800") == (1280, 800) and parse_size(" 1920 X 1080 ") == (1920, 1080)
    for bad in ("1280", "10x10", "99999x800", "axb"):
        with pytest.raises(KioskConfigError):
            parse_size(bad)
    policy = tmp_path / "recipient.yaml"
    policy.write_text("recipient: r\nscreen: 1024x768\nlimits: {idle_seconds: 5}\n")
    assert size_from_policy(policy) == (1024, 768)
    policy.write_text("recipient: r\nscreen: {width: 1600, height: 900}\n")
    assert size_from_policy(policy) == (1600, 900)
    policy.write_text("recipient: r\n")
    assert size_from_policy(policy) is None
    demo = Path(__file__).resolve().parents[2] / "policies" / "examples" / "recipient-demo.yaml"
    size_from_policy(demo)  # readable whatever it holds
    with pytest.raises(KioskConfigError):
        KioskConfig(app_url="file:///etc/passwd", state_dir=tmp_path)
    with pytest.raises(KioskConfigError):
        KioskConfig(app_url=APP, state_dir=tmp_path, network="none")


def test_vnc_server_flags_match_the_proxys_safe_set(tmp_path: Path) -> None:
    """The enclave does not import the proxy; this keeps the two lists of clipboard-off flags equal."""
    from proxy.vncserver import SAFE_X11VNC_FLAGS

    assert set(CLIPBOARD_OFF_FLAGS) == set(SAFE_X11VNC_FLAGS)

    class FakeDisplay:
        name, xauthority = ":9", tmp_path / "xa"

    cmd = x11vnc_command(FakeDisplay(), tmp_path / "pw", unix_socket=tmp_path / "s")  # type: ignore[arg-type]
    for flag in (*SAFE_X11VNC_FLAGS, "-nevershared", "-noremote", "-nocmds", "-norc"):
        assert flag in cmd
    assert cmd[cmd.index("-rfbport") + 1] == "0" and cmd[cmd.index("-rfbportv6") + 1] == "-1"
    assert "-passwdfile" in cmd and "-nopw" not in cmd
    assert "-ultrafilexfer" not in cmd and "-tightfilexfer" not in cmd
    tcp = x11vnc_command(FakeDisplay(), tmp_path / "pw", port=5999)  # type: ignore[arg-type]
    assert "-localhost" in tcp and "-listen" not in tcp
    # in a container: on the enclave network's address, still password-protected with the clipboard off
    container = x11vnc_command(FakeDisplay(), tmp_path / "pw", port=5900, listen="0.0.0.0")  # type: ignore[arg-type]
    assert container[container.index("-listen") + 1] == "0.0.0.0" and "-localhost" not in container
    assert "-passwdfile" in container and all(flag in container for flag in SAFE_X11VNC_FLAGS)


def test_chromium_flags(tmp_path: Path) -> None:
    flags = chromium_flags(APP, 1280, 800, tmp_path / "p", sandbox=True)
    for flag in ("--kiosk", "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--noerrdialogs", f"--user-data-dir={tmp_path / 'p'}", "--window-size=1280,800"):
        assert flag in flags
    assert any(f.startswith("--disable-features=") and "Translate" in f for f in flags)
    assert "--no-sandbox" not in flags and flags[-1] == APP
    assert not any(f.startswith("--remote-debugging") for f in flags)
    fallback = chromium_flags(APP, 800, 600, tmp_path / "p", sandbox=False, proxy_fallback="http://127.0.0.1:9",
                              bypass="127.0.0.1:8765")
    assert "--no-sandbox" in fallback and "--proxy-server=http://127.0.0.1:9" in fallback
    assert "--proxy-bypass-list=<-loopback>;127.0.0.1:8765" in fallback


@pytest.mark.skipif(not os.path.isfile(CHROMIUM), reason="Chromium is installed by scripts/setup.sh")
def test_wrapper_script_is_refused(tmp_path: Path) -> None:
    assert find_chromium() == CHROMIUM
    wrapper = tmp_path / "chromium"
    wrapper.write_text("#!/bin/sh\nexec true\n")
    wrapper.chmod(0o755)
    with pytest.raises(Exception, match="wrapper"):
        find_chromium(str(wrapper))


def test_xauthority_is_private(tmp_path: Path) -> None:
    path = tmp_path / "xa"
    write_xauthority(path, b"\x01" * 16)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert path.read_bytes().endswith(b"MIT-MAGIC-COOKIE-1\x00\x10" + b"\x01" * 16)


def win(window: int, *, viewable: bool = True, override: bool = False, cls: str = "Chromium-browser",
        geometry: tuple[int, int, int, int] = (0, 0, 1280, 800), title: str = "app - Chromium") -> TopLevel:
    return TopLevel(window, viewable, override, *geometry, "chromium-browser", cls, title, 42)


def test_watchdog_adopts_the_first_browser_window_and_closes_the_rest() -> None:
    windows = [win(1, viewable=False), win(2, override=True), win(3), win(4), win(5, cls="XTerm")]
    plan = assess(windows, None, 1280, 800)
    assert plan.kiosk == 3 and plan.close == [4, 5] and plan.restart is None and not plan.fix_geometry


def test_watchdog_leaves_menus_alone_and_fixes_geometry() -> None:
    plan = assess([win(3, geometry=(10, 10, 1050, 780)), win(9, override=True)], 3, 1280, 800)
    assert plan.close == [] and plan.fix_geometry and plan.restart is None


def test_watchdog_restarts_when_the_kiosk_window_is_gone() -> None:
    assert assess([win(4)], 3, 1280, 800).restart == "the kiosk window is gone"
    assert assess([win(3, viewable=False)], 3, 1280, 800).restart == "the kiosk window is gone"
    plan = assess([win(6, cls="XTerm")], None, 1280, 800)  # before the browser is up: foreign windows go
    assert plan.kiosk is None and plan.close == [6]


def test_watchdog_title_check() -> None:
    ok = title_checker("safeshare")
    assert ok("safeshare · cohort - Chromium")
    assert not ok("127.0.0.1 - Chromium") and not ok("chrome://downloads/ - Chromium")
    anything = title_checker(None)
    assert anything("Cohort builder - Chromium") and not anything("chrome://settings - Chromium")
    assert not anything("view-source:http://x - Chromium") and page_title("a - b - Chromium") == "a - b"
    plan = assess([win(3, title="chrome://history/ - Chromium")], 3, 1280, 800, anything)
    assert plan.bad_title == "chrome://history/ - Chromium" and plan.restart is None  # the tracker decides
    assert assess([win(3, title="Cohort - Chromium")], 3, 1280, 800, anything).bad_title is None


def test_a_wrong_page_is_closed_at_once_and_the_browser_restarted_only_if_that_fails() -> None:
    """Finding 23: a page that is not the app used to stay for the 5 s grace plus a browser restart. A browser page
    (chrome://...) is closed at the first poll that sees it, another wrong title after a one-second grace (a page of
    the app may be loading, titled with its address); if the page is still there a second after Ctrl+W, restart."""
    t = TitleTracker()
    assert t.step(None, 100.0) is None and t.shown_app
    history = "chrome://history/ - Chromium"
    assert t.step(history, 101.0) == "close-tab"  # at once
    t.closed(history, 101.0)
    assert t.step(history, 101.5) is None  # Ctrl+W takes effect
    assert t.step(None, 101.6) is None and t.closed_at is None  # the app's tab is back
    # another origin's blocked page (titled with its host) or a slow page of the app: one second, then close
    assert t.step("127.0.0.1 - Chromium", 200.0) is None
    assert t.step("127.0.0.1 - Chromium", 200.0 + TITLE_GRACE_SECONDS - 0.1) is None
    assert t.step("127.0.0.1 - Chromium", 200.0 + TITLE_GRACE_SECONDS) == "close-tab"
    t.closed("127.0.0.1 - Chromium", 201.0)
    # a second bad tab behind the first: closed as well; the same one still there a second later: restart
    assert t.step("chrome://downloads/ - Chromium", 201.2) == "close-tab"
    t.closed("chrome://downloads/ - Chromium", 201.2)
    assert t.step("chrome://downloads/ - Chromium", 201.2 + CLOSE_TAB_SECONDS - 0.1) is None
    assert t.step("chrome://downloads/ - Chromium", 201.2 + CLOSE_TAB_SECONDS) == "restart"
    # Ctrl+W for one episode at most MAX_TAB_CLOSES times, then a restart
    t.reset()
    now = 300.0
    for i in range(MAX_TAB_CLOSES):
        assert t.step(f"chrome://page{i}/ - Chromium", now) == "close-tab"
        t.closed(f"chrome://page{i}/ - Chromium", now)
        now += 0.1
    assert t.step("chrome://another/ - Chromium", now + CLOSE_TAB_SECONDS) == "restart"
    # a new browser window that has not shown the app yet gets the start-up grace ("Untitled", its address)
    t.reset(new_window=True)
    assert t.step("Untitled - Chromium", 400.0) is None
    assert t.step("about:blank - Chromium", 400.0 + STARTUP_GRACE_SECONDS - 0.1) is None
    assert t.step("about:blank - Chromium", 400.0 + STARTUP_GRACE_SECONDS) == "close-tab"


def test_watchdog_polls_often_enough_to_replace_a_page_within_two_seconds() -> None:
    """The bound the kiosk test measures through the real browser, as the configuration that gives it."""
    assert POLL_SECONDS <= 0.1
    assert TITLE_GRACE_SECONDS + POLL_SECONDS + 0.5 <= 2.0  # 0.5 s: Ctrl+W and Chromium closing the tab
    assert Watchdog(":0", b"", 1280, 800, None, lambda: True)._titles.grace == TITLE_GRACE_SECONDS  # type: ignore


def test_vnc_server_adds_no_keysyms_and_releases_keys() -> None:
    """Finding 21: x11vnc added StickyKeys_Enable and Terminate_Server to the keymap when a client sent them."""
    from enclave.kiosk.vnc import HARDENING_FLAGS

    assert "-noadd_keysyms" in HARDENING_FLAGS and "-add_keysyms" not in HARDENING_FLAGS
    assert "-clear_keys" in HARDENING_FLAGS


def test_only_modifier_and_group_actions_are_allowed_on_keys() -> None:
    from enclave.kiosk.xlib import ACCESSX_CONTROLS, XKB_ALLOWED_ACTIONS, XKB_CONTROLS

    assert XKB_ALLOWED_ACTIONS == frozenset({0, 1, 2, 3, 4, 5, 6})  # none, Set/Latch/Lock Mods and Group
    for action in (0x0C, 0x0F, 0x0E, 0x0B, 0x07, 0x08, 0x86):  # Terminate, Lock/SetControls, ISOLock, pointer, private
        assert action not in XKB_ALLOWED_ACTIONS
    for name in ("StickyKeys", "SlowKeys", "BounceKeys", "MouseKeys", "AccessXKeys", "Overlay1", "Overlay2"):
        assert ACCESSX_CONTROLS & XKB_CONTROLS[name], name
    assert not ACCESSX_CONTROLS & XKB_CONTROLS["RepeatKeys"]


def test_new_profiles_get_no_caret_browsing_dialog(tmp_path: Path) -> None:
    """Finding 22: F7 opened the caret-browsing dialog, a window that swallows input; Chromium has no policy for it,
    so every fresh profile starts with the preference that skips the dialog."""
    target = write_profile_preferences(tmp_path / "profile")
    assert target == tmp_path / "profile" / "Default" / "Preferences"
    prefs = json.loads(target.read_text())
    assert prefs["settings"]["a11y"]["caretbrowsing"] == {"enabled": False, "show_dialog": False}


def test_policy_blocks_what_finding_22_found() -> None:
    policy = build_policy(APP)
    assert policy["DownloadRestrictions"] == 3 and policy["DefaultAutomaticDownloadsSetting"] == 2  # Alt+click
    assert policy["TaskManagerEndProcessEnabled"] is False  # Shift+Esc
    assert policy["AllowDeletingBrowserHistory"] is False  # Ctrl+Shift+Delete
    assert policy["BrowserAddPersonEnabled"] is False and policy["BrowserGuestModeEnabled"] is False
    assert policy["DeveloperToolsAvailability"] == 2


def test_a_lost_connection_does_not_mark_the_next_one_dead(tmp_path: Path) -> None:
    """Closing a connection whose server died records its address as dead; Xlib reuses freed addresses, and a new
    connection must not inherit that mark (it made a kiosk's watchdog stop at once, so no window was ever adopted)."""
    import shutil
    import signal

    from enclave.kiosk import xlib
    from enclave.kiosk.display import start_xvfb

    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed")
    first = start_xvfb(320, 240, tmp_path / "xa1", tmp_path / "x1.log")
    conn = xlib.XConnection(first.name, first.cookie)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    address = conn._dpy
    conn.close()
    assert address not in xlib._dead


def test_app_url_is_pinned_to_an_address() -> None:
    """The browser gets the app's address, not its name (a container name like "app" is refused by Chromium's URL
    filter, and with an address the browser needs no name resolution at all)."""
    from enclave.kiosk.config import resolve_app_url

    assert resolve_app_url("http://localhost:8050/cohort?x=1") == "http://127.0.0.1:8050/cohort?x=1"
    assert resolve_app_url("http://10.1.2.3:8050/") == "http://10.1.2.3:8050/"
    with pytest.raises(KioskConfigError):
        resolve_app_url("http://no-such-host.invalid:8050/")


def test_kiosk_waits_for_an_app_that_starts_late() -> None:
    """Provisioning starts app and kiosk together: the kiosk waits until the app answers (any HTTP status), then pins
    its address; an app that never answers is an error that names it, after the timeout and not long after."""
    import socket
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from enclave.kiosk.config import wait_for_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Forbidden(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_error(403)

        def log_message(self, *args) -> None:
            pass

    servers: list[HTTPServer] = []

    def serve_later() -> None:
        time.sleep(0.6)
        server = HTTPServer(("127.0.0.1", port), Forbidden)
        servers.append(server)
        server.serve_forever()

    threading.Thread(target=serve_later, daemon=True).start()
    started = time.monotonic()
    try:
        assert wait_for_app(f"http://localhost:{port}/", timeout=10) == f"http://127.0.0.1:{port}/"
        assert 0.5 < time.monotonic() - started < 5
    finally:
        for server in servers:
            server.shutdown()
    started = time.monotonic()
    with pytest.raises(KioskConfigError, match=f"127.0.0.1:{port}.*did not answer within 1 s"):
        wait_for_app(f"http://127.0.0.1:{port}/", timeout=1)
    assert time.monotonic() - started < 2.5


def test_kiosk_takes_the_escape_shortcuts_off_the_keyboard() -> None:
    """Findings 20 and 22 at the X server: the shortcuts are grabbed with every modifier mask they can come with."""
    from enclave.kiosk.keyboard import KIOSK_SHORTCUTS, shortcut_masks
    from enclave.kiosk.xlib import MODIFIER_BITS

    ctrl, shift, alt = MODIFIER_BITS["Ctrl"], MODIFIER_BITS["Shift"], MODIFIER_BITS["Alt"]
    lock, numlock = MODIFIER_BITS["Lock"], MODIFIER_BITS["Mod2"]
    masks = shortcut_masks(("Ctrl",), ("Shift",))
    assert ctrl in masks and ctrl | shift in masks and ctrl | shift | lock | numlock in masks
    assert 0 not in masks and shift not in masks and all(m & ctrl for m in masks)

    def taken(keysym: int, mask: int) -> bool:
        return any(sym == keysym and mask in shortcut_masks(req, opt) for sym, req, opt in KIOSK_SHORTCUTS)

    f = {n: 0xFFBE + n - 1 for n in range(1, 13)}
    for keysym, mask in ((ord("n"), ctrl), (ord("n"), ctrl | shift), (ord("t"), ctrl), (ord("h"), ctrl | numlock),
                         (ord("j"), ctrl), (0xFFFF, ctrl | shift), (0xFF1B, shift), (f[4], ctrl), (f[4], alt),
                         (f[7], 0), (f[10], shift), (f[11], 0), (f[12], 0), (ord("q"), ctrl | shift),
                         (ord("i"), ctrl | shift), (0xFF50, alt), (ord("f"), alt)):
        assert taken(keysym, mask), (hex(keysym), mask)
    # what the app and the watchdog need stays on the keyboard
    for keysym, mask in ((ord("c"), ctrl), (ord("v"), ctrl), (ord("a"), ctrl), (ord("f"), ctrl), (ord("w"), ctrl),
                         (0xFF1B, 0), (ord("n"), shift), (ord("n"), 0), (0xFF51, alt), (f[5], 0)):
        assert not taken(keysym, mask), (hex(keysym), mask)


def test_the_ready_event_is_written_and_found_in_one_place() -> None:
    from enclave.kiosk.ready import READY, event_line, find_ready

    line = event_line(READY, upstream="unix:/run/vnc.sock", password_file="/run/pw")
    log = "\n".join(["Xvfb started", '{"event": "starting"}', "{not json", line, event_line("failed", reason="x")])
    assert find_ready(log) == {"event": "ready", "upstream": "unix:/run/vnc.sock", "password_file": "/run/pw"}
    assert find_ready("Xvfb started\n{not json\n") is None
