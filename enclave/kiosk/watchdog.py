"""Keep exactly one fullscreen browser window on the kiosk display.

Kiosk mode alone is escapable: Ctrl+N (or "open link in new window", or a second Chromium invocation) opens an
ordinary window with an address bar. The proxy filters such shortcuts, and this watchdog is the layer behind it: it
polls the X display's top-level windows, keeps the first browser window as *the* kiosk window (pinned to the full
screen, raised and focused), asks every other mapped window to close (ICCCM WM_DELETE_WINDOW, as a window manager's
close button would), disconnects the owner of a window that ignores that, and has the browser restarted on the app
URL when the kiosk window is gone or the browser died.

When the kiosk window stops showing the app (its title is a browser page such as chrome://history, or, after a
short grace for a page that is still loading, not the app's title), the watchdog closes that tab at once with Ctrl+W
(XTEST): a page that a shortcut opened in a new tab goes and the app's own tab, with the researcher's work, is back
within a poll; if the bad page was the only tab, the window closes and the browser is restarted. Only if the page is
still there a moment after Ctrl+W is the browser restarted. The window title is read every POLL_SECONDS.

It also keeps the keyboard safe (keyboard.py): it holds the grabs that keep the browser's escape shortcuts from the
browser (and discards what they catch), switches off again an AccessX control such as StickyKeys that got switched on,
and disarms again a keymap that regained an action on the server.

There is no window manager on the display (one would add decorations and key bindings of its own), so the watchdog
also does the one job a window manager would: sizing the kiosk window to the screen. Override-redirect windows
(menus, dropdowns, tooltips) are not top-level application windows and are left alone; what a menu can open is
covered by the browser policy and, if it is a window, by this watchdog.

It also keeps the screen watermark (watermark.py) current and on top of every window, when the kiosk has one: the
watermark is an override-redirect window, so `assess` leaves it alone like a menu.

The decision (`assess`) is a pure function of what the display shows, so it is tested without X.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from enclave.kiosk.keyboard import KeyboardGuard, grab_shortcuts
from enclave.kiosk.watermark import Watermark
from enclave.kiosk.xlib import TopLevel, XConnection, XError

log = logging.getLogger("safeshare.kiosk")
T = TypeVar("T")

POLL_SECONDS = 0.1
CLOSE_GRACE_SECONDS = 1.5  # after a polite close request, before the window's client is disconnected
TITLE_GRACE_SECONDS = 1.0  # a title that is not the app's: a page may still be loading (its title is its address)
STARTUP_GRACE_SECONDS = 5.0  # ... as long as a new browser window has not shown the app yet
CLOSE_TAB_SECONDS = 1.0  # after Ctrl+W: if the bad page is still shown then, the browser is restarted
MAX_TAB_CLOSES = 5  # Ctrl+W at most this often for one episode of bad pages, then a restart
XK_CONTROL_L, XK_W = 0xFFE3, 0x77
BROWSER_CLASSES = ("chromium", "chromium-browser", "google-chrome", "chrome")


# Titles Chromium gives its own pages and error pages (a blocked URL's page is titled with the URL or its host).
INTERNAL_TITLE_PREFIXES = ("chrome://", "chrome-", "devtools://", "view-source:", "file://", "about:", "data:")
TITLE_SUFFIXES = (" - Chromium", " - Google Chrome")


def page_title(window_title: str) -> str:
    """The page's own title: Chromium appends its name to the window title."""
    for suffix in TITLE_SUFFIXES:
        if window_title.endswith(suffix):
            return window_title[: -len(suffix)]
    return window_title


def is_internal_title(window_title: str) -> bool:
    """A browser page (chrome://..., view-source:, about:...): never the app, however briefly."""
    return page_title(window_title).startswith(INTERNAL_TITLE_PREFIXES)


def title_checker(app_title: str | None) -> Callable[[str], bool]:
    """Whether a window title shows the app: never a browser-internal page; if the app's pages share a title
    prefix (`app_title`), only pages with it (a blocked page is titled with the blocked host, e.g. "127.0.0.1")."""
    def ok(window_title: str) -> bool:
        title = page_title(window_title)
        if title.startswith(INTERNAL_TITLE_PREFIXES):
            return False
        return app_title is None or title.startswith(app_title)

    return ok


def is_browser_window(window: TopLevel) -> bool:
    return window.res_class.lower() in BROWSER_CLASSES


def is_app_window(window: TopLevel) -> bool:
    """A window that belongs on screen at all: mapped and managed (not a menu or tooltip)."""
    return window.viewable and not window.override_redirect


@dataclass
class Plan:
    """What the watchdog should do after one look at the display."""

    kiosk: int | None
    close: list[int] = field(default_factory=list)
    fix_geometry: bool = False
    restart: str | None = None
    bad_title: str | None = None  # the kiosk window's title when it does not show the app
    close_tab: bool = False  # send Ctrl+W to the kiosk window (decided by TitleTracker)
    notes: list[str] = field(default_factory=list)  # what was repaired while looking (the watermark)


