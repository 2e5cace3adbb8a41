"""Kiosk benchmark: seconds from start to a ready kiosk, and the memory of Xvfb + x11vnc + Chromium.

    .venv/bin/python benchmarks/kiosk_bench.py [--url APP_URL] [--size 1280x800] [--runs 3] [--settle 5]

Without --url a one-page stand-in app is served locally (the analytics app's own memory is measured by its
benchmark; the enclave target is under 500 MB for Xvfb, VNC server, Chromium and app together). Memory is reported as
RSS summed over processes (overcounts pages the Chromium processes share) and as PSS (shared pages divided among
their users, the honest total).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from enclave.kiosk import Kiosk, KioskConfig  # noqa: E402
from enclave.kiosk.config import parse_size  # noqa: E402
from enclave.kiosk.xlib import XConnection  # noqa: E402

TITLE = "safeshare kiosk benchmark"
PAGE = (f"<!doctype html><title>{TITLE}</title><body style='background:#2a7ab0;font:20px sans-serif'>"
        "<h1>kiosk benchmark</h1><table>" + "".join(f"<tr><td>row {i}</td><td>{i * i}</td></tr>" for i in range(200))
        + "</table></body>").encode()


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


def _memory(pids: list[int]) -> tuple[float, float, int]:
    """(RSS MB, PSS MB, processes) over the pids that still exist."""
    rss = pss = 0
    count = 0
    for pid in set(pids):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        count += 1
        for line in text.splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
    return rss / 1024, pss / 1024, count


async def _one_run(url: str, width: int, height: int, settle: float, title: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="kiosk-bench-") as state:
        kiosk = Kiosk(KioskConfig(app_url=url, state_dir=Path(state), width=width, height=height, app_title=title))
        start = time.perf_counter()
        endpoint = await kiosk.start()
        window = time.perf_counter() - start
        loaded = float("nan")
        if title:
            assert kiosk.display is not None
            with XConnection(kiosk.display.name, kiosk.display.cookie) as conn:
                deadline = time.perf_counter() + 30
                while time.perf_counter() < deadline:
                    if any(w.title.startswith(title) for w in conn.top_levels() if w.viewable):
                        loaded = time.perf_counter() - start
                        break
                    await asyncio.sleep(0.02)
        await asyncio.sleep(settle)
        groups = kiosk.process_ids()
        result = {"window_s": window, "app_shown_s": loaded}
        total_rss = total_pss = 0.0
        for name, pids in groups.items():
            rss, pss, count = _memory(pids)
            result[f"{name}_rss_mb"], result[f"{name}_pss_mb"], result[f"{name}_procs"] = rss, pss, count
            total_rss += rss
            total_pss += pss
        result["total_rss_mb"], result["total_pss_mb"] = total_rss, total_pss
        result["network"] = endpoint.network  # type: ignore[assignment]
        await kiosk.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="app URL (default: a stand-in page served here)")
    parser.add_argument("--app-title", help="title prefix to wait for with --url")
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after start before measuring memory")
    args = parser.parse_args()
    width, height = parse_size(args.size)
    server = None
    url, title = args.url, args.app_title
    if url is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url, title = f"http://127.0.0.1:{server.server_address[1]}/", TITLE
    runs = [asyncio.run(_one_run(url, width, height, args.settle, title)) for _ in range(args.runs)]
    if server is not None:
        server.shutdown()
    print(f"kiosk benchmark: {args.size}, {args.runs} run(s), network {runs[0]['network']}")
    print(f"{'':24}{'median':>10}{'min':>10}{'max':>10}")
    keys = ["window_s", "app_shown_s"] + [f"{n}_{m}" for n in ("Xvfb", "x11vnc", "chromium") for m in
                                          ("rss_mb", "pss_mb", "procs")] + ["total_rss_mb", "total_pss_mb"]
    for key in keys:
        values = [float(r[key]) for r in runs]
        print(f"{key:24}{statistics.median(values):10.2f}{min(values):10.2f}{max(values):10.2f}")
    print("target: total under 500 MB together with the app (compare total_pss_mb plus the app's own)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
