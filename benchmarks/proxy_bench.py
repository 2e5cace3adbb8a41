"""RFB proxy benchmark: `safeshare proxy` (all controls on, screen recording on) against a direct connection.

    .venv/bin/python benchmarks/proxy_bench.py [--seconds 4] [--rounds 3] [--fps 30] [--events 1000] [--json]

1. Throughput on the real stack: Xvfb 1920x1080x24 whose whole screen a drawing client redraws `--fps` times a
   second (shifting colour patterns, XPutImage), x11vnc with the enclave's flags. An RFB client asks for the next
   incremental update as soon as one has arrived (as noVNC does) and counts updates per second and megabytes per
   second of FramebufferUpdate data, for Raw and ZRLE, direct and through the proxy, alternating, `--rounds` times.
2. Throughput bound by the proxy itself: a scripted server answers every request at once with a full-screen Raw
   update (8.3 MB), so nothing but the proxy's copying (and the client's reading) limits the rate.
3. Added latency per input event: the client sends KeyEvents 2 ms apart; a scripted server stamps their arrival with
   the system-wide monotonic clock; the proxy's addition is proxied minus direct, at the median and the 99th
   percentile. Then the same to the X server itself through x11vnc (tests/proxy/xkeys.py reports X's key events).

Every process runs on its own (client, proxy, server, X), as in production; the machine's core count is printed
because on a small machine they compete for the same cores.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from proxy import rfbframe  # noqa: E402
from proxy.rfb import PixelFormat  # noqa: E402
from proxy.vncserver import SAFE_X11VNC_FLAGS  # noqa: E402
from tests.proxy.rfbtools import free_port, stop_process, wait_port, xvfb_start  # noqa: E402

WIDTH, HEIGHT = 1920, 1080
PF_32 = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
BENCH_POLICY = """recipient: benchmark
limits:
  keys: {rate: 100000, burst: 100000}
  pointer: {motion_rate: 100000, click_rate: 100000, click_burst: 100000}
  blocked_shortcuts: []