@dataclass
class TitleTracker:
    """What to do about a kiosk window that does not show the app, over successive polls (pure, tested without X).

    `step(bad_title, now)` returns None (wait or nothing to do), "close-tab" (send Ctrl+W now) or "restart"."""

    grace: float = TITLE_GRACE_SECONDS
    startup_grace: float = STARTUP_GRACE_SECONDS
    shown_app: bool = False  # this window has shown the app at least once
    bad_since: float | None = None
    closed_at: float | None = None
    closed_title: str | None = None
    closes: int = 0

    def reset(self, new_window: bool = False) -> None:
        self.bad_since = self.closed_at = self.closed_title = None
        self.closes = 0
        if new_window:
            self.shown_app = False

    def step(self, bad_title: str | None, now: float) -> str | None:
        if bad_title is None:
            self.reset()
            self.shown_app = True
            return None
        if self.bad_since is None:
            self.bad_since = now
        if not self.shown_app:
            wait = self.startup_grace  # a new browser's first page (titled "Untitled" or by its address at first)
        else:
            wait = 0.0 if is_internal_title(bad_title) else self.grace
        if now - self.bad_since < wait:
            return None
        if self.closed_at is None or (bad_title != self.closed_title and self.closes < MAX_TAB_CLOSES):
            return "close-tab"
        if now - self.closed_at >= CLOSE_TAB_SECONDS:
            return "restart"
        return None

    def closed(self, bad_title: str, now: float) -> None:
        """Ctrl+W was sent for the page titled `bad_title`."""
        self.closed_at, self.closed_title = now, bad_title
        self.closes += 1


def assess(windows: list[TopLevel], kiosk: int | None, width: int, height: int,
           title_ok: Callable[[str], bool] | None = None) -> Plan:
    """Decide from the top-level windows (bottom to top) which one is the kiosk and what must go."""
    shown = [w for w in windows if is_app_window(w)]
    if kiosk is not None and not any(w.window == kiosk for w in shown):
        return Plan(None, restart="the kiosk window is gone")
    if kiosk is None:
        browsers = [w for w in shown if is_browser_window(w)]
        if not browsers:
            return Plan(None, close=[w.window for w in shown])  # nothing of ours yet: anything shown is foreign
        kiosk = browsers[0].window
    current = next(w for w in shown if w.window == kiosk)
    plan = Plan(kiosk, close=[w.window for w in shown if w.window != kiosk])
    plan.fix_geometry = (current.x, current.y, current.width, current.height) != (0, 0, width, height)
    if title_ok is not None and current.title and not title_ok(current.title):
        plan.bad_title = current.title
    return plan


