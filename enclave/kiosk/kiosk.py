"""The kiosk: Xvfb, x11vnc and a locked-down Chromium on the app URL, with a window watchdog and network isolation.

`Kiosk(config).start()` brings everything up and returns the VNC endpoint the RFB proxy connects to; `stop()` takes
everything down again, process groups and network namespace included, so no process outlives the kiosk. Both are
coroutines because the kiosk keeps tasks running in the caller's event loop (the watchdog and, with a network
namespace, the relay to the app), next to the proxy and gateway in `safeshare up`.

Every kiosk start gets a random id (`kiosk_id`): the screen watermark shows it (watermark.py), and x11vnc announces
it as its desktop name, which the proxy writes into each session's log, so that a stamp on a picture of the screen
leads to its session.

Order matters for failing closed: the managed policy is written, and in a namespace checked to be what the browser
will see, before the browser starts; if any step fails, everything started so far is stopped again.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from enclave.kiosk.browser import (BrowserUser, browser_env, chromium_flags, ensure_kiosk_user, find_chromium,
                                   write_profile_preferences)
from enclave.kiosk.browser_policy import (POLICY_FILE_NAME, SYSTEM_POLICY_DIR, build_policy, write_policy)
from enclave.kiosk.config import KioskConfig, KioskConfigError
from enclave.kiosk.config import resolve_app_url, wait_for_app
from enclave.kiosk.display import XDisplay, start_xvfb, write_xauthority
from enclave.kiosk.forward import PortForward
from enclave.kiosk.keyboard import harden_keyboard
from enclave.kiosk.leftovers import clean_previous, remove_record, write_record
from enclave.kiosk.netns import NetnsUnavailable, NetworkNamespace, netns_unavailable_reason
from enclave.kiosk.procs import descendants, kill_pids, spawn, stop_group
from enclave.kiosk.vnc import VncEndpoint, VncServer, desktop_name, start_x11vnc
from enclave.kiosk.watchdog import Watchdog, title_checker
from enclave.kiosk.watermark import Watermark

log = logging.getLogger("safeshare.kiosk")

WINDOW_TIMEOUT = 45.0
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass
class KioskEndpoint:
    """What `start()` returns: how to reach the kiosk's screen, and facts for logs and `status`."""

    upstream: str  # the proxy's syntax: unix:PATH or 127.0.0.1:PORT
    password_file: Path
    display: str
    network: str  # "netns <name>" or "proxy fallback (<reason>)"
    browser_user: str
    log_dir: Path
    kiosk_id: str = ""  # shown in the watermark and announced as the VNC desktop name (the sessions' logs keep it)
    watermark: str = "off"  # "on" or "off", for logs and `status`

    def password(self) -> bytes:
        return VncEndpoint(self.upstream, self.password_file).password()

    def as_dict(self) -> dict[str, str]:
        return {"upstream": self.upstream, "password_file": str(self.password_file), "display": self.display,
                "network": self.network, "browser_user": self.browser_user, "log_dir": str(self.log_dir),
                "kiosk_id": self.kiosk_id, "watermark": self.watermark}


