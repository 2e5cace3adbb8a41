"""`safeshare proxy-for RECIPIENT`: the recipient's inspecting proxy behind a site's websockify (registered by
proxy.cli).

It reads the site folder for its database, sessions folder and the gateway's signing key, so that sessions through
websockify are recorded, sealed and anchored exactly as through `safeshare gateway`. Imports stay inside the command
(`safeshare --help` must not load the proxy, SQLAlchemy or the site). Exit codes: 0, 2 bad input.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK


def _mode(text: str) -> int:
    mode = int(text, 8)
    if mode & ~0o770 or mode & 0o600 != 0o600:
        raise argparse.ArgumentTypeError("socket mode: octal, owner read/write, nothing for others (e.g. 600, 660)")
    return mode


def _user(text: str) -> int:
    """A user name or uid (websockify's user, admitted on a TCP port)."""
    import pwd

    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise argparse.ArgumentTypeError(f"no user named {text!r}") from None


def cmd_proxy_for(args: argparse.Namespace) -> int:
    from deploy.site.folder import SiteError
    from proxy.listen_address import ListenAddress, default_listen, listing_path
    from proxy.recipient_proxy import RecipientProxy
    from proxy.tokens import TokenStore
    from proxy.websockify_plugin import open_site

    try:
        if args.poll_interval <= 0 or args.poll_interval > 1.0:
            raise ValueError("--poll-interval must be in (0, 1] so that revocation ends sessions within a second")
        site = open_site(args.site or _default_site(), args.db)
        if not site.sessions.is_dir():
            raise ValueError(f"{site.root} is not a prepared site folder (no sessions/): see `safeshare site init`")
        address = ListenAddress.parse(args.listen or default_listen(site, args.recipient))
        if args.peer_user and address.unix_path is not None:
            raise ValueError("--peer-user applies to a TCP --listen only (a Unix socket's mode and group decide who "
                             "may connect: --socket-mode, --socket-group)")
        keys = None
        key_file = Path(args.signing_key) if args.signing_key else site.gateway_signing_key
        if args.signing_key or key_file.exists():
            from proxy.eventlog import KeySource

            keys = KeySource(key_file)
            keys.load()  # fail closed: a proxy told to sign does not start without its key
        store = TokenStore(site.db_url)
    except (ValueError, OSError, SiteError) as exc:
        print(f"safeshare proxy-for: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if keys is None:
        print(f"safeshare proxy-for: no signing key at {key_file}: session seals are not signed", file=sys.stderr)

    def started(connection) -> None:
        print(f"session {connection.session.session_id} {connection.session.dir} recipient={args.recipient} "
              f"token={connection.grant.token_id}", flush=True)

    def ended(connection, reason: str) -> None:
        print(f"session {connection.session.session_id} ended: {reason}", flush=True)

    name = args.name or f"proxy-for-{site.recipient_id(args.recipient)}"
    proxy = RecipientProxy(store, args.recipient, site.sessions, name=name, signing_key=keys,
                           poll_interval=args.poll_interval, listing=listing_path(site, args.recipient),
                           socket_mode=args.socket_mode, socket_group=args.socket_group,
                           peer_uids=args.peer_user or None, on_session=started,
                           on_session_end=ended)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            bound = await proxy.start(address)
        except (OSError, KeyError) as exc:  # KeyError: an unknown --socket-group
            print(f"safeshare proxy-for: cannot listen on {address}: {exc}", file=sys.stderr)
            await proxy.close()
            return EXIT_BAD_INPUT
        print(f"listening on {bound} for {args.recipient}", flush=True)
        try:
            await stop.wait()
        finally:
            await proxy.close()
        return EXIT_OK

    try:
        return asyncio.run(main())
    finally:
        store.dispose()


def _default_site() -> Path:
    from deploy.site.folder import default_site

    return default_site()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "proxy-for", help="run one recipient's inspecting proxy behind websockify (token plugin "
                          "safeshare.websockify.TokenPlugin)",
        description="Run the inspecting RFB proxy of one recipient for a site whose front door is websockify "
                    "(--token-plugin safeshare.websockify.TokenPlugin --token-source SITE). It listens on a Unix "
                    "socket (default SITE/proxies/<rid>.sock) or a loopback port, publishes the address for the "
                    "plugin, and runs every session with the controls, recording, seal and anchors of `safeshare "
                    "gateway`. Sessions end within a second when the recipient's tokens are revoked or expire. "
                    "The proxy checks no token itself (websockify's plugin does, and does not pass it on): whoever "
                    "reaches it gets a session of the recipient while the recipient holds a usable token. So it "
                    "trusts the socket's permissions (mode 600: this user only) or, on a loopback port, which any "
                    "local user can reach, the owner of the connecting socket as Linux lists it in /proc/net/tcp: "
                    "only this proxy's user, or the --peer-user users, are admitted there, every other "
                    "connection is refused (on a system without /proc/net/tcp a port is refused: use a socket).")
    p.add_argument("recipient", help="the recipient (as in the recipient policy and its tokens)")
    p.add_argument("--site", help="site folder (default: $SAFESHARE_SITE or /var/lib/safeshare)")
    p.add_argument("--db", help="SQLAlchemy URL of the site database (default: $SAFESHARE_DB or the site's SQLite)")
    p.add_argument("--listen", help="unix:PATH or a loopback HOST:PORT (default unix:SITE/proxies/<rid>.sock); on a "
                                    "port only this user (or the --peer-user users) may connect")
    p.add_argument("--socket-mode", type=_mode, default=0o600,
                   help="mode of the Unix socket, octal (default 600: only this user, i.e. run websockify as it; "
                        "660 with --socket-group for websockify's group)")
    p.add_argument("--socket-group", help="group of the Unix socket (websockify's)")
    p.add_argument("--peer-user", action="append", type=_user, metavar="USER",
                   help="with a HOST:PORT --listen: a user (name or uid) whose connections are admitted, i.e. "
                        "websockify's; repeat for several. Replaces the default: only the user running this proxy, "
                        "as the socket's default mode 600")
    p.add_argument("--signing-key", metavar="FILE",
                   help="Ed25519 key signing the session seals (default: the site's gateway key, "
                        "SITE/secrets/gateway/signing.key, if present)")
    p.add_argument("--poll-interval", type=float, default=0.5, help="seconds between revocation checks (default 0.5)")
    p.add_argument("--name", help="this proxy's name in the sessions table and seal chain (default proxy-for-<rid>)")
    p.add_argument("-v", "--verbose", action="store_true", help="log connections and sessions")
    p.set_defaults(func=cmd_proxy_for)