class Watchdog:
    """Polls the display; `restart_browser(reason)` is the kiosk's callback that relaunches Chromium."""

    def __init__(self, display: str, cookie: bytes, width: int, height: int,
                 restart_browser: Callable[[str], Awaitable[None]], browser_alive: Callable[[], bool],
                 title_ok: Callable[[str], bool] | None = None, title_grace: float = TITLE_GRACE_SECONDS,
                 poll_seconds: float = POLL_SECONDS, watermark: Watermark | None = None) -> None:
        self.display = display
        self.cookie = cookie
        self.width = width
        self.height = height
        self.restart_browser = restart_browser
        self.browser_alive = browser_alive
        self.title_ok = title_ok
        self.poll_seconds = poll_seconds
        self.watermark = watermark
        self.kiosk: int | None = None
        self.closed = 0
        self.restarts = 0
        self.tabs_closed = 0
        self.shortcuts_caught = 0  # key presses of KIOSK_SHORTCUTS taken off the keyboard by the grabs
        self.events: list[tuple[float, str]] = []
        self.keyboard = KeyboardGuard()
        self._close_requested: dict[int, float] = {}
        self._titles = TitleTracker(grace=title_grace)
        self._conn: XConnection | None = None
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        # Every X call runs on this one thread, in order: a poll still running when the watchdog is cancelled
        # finishes before the connection is closed behind it (closing it under a running call corrupts memory).
        self._x_thread: ThreadPoolExecutor | None = None

    # ---- control ----------------------------------------------------------------------------------------------

    async def _in_x_thread(self, func: Callable[..., T], *args: Any) -> T:
        assert self._x_thread is not None
        return await asyncio.get_running_loop().run_in_executor(self._x_thread, func, *args)

    async def start(self) -> None:
        self._x_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiosk-x")
        self._conn = await self._in_x_thread(XConnection, self.display, self.cookie)
        grabbed = await self._in_x_thread(grab_shortcuts, self._conn)
        log.info("kiosk watchdog: %d shortcut key combinations taken off the keyboard", grabbed)
        if self.watermark is not None:  # before the browser's window appears: no frame without it
            await self._in_x_thread(self.watermark.start, self._conn)
        self._task = asyncio.create_task(self._run(), name="kiosk-watchdog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._x_thread is not None:
            if self._conn is not None:
                if self.watermark is not None:
                    await self._in_x_thread(self._stop_watermark)
                await self._in_x_thread(self._conn.close)
                self._conn = None
            self._x_thread.shutdown(wait=True)
            self._x_thread = None

    def _stop_watermark(self) -> None:
        assert self.watermark is not None
        try:
            self.watermark.stop()
        except XError:
            pass  # the display is gone, and the window with it

    async def wait_for_window(self, timeout: float) -> int:
        """Until the watchdog has adopted a kiosk window (the browser is up and shown)."""
        await asyncio.wait_for(self._ready.wait(), timeout)
        assert self.kiosk is not None
        return self.kiosk

    def forget_window(self) -> None:
        """Called by the kiosk before it restarts the browser: the next browser window becomes the kiosk."""
        self.kiosk = None
        self._ready.clear()
        self._close_requested.clear()
        self._titles.reset(new_window=True)

    def _note(self, text: str) -> None:
        log.warning("kiosk watchdog: %s", text)
        self.events.append((time.time(), text))

    # ---- loop -------------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except XError as exc:  # the display is gone: nothing left to watch; the kiosk's supervisor stops it
                self._note(f"stopped: {exc}")
                return
            except Exception:  # keep watching: a watchdog that dies is worse than one that logs
                log.exception("kiosk watchdog poll failed")
            await asyncio.sleep(self.poll_seconds)

    async def _tick(self) -> None:
        if not self.browser_alive():
            await self._restart("the browser is not running")
            return
        plan = await self._in_x_thread(self._look)
        for found in plan.notes:
            self._note(found)
        if plan.restart:
            await self._restart(plan.restart)
            return
        if plan.kiosk is not None and self.kiosk is None:
            self.kiosk = plan.kiosk
            self._ready.set()
        if plan.close or plan.fix_geometry or plan.close_tab:
            await self._in_x_thread(self._act, plan)
        for found in await self._in_x_thread(self.keyboard.check, self._conn):
            self._note(found)
        caught = await self._in_x_thread(self._conn.grabbed_presses)
        if caught:
            self.shortcuts_caught += len(caught)
            self._note(f"kept {len(caught)} shortcut key press(es) from the browser: "
                       + ", ".join(f"keycode {code} state 0x{state:x}" for code, state in caught))

    def _look(self) -> Plan:
        assert self._conn is not None
        windows = self._conn.top_levels()
        plan = assess(windows, self.kiosk, self.width, self.height, self.title_ok)
        if self.watermark is not None:
            try:
                plan.notes = self.watermark.keep(self._conn, windows)
            except XError:
                raise
            except Exception as exc:  # noqa: BLE001 (logged; the window checks below must still run)
                plan.notes = [f"keeping the watermark failed: {exc.__class__.__name__}: {exc}"]
        if plan.kiosk is not None and not plan.restart:
            what = self._titles.step(plan.bad_title, time.monotonic())
            if what == "restart":
                plan.restart = f"the kiosk window still shows {plan.bad_title!r}, not the app"
            plan.close_tab = what == "close-tab"
        return plan

    def _act(self, plan: Plan) -> None:
        assert self._conn is not None
        now = time.monotonic()
        for window in plan.close:
            asked = self._close_requested.get(window)
            if asked is None:
                info = self._conn.describe(window)
                self._note(f"closing extra window 0x{window:x} {info.title if info else ''!r}")
                self._close_requested[window] = now
                self.closed += 1
                if info is not None and self._conn.supports_delete(window):
                    self._conn.request_close(window)
                else:
                    self._conn.kill_client(window)
            elif now - asked > CLOSE_GRACE_SECONDS:
                self._note(f"window 0x{window:x} ignored the close request: disconnecting its client")
                self._conn.kill_client(window)
                self._close_requested[window] = now
        self._close_requested = {w: t for w, t in self._close_requested.items() if w in plan.close}
        if plan.kiosk is not None:
            if plan.fix_geometry:
                self._conn.move_resize(plan.kiosk, 0, 0, self.width, self.height)
            if plan.close or plan.close_tab:
                self._conn.raise_and_focus(plan.kiosk)
                if self.watermark is not None:
                    self.watermark.raise_()
            if plan.close_tab and plan.bad_title is not None:
                self._note(f"closing the tab showing {plan.bad_title!r} (Ctrl+W)")
                self._titles.closed(plan.bad_title, now)
                self.tabs_closed += 1
                self._conn.release_keys()  # a modifier held now would turn Ctrl+W into another shortcut
                if not self._conn.send_keys(XK_CONTROL_L, XK_W):
                    self._titles.closed_at = now - CLOSE_TAB_SECONDS  # no XTEST: restart at the next poll

    async def _restart(self, reason: str) -> None:
        self._note(f"restarting the browser: {reason}")
        self.restarts += 1
        self.forget_window()
        await self.restart_browser(reason)
