"""`safeshare gateway` and `safeshare token issue|revoke|list|verify` (registered by proxy.cli).

Exit codes follow DESIGN.md: 0 success, 1 refused (a token that does not verify, nothing to revoke, an expired
recipient policy), 2 bad input.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path

from safeshare.endpoints import parse_host_port
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _db_arg(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", help="SQLAlchemy URL of the token database (default: $SAFESHARE_DB, else the site's "
                                    "database, SITE/db/safeshare.db, of --site or $SAFESHARE_SITE, else "
                                    "sqlite:///safeshare.db in the current folder, which is refused inside a site "
                                    "folder)")
    where.add_argument("--site", help="site folder (or `safeshare up` home) whose database to use: SITE/db/"
                                      "safeshare.db, as every site tool (default $SAFESHARE_SITE)")


class DatabaseUnusable(ValueError):
    """--db (or $SAFESHARE_DB) names no database this command can open: bad input, said without a traceback."""


def database_url(args: argparse.Namespace) -> str:
    """The token database: --db, else $SAFESHARE_DB (as proxy-for and websockify's plugin), else the database of
    the site named by --site or $SAFESHARE_SITE (safeshare.sitedb, the one place that says where it is), else
    `safeshare.db` in the current folder, unless that folder is or lies in a site folder (`db/safeshare.db` or
    `trust.json`): a database made there would be a second one of the site, holding none of its tokens (a token
    revoked in it would revoke nothing), and site tools would refuse the folder for it. Raises DatabaseUnusable."""
    import os

    from proxy.db import DB_URL_ENV, DEFAULT_DB_URL
    from safeshare.sitedb import SiteDatabaseError, enclosing_site, site_db_url
    from safeshare.sitefolder import SITE_ENV

    if getattr(args, "db", None):
        return args.db
    if os.environ.get(DB_URL_ENV, "").strip():
        return os.environ[DB_URL_ENV]
    site, named = getattr(args, "site", None), "--site"
    if site is None and os.environ.get(SITE_ENV, "").strip():
        site, named = os.environ[SITE_ENV], f"${SITE_ENV}"
    if site is not None:
        if not str(site).strip():
            raise DatabaseUnusable("--site is empty: name the site folder")
        if not Path(site).is_dir():
            raise DatabaseUnusable(f"{named} {site}: no such site folder")
        try:
            return site_db_url(site)
        except SiteDatabaseError as exc:
            raise DatabaseUnusable(str(exc)) from None
    here = Path.cwd()
    inside = enclosing_site(here)
    if inside is not None:
        where = "" if inside == here else "in "
        raise DatabaseUnusable(f"{here / 'safeshare.db'}: not used: the current folder is {where}the site folder "
                               f"{inside} (it holds db/safeshare.db or trust.json), whose database "
                               f"is {inside / 'db' / 'safeshare.db'}: name it with --site {inside} (or --db URL, "
                               f"${DB_URL_ENV}, ${SITE_ENV})")
    return DEFAULT_DB_URL


def _store(args: argparse.Namespace):
    """The token store of `database_url`; an unusable URL or an unreachable database raises DatabaseUnusable naming
    it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from proxy.tokens import TokenStore

    url = database_url(args)
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:
        shown = repr(url)
    try:
        return TokenStore(url)
    except (SQLAlchemyError, ValueError, OSError) as exc:
        raise DatabaseUnusable(f"--db {shown}: cannot use this database: {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def _token_command(name: str, func):
    """Run a `safeshare token` action; a database it cannot open is bad input (exit 2), naming the URL."""
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except DatabaseUnusable as exc:
            print(f"safeshare token {name}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return run


# --- safeshare gateway -------------------------------------------------------------------------------------------

def _sessions_folder(args: argparse.Namespace) -> Path:
    """--sessions, else SITE/sessions of the site named by --site or $SAFESHARE_SITE (the site's layout)."""
    import os

    from safeshare.sitefolder import SITE_ENV

    if args.sessions:
        return Path(args.sessions)
    site = args.site or os.environ.get(SITE_ENV, "").strip()
    if not site:
        raise ValueError("--sessions is required (or --site SITE / $SAFESHARE_SITE: SITE/sessions)")
    return Path(site) / "sessions"

def cmd_gateway(args: argparse.Namespace) -> int:
    from proxy.gateway import Gateway
    from policies.recipient import PolicyError, load_recipient_policy
    from proxy.limits import SessionLimits

    try:
        host, port = parse_host_port(args.listen)
        sessions = _sessions_folder(args)
        limits = load_recipient_policy(Path(args.limits)).limits if args.limits else SessionLimits()
        if args.poll_interval <= 0 or args.poll_interval > 1.0:
            raise ValueError("--poll-interval must be in (0, 1] so that revocation ends sessions within a second")
        keys = None
        if args.signing_key:
            from proxy.eventlog import KeySource

            keys = KeySource(args.signing_key)
            keys.load()  # fail closed: a gateway told to sign does not start without its key
        if args.anchor_interval <= 0:
            raise ValueError("--anchor-interval must be positive")
        store = _store(args)
    except (ValueError, OSError, PolicyError) as exc:
        print(f"safeshare gateway: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # database URL that SQLAlchemy cannot use
        print(f"safeshare gateway: database: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    def started(live) -> None:
        print(f"session {live.session.session_id} {live.session.dir} recipient={live.grant.recipient} "
              f"token={live.grant.token_id}", flush=True)

    def ended(live, reason: str) -> None:
        print(f"session {live.session.session_id} ended: {reason}", flush=True)

    gateway = Gateway(store, sessions, novnc_dir=Path(args.novnc), default_limits=limits,
                      poll_interval=args.poll_interval, record=not args.no_record,
                      allowed_origins=tuple(args.allowed_origin or ()),
                      secure_cookies=True if args.secure_cookies else None, on_session=started, on_session_end=ended,
                      name=args.name, signing_key=keys, anchor_interval=args.anchor_interval,
                      airlock=Path(args.airlock) if args.airlock else None)
    if keys is None:
        print("safeshare gateway: no --signing-key: session seals are not signed (`audit verify` reports them as "
              "unsigned)", file=sys.stderr)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        bound = await gateway.start(host, port)
        print(f"listening on http://{host}:{bound}/", flush=True)
        try:
            await stop.wait()
        finally:
            await gateway.close()
            store.dispose()

    asyncio.run(main())
    return EXIT_OK


# --- safeshare token ---------------------------------------------------------------------------------------------

def _fmt(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if value else "-"


def cmd_token_issue(args: argparse.Namespace) -> int:
    from policies.recipient import PolicyError, load_recipient_policy
    from proxy.tokens import AccessEnded, issue_for_policy, parse_expiry, parse_ttl

    recipient, policy, policy_path = args.recipient, None, None
    try:
        if args.policy:
            policy_path = Path(args.policy).resolve()
            policy = load_recipient_policy(policy_path)
            if recipient and recipient != policy.recipient:
                raise ValueError(f"--recipient {recipient!r} but {args.policy} is the policy of {policy.recipient!r}")
            recipient = policy.recipient
        if not recipient:
            raise ValueError("--recipient (or --policy) is required")
        from proxy.transport import UpstreamTarget

        UpstreamTarget.parse(args.upstream)  # validate early
        password_file = None
        if args.password_file:
            password_path = Path(args.password_file).resolve()
            if not password_path.is_file():
                raise ValueError(f"no password file at {args.password_file}")
            password_file = str(password_path)
        now = datetime.now(timezone.utc)
        expires = parse_expiry(args.expires) if args.expires else now + parse_ttl(args.ttl)
    except (ValueError, OSError, PolicyError) as exc:
        print(f"safeshare token issue: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    store = _store(args)
    try:
        if policy is not None:
            issued = issue_for_policy(store, policy, policy_path, args.upstream, expires_at=expires,
                                      password_file=password_file, target_name=args.target,
                                      release=args.release or policy.release, now=now)
        else:
            issued = store.issue(recipient, args.upstream, password_file=password_file, target_name=args.target,
                                 expires_at=expires, release=args.release)
    except AccessEnded as exc:
        print(f"safeshare token issue: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except ValueError as exc:
        print(f"safeshare token issue: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    url = f"{args.url.rstrip('/')}/?token={issued.token}" if args.url else None
    if args.json:
        print(json.dumps({**issued.as_dict(), "url": url}, indent=2))
    else:
        print(issued.token)
        print(f"id {issued.token_id}, recipient {issued.recipient}, target {issued.target_name} "
              f"({issued.upstream}), expires {_fmt(issued.expires_at)}", file=sys.stderr)
        if url:
            print(url)
    return EXIT_OK


def cmd_token_revoke(args: argparse.Namespace) -> int:
    try:
        count = _store(args).revoke(token_id=args.id, token=args.token, recipient=args.recipient, reason=args.reason)
    except ValueError as exc:
        print(f"safeshare token revoke: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"revoked {count} token(s)")
    return EXIT_OK if count else EXIT_REFUSED


def cmd_token_list(args: argparse.Namespace) -> int:
    infos = _store(args).list_tokens(args.recipient, active_only=args.active)
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
        return EXIT_OK
    print(f"{'id':>5}  {'recipient':<20} {'target':<24} {'status':<8} {'expires':<20} {'last used':<20}")
    for info in infos:
        print(f"{info.token_id:>5}  {info.recipient:<20} {info.target_name:<24} {info.status:<8} "
              f"{_fmt(info.expires_at):<20} {_fmt(info.last_used_at):<20}")
    return EXIT_OK


def cmd_token_verify(args: argparse.Namespace) -> int:
    from proxy.tokens import TokenRefused

    token = args.token if args.token != "-" else sys.stdin.readline().strip()
    try:
        grant = _store(args).verify(token)
    except TokenRefused as refused:
        print(json.dumps({"valid": False, "reason": refused.reason}))
        return EXIT_REFUSED
    print(json.dumps({"valid": True, "token_id": grant.token_id, "recipient": grant.recipient,
                      "target": grant.target_name, "upstream": grant.upstream,
                      "expires_at": grant.expires_at.isoformat()}))
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    g = subparsers.add_parser(
        "gateway", help="serve noVNC and the WebSocket endpoint in front of the RFB proxy, with session tokens",
        description="Serve the noVNC page and the WebSocket endpoint. Each connection needs a session token "
                    "(`safeshare token issue`) given as ?token= or cookie; it is proxied to the token's enclave "
                    "target with all controls of `safeshare proxy`. Revoked tokens end their sessions within a "
                    "second.")
    g.add_argument("--listen", default="127.0.0.1:6080", help="HOST:PORT (default 127.0.0.1:6080; put TLS in front)")
    g.add_argument("--sessions", help="directory for session folders (default: SITE/sessions of --site or "
                                      "$SAFESHARE_SITE; required without a site)")
    _db_arg(g)
    g.add_argument("--novnc", default="/usr/share/novnc", help="noVNC directory (default: Debian's novnc package)")
    g.add_argument("--limits", help="recipient policy YAML whose limits apply to tokens issued without --policy")
    g.add_argument("--poll-interval", type=float, default=0.5, help="seconds between revocation checks (default 0.5)")
    g.add_argument("--allowed-origin", action="append",
                   help="the URL researchers open (an Origin allowed to open the WebSocket; repeatable). "
                        "Needed unless they open the --listen address itself: the Host header is never trusted")
    g.add_argument("--secure-cookies", action="store_true",
                   help="mark the token cookie Secure (set this when TLS is terminated in front of the gateway)")
    g.add_argument("--name", default="gateway",
                   help="this gateway's name in the session table (distinct per gateway sharing one database; "
                        "at start it closes the sessions its previous run left open)")
    g.add_argument("--signing-key", metavar="FILE",
                   help="Ed25519 key (PEM, mode 0600) that signs every session's seal, e.g. "
                        "SITE/secrets/gateway/signing.key; re-read when it changes (`safeshare custodian key rotate "
                        "--purpose gateway`). Missing or unreadable: the gateway does not start (exit 2)")
    g.add_argument("--anchor-interval", type=float, default=5.0,
                   help="seconds between anchors of live sessions' log heads in the database (default 5)")
    g.add_argument("--airlock", metavar="DIR",
                   help="the site's airlock store (SITE/airlock, read-only is enough): serve each recipient's "
                        "released output packages at /outputs, authenticated by the same token; without it there "
                        "is no /outputs")
    g.add_argument("-v", "--verbose", action="store_true", help="log requests and sessions")
    g.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)
    g.set_defaults(func=cmd_gateway)

    t = subparsers.add_parser("token", help="issue, revoke, list and verify gateway session tokens",
                              description="Session tokens for the gateway, stored hashed in the SQL database.")
    tsub = t.add_subparsers(dest="token_command", metavar="ACTION")
    tsub.required = True

    issue = tsub.add_parser("issue", help="issue a token for one recipient and one enclave target",
                            description="Prints the token (shown only this once) on stdout.")
    issue.add_argument("--recipient", help="recipient name (default: from --policy)")
    issue.add_argument("--upstream", required=True, help="the enclave's VNC server: HOST:PORT or unix:PATH")
    issue.add_argument("--password-file", help="file holding the VNC password of the upstream server")
    issue.add_argument("--target", help="name of the target (default: the upstream)")
    issue.add_argument("--policy", help="recipient policy YAML: recipient, release, limits; caps the expiry")
    issue.add_argument("--release", help="release id recorded in the session metadata")
    when = issue.add_mutually_exclusive_group()
    when.add_argument("--ttl", default="8h", help="lifetime, e.g. 30m, 8h, 7d (default 8h)")
    when.add_argument("--expires", help="ISO date (through that day, UTC) or datetime")
    issue.add_argument("--url", help="gateway base URL; prints the session link")
    issue.add_argument("--json", action="store_true", help="print JSON")
    _db_arg(issue)
    issue.set_defaults(func=_token_command("issue", cmd_token_issue))

    revoke = tsub.add_parser("revoke", help="revoke a token or every token of a recipient; live sessions end")
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", type=int, help="token id (see `safeshare token list`)")
    which.add_argument("--token", help="the token text")
    which.add_argument("--recipient", help="revoke every token of this recipient")
    revoke.add_argument("--reason", help="recorded with the revocation")
    _db_arg(revoke)
    revoke.set_defaults(func=_token_command("revoke", cmd_token_revoke))

    lst = tsub.add_parser("list", help="list tokens (never their text)")
    lst.add_argument("--recipient")
    lst.add_argument("--active", action="store_true", help="only tokens that are neither expired nor revoked")
    lst.add_argument("--json", action="store_true")
    _db_arg(lst)
    lst.set_defaults(func=_token_command("list", cmd_token_list))

    verify = tsub.add_parser("verify", help="check a token (exit 0 valid, 1 refused)")
    verify.add_argument("token", help="the token text, or - to read it from stdin")
    _db_arg(verify)
    verify.set_defaults(func=_token_command("verify", cmd_token_verify))
