"""Keep exactly one fullscreen browser window on the kiosk display.

Kiosk mode alone is escapable: Ctrl+N (or "open link in new window", or a second Chromium invocation) opens an
ordinary window with an address bar. The proxy filters such shortcuts, and this watchdog is the layer behind it: it
polls the X display's top-level windows, keeps the first browser window as *the* kiosk window (pinned to the full
screen, raised and focused), asks every other mapped window to close (ICCCM WM_DELETE_WINDOW, as a window manager's
close button would), disconnects the owner of a window that ignores that, and has the browser restarted on the app
URL when the kiosk window is gone, the browser died, or (optionally) the window no longer shows the app.

There is no window manager on the display (one would add decorations and key bindings of its own), so the watchdog
also does the one job a window manager would: sizing the kiosk window to the screen. Override-redirect windows
(menus, dropdowns, tooltips) are not top-level application windows and are left alone; what a menu can open is
covered by the browser policy and, if it is a window, by this watchdog.

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

from enclave.kiosk.xlib import TopLevel, XConnection, XError

log = logging.getLogger("safeshare.kiosk")
T = TypeVar("T")

POLL_SECONDS = 0.25
CLOSE_GRACE_SECONDS = 1.5  # after a polite close request, before the window's client is disconnected
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
        plan.restart = f"the kiosk window shows {current.title!r}, not the app"
    return plan


class Watchdog:
    """Polls the display; `restart_browser(reason)` is the kiosk's callback that relaunches Chromium."""

    def __init__(self, display: str, cookie: bytes, width: int, height: int,
                 restart_browser: Callable[[str], Awaitable[None]], browser_alive: Callable[[], bool],
                 title_ok: Callable[[str], bool] | None = None, title_grace: float = 5.0,
                 poll_seconds: float = POLL_SECONDS) -> None:
        self.display = display
        self.cookie = cookie
        self.width = width
        self.height = height
        self.restart_browser = restart_browser
        self.browser_alive = browser_alive
        self.title_ok = title_ok
        self.title_grace = title_grace
        self.poll_seconds = poll_seconds
        self.kiosk: int | None = None
        self.closed = 0
        self.restarts = 0
        self.events: list[tuple[float, str]] = []
        self._close_requested: dict[int, float] = {}
        self._title_bad_since: float | None = None
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
        self._task = asyncio.create_task(self._run(), name="kiosk-watchdog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._x_thread is not None:
            if self._conn is not None:
                await self._in_x_thread(self._conn.close)
                self._conn = None
            self._x_thread.shutdown(wait=True)
            self._x_thread = None

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
        self._title_bad_since = None

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
        if plan.restart:
            await self._restart(plan.restart)
            return
        if plan.kiosk is not None and self.kiosk is None:
            self.kiosk = plan.kiosk
            self._ready.set()
        if plan.close or plan.fix_geometry:
            await self._in_x_thread(self._act, plan)

    def _look(self) -> Plan:
        assert self._conn is not None
        windows = self._conn.top_levels()
        plan = assess(windows, self.kiosk, self.width, self.height, self.title_ok)
        if plan.restart and plan.kiosk is not None:  # a bad title: only after a grace period (pages load)
            now = time.monotonic()
            if self._title_bad_since is None:
                self._title_bad_since = now
            if now - self._title_bad_since < self.title_grace:
                plan.restart = None
        elif plan.kiosk is not None:
            self._title_bad_since = None
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
            if plan.close:
                self._conn.raise_and_focus(plan.kiosk)

    async def _restart(self, reason: str) -> None:
        self._note(f"restarting the browser: {reason}")
        self.restarts += 1
        self.forget_window()
        await self.restart_browser(reason)
