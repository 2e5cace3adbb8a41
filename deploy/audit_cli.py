"""`safeshare audit verify|sessions|export|retention`: the auditors' commands over a site's recorded sessions.

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

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2


def _sessions_root(text: str | None) -> Path:
    if text:
        return Path(text)
    from deploy.site import default_site

    return default_site() / "sessions"


def _known_folders(db: str | None) -> list[str]:
    if not db:
        return []
    from proxy.tokens import SessionBook, TokenStore

    store = TokenStore(db)
    try:
        return [info.folder for info in SessionBook(store).list()]
    finally:
        store.dispose()


def cmd_verify(args: argparse.Namespace) -> int:
    from proxy.audit.verify import verify_path

    try:
        checks = verify_path(_sessions_root(args.path), _known_folders(args.db))
    except FileNotFoundError as exc:
        print(f"safeshare audit verify: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    bad = [check for check in checks if not check.ok]
    if args.json:
        print(json.dumps({"sessions": len(checks), "ok": len(checks) - len(bad),
                          "findings": sum(len(c.findings) for c in bad),
                          "checks": [check.as_dict() for check in checks]}, indent=2))
    else:
        for check in checks:
            if check.ok:
                print(f"ok       {check.session}  {check.lines} lines, seal {check.head}")
            else:
                print(f"FAILED   {check.session}")
                for finding in check.findings:
                    print(f"         {finding}")
        print(f"{len(checks)} session(s): {len(checks) - len(bad)} ok, {len(bad)} with findings")
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
    if args.json:
        print(json.dumps([summary.as_dict() for summary in summaries], indent=2))
        return EXIT_OK
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
              f"{s.cut_text_attempts:>4} {s.limit_hits:>4}{'' if s.sealed else '  (not sealed)'}")
    return EXIT_OK


def _session_folder(text: str, site_text: str | None) -> Path:
    """A session folder given as a path, or as a session id under the site's sessions root."""
    path = Path(text)
    if path.is_dir():
        return path
    from deploy.site import default_site

    return (Path(site_text) if site_text else default_site()) / "sessions" / text


def cmd_export(args: argparse.Namespace) -> int:
    from proxy.audit.player import export_video, prepare

    folder = _session_folder(args.session, args.site)
    out = Path(args.out or f"{folder.name}.mp4")
    cache = Path(args.cache) if args.cache else folder.parent.parent / "player-cache"
    try:
        player = prepare(folder, cache)
        export_video(player, out, fps=args.fps)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"safeshare audit export: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, (FileNotFoundError, ValueError)) else EXIT_FINDINGS
    summary = {"session": folder.name, "video": str(out), "duration": player.index["duration"],
               "width": player.index["width"], "height": player.index["height"], "fps": args.fps}
    print(json.dumps(summary, indent=2) if args.json else f"{out}: {summary['duration']:.1f} s at "
          f"{summary['width']}x{summary['height']}, {args.fps:g} frames/s")
    return EXIT_OK


def cmd_retention(args: argparse.Namespace) -> int:
    from deploy.records import Records
    from deploy.retention import apply_retention
    from deploy.site import Site, SiteError, default_site
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
        "verify", help="check hash chains, seals, recordings and captures; exit 1 on any finding",
        description="Check one session folder or every session under a sessions root: the event log's hash chain, "
                    "sequence and seal, the recording's and capture's sealed SHA-256 and size, meta.json's log "
                    "head. Every finding names the file, the line (event log) and the problem.")
    verify.add_argument("path", nargs="?", help="a session folder or a sessions root (default $SAFESHARE_SITE/sessions)")
    verify.add_argument("--db", help="also report sessions the gateways' session table (this database URL) records "
                                     "whose folder is missing")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_verify)

    sessions = sub.add_parser("sessions", help="list recorded sessions with a summary, filtered",
                              description="Duration, key presses, pointer events and clicks, blocked and dropped "
                                          "input, clipboard (cut-text) attempts and limit hits per session.")
    sessions.add_argument("root", nargs="?", help="sessions root (default $SAFESHARE_SITE/sessions)")
    sessions.add_argument("--recipient")
    sessions.add_argument("--release", help="dataset/id, or a dataset")
    sessions.add_argument("--since", help="sessions that started at or after (ISO date or date-time, UTC if no zone)")
    sessions.add_argument("--until", help="sessions that started before")
    sessions.add_argument("--flagged", action="store_true",
                          help="only sessions with blocked or dropped input, cut-text attempts or limit hits")
    sessions.add_argument("--json", action="store_true")
    sessions.set_defaults(func=cmd_sessions)

    export = sub.add_parser("export", help="export a recorded session to an MP4 video (ffmpeg) for case files",
                            description="Decode the recording (prepared once into keyframes, cached next to the "
                                        "sessions root in player-cache/) and encode the whole session, at its screen "
                                        "size, with ffmpeg.")
    export.add_argument("session", help="a session folder, or a session id under SITE/sessions")
    export.add_argument("--out", help="video file (default SESSION.mp4)")
    export.add_argument("--fps", type=float, default=10.0, help="frames per second (default 10)")
    export.add_argument("--site", help="site folder (default $SAFESHARE_SITE or /var/lib/safeshare)")
    export.add_argument("--cache", help="player cache folder (default SITE/player-cache)")
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
