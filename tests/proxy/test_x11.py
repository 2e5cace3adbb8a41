"""The proxy against a real x11vnc on a real Xvfb display: framebuffer, cut text on the X selection, passwords, CLI."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from proxy.eventlog import verify_log
from proxy.limits import SessionLimits
from proxy.server import RfbProxyServer
from proxy.session import UpstreamTarget
from proxy.vncserver import SAFE_TIGERVNC_PARAMS, SAFE_X11VNC_FLAGS
from tests.proxy.rfbtools import RfbClient, free_port, stop_process, wait_port, x11vnc_start, xvfb_start, xvnc_start

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("Xvfb", "x11vnc", "Xvnc", "xclip", "xsetroot")),
    reason="Xvfb, x11vnc, Xvnc, xclip and xsetroot are installed by scripts/setup.sh",
)

WIDTH, HEIGHT = 320, 240
FG, BG = (0xFF, 0x40, 0x00), (0x00, 0x30, 0xC0)


def pattern_bit(x: int, y: int) -> int:
    return 1 if ((x % 16) * 3 + (y % 16) * 5 + (x % 16) * (y % 16)) % 7 < 3 else 0


def write_xbm(path: Path) -> None:
    data = []
    for y in range(16):
        for byte in range(2):
            value = 0
            for bit in range(8):
                value |= pattern_bit(byte * 8 + bit, y) << bit  # XBM: least significant bit first
            data.append(f"0x{value:02x}")
    path.write_text("#define p_width 16\n#define p_height 16\nstatic unsigned char p_bits[] = {\n   "
                    + ", ".join(data) + "};\n")


@pytest.fixture(scope="module")
def display(tmp_path_factory: pytest.TempPathFactory):
    proc, name = xvfb_start(WIDTH, HEIGHT)
    try:
        xbm = tmp_path_factory.mktemp("x11") / "pattern.xbm"
        write_xbm(xbm)
        env = {**os.environ, "DISPLAY": name}
        subprocess.run(["xsetroot", "-bitmap", str(xbm), "-fg", "#%02x%02x%02x" % FG, "-bg", "#%02x%02x%02x" % BG],
                       env=env, check=True, timeout=10)
        yield name
    finally:
        stop_process(proc)


@pytest.fixture
def vnc(display: str, request: pytest.FixtureRequest):
    """x11vnc on the display; `extra` flags via indirect parametrisation, clipboard left on by default so that the
    proxy's own dropping is what the clipboard tests measure."""
    extra = getattr(request, "param", [])
    port = free_port()
    proc = x11vnc_start(display, port, list(extra))
    try:
        yield port
    finally:
        stop_process(proc)


def selection(display: str, which: str) -> bytes:
    result = subprocess.run(["xclip", "-o", "-selection", which], env={**os.environ, "DISPLAY": display},
                            capture_output=True, timeout=10)
    return result.stdout if result.returncode == 0 else b""


async def run_with_proxy(tmp_path: Path, upstream: UpstreamTarget, body, limits: SessionLimits | None = None):
    ended: list[tuple[Path, str]] = []
    server = RfbProxyServer(upstream, tmp_path / "sessions", limits or SessionLimits(),
                            on_session_end=lambda s, reason: ended.append((s.dir, reason)))
    port = await server.start("127.0.0.1", 0)
    try:
        result = await body(port)
        async with asyncio.timeout(5):
            while not ended:
                await asyncio.sleep(0.01)
    finally:
        await server.close()
    return result, ended[0]


def expected_pixel(x: int, y: int) -> tuple[int, int, int]:
    return FG if pattern_bit(x, y) else BG


@pytest.mark.parametrize("encoding", [0, 6], ids=["raw", "zlib"])
def test_framebuffer_through_proxy_matches_screen(tmp_path: Path, vnc: int, encoding: int) -> None:
    async def fetch(port: int) -> tuple[bytes, tuple[int, int]]:
        client = RfbClient()
        await client.connect(port, encodings=(encoding,))
        await client.request(incremental=False)
        await client.read_update()
        await client.close()
        return bytes(client.fb), (client.width, client.height)

    (proxied, size), (session_dir, _) = asyncio.run(run_with_proxy(tmp_path, UpstreamTarget("127.0.0.1", vnc),
                                                                   fetch))
    direct, _ = asyncio.run(fetch(vnc))
    assert size == (WIDTH, HEIGHT)
    assert proxied == direct
    wrong = [(x, y) for y in range(0, HEIGHT, 3) for x in range(0, WIDTH, 3)
             if tuple(proxied[(y * WIDTH + x) * 4 + i] for i in (2, 1, 0)) != expected_pixel(x, y)]
    assert not wrong, wrong[:5]
    assert verify_log(session_dir / "events.jsonl").ok


