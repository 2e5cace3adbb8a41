"""Auditing: the recording's bytes per minute of active use, and the time to seek to the middle of a one-hour
session (target under 1 s), plus the one-off preparation of that hour and the bytes a browser fetches per seek.

    .venv/bin/python benchmarks/audit_bench.py [--active-seconds 60] [--hours 1]

Active use: x11vnc on Xvfb (1280x800) through the proxy with noVNC's encodings (Tight with JPEG quality 6, ZRLE,
CopyRect, Raw), the client requesting updates continuously while a third of the screen changes four times a second
(text-like blocks, as when scrolling tables) and a small region every 50 ms (typing, a cursor). The one-hour session
is synthetic (Raw updates written in the recording format: a typing-sized change every 0.5 s and a large one every
30 s), so that the seek figure does not depend on this machine recording for an hour.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from proxy.audit.player import prepare  # noqa: E402
from proxy.recording import HEADER, KIND_END, KIND_INIT, KIND_SERVER, MAGIC  # noqa: E402

PF = {"bits_per_pixel": 32, "depth": 24, "big_endian": 0, "true_colour": 1, "red_max": 255, "green_max": 255,
      "blue_max": 255, "red_shift": 16, "green_shift": 8, "blue_shift": 0}


def active_use(seconds: float, folder: Path) -> dict:
    from proxy.limits import SessionLimits
    from tests.proxy.rfbtools import RfbClient, free_port, stop_process, x11vnc_start, xvfb_start
    from tests.proxy.test_controls import proxied_session
    from tests.proxy.test_replay import put_image

    xvfb, display = xvfb_start(1280, 800)
    port = free_port()
    vnc = x11vnc_start(display, port, ["-nosel", "-noprimary", "-noclipboard", "-nosetclipboard"])
    rng = np.random.default_rng(1)
    glyphs = (rng.random((400, 1280)) > 0.82).astype(np.uint8) * 200 + 30

    async def body(proxy_port: int) -> None:
        client = RfbClient()
        await client.connect(proxy_port, (7, -26, 16, 1, 0))

        async def drain() -> None:
            while True:
                if not await client.reader.read(1 << 20):
                    return

        async def request() -> None:
            await client.request(False)
            while True:
                await asyncio.sleep(0.02)
                await client.request(True)

        tasks = [asyncio.create_task(drain()), asyncio.create_task(request())]
        started = time.monotonic()
        step = 0
        while time.monotonic() - started < seconds:
            step += 1
            if step % 5 == 0:
                rows = np.roll(glyphs, -7 * step, axis=0)[:260]
                block = np.repeat(rows[:, :, None], 3, axis=2).astype(np.uint8)
                await asyncio.to_thread(put_image, display, 0, 200, block)
            caret = np.full((18, 40, 3), (step * 37) % 255, np.uint8)
            await asyncio.to_thread(put_image, display, 100 + (step % 30) * 40, 600, caret)
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await client.close()

    try:
        session, _ = asyncio.run(proxied_session(folder, port, SessionLimits(), body))
    finally:
        stop_process(vnc)
        stop_process(xvfb)
    size = (session / "screen.rfbrec").stat().st_size
    return {"active_seconds": seconds, "recording_bytes": size,
            "recording_mb_per_minute": round(size / 1e6 / (seconds / 60), 2)}


def synthetic_hour(path: Path, hours: float, width: int = 1280, height: int = 800) -> None:
    rng = np.random.default_rng(2)

    def record(kind: int, seconds: float, payload: bytes) -> bytes:
        return HEADER.pack(kind, seconds, len(payload)) + payload

    def raw_update(x: int, y: int, w: int, h: int) -> bytes:
        pixels = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
        pixels[..., 3] = 0
        return struct.pack(">BxH", 0, 1) + struct.pack(">HHHHi", x, y, w, h, 0) + pixels.tobytes()

    with open(path, "wb") as out:
        out.write(MAGIC)
        out.write(record(KIND_INIT, 0.0, json.dumps({"width": width, "height": height, "pixel_format": PF,
                                                     "name": "bench", "protocol": "3.8"}).encode()))
        out.write(record(KIND_SERVER, 0.05, raw_update(0, 0, width, height)))
        total = int(hours * 3600 * 2)
        for n in range(1, total):
            t = n * 0.5
            if n % 60 == 0:
                payload = raw_update(0, 100, width, 500)
            else:
                payload = raw_update(int(rng.integers(0, width - 200)), int(rng.integers(0, height - 20)), 200, 20)
            out.write(record(KIND_SERVER, t, payload))
        out.write(record(KIND_END, total * 0.5, b'{"reason":"closed"}'))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--active-seconds", type=float, default=60.0)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--no-active", action="store_true", help="skip the live recording (needs Xvfb, x11vnc)")
    args = parser.parse_args()
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="audit-bench-", dir="/var/tmp") as tmp:
        tmp_path = Path(tmp)
        if not args.no_active:
            figures.update(active_use(args.active_seconds, tmp_path / "active"))
        session = tmp_path / "sessions" / "20260101T000000Z-bench000"
        session.mkdir(parents=True)
        synthetic_hour(session / "screen.rfbrec", args.hours)
        figures["synthetic_recording_mb"] = round((session / "screen.rfbrec").stat().st_size / 1e6, 1)
        started = time.perf_counter()
        player = prepare(session, tmp_path / "cache")
        figures["prepare_hour_s"] = round(time.perf_counter() - started, 1)
        figures["frames"] = len(player.frames)
        figures["keyframes"] = sum(frame[1] for frame in player.frames)
        figures["prepared_mb"] = round((player.folder / "frames.bin").stat().st_size / 1e6, 1)
        middle = player.index["duration"] / 2
        timings = []
        for offset in (0.0, 3.3, 7.7, 9.9):
            started = time.perf_counter()
            player.frame_at(middle + offset)
            timings.append(time.perf_counter() - started)
        first = player.keyframe_before(middle + 9.9)
        last = max(i for i, t in enumerate(player.index["frame_times"]) if t <= middle + 9.9)
        fetched = sum(frame[7] for frame in player.frames[first:last + 1])
        figures["seek_middle_s"] = {"median": round(sorted(timings)[len(timings) // 2], 3),
                                    "worst": round(max(timings), 3)}
        figures["seek_bytes_fetched_kb"] = round(fetched / 1e3, 1)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
