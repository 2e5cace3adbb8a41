"""`safeshare proxy`, `safeshare verify-session` and `safeshare gateway ...` subcommands.

Exit codes follow DESIGN.md: 0 success, 1 refused (a log that does not verify, an unknown token), 2 bad input.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from safeshare.endpoints import parse_host_port, read_vnc_password
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _read_password(path: str | None) -> bytes | None:
    return None if path is None else read_vnc_password(path)


def _load_limits(path: str | None):  # -> tuple[SessionLimits, recipient, release]
    from policies.recipient import load_recipient_policy
    from proxy.limits import SessionLimits

    if path is None:
        return SessionLimits(), None, None
    policy = load_recipient_policy(Path(path))
    return policy.limits, policy.recipient, policy.release


async def _run_until_signal(serve, close) -> None:
    """Serve until SIGINT/SIGTERM, then close every session so that each log gets its seal line."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(serve())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    await close()
    task.cancel()
    waiter.cancel()
    await asyncio.gather(task, waiter, return_exceptions=True)


def cmd_proxy(args: argparse.Namespace) -> int:
    from proxy.capture import CaptureConfig
    from policies.recipient import PolicyError
    from proxy.server import RfbProxyServer
    from proxy.transport import UpstreamTarget

    try:
        host, port = parse_host_port(args.listen)
        upstream = UpstreamTarget.parse(args.upstream, _read_password(args.upstream_password_file))
        limits, recipient, release = _load_limits(args.limits)
        if args.capture_filter and not args.capture_interface:
            raise ValueError("--capture-filter needs --capture-interface")
        capture = CaptureConfig(args.capture_interface, args.capture_filter) if args.capture_interface else None
    except (ValueError, OSError, PolicyError) as exc:
        print(f"safeshare proxy: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def started(session) -> None:
        print(f"session {session.session_id} {session.dir}", flush=True)

    def ended(session, reason: str) -> None:
        print(f"session {session.session_id} ended: {reason}", flush=True)

    server = RfbProxyServer(upstream, Path(args.sessions), limits, recipient=recipient, release=release,
                            on_session=started, on_session_end=ended, record=not args.no_record,
                            capture=capture)

    async def main() -> None:
        bound = await server.start(host, port)
        print(f"listening on {host}:{bound} -> {upstream.describe()}", flush=True)
        await _run_until_signal(server.serve_forever, server.close)

    asyncio.run(main())
    return EXIT_OK


def cmd_verify_session(args: argparse.Namespace) -> int:
    from proxy.eventlog import verify_log

    path = Path(args.path)
    from proxy.sessiondir import EVENTS

    log_path = path / EVENTS if path.is_dir() else path
    if not log_path.is_file():
        print(f"safeshare verify-session: no events log at {log_path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    result = verify_log(log_path)
    print(json.dumps(result.as_dict(), indent=2))
    return EXIT_OK if result.ok else EXIT_REFUSED


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("proxy", help="run the inspecting RFB proxy (no WebSocket side)",
                              description="Run the RFB proxy: clipboard dropped, input rate-limited and logged, "
                                          "screen recorded. Prints the session folder of each connection.")
    p.add_argument("--listen", required=True, help="HOST:PORT to listen on (security type None towards clients)")
    p.add_argument("--upstream", required=True, help="VNC server as HOST:PORT or unix:PATH")
    p.add_argument("--upstream-password-file", help="file holding the VNC password of the upstream server")
    p.add_argument("--sessions", required=True, help="directory for session folders")
    p.add_argument("--limits", help="recipient policy YAML whose `limits:` apply (defaults otherwise)")
    p.add_argument("--capture-interface", metavar="IFACE",
                   help="record the enclave's network with tcpdump on IFACE into each session folder (network.pcap); "
                        "a session does not start if the capture cannot")
    p.add_argument("--capture-filter", metavar="BPF", help="tcpdump filter expression for --capture-interface")
    p.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)  # benchmarks only
    p.set_defaults(func=cmd_proxy)

    v = subparsers.add_parser("verify-session", help="verify a session's hash-chained events log")
    v.add_argument("path", help="session folder or events.jsonl")
    v.set_defaults(func=cmd_verify_session)

    try:
        from proxy.gateway_cli import register as register_gateway
    except ImportError:  # gateway dependencies missing: the bare proxy still works
        return
    register_gateway(subparsers)
    from proxy.proxy_for_cli import register as register_proxy_for

    register_proxy_for(subparsers)