def test_zrle_and_tight_framed_identically(tmp_path: Path, vnc: int) -> None:
    """The proxy frames ZRLE and Tight without decoding them: for a static screen the bytes must match direct."""

    async def raw_stream(port: int, encodings: tuple[int, ...]) -> bytes:
        client = RfbClient()
        await client.connect(port, encodings=encodings)
        await client.request(incremental=False)
        data = b""
        try:
            while True:
                data += await asyncio.wait_for(client.reader.read(1 << 20), 0.5)
        except asyncio.TimeoutError:
            pass
        await client.close()
        return data

    for encodings in ((16,), (7, -256 + 6, -32 + 5)):
        proxied, (session_dir, reason) = asyncio.run(run_with_proxy(
            tmp_path / str(encodings[0]), UpstreamTarget("127.0.0.1", vnc), lambda p: raw_stream(p, encodings)))
        direct = asyncio.run(raw_stream(vnc, encodings))
        assert len(direct) > 100
        assert proxied == direct
        assert reason == "client closed"


@pytest.fixture
def xvnc(request: pytest.FixtureRequest):
    """Xvnc with the clipboard parameters given by indirect parametrisation; yields (port, display)."""
    port = free_port()
    proc, name = xvnc_start(port, list(request.param))
    try:
        yield port, name
    finally:
        stop_process(proc)


LEAKY_TIGERVNC = ["-AcceptCutText=1", "-SendCutText=1", "-SendPrimary=1", "-SetPrimary=1"]


async def send_cut(port: int, text: bytes, display: str) -> list[bytes]:
    """Send cut text and read both X selections while still connected (Xvnc lets go of a selection that a client
    set once that client leaves)."""
    client = RfbClient()
    await client.connect(port)
    await client.request()
    await client.read_update()
    await client.cut_text(text)
    await asyncio.sleep(0.5)
    seen = [await asyncio.to_thread(selection, display, which) for which in ("primary", "clipboard")]
    await client.close()
    return seen


async def watch_cut(port: int, seconds: float = 2.0) -> list[bytes]:
    client = RfbClient()
    await client.connect(port)
    await client.request()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline and not client.cut_texts:
        await client.request(incremental=True)
        try:
            await asyncio.wait_for(client.read_message(), 0.3)
        except asyncio.TimeoutError:
            pass
    await client.close()
    return client.cut_texts


def own_selection(display: str, text: bytes) -> subprocess.Popen:
    owner = subprocess.Popen(["xclip", "-i", "-selection", "clipboard", "-quiet"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "DISPLAY": display})
    assert owner.stdin is not None
    owner.stdin.write(text)
    owner.stdin.close()
    time.sleep(0.3)
    return owner


@pytest.mark.parametrize("xvnc", [LEAKY_TIGERVNC], indirect=True)
def test_cut_text_never_crosses_the_proxy(tmp_path: Path, xvnc: tuple[int, str]) -> None:
    """The VNC server here exchanges the clipboard, so only the proxy stands in the way; direct connections are the
    positive control showing that the checks would see a leak."""
    port, display = xvnc
    proxy_secret = b"proxied-secret-%d" % time.time_ns()
    direct_secret = b"direct-control-%d" % time.time_ns()
    x_secret = b"x-selection-secret-%d" % time.time_ns()

    seen, _ = asyncio.run(run_with_proxy(tmp_path / "c2s", UpstreamTarget("127.0.0.1", port),
                                         lambda p: send_cut(p, proxy_secret, display)))
    assert all(proxy_secret not in text for text in seen)
    assert any(direct_secret in text for text in asyncio.run(send_cut(port, direct_secret, display)))

    owners: list[subprocess.Popen] = []

    async def both() -> tuple[list[bytes], tuple[list[bytes], tuple[Path, str]]]:
        # Xvnc announces selection changes, so the selection changes after both clients are connected
        proxied = asyncio.create_task(run_with_proxy(tmp_path / "s2c", UpstreamTarget("127.0.0.1", port),
                                                     lambda p: watch_cut(p, 3.0)))
        direct = asyncio.create_task(watch_cut(port, 3.0))
        await asyncio.sleep(0.7)
        owners.append(await asyncio.to_thread(own_selection, display, x_secret))
        return await direct, await proxied

    try:
        direct_cuts, (proxied_cuts, (session_dir, _)) = asyncio.run(both())
    finally:
        for owner in owners:
            stop_process(owner)
    assert any(x_secret in text for text in direct_cuts)  # positive control: the server did send it
    assert proxied_cuts == []
    log = [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]
    dropped = [e for e in log if e["event"] == "cut_text_dropped" and e["direction"] == "server_to_client"]
    assert dropped, "the server sent the selection to the proxy, which must have logged dropping it"
    assert x_secret.decode() not in (session_dir / "events.jsonl").read_text()
    assert x_secret not in (session_dir / "screen.rfbrec").read_bytes()


