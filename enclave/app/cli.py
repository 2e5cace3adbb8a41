"""`safeshare app`: serve the analytics app for one sealed release bundle (uvicorn, in the foreground).

The bundle is verified and imported before the port is opened: a refused bundle or an unusable database exits 2 with
a message naming the folder and the problem, and nothing listens. The socket is bound here rather than by uvicorn so
that a busy port is a clean exit 2 as well, and so that `app ready: http://HOST:PORT/` is printed only once the app
accepts connections (the kiosk and the tests wait for that line). SIGINT/SIGTERM stop it gracefully (exit 0).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from safeshare.endpoints import port_number
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK

TRUST_ENV = "SAFESHARE_TRUST"  # the trust store, when --trust is not given
RECIPIENT_ENV = "SAFESHARE_RECIPIENT"  # who outputs are recorded as made by, when --recipient is not given


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY on accepted sockets only then, and without it a
    # response's body waits for the ACK of its headers on a keep-alive connection (~40 ms of delayed ACK each).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


async def _serve(app, sock: socket.socket) -> None:  # app: FastAPI
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False, date_header=False,
                            proxy_headers=False, http="h11", ws="none", lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)

    def stop(signum: int, frame: object) -> None:
        server.should_exit = True

    # uvicorn installs its own handlers while serving and, once stopped, re-raises the signal to the handler that
    # was there before: with this one that is a no-op, so a SIGTERM is a clean stop (exit 0), not a death by signal.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        host, port = sock.getsockname()[:2]
        print(f"app ready: {_url(host, port)}", flush=True)
    await task


def _import_release(bundle: str, db_url: str | None, state: str, trust: str | None, report,
                    release: str | None = None) -> None:
    """Child process: verify and import the bundle into the release database (a no-op when it already holds it);
    sends None on success, else the message, to the parent (which prints it: one place for the CLI's errors)."""
    from .release import ReleaseError, load_release

    try:
        load_release(bundle, db_url=db_url, state_dir=state, trust=trust, release=release).engine.dispose()
    except ReleaseError as exc:
        report.send(str(exc))
    except Exception as exc:  # anything else is still a release that cannot be served
        report.send(f"importing the release failed: {type(exc).__name__}: {exc}")
    else:
        report.send(None)


def import_in_child(bundle: Path, db_url: str | None, state: Path, trust: Path | None = None,
                    release: str | None = None) -> str | None:
    """Run the import in a fresh interpreter; returns None or the reason it failed. Parsing parquet needs pyarrow
    and much transient memory, and a process keeps both after they are freed; the serving process then finds the
    database holding the bundle and never loads pyarrow, so a running enclave's app stays near 100 MB, not 200."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_import_release,
                            args=(str(bundle), db_url, str(state), str(trust) if trust else None, send, release),
                            name="safeshare-app-import")
    child.start()
    send.close()
    try:
        message = receive.recv()
    except EOFError:
        message = "the import process ended without a result"
    child.join()
    if message is None and child.exitcode != 0:
        message = f"the import process exited with {child.exitcode}"
    return message


def cmd_app(args: argparse.Namespace) -> int:
    from engine.bundle import BundleError, parse_release_ref
    from engine.errors import InputError
    from outputs.floor import site_folder
    from safeshare.signing import KeyFileError
    from safeshare.sitefolder import site_trust

    from . import create_app
    from .release import ReleaseError

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        trust = site_trust(args.trust, args.site)  # the site's, never one near the bundle
        release = parse_release_ref(args.release) if args.release is not None else None
        site = site_folder(args.site)  # its outputs.yaml is the floor of the output rules (none: ACRO's defaults)
    except (KeyFileError, BundleError, InputError) as exc:
        print(f"safeshare app: refused bundle {args.bundle}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    failure = import_in_child(Path(args.bundle), args.db, Path(args.state).expanduser(), trust, release)
    if failure is not None:
        print(f"safeshare app: {failure}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        app = create_app(Path(args.bundle), db_url=args.db, state_dir=Path(args.state).expanduser(), trust=trust,
                         release=release, site=site, recipient=args.recipient)
    except ReleaseError as exc:
        print(f"safeshare app: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        sock = _listen(args.host, args.port)
    except OSError as exc:
        print(f"safeshare app: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        asyncio.run(_serve(app, sock))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    from . import DEFAULT_STATE

    app = subparsers.add_parser(
        "app", help="serve the analytics web app for one sealed release bundle",
        description="Verify a sealed release bundle (the seal's signature by a key the site's trust store trusts "
                    "for releases, the seal, hashes, gate verdict), import it into the release database (SQLite "
                    "in --state by default, or PostgreSQL with --db) and serve the analytics app. Prints 'app "
                    "ready: URL' once listening. Exit 2 with the reason when the bundle is refused (unsigned, "
                    "signed by an untrusted key, a signature that does not match, a retired key's new signature, a "
                    "bundle lying under another release's name than its seal's, any changed byte) or no trust store "
                    "is named. The trust store comes from --trust or the site (--site, $SAFESHARE_SITE, "
                    "/var/lib/safeshare), never from the folder the bundle lies in.")
    app.add_argument("--bundle", required=True, metavar="SEALED_DIR", help="a sealed release folder "
                     "(RELEASES/<dataset>/<id>, as written by `safeshare release`)")
    app.add_argument("--trust", default=os.environ.get(TRUST_ENV) or None, metavar="FILE",
                     help=f"the site's trust store (trust.json; provisioning mounts it read-only). Default: "
                          f"${TRUST_ENV}, else SITE/trust.json of --site; never one near the bundle")
    app.add_argument("--site", default=None, metavar="SITE",
                     help="the site whose trust.json decides when --trust is not given, and whose outputs.yaml is "
                          "the floor of the output rules (default: $SAFESHARE_SITE, else /var/lib/safeshare if it "
                          "exists; with no trust store the bundle is refused; with no outputs.yaml, ACRO's defaults)")
    app.add_argument("--release", default=None, metavar="DATASET/ID",
                     help="the release the bundle must be sealed as (default: the folder's own <dataset>/<id>; "
                          "provisioning names it for the container's /release mount)")
    app.add_argument("--recipient", default=os.environ.get(RECIPIENT_ENV) or None, metavar="NAME",
                     help=f"the recipient outputs are recorded as made by (default ${RECIPIENT_ENV}, else "
                          "'researcher'). The output rules come from SITE/outputs.yaml of the site (--site, "
                          "$SAFESHARE_SITE, /var/lib/safeshare), else ACRO's defaults, tightened by the manifest's "
                          "`outputs:` block if it has one")
    app.add_argument("--db", default=None, metavar="URL",
                     help="release database URL, e.g. postgresql+psycopg://user@host/db (default: SQLite in --state)")
    app.add_argument("--state", default=str(DEFAULT_STATE), metavar="DIR",
                     help=f"folder for the SQLite release database, the saved analyses and the outputs "
                          f"(STATE/outputs) (default {DEFAULT_STATE})")
    app.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    app.add_argument("--port", type=port_number, default=8050,
                     help="port to listen on (default 8050; 0 picks a free one)")
    app.add_argument("--verbose", action="store_true", help="log at INFO level")
    app.set_defaults(func=cmd_app)
