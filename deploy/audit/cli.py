"""`safeshare audit verify|sessions|export|retention|checkpoint`: the auditors' commands over recorded sessions.

The work is done by `proxy/audit/` (which knows nothing of sites); this module adds the site's defaults (sessions
root, database, player cache), as deploy/ may know every component and proxy/ may not know deploy/.

Exit codes: 0 (verify: every check passed), 1 (verify: at least one finding), 2 (bad input: no such folder, a time
that does not parse).
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from deploy.audit.sequence import VERIFY_CHECKPOINT_HELP
from deploy.audit.sequence import register as register_checkpoint
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK


def _sessions_root(text: str | None, site: str | None = None) -> Path:
    """PATH when given, else SITE/sessions of --site, $SAFESHARE_SITE or /var/lib/safeshare."""
    if text:
        return Path(text)
    from deploy.site.folder import default_site

    return (Path(site) if site else default_site()) / "sessions"


def _verify_db(args: argparse.Namespace) -> tuple[str | None, str]:
    """The database `audit verify` checks anchors against, and why: --db; none with --no-db; else, when what is
    verified is the site's sessions (no PATH, or a PATH inside SITE/sessions of --site, $SAFESHARE_SITE or
    /var/lib/safeshare), that site's database if it exists (safeshare.sitedb; an old `up` home's is refused,
    SiteError). A PATH elsewhere (a copy) gets none: another site's rows would report its sessions missing."""
    from deploy.site.folder import default_site

    if args.db:
        return args.db, "--db"
    if args.no_db:
        return None, "--no-db"
    site = Path(args.site) if args.site else default_site()
    sessions = (site / "sessions").resolve()
    if args.path:
        path = Path(args.path).resolve()
        if path != sessions and sessions not in path.parents:
            return None, f"{args.path} is not under {site / 'sessions'}: name its database with --db"
    db = _site_db(args)
    return db, ("the site's database" if db else f"{site} has no database (db/safeshare.db)")


def _trust(args: argparse.Namespace):
    """The trust store signatures are checked against: --trust, else SITE/trust.json (--site, $SAFESHARE_SITE).
    Never a file found next to the sessions: whoever can write those could put their own key there."""
    from deploy.site.folder import default_site
    from safeshare.signing import TRUST_FILE, TrustStore

    path = Path(args.trust) if args.trust else (Path(args.site) if args.site else default_site()) / TRUST_FILE
    return TrustStore.load(path)


def _anchors(db: str | None) -> tuple[dict | None, dict]:
    """The gateways' sessions table by session id, and the sessions retention deleted (session -> seal hash, from
    the custodian's `session-deleted` events), from the database at `db`; (None, {}) without one."""
    if not db:
        return None, {}
    from sqlalchemy import inspect

    from deploy.records import AuditEventRow, Records
    from proxy.anchors import AnchorBook

    book = AnchorBook(db)
    try:
        anchors = book.all()
        deleted: dict = {}
        if AuditEventRow.__tablename__ in inspect(book.engine).get_table_names():  # not in `safeshare up`'s
            deleted = {e.detail.get("session"): e.detail.get("log_head")
                       for e in Records(book.engine).events(action="session-deleted", limit=10 ** 9)}
    finally:
        book.dispose()
    return anchors, deleted


def verify_site_session(site, folder: Path):
    """One session of `site` checked as `audit verify --db` checks it: its seal's signature against the site's
    trust store (a missing trust store trusts nothing: signed seals then fail, fail closed) and its anchor in the
    site's database. For the custodian service's audit endpoints."""
    from proxy.anchors import AnchorBook
    from proxy.audit.verify import verify_session
    from safeshare.signing import TrustStore

    book = AnchorBook(site.db_url)
    try:
        anchor = book.get(folder.name)
    finally:
        book.dispose()
    return verify_session(folder, TrustStore.load_or_empty(site.trust_file), anchor)


def _check(path: Path, args: argparse.Namespace):
    from proxy.audit.verify import verify_path

    anchors, deleted = _anchors(args.db)
    return verify_path(path, trust=_trust(args), anchors=anchors, deleted=deleted,
                       allow_unsigned=getattr(args, "allow_unsigned", False),
                       allow_partial=getattr(args, "allow_partial", False))