@pytest.mark.parametrize("xvnc", [list(SAFE_TIGERVNC_PARAMS)], indirect=True)
def test_safe_server_parameters_keep_selection_untouched(xvnc: tuple[int, str]) -> None:
    """Second layer: the server configured as the enclave configures it exchanges nothing even without the proxy."""
    port, display = xvnc
    secret = b"params-secret-%d" % time.time_ns()
    assert all(secret not in text for text in asyncio.run(send_cut(port, secret, display)))
    owners: list[subprocess.Popen] = []

    async def watch_while_owned() -> list[bytes]:
        watcher = asyncio.create_task(watch_cut(port, 2.0))
        await asyncio.sleep(0.5)
        owners.append(await asyncio.to_thread(own_selection, display, b"x-" + secret))
        return await watcher

    try:
        assert asyncio.run(watch_while_owned()) == []
    finally:
        for owner in owners:
            stop_process(owner)


def test_upstream_vnc_password(tmp_path: Path, display: str) -> None:
    passfile = tmp_path / "passwd"
    subprocess.run(["x11vnc", "-storepasswd", "s3cret-pw", str(passfile)], check=True, capture_output=True,
                   timeout=10)
    port = free_port()
    proc = x11vnc_start(display, port, list(SAFE_X11VNC_FLAGS), password_file=str(passfile))
    try:
        async def fetch(p: int) -> tuple[int, int]:
            client = RfbClient()
            await client.connect(p)
            await client.request()
            await client.read_update()
            await client.close()
            return client.pixel(0, 0)

        pixel, (_, reason) = asyncio.run(run_with_proxy(tmp_path / "ok", UpstreamTarget(
            "127.0.0.1", port, password=b"s3cret-pw"), fetch))
        assert pixel == expected_pixel(0, 0)

        async def refused(p: int) -> bytes:
            """The client's part of the handshake completes (the proxy opens the upstream only then), and then the
            connection closes without a ServerInit."""
            reader, writer = await asyncio.open_connection("127.0.0.1", p)
            writer.write(b"RFB 003.008\n\x01\x01")
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return data

        data, (session_dir, reason) = asyncio.run(run_with_proxy(tmp_path / "bad", UpstreamTarget(
            "127.0.0.1", port, password=b"wrong"), refused))
        assert data == b"RFB 003.008\n\x01\x01\0\0\0\0" and "authentication failed" in reason
        assert verify_log(session_dir / "events.jsonl").ok
    finally:
        stop_process(proc)


def test_safeshare_proxy_command(tmp_path: Path, vnc: int) -> None:
    port = free_port()
    sessions = tmp_path / "sessions"
    policy = Path(__file__).resolve().parents[2] / "policies" / "examples" / "recipient-demo.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "safeshare.cli", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
         f"127.0.0.1:{vnc}", "--sessions", str(sessions), "--limits", str(policy)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "listening on" in proc.stdout.readline()
        wait_port(port, 10, proc)  # the probe connection is a (short) session of its own

        async def fetch() -> tuple[int, int, int]:
            client = RfbClient()
            await client.connect(port)
            await client.request()
            await client.read_update()
            await client.close()
            return client.pixel(5, 5)

        assert asyncio.run(fetch()) == expected_pixel(5, 5)
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    folders = [Path(line.split()[2]) for line in out.splitlines()
               if line.startswith("session ") and " ended: " not in line]
    assert len(folders) == 2 and all(folder.is_dir() for folder in folders)
    session = folders[-1]
    meta = json.loads((session / "meta.json").read_text())
    assert meta["recipient"] == "demo-researcher" and meta["limits"]["keys"]["rate"] == 10
    assert verify_log(session / "events.jsonl").ok


