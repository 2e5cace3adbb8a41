"""`safeshare audit checkpoint` and the sequence checks of `audit verify` (`--db`, `--checkpoint FILE`): the site's
side of proxy/audit/sequence.py (which sessions root, database, trust store and retention periods).

Who signs the checkpoint: nobody new. Each entry is a seal line the gateway signed when it sealed that session, so
`audit checkpoint` needs no private key (the gateway's key stays readable by the gateway only) and anyone holding the
trust store can check the entries. What makes the checkpoint worth more than the database is where it is kept: the
auditor stores the file outside the site, where a writer of the sessions folder and the database cannot reach it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK


def now() -> datetime:
    """The time deletions are checked at (a function, so that tests can move it)."""
    return datetime.now(timezone.utc)


def _site(args: argparse.Namespace):
    from deploy.site.folder import Site, default_site

    return Site(Path(args.site) if getattr(args, "site", None) else default_site(), db_url=args.db)


def deletions(db: str) -> list:
    """The `session-deleted` audit events of the database at `db` (none when it has no audit table)."""
    from sqlalchemy import inspect

    from deploy.records import AuditEventRow, Records
    from proxy.audit.sequence import Deletion
    from proxy.db import make_engine

    engine = make_engine(db)
    try:
        if AuditEventRow.__tablename__ not in inspect(engine).get_table_names():  # `safeshare up`'s database
            return []
        records = Records(engine)
        return [Deletion(str(e.detail.get("session")), e.detail.get("log_head"), e.at, e.recipient, e.id)
                for e in records.events(action="session-deleted", limit=10 ** 9) if e.outcome == "ok"]
    finally:
        engine.dispose()


def retention_days(args: argparse.Namespace):
    """recipient -> the retention days that apply now (recipient policy as provisioned, else the site's). The
    database is opened at the first question and only read: a database without the custodian's tables (`safeshare
    up`'s) gives the site's default."""
    from sqlalchemy import inspect

    from deploy.records import Records, RecipientRow
    from deploy.audit.retention import retention_days_for
    from proxy.db import make_engine

    site = _site(args)
    state: dict[str, Any] = {}

    def days_for(recipient: str | None) -> int:
        if "days" not in state:
            engine = state["engine"] = make_engine(args.db or site.db_url)
            if RecipientRow.__tablename__ in inspect(engine).get_table_names():
                state["days"] = retention_days_for(site, Records(engine))
            else:
                state["days"] = lambda _recipient: site.settings.session_retention_days
        return state["days"](recipient)

    def dispose() -> None:
        if "engine" in state:
            state["engine"].dispose()

    days_for.dispose = dispose  # type: ignore[attr-defined] - called by whoever asked
    return days_for


def sequence_check(args: argparse.Namespace, root: Path, checks: list) -> Any:
    """The hook of `audit verify`: with a database, check its deletion events; with --checkpoint, every session the
    checkpoint names. Adds the findings to `checks` (in place) and returns the report (None when nothing ran)."""
    from proxy.anchors import AnchorBook
    from proxy.audit.sequence import CheckpointError, check_deletions, load_checkpoint
    from proxy.sessiondir import is_session_folder

    path = getattr(args, "checkpoint", None)
    if not args.db and not path:
        return None
    if is_session_folder(root):
        if path:
            raise CheckpointError(f"--checkpoint: {root} is one session; a checkpoint is checked against a sessions "
                                  f"root")
        return None
    checkpoint = load_checkpoint(path, _trust_of(args)) if path else None
    book = AnchorBook(args.db)
    try:
        anchors = book.all()
    finally:
        book.dispose()
    days_for = retention_days(args)
    try:
        report = check_deletions(root, checks, deletions(args.db), days_for, now(), anchors=anchors,
                                 checkpoint=checkpoint, checkpoint_name=f"the checkpoint {path}" if path else
                                 "the checkpoint")
    finally:
        days_for.dispose()
    checks.extend(report.findings)
    return report


def _trust_of(args: argparse.Namespace):
    from deploy.audit.cli import _trust

    return _trust(args)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Verify the whole sessions root with the database; refuse (exit 1) if anything is found, else write the
    checkpoint (to --out, else stdout)."""
    from deploy.audit.cli import _check, _site_db
    from deploy.site.folder import SiteError
    from proxy.audit.sequence import CheckpointError, make_checkpoint
    from safeshare.signing import KeyFileError

    try:
        root = Path(args.path) if args.path else _site(argparse.Namespace(site=args.site, db=None)).sessions
        args.db = args.db or _site_db(args)
        if not args.db:
            raise FileNotFoundError("no database: --db, or a site with SITE/db/safeshare.db")
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such sessions root")
        checks = _check(root, args)
        sequence_check(args, root, checks)
        days_for = retention_days(args)
        try:
            bad = [check for check in checks if not check.ok]
            checkpoint = None if bad else make_checkpoint(checks, days_for, now())
        finally:
            days_for.dispose()
    except (FileNotFoundError, KeyFileError, SiteError, CheckpointError) as exc:
        print(f"safeshare audit checkpoint: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:  # a session changed while it was read
        print(f"safeshare audit checkpoint: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    if checkpoint is None:
        for check in bad:
            for finding in check.findings or [f"{check.folder}: not ok"]:
                print(f"safeshare audit checkpoint: {finding}", file=sys.stderr)
        print(f"safeshare audit checkpoint: {len(bad)} session(s) do not verify: no checkpoint written (a checkpoint "
              f"would vouch for them); resolve the findings of `safeshare audit verify --db` first", file=sys.stderr)
        return EXIT_FINDINGS
    text = json.dumps(checkpoint, indent=1, sort_keys=True) + "\n"
    if args.out:
        write_atomic(Path(args.out), text)
    else:
        sys.stdout.write(text)
    last = checkpoint["last"]
    print(f"safeshare audit checkpoint: {checkpoint['count']} sealed session(s)"
          f"{', the newest ' + last['session'] + ' (head ' + last['head'] + ')' if last else ''}"
          f"{' written to ' + args.out if args.out else ''}; keep it outside the site", file=sys.stderr)
    return EXIT_OK


CHECKPOINT_HELP = """\
Verify every session under the sessions root with the site's database (as `audit verify --db`;
refused with exit 1 if anything is found) and write a checkpoint of the sequence of sealed sessions:
each session's signed seal line (its hash is the log's head, its time the signed seal time), the
retention period that applies to it, their count and the newest session per gateway.

Keep the file OUTSIDE the site (another host, the auditor's own storage), where a writer of the
sessions folder and the database cannot change it, and check the site against it later with
`safeshare audit verify --db URL --checkpoint FILE`. That finds any session the checkpoint names
that is gone (folder and row deleted) unless a `session-deleted` event names its head and is dated
after its retention ended, including the newest session, which no later seal names yet.

It needs no private key: the entries are the gateway's own signatures, checked against the trust
store when the checkpoint is used. Sessions sealed after the checkpoint are covered only by the
next one: export checkpoints regularly (for example daily, from cron) and keep them all or the newest."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("checkpoint", help="export a checkpoint of the sealed sessions for the auditor to keep "
                                               "outside the site (exit 1 if the site does not verify)",
                            formatter_class=argparse.RawDescriptionHelpFormatter, description=CHECKPOINT_HELP)
    parser.add_argument("path", nargs="?", help="sessions root (default SITE/sessions)")
    parser.add_argument("--out", help="checkpoint file to write (atomically; default: standard output)")
    parser.add_argument("--db", help="the site database (SQLAlchemy URL; default SITE/db/safeshare.db)")
    parser.add_argument("--site", help="site folder (default $SAFESHARE_SITE or /var/lib/safeshare)")
    parser.add_argument("--trust", help="trust store for the seals' signatures (default SITE/trust.json)")
    parser.add_argument("--allow-unsigned", action="store_true",
                        help="accept unsigned seals of sessions sealed before signing existed")
    parser.add_argument("--allow-partial", action="store_true",
                        help="accept sessions a restarted gateway recovered (proven up to their last signed "
                             "checkpoint); the checkpoint then vouches for their seals as they are")
    parser.set_defaults(func=cmd_checkpoint)


VERIFY_CHECKPOINT_HELP = (
    "a checkpoint written by `safeshare audit checkpoint` and kept outside the site: every session it names must "
    "still be there with the same seal, or be accounted for by a session-deleted event that names its log head and "
    "is dated after its retention ended (finds the deletion of the newest session, and of any session with a forged "
    "deletion event; the checkpoint's seals are checked against the trust store). Uses the site's database when "
    "--db is not given")

__all__ = ["CHECKPOINT_HELP", "VERIFY_CHECKPOINT_HELP", "cmd_checkpoint", "deletions", "register", "sequence_check"]
