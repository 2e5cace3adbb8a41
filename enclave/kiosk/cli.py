"""`safeshare kiosk`: run the kiosk in the foreground until Ctrl+C or SIGTERM.

Prints one JSON line with the VNC endpoint (what `safeshare proxy --upstream ... --upstream-password-file ...`
needs) once the browser window is up, then `stopped` after a clean shutdown. Exit codes follow DESIGN.md: 0 after a
clean stop, 1 when the kiosk could not be started safely (it refuses rather than running with a control missing),
2 for bad input.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from enclave.kiosk.ready import FAILED, READY, STOPPED, event_line
from safeshare.endpoints import port_number
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _config(args: argparse.Namespace):  # -> KioskConfig
    from enclave.kiosk.config import DEFAULT_SIZE, KioskConfig, parse_size, size_from_policy, watermark_settings

    size = None
    if args.size:
        size = parse_size(args.size)
    elif args.policy:
        size = size_from_policy(Path(args.policy))
    width, height = size or DEFAULT_SIZE
    watermark = watermark_settings(Path(args.policy) if args.policy else None, args.recipient, args.watermark)
    return KioskConfig(app_url=args.url, state_dir=Path(args.state), width=width, height=height,
                       network=args.network, vnc_port=args.vnc_port,
                       vnc_listen=args.vnc_listen,
                       vnc_password_file=Path(args.vnc_password_file) if args.vnc_password_file else None,
                       log_dir=Path(args.logs) if args.logs else None,
                       chromium=args.chromium, app_title=args.app_title, app_wait=args.app_wait,
                       watermark=watermark)


async def _serve(config) -> int:  # config: KioskConfig
    from enclave.kiosk.kiosk import Kiosk

    kiosk = Kiosk(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    start = asyncio.create_task(kiosk.start())
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([start, waiter], return_when=asyncio.FIRST_COMPLETED)
        if not start.done():  # asked to stop while starting
            start.cancel()
            await asyncio.gather(start, return_exceptions=True)
            return EXIT_OK
        endpoint = start.result()
        print(event_line(READY, **endpoint.as_dict()), flush=True)
        failed = asyncio.create_task(kiosk.failed.wait())
        await asyncio.wait([waiter, failed], return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()
        if kiosk.failure is not None:
            print(event_line(FAILED, reason=kiosk.failure), flush=True)
            return EXIT_REFUSED
        return EXIT_OK
    finally:
        waiter.cancel()
        await kiosk.stop()
        print(event_line(STOPPED), flush=True)


def cmd_kiosk(args: argparse.Namespace) -> int:
    from enclave.kiosk.browser_policy import BrowserPolicyError
    from enclave.kiosk.config import KioskConfigError

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = _config(args)
    except (KioskConfigError, OSError) as exc:
        print(f"safeshare kiosk: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return asyncio.run(_serve(config))
    except (KioskConfigError, BrowserPolicyError) as exc:
        print(f"safeshare kiosk: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # could not start safely: refuse
        print(f"safeshare kiosk: not started: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return EXIT_REFUSED


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "kiosk", help="run the locked-down kiosk browser (Xvfb, x11vnc, Chromium) in the foreground",
        description="Start Xvfb, a password-protected x11vnc (clipboard off) and Chromium in kiosk mode on the app "
                    "URL with managed policies, a window watchdog, a screen watermark (on unless the recipient policy "
                    "switches it off) and network isolation; print the VNC endpoint as JSON; stop everything on "
                    "Ctrl+C or SIGTERM.")
    p.add_argument("--url", required=True, help="the analytics app URL, http://HOST:PORT/ (the only allowed origin)")
    p.add_argument("--state", required=True, help="folder for the VNC socket, password file and logs")
    p.add_argument("--size", help="screen size WIDTHxHEIGHT (default: the policy's `screen`, else 1280x800)")
    p.add_argument("--policy", help="recipient policy YAML: its `screen:` sets the size, its `recipient` and "
                                    "`watermark:` the screen watermark")
    p.add_argument("--recipient", help="the recipient the screen watermark names (default: the policy's)")
    p.add_argument("--watermark", metavar="JSON",
                   help="the recipient policy's `watermark` setting as JSON, e.g. '{\"enabled\": false}' (default: "
                        "the policy's; without either, on: a faint tiled stamp of the recipient, this kiosk's id and "
                        "the UTC time over the whole screen, outside the browser's reach)")
    p.add_argument("--network", choices=("auto", "netns", "proxy"), default="auto",
                   help="how the browser is kept to the app: its own network namespace (needs root; auto uses it "
                        "when possible) or a refusing proxy for every other request")
    p.add_argument("--vnc-port", type=port_number, help="serve VNC on 127.0.0.1:PORT instead of a Unix socket")
    p.add_argument("--vnc-listen", default="127.0.0.1",
                   help="with --vnc-port: address to listen on (in a container, where only the gateway can reach "
                        "the enclave network; default 127.0.0.1)")
    p.add_argument("--vnc-password-file", help="use this VNC password instead of a fresh one (shared with the "
                                               "gateway when they run in separate containers)")
    p.add_argument("--app-wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to SECONDS for the app to answer before opening the browser (containers that start "
                        "together; default 0: it must answer now)")
    p.add_argument("--app-title", help="title prefix of the app's pages; another title makes the browser restart")
    p.add_argument("--logs", help="log folder (default STATE/logs)")
    p.add_argument("--chromium", help="path of the Chromium binary (default /usr/lib/chromium/chromium)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    p.set_defaults(func=cmd_kiosk)