def test_proxy_command_bad_input(tmp_path: Path) -> None:
    from safeshare.cli import main

    assert main(["proxy", "--listen", "nope", "--upstream", "127.0.0.1:5900", "--sessions", str(tmp_path)]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipient: x\nlimits:\n  keys:\n    rats: 3\n")
    assert main(["proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:5900", "--sessions", str(tmp_path),
                 "--limits", str(bad)]) == 2
    assert main(["proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:5900", "--sessions", str(tmp_path),
                 "--capture-filter", "tcp"]) == 2  # a filter without an interface


# --- keyboard input as the X server sees it -------------------------------------------------------------------------

XKEYS = Path(__file__).with_name("xkeys.py")


class XKeyWatcher:
    """Key events on the display's root window, as reported by tests/proxy/xkeys.py (see there)."""

    def __init__(self, display: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(XKEYS), "listen", display], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        self.events: list[tuple[str, int, int, int]] = []  # (press|release, keysym, X time ms, monotonic ns)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, keysym, xtime, mono = line.split()
            self.events.append((kind, int(keysym), int(xtime), int(mono)))

    def wait_for_press(self, keysym: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e[0] == "press" and e[1] == keysym for e in self.events):
            assert time.monotonic() < deadline, f"keysym {keysym:#x} never reached the X server"
            time.sleep(0.02)

    def presses(self, keysym: int | None = None) -> list[tuple[str, int, int, int]]:
        return [e for e in list(self.events) if e[0] == "press" and (keysym is None or e[1] == keysym)]

    def stop(self) -> None:
        stop_process(self.proc)
        self._thread.join(5)


def held_keys(display: str) -> list[int]:
    out = subprocess.run([sys.executable, str(XKEYS), "held", display], capture_output=True, text=True, check=True,
                         timeout=10).stdout
    return [int(code) for code in out.split()]


@pytest.fixture
def keys_seen(display: str):
    watcher = XKeyWatcher(display)
    try:
        yield watcher
    finally:
        watcher.stop()


@pytest.fixture
def safe_vnc(display: str):
    """x11vnc configured as the enclave configures it (clipboard off)."""
    port = free_port()
    proc = x11vnc_start(display, port, list(SAFE_X11VNC_FLAGS))
    try:
        yield port
    finally:
        stop_process(proc)


KEY_A, KEY_Z = 0x61, 0x7A


def test_key_flood_reaches_x_at_the_configured_rate(tmp_path: Path, display: str, safe_vnc: int,
                                                    keys_seen: XKeyWatcher) -> None:
    """1,000 key presses (each with its release) within one second through the proxy to x11vnc: the X server sees the
    burst and then the configured rate, exactly the presses the log says were forwarded; every release passes, no
    key stays down, and each dropped press is logged."""
    limits = SessionLimits.model_validate({"keys": {"rate": 10, "burst": 30}})
    timing: dict[str, float] = {}

    async def flood(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        start = time.monotonic()
        for i in range(1000):
            client.writer.write(struct.pack(">BBxxI", 4, 1, KEY_A) + struct.pack(">BBxxI", 4, 0, KEY_A))
            await client.writer.drain()
            if (delay := start + (i + 1) / 1000 - time.monotonic()) > 0:
                await asyncio.sleep(delay)
        timing["elapsed"] = time.monotonic() - start
        await asyncio.sleep(0.3)  # a few tokens come back for the sentinel
        await client.key(KEY_Z, True)
        await client.key(KEY_Z, False)
        await asyncio.to_thread(keys_seen.wait_for_press, KEY_Z)
        await client.close()

    _, (session_dir, reason) = asyncio.run(run_with_proxy(tmp_path, UpstreamTarget("127.0.0.1", safe_vnc), flood,
                                                          limits))
    assert reason == "client closed"
    log = [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]
    forwarded = [e for e in log if e["event"] == "key" and e["keysym"] == KEY_A]
    forwarded_presses = [e for e in forwarded if e["down"]]
    dropped = [e for e in log if e["event"] == "key_dropped"]
    assert sum(1 for e in forwarded if not e["down"]) == 1000  # all releases pass
    assert len(dropped) + len(forwarded_presses) == 1000
    assert all(e["keysym"] == KEY_A and e["name"] == "a" and e["limit"] == "keys" for e in dropped)

    x_presses = keys_seen.presses(KEY_A)
    assert len(x_presses) == len(forwarded_presses)  # what the log says is what X got
    assert 30 <= len(x_presses) <= 30 + 10 * timing["elapsed"] + 2, (len(x_presses), timing)
    after_burst = x_presses[30:]
    assert len(after_burst) >= 5
    span = (after_burst[-1][2] - after_burst[0][2]) / 1000  # X server timestamps, ms
    assert (len(after_burst) - 1) / span <= 10 * 1.25, (len(after_burst), span)
    assert held_keys(display) == []  # nothing stuck
    assert verify_log(session_dir / "events.jsonl").ok


def test_blocked_shortcuts_never_reach_x(tmp_path: Path, display: str, safe_vnc: int,
                                        keys_seen: XKeyWatcher) -> None:
    ctrl, shift, alt = 0xFFE3, 0xFFE1, 0xFFE9
    key_n, key_i, f4, f12, key_t = 0x6E, 0x49, 0xFFC1, 0xFFC9, 0x74
    combos = [(ctrl, True), (key_n, True), (key_n, False), (ctrl, False),  # Ctrl+N
              (ctrl, True), (shift, True), (key_i, True), (key_i, False), (shift, False), (ctrl, False),  # Ctrl+Shift+I
              (alt, True), (f4, True), (f4, False), (alt, False),  # Alt+F4
              (f12, True), (f12, False),  # F12
              (ctrl, True), (key_t, True), (key_t, False), (ctrl, False)]  # Ctrl+T

    async def send(port: int, keys: list[tuple[int, bool]]) -> None:
        client = RfbClient()
        await client.connect(port)
        for keysym, down in keys:
            await client.key(keysym, down)
        await client.key(KEY_Z, True)
        await client.key(KEY_Z, False)
        await asyncio.to_thread(keys_seen.wait_for_press, KEY_Z)
        await client.close()

    # positive control: the same keys sent directly do reach the X server
    asyncio.run(send(safe_vnc, combos))
    direct = {keysym for _, keysym, _, _ in keys_seen.presses()}
    assert {key_n, ord("i"), f4, f12, key_t} <= direct
    keys_seen.events.clear()

    _, (session_dir, _) = asyncio.run(run_with_proxy(tmp_path, UpstreamTarget("127.0.0.1", safe_vnc),
                                                     lambda port: send(port, combos + [(key_n, True),
                                                                                       (key_n, False)])))
    proxied = [keysym for _, keysym, _, _ in keys_seen.presses()]
    assert {key_i, ord("i"), f4, f12, key_t}.isdisjoint(proxied)
    assert proxied.count(key_n) == 1 and proxied.index(key_n) > proxied.index(0xFFE9)  # only the plain n at the end
    log = [json.loads(line) for line in (session_dir / "events.jsonl").read_text().splitlines()]
    assert [e["shortcut"] for e in log if e["event"] == "key_blocked"] == ["Ctrl+N", "Ctrl+Shift+I", "Alt+F4", "F12",
                                                                           "Ctrl+T"]
    assert held_keys(display) == []


def test_real_session_log_verifies_and_a_changed_line_is_detected(tmp_path: Path, safe_vnc: int) -> None:
    async def session(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        await client.request()
        await client.read_update()
        for keysym in b"ok":
            await client.key(keysym, True)
            await client.key(keysym, False)
        await client.pointer(1, 10, 10)
        await client.pointer(0, 10, 10)
        await client.cut_text(b"not for the enclave")
        await asyncio.sleep(0.2)
        await client.close()

    _, (session_dir, _) = asyncio.run(run_with_proxy(tmp_path, UpstreamTarget("127.0.0.1", safe_vnc), session))
    path = session_dir / "events.jsonl"
    assert verify_log(path).ok
    lines = path.read_text().splitlines(keepends=True)
    kinds = [json.loads(line)["event"] for line in lines]
    assert {"connect", "upstream_ready", "client_ready", "key", "pointer", "cut_text_dropped", "disconnect",
            "seal"} <= set(kinds)
    target = kinds.index("pointer")
    lines[target] = lines[target].replace('"x":10', '"x":11')
    path.write_text("".join(lines))
    broken = verify_log(path)
    assert not broken.ok and broken.bad_line == target + 1  # the altered line itself (1-based)
    from safeshare.cli import main

    assert main(["verify-session", str(session_dir)]) == 1