"""


# --- an RFB client that frames but does not decode ------------------------------------------------------------------

class Client:
    async def connect(self, port: int, encodings: tuple[int, ...]) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        assert (await self.reader.readexactly(12)).startswith(b"RFB 003.")
        self.writer.write(b"RFB 003.008\n")
        (n,) = await self.reader.readexactly(1)
        assert 1 in await self.reader.readexactly(n), "server offers no security type None"
        self.writer.write(b"\x01")
        assert await self.reader.readexactly(4) == b"\0\0\0\0"
        self.writer.write(b"\x01")
        self.width, self.height = struct.unpack(">HH", await self.reader.readexactly(4))
        await self.reader.readexactly(16)
        (length,) = struct.unpack(">I", await self.reader.readexactly(4))
        await self.reader.readexactly(length)
        self.writer.write(b"\x00\x00\x00\x00" + PF_32)
        self.writer.write(struct.pack(f">BxH{len(encodings)}i", 2, len(encodings), *encodings))
        await self.writer.drain()
        self.framer = rfbframe.ServerFramer(PixelFormat.parse(PF_32), self.width, self.height, chunk=1 << 20)
        self.in_update = False

    def request(self, incremental: bool) -> None:
        self.writer.write(struct.pack(">BBHHHH", 3, int(incremental), 0, 0, self.width, self.height))

    async def read_update(self) -> int:
        """Read messages until a FramebufferUpdate has been read; return its size in bytes (framed by the proxy's own
        framer, in pieces, so an 8 MB Raw screen is never held whole)."""
        size = 0
        while True:
            for event in self.framer.events():
                if isinstance(event, rfbframe.FramebufferUpdate | rfbframe.Rectangle):
                    size += len(event.raw)
                elif isinstance(event, rfbframe.Data) and self.in_update:
                    size += len(event.data)
                if isinstance(event, rfbframe.FramebufferUpdate):
                    self.in_update = True
                elif isinstance(event, rfbframe.MessageEnd) and event.type == 0:
                    self.in_update = False
                    return size
            data = await self.reader.read(1 << 20)
            if not data:
                raise RuntimeError("the proxy closed the connection")
            self.framer.feed(data)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def throughput(port: int, encodings: tuple[int, ...], seconds: float) -> tuple[float, float]:
    """(updates per second, megabytes per second) with one request outstanding at a time."""
    client = Client()
    await client.connect(port, encodings)
    client.request(False)
    await client.read_update()  # the first, full update is not part of the steady state
    client.request(True)
    updates = total = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        size = await client.read_update()
        client.request(True)
        if size > 4:
            updates += 1
            total += size
    await client.close()
    return updates / elapsed, total / elapsed / 1e6


async def send_keys(port: int, count: int, gap: float, keysym_of) -> list[int]:
    """Send `count` key presses `gap` seconds apart; return their send times (monotonic ns)."""
    client = Client()
    await client.connect(port, (0,))
    sent = []
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    for i in range(count):
        next_at += gap
        await asyncio.sleep(max(0.0, next_at - loop.time()))
        down, keysym = keysym_of(i)
        data = struct.pack(">BBxxI", 4, down, keysym)
        sent.append(time.monotonic_ns())
        client.writer.write(data)
        await client.writer.drain()
    await asyncio.sleep(0.3)
    await client.close()
    return sent


# --- scripted servers (run as subprocesses of this file) ------------------------------------------------------------

async def _serve_rfb(port: int, on_client) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(b"RFB 003.008\n")
            await reader.readexactly(12)
            writer.write(b"\x01\x01")
            await reader.readexactly(1)
            writer.write(b"\0\0\0\0")
            await reader.readexactly(1)
            writer.write(struct.pack(">HH", WIDTH, HEIGHT) + PF_32 + struct.pack(">I", 5) + b"bench")
            await writer.drain()
            await on_client(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=1 << 22)
    print("ready", flush=True)
    await server.serve_forever()


async def _read_client_message(reader: asyncio.StreamReader, framer: rfbframe.ClientFramer) -> object:
    """The next whole client message (framed by the proxy's own framer, which keeps what it read beyond it)."""
    while True:
        for event in framer.events():
            if not isinstance(event, rfbframe.MessageEnd):
                return event
        data = await reader.read(1 << 16)
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
        framer.feed(data)


def frame_server(port: int) -> None:
    """Answers every FramebufferUpdateRequest at once with the whole screen in Raw."""
    frame = (struct.pack(">BxH", 0, 1) + struct.pack(">HHHHi", 0, 0, WIDTH, HEIGHT, 0)
             + bytes(range(256)) * (WIDTH * HEIGHT * 4 // 256))

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        framer = rfbframe.ClientFramer()
        while True:
            if isinstance(await _read_client_message(reader, framer), rfbframe.FramebufferUpdateRequest):
                writer.write(frame)
                await writer.drain()

    asyncio.run(_serve_rfb(port, on_client))


def key_server(port: int) -> None:
    """Prints "keysym monotonic_ns" for every key press as it arrives (not releases: the proxy releases every held key
    when a session ends, and that release must not overwrite the press's arrival time)."""

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        framer = rfbframe.ClientFramer()
        while True:
            message = await _read_client_message(reader, framer)
            if isinstance(message, rfbframe.KeyEvent) and message.down:
                stamp = time.monotonic_ns()
                print(message.keysym, stamp, flush=True)

    asyncio.run(_serve_rfb(port, on_client))


def screen_changer(display: str, fps: float) -> None:
    """Redraws the whole root window `fps` times a second with shifting colour patterns (XPutImage)."""
    import numpy as np

    lib = ctypes.CDLL(ctypes.util.find_library("X11") or "libX11.so.6")
    vp, ul, ci = ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int
    lib.XOpenDisplay.restype, lib.XOpenDisplay.argtypes = vp, [ctypes.c_char_p]
    lib.XDefaultScreen.argtypes = [vp]
    lib.XRootWindow.restype, lib.XRootWindow.argtypes = ul, [vp, ci]
    lib.XDefaultVisual.restype, lib.XDefaultVisual.argtypes = vp, [vp, ci]
    lib.XDefaultGC.restype, lib.XDefaultGC.argtypes = vp, [vp, ci]
    lib.XDefaultDepth.argtypes = [vp, ci]
    lib.XCreateImage.restype = vp
    lib.XCreateImage.argtypes = [vp, vp, ctypes.c_uint, ci, ci, ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ci, ci]
    lib.XPutImage.argtypes = [vp, ul, vp, vp, ci, ci, ci, ci, ctypes.c_uint, ctypes.c_uint]
    lib.XSync.argtypes = [vp, ci]
    dpy = lib.XOpenDisplay(display.encode())
    if not dpy:
        sys.exit(f"cannot open {display}")
    screen = lib.XDefaultScreen(dpy)
    root, visual, gc = lib.XRootWindow(dpy, screen), lib.XDefaultVisual(dpy, screen), lib.XDefaultGC(dpy, screen)
    depth = lib.XDefaultDepth(dpy, screen)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.uint32)
    buffers, images = [], []
    for k in range(8):  # bands, a checkerboard and a gradient that move from frame to frame
        r = ((x + 40 * k) // 24 % 2) * 200 + (y % 50)
        g = ((x // 16 + y // 16 + k) % 2) * 180 + (x + 13 * k) % 64
        b = (x * 255 // WIDTH + 31 * k) % 256
        data = ((r & 0xFF) << 16 | (g & 0xFF) << 8 | (b & 0xFF)).astype("<u4").tobytes()
        buffers.append(ctypes.create_string_buffer(data, len(data)))
        images.append(lib.XCreateImage(dpy, visual, depth, 2, 0, buffers[-1], WIDTH, HEIGHT, 32, 0))
    print("ready", flush=True)
    period, next_at, k = 1.0 / fps, time.monotonic(), 0
    while True:
        lib.XPutImage(dpy, root, gc, images[k % len(images)], 0, 0, 0, 0, WIDTH, HEIGHT)
        lib.XSync(dpy, 0)
        k += 1
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))


# --- orchestration ----------------------------------------------------------------------------------------------------

def spawn(args: list[str], env: dict[str, str] | None = None, ready: str | None = "ready",
          stdout=subprocess.PIPE) -> subprocess.Popen:
    proc = subprocess.Popen(args, stdout=stdout, stderr=subprocess.DEVNULL, text=True, env=env)
    if ready is not None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if ready not in line:
            stop_process(proc)
            raise RuntimeError(f"{args[:3]} did not start: {line!r}")
    return proc


def self_command(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *args]


RECORD = True


def start_proxy(upstream_port: int, workdir: Path, record: bool | None = None) -> tuple[subprocess.Popen, int]:
    policy = workdir / "bench-recipient.yaml"
    policy.write_text(BENCH_POLICY)
    port = free_port()
    proc = spawn([sys.executable, "-m", "safeshare.cli", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
                  f"127.0.0.1:{upstream_port}", "--sessions", str(workdir / "sessions"), "--limits", str(policy)]
                 + ([] if (RECORD if record is None else record) else ["--no-record"]), ready="listening on")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    return proc, port


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def latency_summary(sent: list[int], arrived: list[int]) -> dict[str, float]:
    ms = [(a - s) / 1e6 for s, a in zip(sent, arrived)]
    return {"median_ms": statistics.median(ms), "p99_ms": percentile(ms, 99), "events": len(ms)}


def bench_real_throughput(args, workdir: Path, results: dict) -> None:
    xvfb, display = xvfb_start(WIDTH, HEIGHT)
    env = {**os.environ, "DISPLAY": display}
    procs = [xvfb]
    try:
        procs.append(spawn(self_command("--changer", display, str(args.fps)), env=env))
        vnc_port = free_port()
        procs.append(subprocess.Popen(
            ["x11vnc", "-display", display, "-rfbport", str(vnc_port), "-localhost", "-shared", "-forever", "-quiet",
             "-nopw", "-nocursor", "-nocursorshape", "-nocursorpos", "-noxrecord", *SAFE_X11VNC_FLAGS],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        wait_port(vnc_port, 15, procs[-1])
        proxy, proxy_port = start_proxy(vnc_port, workdir)
        procs.append(proxy)
        for name, encodings in (("raw", (0,)), ("zrle", (16, 0))):
            runs: dict[str, list[tuple[float, float]]] = {"direct": [], "proxy": []}
            for _ in range(args.rounds):
                for path, port in (("direct", vnc_port), ("proxy", proxy_port)):
                    runs[path].append(asyncio.run(throughput(port, encodings, args.seconds)))
            results["x11vnc"][name] = {
                path: {"updates_per_s": statistics.median(r[0] for r in rs),
                       "mb_per_s": statistics.median(r[1] for r in rs), "runs": rs} for path, rs in runs.items()}
        # the latency of an input event to the X server itself, through x11vnc (screen still changing)
        watcher = spawn([sys.executable, str(REPO / "tests" / "proxy" / "xkeys.py"), "listen", display])
        procs.append(watcher)
        arrivals: list[tuple[int, int]] = []

        def collect() -> None:
            for line in watcher.stdout:  # type: ignore[union-attr]
                kind, keysym, _, stamp = line.split()
                if kind == "press":
                    arrivals.append((int(keysym), int(stamp)))

        threading.Thread(target=collect, daemon=True).start()
        keys = [0x61 + i % 26 for i in range(26)]

        def to_x() -> dict:
            out: dict = {}
            for path, port in (("direct", vnc_port), ("proxy", proxy_port)):
                arrivals.clear()
                sent = asyncio.run(send_keys(port, 2 * args.x_events, 0.01,
                                             lambda i: (1 - i % 2, keys[(i // 2) % 26])))[::2]
                time.sleep(0.3)
                got = list(arrivals)
                if len(got) != len(sent):
                    out[path] = {"error": f"{len(got)} of {len(sent)} presses reached X"}
                    continue
                out[path] = latency_summary(sent, [stamp for _, stamp in got])
            if "median_ms" in out.get("direct", {}) and "median_ms" in out.get("proxy", {}):
                out["added"] = {"median_ms": out["proxy"]["median_ms"] - out["direct"]["median_ms"],
                                "p99_ms": out["proxy"]["p99_ms"] - out["direct"]["p99_ms"]}
            return out

        results["latency_to_x"] = to_x()
        stop_process(procs[1])  # the screen changer: the same again on a still screen
        results["latency_to_x_still"] = to_x()
    finally:
        for proc in reversed(procs):
            stop_process(proc)


def bench_scripted(args, workdir: Path, results: dict) -> None:
    frame_port, key_port = free_port(), free_port()
    procs = [spawn(self_command("--frame-server", str(frame_port))),
             spawn(self_command("--key-server", str(key_port)))]
    try:
        frame_proxy, frame_proxy_port = start_proxy(frame_port, workdir)
        procs.append(frame_proxy)
        paths = [("direct", frame_port), ("proxy", frame_proxy_port)]
        if RECORD:  # the same without the recording's disk writes, to show what they cost
            unrecorded, unrecorded_port = start_proxy(frame_port, workdir, record=False)
            procs.append(unrecorded)
            paths.append(("no-rec", unrecorded_port))
        runs: dict[str, list[tuple[float, float]]] = {path: [] for path, _ in paths}
        for _ in range(args.rounds):
            for path, port in paths:
                runs[path].append(asyncio.run(throughput(port, (0,), args.seconds)))
        results["scripted_raw"] = {
            path: {"updates_per_s": statistics.median(r[0] for r in rs),
                   "mb_per_s": statistics.median(r[1] for r in rs), "runs": rs} for path, rs in runs.items()}

        key_proxy, key_proxy_port = start_proxy(key_port, workdir)
        procs.append(key_proxy)
        server = procs[1]
        arrivals: dict[int, int] = {}

        def collect() -> None:
            for line in server.stdout:  # type: ignore[union-attr]
                keysym, stamp = line.split()
                arrivals[int(keysym)] = int(stamp)

        threading.Thread(target=collect, daemon=True).start()
        samples: dict[str, list[float]] = {"direct": [], "proxy": []}
        base = 0x01000100
        for round_no in range(args.rounds):
            for path, port in (("direct", key_port), ("proxy", key_proxy_port)):
                arrivals.clear()
                offset = base + round_no * 2 * args.events + (args.events if path == "proxy" else 0)
                sent = asyncio.run(send_keys(port, args.events, 0.002, lambda i, o=offset: (1, o + i)))
                time.sleep(0.2)
                samples[path] += [(arrivals[offset + i] - s) / 1e6 for i, s in enumerate(sent)
                                  if offset + i in arrivals]
        out = {path: {"median_ms": statistics.median(v), "p99_ms": percentile(v, 99), "events": len(v)}
               for path, v in samples.items()}
        out["added"] = {"median_ms": out["proxy"]["median_ms"] - out["direct"]["median_ms"],
                        "p99_ms": out["proxy"]["p99_ms"] - out["direct"]["p99_ms"]}
        results["latency_scripted"] = out
    finally:
        for proc in reversed(procs):
            stop_process(proc)


def print_report(results: dict, args) -> None:
    print(f"proxy benchmark: {os.cpu_count()} cores, {args.seconds:g} s per run, median of {args.rounds} rounds, "
          f"proxy = safeshare proxy with recording {'on' if RECORD else 'off'}, sessions under "
          f"{args.sessions_parent or tempfile.gettempdir()}")

    def table(title: str, rows: dict) -> None:
        print(f"\n{title}")
        print(f"  {'encoding':<10}{'path':<8}{'updates/s':>11}{'MB/s':>10}{'of direct':>11}")
        for enc, paths in rows.items():
            for path, r in paths.items():
                share = r["mb_per_s"] / paths["direct"]["mb_per_s"] * 100 if paths["direct"]["mb_per_s"] else 0
                print(f"  {enc:<10}{path:<8}{r['updates_per_s']:>11.1f}{r['mb_per_s']:>10.1f}"
                      f"{(f'{share:.0f} %' if path != 'direct' else ''):>11}")

    if results.get("x11vnc"):
        table(f"x11vnc on Xvfb {WIDTH}x{HEIGHT}x24, whole screen redrawn {args.fps:g} times a second",
              results["x11vnc"])
    if results.get("scripted_raw"):
        table("scripted server, full-screen Raw update per request (proxy-bound; no-rec = proxy with --no-record)",
              {"raw": results["scripted_raw"]})

    def latency(title: str, out: dict) -> None:
        print(f"\n{title}")
        for path in ("direct", "proxy"):
            r = out.get(path, {})
            if "error" in r:
                print(f"  {path:<8}{r['error']}")
            elif r:
                print(f"  {path:<8}median {r['median_ms']:.3f} ms   p99 {r['p99_ms']:.3f} ms   ({r['events']} events)")
        if "added" in out:
            print(f"  {'added':<8}median {out['added']['median_ms']:+.3f} ms   p99 {out['added']['p99_ms']:+.3f} ms")

    if results.get("latency_scripted"):
        latency("KeyEvent, client -> scripted server (one way)", results["latency_scripted"])
    if results.get("latency_to_x"):
        latency("KeyEvent, client -> x11vnc -> X server KeyPress (one way, screen changing)",
                results["latency_to_x"])
    if results.get("latency_to_x_still"):
        latency("KeyEvent, client -> x11vnc -> X server KeyPress (one way, still screen)",
                results["latency_to_x_still"])


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] in ("--changer", "--frame-server", "--key-server"):
        role = sys.argv[1]
        if role == "--changer":
            screen_changer(sys.argv[2], float(sys.argv[3]))
        elif role == "--frame-server":
            frame_server(int(sys.argv[2]))
        else:
            key_server(int(sys.argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each throughput run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/proxy rounds")
    parser.add_argument("--fps", type=float, default=30.0, help="whole-screen redraws per second")
    parser.add_argument("--events", type=int, default=1000, help="key events per latency run (scripted server)")
    parser.add_argument("--x-events", type=int, default=400, help="key presses per latency run to the X server")
    parser.add_argument("--skip-x", action="store_true", help="only the scripted-server parts")
    parser.add_argument("--no-record", action="store_true", help="proxy without screen recording (for comparison)")
    parser.add_argument("--sessions-parent", help="where the proxy's session folders go (default: the temp dir); "
                                                  "e.g. /dev/shm to take the disk out of the recording's cost")
    parser.add_argument("--json", action="store_true", help="print the results as JSON as well")
    args = parser.parse_args()
    global RECORD
    RECORD = not args.no_record
    results: dict = {"cores": os.cpu_count(), "x11vnc": {}}
    with tempfile.TemporaryDirectory(prefix="proxy-bench-", dir=args.sessions_parent) as tmp:
        bench_scripted(args, Path(tmp), results)
        if not args.skip_x:
            bench_real_throughput(args, Path(tmp), results)
    print_report(results, args)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
