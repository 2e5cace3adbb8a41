"""`safeshare up`, `safeshare status`, `safeshare down`: the whole enclave as local processes.

Exit codes follow DESIGN.md: 0 after a clean stop, 1 refused (the gate failed, a component could not start safely or
failed while running, an enclave already runs from that home), 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path

from safeshare.endpoints import port_number
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _home_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", help="folder for logs, releases, sessions and state, laid out like a site: the "
                                       "release key in HOME/keys, the trust store HOME/trust.json (default: "
                                       "$SAFESHARE_HOME or ./.safeshare)")


def _home(args: argparse.Namespace) -> Path:
    from deploy.local import default_home

    return Path(args.home).resolve() if args.home else default_home()


def cmd_up(args: argparse.Namespace) -> int:
    from deploy.children import ComponentFailed
    from deploy.local import AlreadyRunning, LocalEnclave, UpConfig, install_stop_signals
    from engine.bundle import BundleError
    from engine.deid import NoSolutionError
    from engine.errors import InputError
    from policies.recipient import PolicyError
    from proxy.tokens import parse_ttl
    from safeshare.signing import KeyFileError
    from safeshare.sitedb import SiteDatabaseError

    def say(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    try:
        config = UpConfig(home=_home(args), policy=Path(args.policy).resolve(),
                          recipient_policy=Path(args.recipient_policy).resolve(), gateway_listen=args.listen,
                          app_port=args.app_port, size=args.size, network=args.network, db_url=args.db,
                          token_ttl=parse_ttl(args.ttl) if args.ttl else timedelta(hours=8),
                          review_listen=args.review_listen)
        from safeshare.endpoints import parse_host_port

        review_host, review_port = parse_host_port(args.review_listen)
        config.review_listen = f"{review_host}:{review_port}"  # --review-listen :8070 is 127.0.0.1:8070
        for path in (config.policy, config.recipient_policy):
            if not path.is_file():
                raise ValueError(f"{path}: no such file")
    except ValueError as exc:
        print(f"safeshare up: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    enclave = LocalEnclave(config, say)
    install_stop_signals(enclave)
    code = EXIT_OK
    try:
        ready = enclave.start()
    except (InputError, PolicyError, KeyFileError, SiteDatabaseError) as exc:  # HOME's keys, trust or db unusable
        print(f"safeshare up: {exc}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    except (BundleError, NoSolutionError, AlreadyRunning, ComponentFailed) as exc:
        print(f"safeshare up: refused: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    except KeyboardInterrupt:
        code = EXIT_OK
    except Exception as exc:  # anything unexpected while starting: stop what started, never run half an enclave
        print(f"safeshare up: not started: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    else:
        if args.json:
            print(json.dumps(ready.as_dict()), flush=True)
        else:
            say(f"\nready in {ready.seconds:.1f} s. Researcher URL (give it to {ready.recipient} only):\n\n"
                f"    {ready.url}\n\nreleased outputs: {ready.gateway.rstrip('/')}/outputs (same token)   "
                f"checkers' review pages: {ready.review}\n"
                f"logs: {config.home / 'logs'}   sessions: {config.home / 'sessions'}\n"
                f"`safeshare status` shows what runs; Ctrl+C stops everything.")
        enclave.supervise()
        if enclave.failure:
            print(f"safeshare up: stopping everything: {enclave.failure}", file=sys.stderr, flush=True)
            code = EXIT_REFUSED
    strays = enclave.stop()
    if strays:
        print(f"safeshare up: stopped {len(strays)} leftover process(es): {strays}", file=sys.stderr)
    if args.json:
        print(json.dumps({"event": "stopped", "exit": code}), flush=True)
    else:
        say("stopped")
    return code


def cmd_status(args: argparse.Namespace) -> int:
    from deploy.local import status

    report = status(_home(args))
    if args.json:
        print(json.dumps(report, indent=2))
    elif not report["running"]:
        print(f"nothing runs from {report['home']}")
    else:
        print(f"enclave from {report['home']} (pid {report['pid']}, since {report['started_at']}): "
              f"{'healthy' if report['healthy'] else 'DEGRADED'}")
        print(f"  release    {report['release']}")
        print(f"  recipient  {report['recipient']} (token id {report['token_id']})")
        print(f"  gateway    {report['gateway']}")
        print(f"  app        {report['app']} (reachable only from this machine and the kiosk)")
        if report.get("review"):
            print(f"  review     {report['review']} (checkers sign in: safeshare custodian person add)")
        for name, info in report["components"].items():
            answers = {True: ", answers", False: ", DOES NOT ANSWER"}.get(info.get("answers"), "")
            print(f"  {name:<10} pid {info['pid']} {'running' if info['alive'] else 'GONE'}{answers}   {info['log']}")
    return EXIT_OK if report["running"] and report.get("healthy") else EXIT_REFUSED


def cmd_down(args: argparse.Namespace) -> int:
    from deploy.local import down

    home = _home(args)
    if down(home):
        print(f"stopped the enclave of {home}")
        return EXIT_OK
    print(f"nothing runs from {home}", file=sys.stderr)
    return EXIT_REFUSED


def register(subparsers: argparse._SubParsersAction) -> None:
    from deploy.local import DEFAULT_POLICY, DEFAULT_RECIPIENT

    up = subparsers.add_parser(
        "up", help="run the whole enclave on this machine: de-identify, seal, app, kiosk, gateway; Ctrl+C stops",
        description="De-identify the demo table with the dataset policy, seal the release (refused if its gate "
                    "fails), start the analytics app, the kiosk and the gateway with the inspecting RFB proxy, "
                    "issue a token for the recipient and print the researcher URL. The airlock runs too: the "
                    "intake over the app's workspace (HOME/app) into HOME/airlock, the custodian service's review "
                    "pages for checkers (--review-listen), and released packages at the gateway's /outputs. "
                    "Ctrl+C stops everything.")
    _home_arg(up)
    up.add_argument("--policy", default=str(DEFAULT_POLICY), help="dataset policy (default: the ADULT example)")
    up.add_argument("--recipient-policy", default=str(DEFAULT_RECIPIENT),
                    help="recipient policy: recipient, expiry, session limits (default: the demo recipient)")
    up.add_argument("--listen", default="127.0.0.1:6080", help="gateway HOST:PORT (default 127.0.0.1:6080)")
    up.add_argument("--app-port", type=port_number, default=0, help="app port on 127.0.0.1 (default: a free port)")
    up.add_argument("--size", help="kiosk screen WIDTHxHEIGHT (default 1280x800)")
    up.add_argument("--network", choices=("auto", "netns", "proxy"), default="auto",
                    help="how the kiosk browser is kept to the app (see `safeshare kiosk --help`)")
    up.add_argument("--db", help="SQLAlchemy URL of the token database (default: SQLite in HOME/db, as at a site)")
    up.add_argument("--ttl", help="lifetime of the researcher's token, e.g. 30m, 8h (default 8h)")
    up.add_argument("--review-listen", default="127.0.0.1:0",
                    help="HOST:PORT of the custodian service with the checkers' review pages (/review) on HOME "
                         "(default 127.0.0.1 and a free port)")
    up.add_argument("--json", action="store_true",
                    help="print one JSON line when ready (url, gateway, app, release, pids, seconds, review) and one "
                         "when stopped; progress goes to stderr")
    up.set_defaults(func=cmd_up)

    st = subparsers.add_parser("status", help="show what `safeshare up` runs (exit 1 if nothing, or not healthy)")
    _home_arg(st)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    dn = subparsers.add_parser("down", help="stop the enclave that `safeshare up` runs from the home folder")
    _home_arg(dn)
    dn.set_defaults(func=cmd_down)