class _RefusingProxy:
    """Fallback network control: Chromium sends every non-app request here, and every connection is closed at once."""

    def __init__(self) -> None:
        self.port = 0
        self.refused = 0
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _handle(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.refused += 1
        writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


class Kiosk:
    def __init__(self, config: KioskConfig) -> None:
        self.config = config
        self.kiosk_id = secrets.token_hex(4)
        self.display: XDisplay | None = None
        self.vnc: VncServer | None = None
        self.netns: NetworkNamespace | None = None
        self.forward: PortForward | None = None
        self.refusing_proxy: _RefusingProxy | None = None
        self.watchdog: Watchdog | None = None
        self.user: BrowserUser | None = None
        self.browser: subprocess.Popen | None = None
        self.browser_starts = 0
        self.endpoint: KioskEndpoint | None = None
        self.policy_path: Path | None = None
        self._wrote_system_policy = False
        self._home: Path | None = None
        self._profile: Path | None = None  # the running browser's profile folder, new at every start
        self._chromium = ""
        self._network = ""
        self._restart_lock = asyncio.Lock()
        self._last_restart = 0.0
        self._quick_restarts = 0
        self._stopping = False
        self._supervisor: asyncio.Task | None = None
        self.failed = asyncio.Event()
        self.failure: str | None = None

    # ---- public ---------------------------------------------------------------------------------------------

    async def start(self) -> KioskEndpoint:
        """Bring the kiosk up; returns once the browser window is on screen. Stops everything on failure."""
        try:
            return await self._start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop everything this kiosk started (idempotent; safe after a failed start)."""
        self._stopping = True
        if self._supervisor is not None and self._supervisor is not asyncio.current_task():
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        self._supervisor = None
        if self.watchdog is not None:
            await self.watchdog.stop()
            self.watchdog = None
        await asyncio.to_thread(self._stop_browser)
        if self.forward is not None:
            await self.forward.close()
            self.forward = None
        if self.refusing_proxy is not None:
            await self.refusing_proxy.close()
            self.refusing_proxy = None
        if self.vnc is not None:
            await asyncio.to_thread(self.vnc.stop)
            self.vnc = None
        if self.display is not None:
            await asyncio.to_thread(self.display.stop)
            self.display = None
        if self.netns is not None:
            await asyncio.to_thread(self.netns.delete)
            self.netns = None
        if self._wrote_system_policy and self.policy_path is not None:
            self.policy_path.unlink(missing_ok=True)
            self._wrote_system_policy = False
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None
        remove_record(self.config.state_dir)
        if self.endpoint is not None:
            log.info("kiosk stopped")
        self.endpoint = None

    def _record(self) -> None:
        """Note what runs, so that a kiosk that dies without stopping is cleaned up by the next one (leftovers.py)."""
        if self._stopping:
            return
        pids = [pid for group in self.process_ids().values() for pid in group]
        write_record(self.config.state_dir, {
            "pids": pids, "netns": self.netns.name if self.netns is not None else None,
            "home": str(self._home) if self._home is not None else None,
            "system_policy": str(self.policy_path) if self._wrote_system_policy and self.policy_path else None})

    async def __aenter__(self) -> KioskEndpoint:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def browser_pid(self) -> int | None:
        return self.browser.pid if self.browser is not None and self.browser.poll() is None else None

    def process_ids(self) -> dict[str, list[int]]:
        """Pids of the kiosk's processes by part (for status and memory figures)."""
        pid = self.browser_pid()
        return {"Xvfb": [self.display.proc.pid] if self.display is not None else [],
                "x11vnc": [self.vnc.proc.pid] if self.vnc is not None else [],
                "chromium": descendants(pid) if pid is not None else []}

    # ---- start-up steps -------------------------------------------------------------------------------------

    async def _start(self) -> KioskEndpoint:
        cfg = self.config
        self._stopping = False
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        assert cfg.log_dir is not None
        cfg.log_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(clean_previous, cfg.state_dir)
        if cfg.app_wait > 0:
            cfg.app_url = await asyncio.to_thread(wait_for_app, cfg.app_url, cfg.app_wait)
        else:
            cfg.app_url = await asyncio.to_thread(resolve_app_url, cfg.app_url)
        self._chromium = find_chromium(cfg.chromium)
        self.user = await asyncio.to_thread(ensure_kiosk_user, cfg.user or "safeshare-kiosk")
        log.info("kiosk browser user: %s", self.user.describe())
        await asyncio.to_thread(self._choose_network)
        self._record()
        self.display = await asyncio.to_thread(start_xvfb, cfg.width, cfg.height, cfg.state_dir / "xauthority",
                                               cfg.log_dir / "xvfb.log")
        # Before any other client connects: no key may act on the server (terminate it, switch StickyKeys on).
        await asyncio.to_thread(harden_keyboard, self.display.name, self.display.cookie)
        self.vnc = await asyncio.to_thread(start_x11vnc, self.display, cfg.state_dir, cfg.log_dir / "x11vnc.log",
                                           port=cfg.vnc_port, listen=cfg.vnc_listen,
                                           password_from=cfg.vnc_password_file, desktop=desktop_name(self.kiosk_id))
        await asyncio.to_thread(self._install_policy)
        self._prepare_home()
        self._record()
        await self._open_network_path()
        await asyncio.to_thread(self._launch_browser)
        self.watchdog = Watchdog(self.display.name, self.display.cookie, cfg.width, cfg.height,
                                 self._restart_browser, lambda: self.browser is not None and self.browser.poll() is None,
                                 title_ok=title_checker(cfg.app_title),
                                 watermark=Watermark(cfg.watermark, self.kiosk_id) if cfg.watermark.enabled else None)
        await self.watchdog.start()
        deadline = time.monotonic() + WINDOW_TIMEOUT
        while True:
            try:
                await self.watchdog.wait_for_window(0.5)
                break
            except asyncio.TimeoutError:
                if self.browser_starts > 3:
                    raise RuntimeError(f"the browser keeps exiting (see {cfg.log_dir}/chromium.log)") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no browser window within {WINDOW_TIMEOUT:.0f} s "
                                       f"(see {cfg.log_dir}/chromium.log)") from None
        self._record()
        self._supervisor = asyncio.create_task(self._supervise(), name="kiosk-supervisor")
        self.endpoint = KioskEndpoint(self.vnc.endpoint.upstream, self.vnc.endpoint.password_file, self.display.name,
                                      self._network, self.user.describe(), cfg.log_dir, self.kiosk_id,
                                      "on" if cfg.watermark.enabled else "off")
        log.info("kiosk ready: %s", json.dumps(self.endpoint.as_dict()))
        return self.endpoint

    def _choose_network(self) -> None:
        cfg = self.config
        reason = netns_unavailable_reason()
        if cfg.network in ("auto", "netns") and reason is None:
            try:
                self.netns = NetworkNamespace().create()
                self._network = f"netns {self.netns.name}"
                return
            except NetnsUnavailable as exc:
                reason = str(exc)
        if cfg.network == "netns":
            raise NetnsUnavailable(f"network namespace required but unavailable: {reason}")
        why = "requested" if cfg.network == "proxy" else reason
        self._network = f"proxy fallback ({why})"
        log.warning("kiosk network: no namespace (%s); every request but the app's goes to a refusing proxy", why)

    def _install_policy(self) -> None:
        """Write the managed policy where this browser will read it, and check that it will."""
        policy = build_policy(self.config.app_url)
        if self.netns is not None:
            # `ip netns exec` bind-mounts /etc/netns/NAME/chromium over /etc/chromium for the browser only.
            Path("/etc/chromium").mkdir(exist_ok=True)
            for path in (self.netns.etc_dir / "chromium", self.netns.etc_dir / "chromium" / "policies"):
                path.mkdir(mode=0o755, exist_ok=True)
            self.policy_path = write_policy(policy, self.netns.etc_dir / "chromium" / "policies" / "managed")
            seen = self.netns.run("cat", f"/etc/chromium/policies/managed/{POLICY_FILE_NAME}")
            if seen.returncode != 0 or json.loads(seen.stdout or b"null") != policy:
                raise RuntimeError("the browser's namespace does not see the managed policy; refusing to start")
            return
        directory = self.config.policy_dir or SYSTEM_POLICY_DIR
        try:
            self.policy_path = write_policy(policy, directory)
            self._wrote_system_policy = True
        except PermissionError as exc:
            existing = directory / POLICY_FILE_NAME
            if existing.is_file() and json.loads(existing.read_text()) == policy:
                self.policy_path = existing  # installed beforehand by an administrator: fine
                return
            raise RuntimeError(f"cannot install the managed browser policy in {directory}: {exc}") from exc

    def _prepare_home(self) -> None:
        """A fresh home for the browser user, outside state_dir so that the user can reach it whatever the state
        folder's parents allow; holds the profile and a copy of the X cookie readable by that user only."""
        assert self.user is not None and self.display is not None
        self._home = Path(tempfile.mkdtemp(prefix="safeshare-kiosk-"))
        for sub in ("tmp", ".config", ".cache"):
            (self._home / sub).mkdir()
        write_xauthority(self._home / "xauthority", self.display.cookie)
        if self.user.uid is not None:
            for path in [self._home, *self._home.rglob("*")]:
                os.chown(path, self.user.uid, self.user.gid)
        os.chmod(self._home, 0o700)

    async def _open_network_path(self) -> None:
        cfg = self.config
        if self.netns is not None:
            host = cfg.app_host
            listen_hosts: list[str]
            if host == "localhost":
                listen_hosts = ["127.0.0.1"]
            else:
                try:
                    address = ipaddress.ip_address(host)
                except ValueError:
                    raise KioskConfigError(f"with a network namespace the app URL host must be an IP address or "
                                           f"localhost (no DNS inside), got {host!r}") from None
                if not address.is_loopback:
                    await asyncio.to_thread(self.netns.add_address, host)
                listen_hosts = [host]
            listeners = [await asyncio.to_thread(self.netns.listen, h, cfg.app_port) for h in listen_hosts]
            self.forward = PortForward(listeners, "127.0.0.1" if host == "localhost" else host, cfg.app_port)
            await self.forward.start()
        else:
            self.refusing_proxy = _RefusingProxy()
            await self.refusing_proxy.start()

    def _browser_command(self) -> list[str]:
        cfg = self.config
        assert self.user is not None and self._home is not None and self._profile is not None
        profile = self._profile
        proxy = bypass = None
        if self.refusing_proxy is not None:
            proxy = f"http://127.0.0.1:{self.refusing_proxy.port}"
            bypass = f"{cfg.app_host}:{cfg.app_port}"
        flags = chromium_flags(cfg.app_url, cfg.width, cfg.height, profile, sandbox=self.user.sandbox,
                               proxy_fallback=proxy, bypass=bypass)
        flags = flags[:-1] + list(cfg.extra_flags) + flags[-1:]
        prefix = self.netns.exec_prefix() if self.netns is not None else []
        return [*prefix, *self.user.prefix(), self._chromium, *flags]

    def _launch_browser(self) -> None:
        """Start Chromium with a new, empty profile."""
        assert self._home is not None and self.display is not None and self.user is not None
        # A new folder for every start: a process of the previous browser that is still being killed may hold files
        # in its own folder (removing it could then fail, and reusing it would hand its leftovers to the new one).
        for old in self._home.glob("profile-*"):
            shutil.rmtree(old, ignore_errors=True)
        profile = self._home / f"profile-{self.browser_starts + 1}"
        profile.mkdir()
        self._profile = profile
        if self.user.uid is not None:
            os.chown(profile, self.user.uid, self.user.gid)
        write_profile_preferences(profile, self.user.uid, self.user.gid)
        env = browser_env({"DISPLAY": self.display.name, "XAUTHORITY": str(self._home / "xauthority")}, self._home)
        assert self.config.log_dir is not None
        self.browser = spawn(self._browser_command(), self.config.log_dir / "chromium.log", env=env)
        self.browser_starts += 1
        log.info("browser started (pid %s, start %d)", self.browser.pid, self.browser_starts)

    def _stop_browser(self) -> None:
        if self.browser is not None:
            tree = descendants(self.browser.pid)
            stop_group(self.browser)
            leftovers = [pid for pid in tree if Path(f"/proc/{pid}").exists()]
            if leftovers:
                kill_pids(leftovers)
            self.browser = None
        if self._home is not None:
            stragglers = _processes_mentioning(str(self._home / "profile-"))
            if stragglers:
                log.warning("killing %d leftover browser process(es)", len(stragglers))
                kill_pids(stragglers)

    async def _supervise(self, interval: float = 1.0) -> None:
        """Xvfb gone means no kiosk: fail closed (stop everything, `failed` is set). x11vnc gone is restarted with
        the same password, so that a running proxy can reconnect."""
        while not self._stopping:
            await asyncio.sleep(interval)
            if self.display is not None and self.display.proc.poll() is not None:
                self.failure = f"Xvfb exited with {self.display.proc.returncode}"
                log.error("kiosk failed: %s; stopping everything", self.failure)
                await self.stop()
                self.failed.set()
                return
            if self.vnc is not None and not self.vnc.alive() and self.display is not None:
                log.warning("x11vnc exited with %s; restarting it", self.vnc.proc.returncode)
                assert self.config.log_dir is not None
                try:
                    self.vnc = await asyncio.to_thread(start_x11vnc, self.display, self.config.state_dir,
                                                       self.config.log_dir / "x11vnc.log",
                                                       port=self.config.vnc_port, keep_password=True,
                                                       listen=self.config.vnc_listen,
                                                       desktop=desktop_name(self.kiosk_id))
                    self._record()
                except RuntimeError as exc:
                    self.failure = f"x11vnc cannot be restarted: {exc}"
                    log.error("kiosk failed: %s; stopping everything", self.failure)
                    await self.stop()
                    self.failed.set()
                    return

    async def _restart_browser(self, reason: str) -> None:
        """The watchdog's callback: a new browser on the app URL, with backoff if it keeps dying."""
        async with self._restart_lock:
            if self._stopping:
                return
            now = time.monotonic()
            self._quick_restarts = self._quick_restarts + 1 if now - self._last_restart < 30 else 0
            delay = RESTART_BACKOFF[min(self._quick_restarts, len(RESTART_BACKOFF) - 1)]
            await asyncio.to_thread(self._stop_browser)
            await asyncio.sleep(delay if self._quick_restarts else 0)
            if self._stopping:
                return
            self._last_restart = time.monotonic()
            log.warning("restarting the kiosk browser (%s)", reason)
            await asyncio.to_thread(self._launch_browser)
            self._record()


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (the per-start profile path is unique to this kiosk)."""
    needle = text.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