def _status(check) -> str:
    signed = f"signed by {check.signed_by}" if check.signed_by else check.signature
    return f"{check.lines} lines, seal {check.head}, {signed}, anchor {check.anchor}"


def cmd_verify(args: argparse.Namespace) -> int:
    from safeshare.signing import KeyFileError

    from deploy.audit.sequence import sequence_check
    from deploy.site.folder import SiteError
    from proxy.audit.sequence import CheckpointError

    try:
        root = _sessions_root(args.path, args.site)
        if args.checkpoint and args.no_db:
            raise FileNotFoundError("--checkpoint needs the site's database (its session-deleted events): "
                                    "drop --no-db, or name it with --db")
        if args.checkpoint and not args.db:
            args.db = _site_db(args)  # the deletion events are in the site's database
        args.db, why = _verify_db(args)
        if args.db is None:  # on stderr: --json's output stays one object
            print(f"safeshare audit verify: anchors not checked ({why})", file=sys.stderr)
        checks = _check(root, args)
        sequence = sequence_check(args, root, checks)  # deletion events (--db), sessions of --checkpoint
    except (FileNotFoundError, KeyFileError, CheckpointError, SiteError) as exc:
        print(f"safeshare audit verify: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # a database URL that cannot be used
        print(f"safeshare audit verify: --db: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    bad = [check for check in checks if not check.ok]
    if sequence is not None and sequence.checkpoint:  # on stderr: --json's output stays one object
        print(f"{sequence.checkpoint} (of {sequence.created}): {sequence.count} session(s), {sequence.present} "
              f"still there, {sequence.deleted} deleted by retention, "
              f"{sequence.count - sequence.present - sequence.deleted} missing", file=sys.stderr)
    if args.json:
        print(json.dumps({"sessions": len(checks), "ok": len(checks) - len(bad),
                          "findings": sum(len(c.findings) for c in bad),
                          "checks": [check.as_dict() for check in checks]}, indent=2))
    else:
        for check in checks:
            if check.partial and not check.findings:  # a recovered session: proven up to its last checkpoint
                print(f"{'partial ' if check.ok else 'PARTIAL '} {check.session}  {_status(check)}, "
                      f"{check.verified_lines} line(s) proven, {check.unverified_lines} unverifiable")
                print(f"         {check.partial_note}")
            elif check.ok:
                print(f"ok       {check.session}  {_status(check)}")
            else:
                print(f"FAILED   {check.session}")
                for finding in check.findings:
                    print(f"         {finding}")
        partial = sum(1 for check in bad if check.partial and not check.findings)
        print(f"{len(checks)} session(s): {len(checks) - len(bad)} ok, "
              f"{f'{partial} partial, ' if partial else ''}{len(bad) - partial} with findings")
    return EXIT_FINDINGS if bad else EXIT_OK


def _when(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{option}: {text!r} is not an ISO date or date-time (2026-11-23 or 2026-11-23T10:00)") \
            from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def cmd_sessions(args: argparse.Namespace) -> int:
    from proxy.audit.sessions import find_sessions

    try:
        summaries = find_sessions(_sessions_root(args.root), recipient=args.recipient, release=args.release,
                                  since=_when(args.since, "--since"), until=_when(args.until, "--until"),
                                  flagged=args.flagged)
    except (FileNotFoundError, ValueError) as exc:
        print(f"safeshare audit sessions: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    bad = [summary for summary in summaries if summary.problem]
    for summary in bad:  # listed with the others; named here with the file and field, and the exit code says so
        print(f"safeshare audit sessions: session {summary.session}: {summary.problem}", file=sys.stderr)
    done = EXIT_BAD_INPUT if bad else EXIT_OK
    if args.json:
        print(json.dumps([summary.as_dict() for summary in summaries], indent=2))
        return done
    if not summaries:
        print("no sessions match")
        return EXIT_OK
    print(f"{'SESSION':<27} {'RECIPIENT':<18} {'RELEASE':<26} {'START':<20} {'MIN':>6} {'KEYS':>5} {'PTR':>6} "
          f"{'BLK':>4} {'DROP':>4} {'CUT':>4} {'LIM':>4}")
    for s in summaries:
        minutes = f"{s.duration / 60:.1f}" if s.duration is not None else "-"
        start = s.start.strftime("%Y-%m-%d %H:%M:%S") if s.start else "-"
        print(f"{s.session:<27} {(s.recipient or '-'):<18} {(s.release or '-'):<26} {start:<20} {minutes:>6} "
              f"{s.keys:>5} {s.pointer:>6} {s.keys_blocked:>4} {s.keys_dropped + s.clicks_dropped:>4} "
              f"{s.cut_text_attempts:>4} {s.limit_hits:>4}{'' if s.sealed else '  (not sealed)'}"
              f"{'  (bad: see above)' if s.problem else ''}"
              f"{_recovered_note(s) if s.recovered else ''}")
    return done


def _recovered_note(summary) -> str:
    """A recovered session in the list: what its seal says is not proven (`audit verify` checks it)."""
    lines = "?" if summary.unverified_lines is None else summary.unverified_lines
    return f"  (recovered: {lines} line(s) after its last checkpoint unverifiable)"


def _session_folder(text: str, site_text: str | None) -> Path:
    """A session folder given as a path, or as a session id under the site's sessions root."""
    path = Path(text)
    if path.is_dir():
        return path
    from deploy.site.folder import default_site

    return (Path(site_text) if site_text else default_site()) / "sessions" / text


def _site_db(args: argparse.Namespace) -> str | None:
    """The database export records its audit event in: --db, else the site's SQLite file if it exists."""
    if args.db:
        return args.db
    from deploy.site.folder import Site, default_site

    site = Site(Path(args.site) if args.site else default_site())
    return site.db_url if site.db_file.is_file() else None


def cmd_export(args: argparse.Namespace) -> int:
    """Verify first (signature, seal, recording, anchor when there is a database): a video of a session that does
    not verify is evidence of nothing, so it is refused unless --force, which stamps video and event unverified.
    The video is made from the bytes the player reads and hashes in one go; it is verified only if that hash is the
    one in the verified seal (a recording swapped between the two reads is refused as tampered)."""
    import getpass

    from deploy.site.folder import SiteError
    from proxy.audit.evidence import judge
    from proxy.audit.player import export_video, prepare
    from proxy.sessiondir import read_meta
    from safeshare.signing import KeyFileError

    folder = _session_folder(args.session, args.site)
    out = Path(args.out or f"{folder.name}.mp4")
    cache = Path(args.cache) if args.cache else folder.parent.parent / "player-cache"
    try:
        db = _site_db(args)
        args.db = db
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such session folder")
        (check,) = _check(folder, args)
    except (FileNotFoundError, KeyFileError, SiteError) as exc:
        print(f"safeshare audit export: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    findings = [str(finding) for finding in check.findings]
    event = {"session": folder.name, "video": str(out.absolute()), "verified": check.ok, "seal": check.head,
             "signed_by": check.signed_by, "anchor": check.anchor, "findings": findings[:20]}

    def audit(outcome: str) -> None:
        if db is None:
            return
        from deploy.records import Records

        records = Records(db)
        try:
            records.audit(f"cli:{getpass.getuser()}", "session-exported", outcome,
                          read_meta(folder).get("recipient"), **event)
        finally:
            records.dispose()

    def refuse() -> int:
        for finding in findings:
            print(f"safeshare audit export: {finding}", file=sys.stderr)
        if check.partial and not findings:
            print(f"safeshare audit export: {folder.name} is PARTIAL: {check.partial_note}", file=sys.stderr)
            print(f"safeshare audit export: {folder.name} is proven only up to its last checkpoint: not exported "
                  f"(--allow-partial exports it stamped partial; --force stamped unverified)", file=sys.stderr)
        else:
            print(f"safeshare audit export: {folder.name} does not verify: not exported (--force exports it stamped "
                  f"unverified)", file=sys.stderr)
        audit("refused")
        return EXIT_FINDINGS

    if not check.ok and not args.force:
        return refuse()
    try:
        player = prepare(folder, cache)  # the frames of the bytes read (and hashed) now, not of the verified read
    except (FileNotFoundError, ValueError) as exc:
        print(f"safeshare audit export: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # verified only if those bytes are the ones the seal names, and the log the player read is the verified one
    shown = judge(folder, check, player.sha256, player.log_head)
    # a recovered session accepted with --allow-partial is never `verified`: the seal's recording hash is the
    # recovering gateway's, which vouches only for what its last checkpoint proves
    partial = partial_proof(folder, check, player.sha256) if shown.verified and check.partial else None
    verified = shown.verified and partial is None
    findings = shown.findings
    event.update(verified=verified, findings=findings[:20], recording_sha256=player.sha256, partial=partial)
    if not verified and partial is None and not args.force:
        return refuse()
    signer = f"{'signed by ' + check.signed_by if check.signed_by else check.signature}, anchor {check.anchor}"
    if verified:
        stamp = f"safeshare: verified session {folder.name}: seal {check.head}, recording {player.sha256}, {signer}"
    elif partial is not None:
        stamp = (f"safeshare: PARTIAL session {folder.name} (recovered after its gateway stopped; exported with "
                 f"--allow-partial): {partial['statement']}; seal {check.head}, recording {player.sha256}, {signer}")
    else:
        stamp = f"safeshare: UNVERIFIED session {folder.name} (exported with --force): " + "; ".join(findings)[:900]
    try:
        export_video(player, out, fps=args.fps, metadata={"comment": stamp})
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"safeshare audit export: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, (FileNotFoundError, ValueError)) else EXIT_FINDINGS
    audit("ok" if verified else "partial" if partial is not None else "unverified")
    summary = {"session": folder.name, "video": str(out), "duration": player.index["duration"],
               "width": player.index["width"], "height": player.index["height"], "fps": args.fps,
               "verified": verified, "partial": partial, "recording_sha256": player.sha256, "findings": findings,
               "stamp": stamp}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        state = "" if verified else f", PARTIAL: {partial['statement']}" if partial is not None else ", UNVERIFIED"
        print(f"{out}: {summary['duration']:.1f} s at {summary['width']}x{summary['height']}, {args.fps:g} frames/s"
              f"{state}")
    return EXIT_OK


def partial_proof(folder: Path, check, decoded_sha256: str) -> dict:
    """What a recovered session's export may claim: the log lines and the recording start (bytes, and seconds of
    the video, from the bytes decoded) its gateway's last signed checkpoint proves, and a statement of it, which
    the video's comment and the summary carry: 'partial: verified up to checkpoint ..., the rest unverifiable'."""
    from proxy.audit.evidence import proven_seconds

    line = check.verified_lines
    proven = check.recording_proven
    seconds = proven_seconds(folder, decoded_sha256, proven)
    if line:
        recording = (f"the recording's first {proven['bytes']} bytes"
                     f"{f', the first {seconds:.1f} s of this video' if seconds is not None else ''}"
                     if proven else "no part of the recording")
        statement = (f"partial: verified up to checkpoint at line {line} (log lines 1-{line}; {recording}), the rest "
                     f"unverifiable ({check.unverified_lines} log line(s) after it"
                     f"{', and the recording after that' if proven else ', and the whole recording'})")
    else:
        statement = ("partial: verified up to no checkpoint (no log line and no part of the recording is proven), "
                     "the rest unverifiable")
    return {"checkpoint_line": line or None, "verified_lines": line, "unverified_lines": check.unverified_lines,
            "recording_proven_bytes": proven["bytes"] if proven else None, "recording_proven_seconds": seconds,
            "statement": statement, "note": check.partial_note}


def cmd_retention(args: argparse.Namespace) -> int:
    from deploy.records import Records
    from deploy.audit.retention import apply_retention
    from deploy.site.folder import Site, SiteError, default_site
    from proxy.db import utcnow

    try:
        site = Site(Path(args.site) if args.site else default_site(), db_url=args.db)
    except SiteError as exc:
        print(f"safeshare audit retention: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    records = Records(site.db_url)
    try:
        import getpass

        done = apply_retention(site, records, utcnow(), actor=f"cli:{getpass.getuser()}", dry_run=args.dry_run)
    finally:
        records.dispose()
    if args.json:
        print(json.dumps(done, indent=2))
    else:
        for item in done:
            print(f"{'would delete' if args.dry_run else 'deleted'} {item['session']} ({item['recipient']}, ended "
                  f"{item['end']}, kept {item['retention_days']} days)")
        print(f"{len(done)} session(s) past their retention period")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser("audit", help="verify, find and summarize recorded sessions (auditors)")
    sub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")
    sub.required = True
    verify = sub.add_parser(
        "verify", help="check hash chains, signed seals, anchors, recordings and captures; exit 1 on any finding",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Check one session folder or every session under a sessions root: the event log's hash chain,
sequence and seal, the seal's signature (by a gateway key SITE/trust.json trusts), the recording's
and capture's sealed SHA-256 and size, meta.json's log head, recipient and release; with --db, the
anchors the gateway wrote in its sessions table. Every finding names the file, the line (event log:
the altered line itself) and the problem.

What a passing check proves, and against whom:
  a reader of the folder     cannot forge anything: nothing secret is in the folder.
  a writer of the folder     can delete or rewrite files, re-chain the log and re-seal it, but cannot
                             sign the seal (the gateway's private key is not in the folder): found by the
                             signature check; a genuine older or shorter session put in its place, or a
                             deleted session, is found by the anchors (--db).
  a writer of the folder     can rewrite both the folder and its anchor (seal hash, line count,
  and of the database        recording hash), but still cannot produce a seal signed by the gateway's
                             key: found by the signature check. What is left to them is deleting whole
                             sessions with their rows; the next session's signed seal names the session
                             sealed before it, so a deletion not recorded by retention is reported (--db),
                             and a session-deleted event must name that seal's head and be dated after the
                             session's retention ended (counted from signed times). The newest session,
                             which no later seal names, needs --checkpoint: a file from `safeshare audit
                             checkpoint` the auditor keeps OUTSIDE the site; every session it names must be
                             there or deleted by such an event.
Not covered: someone holding the gateway's key (keep it readable only by the gateway; rotate it with
`safeshare custodian key rotate --purpose gateway` if it may have leaked), and events after the last
anchor of a gateway that was killed (anchored every few seconds).

Sessions sealed before signing existed (or by `safeshare proxy`, which has no key) are reported as
unsigned; --allow-unsigned accepts them (and their missing anchors) while still saying so.

A gateway killed mid-session cannot seal it; the gateway that recovers it at its next start did not
write its lines, so it vouches only up to the last checkpoint the gateway signed into the log while
the session ran (every 2 s and at every control event). Any rewrite before that checkpoint fails
here, whoever sealed afterwards; the lines after it are an unverifiable tail, and the session is
reported PARTIAL with the number of lines proven and not (exit 1; --allow-partial: exit 0, still
reported). meta.json's fields (start, end, end reason, front door, counters, limits) are signed in
the seal: an edit there is a finding.

The database: --db URL; without it, verifying the site's sessions (no PATH, or a PATH inside
SITE/sessions of --site, $SAFESHARE_SITE or /var/lib/safeshare) checks the anchors in that site's
database, SITE/db/safeshare.db, when it exists; --no-db skips them (said on stderr). A PATH outside
the site (a copy) is checked without anchors unless --db names its database.""")
    verify.add_argument("path", nargs="?", help="a session folder or a sessions root (default SITE/sessions)")
    verify_db = verify.add_mutually_exclusive_group()
    verify_db.add_argument("--db", help="the gateways' database (SQLAlchemy URL): compare seal hash, line count "
                                        "and recording hash with the anchors, report sessions without an anchor "
                                        "and recorded sessions whose folder is missing (default: the site's "
                                        "SITE/db/safeshare.db, if it exists, when verifying the site's sessions)")
    verify_db.add_argument("--no-db", action="store_true",
                           help="check no anchors, even of the site's database (a finding then needs a signature "
                                "check to show; deleted sessions and rows are not found)")
    verify.add_argument("--trust", help="trust store whose 'gateway' keys may sign seals (default SITE/trust.json)")
    verify.add_argument("--site", help="site folder whose trust.json to use (default $SAFESHARE_SITE or "
                                       "/var/lib/safeshare)")
    verify.add_argument("--checkpoint", metavar="FILE", help=VERIFY_CHECKPOINT_HELP)
    verify.add_argument("--allow-unsigned", action="store_true",
                        help="accept unsigned seals (sessions sealed before signing existed); still reported")
    verify.add_argument("--allow-partial", action="store_true",
                        help="accept sessions a restarted gateway recovered, proven up to their last signed "
                             "checkpoint; still reported PARTIAL with their unverifiable tail")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_verify)

    sessions = sub.add_parser("sessions", help="list recorded sessions with a summary, filtered",
                              description="Duration, key presses, pointer events and clicks, blocked and dropped "
                                          "input, clipboard (cut-text) attempts and limit hits per session. "
                                          "A folder that does not read as a session (a field of the wrong type, "
                                          "an unreadable file) is listed too, flagged, with its problem named on "
                                          "stderr, and the exit code is then 2; the others are listed as usual.")
    sessions.add_argument("root", nargs="?", help="sessions root (default $SAFESHARE_SITE/sessions)")
    sessions.add_argument("--recipient")
    sessions.add_argument("--release", help="dataset/id, or a dataset")
    sessions.add_argument("--since", help="sessions that started at or after (ISO date or date-time, UTC if no zone); "
                                          "the start, end and end reason are the ones the gateway signed in the "
                                          "seal (or, while a session runs, the log's connect line), not meta.json's")
    sessions.add_argument("--until", help="sessions that started before")
    sessions.add_argument("--flagged", action="store_true",
                          help="only sessions with blocked or dropped input, cut-text attempts or limit hits")
    sessions.add_argument("--json", action="store_true")
    sessions.set_defaults(func=cmd_sessions)

    export = sub.add_parser("export", help="export a recorded session to an MP4 video (ffmpeg) for case files",
                            description="Verify the session first (as `audit verify`, with the site's trust store "
                                        "and, when the site has one, its database): a session that does not verify "
                                        "is refused (exit 1) unless --force. Then decode the recording (read once, "
                                        "hashed, and decoded from that same copy into keyframes, cached by its "
                                        "SHA-256 next to the sessions root in player-cache/) and encode the whole "
                                        "session, at its screen size, with ffmpeg. The video counts as verified only "
                                        "if the hash of the bytes decoded is the recording hash in the verified "
                                        "seal: a recording swapped between the two reads is refused as tampered. "
                                        "The video's comment says whether it was verified (and the recording's "
                                        "hash), and the export is an audit event (session-exported) in the site's "
                                        "database. A session a restarted gateway recovered is proven only up to its "
                                        "last signed checkpoint (PARTIAL): refused unless --allow-partial, which "
                                        "exports it stamped 'partial: verified up to checkpoint at line N ..., the "
                                        "rest unverifiable', never verified.")
    export.add_argument("session", help="a session folder, or a session id under SITE/sessions")
    export.add_argument("--out", help="video file (default SESSION.mp4)")
    export.add_argument("--fps", type=float, default=10.0, help="frames per second (default 10)")
    export.add_argument("--site", help="site folder (default $SAFESHARE_SITE or /var/lib/safeshare)")
    export.add_argument("--cache", help="player cache folder (default SITE/player-cache)")
    export.add_argument("--db", help="SQLAlchemy URL of the site database (default: SQLite in SITE/db, if present)")
    export.add_argument("--trust", help="trust store for the seal's signature (default SITE/trust.json)")
    export.add_argument("--allow-unsigned", action="store_true", help="accept an unsigned seal (older sessions)")
    export.add_argument("--allow-partial", action="store_true",
                        help="export a session a restarted gateway recovered (PARTIAL in `audit verify`) stamped "
                             "PARTIAL, never verified: the video's comment, the summary and the event say 'partial: "
                             "verified up to checkpoint at line N' (with the recording bytes and seconds of the "
                             "video it proves) 'the rest unverifiable'")
    export.add_argument("--force", action="store_true",
                        help="export a session that does not verify, stamped UNVERIFIED in the video and the event")
    export.add_argument("--json", action="store_true")
    export.set_defaults(func=cmd_export)

    retention = sub.add_parser(
        "retention", help="delete recorded sessions past their retention period (each deletion is an audit event)",
        description="A session is kept for its recipient policy's retention_days (as provisioned), else the site's "
                    "session_retention_days, counted from its end. The custodian service runs this every hour.")
    retention.add_argument("--site", help="site folder (default $SAFESHARE_SITE or /var/lib/safeshare)")
    retention.add_argument("--db", help="SQLAlchemy URL of the site database (default: SQLite in SITE/db)")
    retention.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    retention.add_argument("--json", action="store_true")
    retention.set_defaults(func=cmd_retention)

    register_checkpoint(sub)  # audit checkpoint (deploy/audit/sequence.py)
