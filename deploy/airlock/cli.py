"""`safeshare airlock ...`: the airlock for custodians and checkers who script, under the same rules as the pages.

    list      requests (queue), filtered by state or recipient
    show      one request: texts, outputs, checks, justifications, hashes; votes as the --checker may see them
    vote      REQUEST OUTPUT approve|changes|reject --checker NAME --password-file FILE [--round N] --comment TEXT
              (NAME an active checker of the site's people, proven by their password; the requester can never vote)
    return    return a submitted or approved request to the researcher for changes
    release   package and sign an approved request (refused with "checksum mismatch" if a stored file changed)
    withdraw  withdraw an open request
    history   a recipient's airlock history: what left, when, approved by whom
    intake    run the intake over every active recipient's workspace (once, or every --interval seconds)

Exit codes: 0 done, 1 refused (a rule, a checksum mismatch), 2 bad input (no such request, bad arguments),
3 failed. `--json` prints stable fields.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_REFUSED


def _site(args: argparse.Namespace):
    from deploy.site.folder import Site, default_site
    from pathlib import Path

    return Site(Path(args.site) if args.site else default_site(), db_url=args.db)


def _airlock(args: argparse.Namespace):
    from outputs.airlock.workflow import Airlock

    site = _site(args)
    return site, Airlock.open(site.root, site.db_url)


def _actor() -> str:
    from deploy.provision import cli_actor

    return cli_actor()


def _printable(text: str) -> str:
    """What a researcher or checker wrote reaches the terminal without control characters."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def _emit(args: argparse.Namespace, document: Any, text: str) -> None:
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True, default=str))
    else:
        print(_printable(text))


def _run(command: str, func):
    """Map the airlock's errors to exit codes with one line on stderr naming the command."""
    def run(args: argparse.Namespace) -> int:
        from deploy.site.folder import SiteError
        from outputs.airlock.store import ChecksumMismatch, StoreError
        from outputs.airlock.workflow import NotFound, Refused
        from safeshare.signing import KeyFileError
        from safeshare.sitedb import SiteDatabaseError

        try:
            return func(args)
        except (Refused, ChecksumMismatch) as exc:
            print(f"safeshare airlock {command}: refused: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        except (NotFound, StoreError, SiteError, SiteDatabaseError, KeyFileError) as exc:
            print(f"safeshare airlock {command}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:
            print(f"safeshare airlock {command}: failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
    return run


def cmd_list(args: argparse.Namespace) -> int:
    _, airlock = _airlock(args)
    try:
        items = airlock.list(states=args.state or None, recipient=args.recipient)
    finally:
        airlock.close()
    lines = [f"{i['request_id']:<28} {i['state']:<10} round {i['round']:<3} {i['recipient']:<20} {i['release']:<24} "
             f"{i['decided']}/{i['outputs']} decided, updated {i['updated_at'][:19]}" for i in items]
    _emit(args, items, "\n".join(lines) if lines else "no airlock requests")
    return EXIT_OK


def _show_text(view: dict[str, Any]) -> str:
    request = view["request"]
    lines = [f"request {view['request_id']} ({view['state']}, round {view['round']}) by {view['recipient']}",
             f"release {view['release']} (seal sha256 {(request.get('release') or {}).get('seal_sha256')})",
             f"submitted {request.get('submitted_at')}", f"context: {request.get('context')}",
             f"controls: {request.get('controls')}"]
    for output in view["outputs"]:
        lines.append(f"- output {output['output_id']} {output.get('name')!r} ({output.get('kind')}, "
                     f"checks {output.get('status')})")
        for check in output.get("checks", []):
            if check.get("status") != "pass":
                lines.append(f"    check {check.get('rule')}: {check.get('status')} ({check.get('reason')})")
        if output.get("justification"):
            lines.append(f"    justification: {output['justification']}")
        for name, meta in sorted(output.get("files", {}).items()):
            lines.append(f"    {name} sha256 {meta.get('sha256')} ({meta.get('size')} bytes)")
        decision = output.get("decision")
        lines.append(f"    decision: {decision['state'] if decision else 'hidden until two checkers voted'}")
        for vote in output.get("votes", []):
            lines.append(f"    vote {vote['checker']}: {vote['vote']} at {vote['at'][:19]} {vote['comment']}")
    for name, meta in sorted((request.get("supporting") or {}).items()):
        lines.append(f"supporting {name} sha256 {meta.get('sha256')} (checkers only)")
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    _, airlock = _airlock(args)
    try:
        view = airlock.show(args.request, viewer=args.checker)
    finally:
        airlock.close()
    _emit(args, view, _show_text(view))
    return EXIT_OK


def _check_person(site, airlock, name: str, password: str, request_id: str, actor: str) -> None:
    """The CLI acts as a named person, who proves it like on the pages: an active checker of the site's people
    (deploy/custodian/people.py) with that person's password. A shell on the custodian's host is not a second checker:
    without the password one person could cast both approvals under two names. Failures are audited (without the
    password)."""
    from deploy.custodian.people import People
    from outputs.airlock.workflow import Refused

    people = People(site.db_url)
    try:
        person, why = people.authenticate(name, password)
    finally:
        people.engine.dispose()
    if person is None or person.role != "checker":
        reason = {"unknown": "is not a person of this site", "wrong-password": "gave a wrong password",
                  "disabled": "is disabled"}.get(why, "is not a checker")
        record = airlock.records.get(request_id)
        message = (f"{name} {reason}: the CLI votes as an active checker of the site's people, signed in with their "
                   f"password (safeshare custodian person add {name} --role checker)")
        airlock.records.event(actor, "voted", "refused", record.recipient if record else None,
                              request_id if record else None, checker=name, reason=f"{name} {reason}")
        raise Refused(message)


def _read_password(path: str) -> str:
    """One line from --password-file (`-`: standard input), as `custodian person add` reads it."""
    from deploy.site.folder import SiteError

    try:
        text = sys.stdin.readline() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SiteError(f"--password-file {path}: {exc}") from exc
    return text.split("\n", 1)[0].rstrip("\r")


def cmd_vote(args: argparse.Namespace) -> int:
    site, airlock = _airlock(args)
    actor = f"{_actor()} as checker:{args.checker}"
    try:
        airlock.get(args.request)
        _check_person(site, airlock, args.checker, _read_password(args.password_file), args.request, actor)
        decision = airlock.vote(args.request, args.output, args.checker, args.vote, args.comment or "", actor=actor,
                                round_=args.round)
        record = airlock.get(args.request)
    finally:
        airlock.close()
    visible = len(decision.checkers) >= 2
    document = {"request_id": args.request, "output_id": str(args.output), "checker": args.checker,
                "vote": args.vote, "request_state": record.state,
                "decision": decision.as_dict() if visible else None}
    _emit(args, document, f"{args.checker} voted {args.vote} on output {args.output} of {args.request}; output "
                          f"{decision.state if visible else 'waiting for a second checker'}; request {record.state}")
    return EXIT_OK


def cmd_return(args: argparse.Namespace) -> int:
    _, airlock = _airlock(args)
    try:
        record = airlock.return_request(args.request, _actor(), args.reason or "")
    finally:
        airlock.close()
    _emit(args, record.as_dict(), f"{record.request_id} returned to {record.recipient} for changes")
    return EXIT_OK


def cmd_release(args: argparse.Namespace) -> int:
    from safeshare.signing import ensure_outputs_key

    site, airlock = _airlock(args)
    try:
        key = ensure_outputs_key(site.root)
        record = airlock.release(args.request, key, _actor())
        package = airlock.store.package_file(args.request)
    finally:
        airlock.close()
    document = {**record.as_dict(), "package": str(package), "key_id": key.key_id}
    _emit(args, document, f"{record.request_id} released: {package} (sha256 {record.package_sha256}, key "
                          f"{key.key_id}); downloadable by {record.recipient} until {record.download_until}")
    return EXIT_OK


def cmd_withdraw(args: argparse.Namespace) -> int:
    _, airlock = _airlock(args)
    try:
        record = airlock.withdraw(args.request, _actor(), args.reason or "")
    finally:
        airlock.close()
    _emit(args, record.as_dict(), f"{record.request_id} withdrawn")
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    _, airlock = _airlock(args)
    try:
        items = airlock.history(args.recipient)
    finally:
        airlock.close()
    lines = []
    for item in items:
        lines.append(f"{item['request_id']} {item['state']} round {item['round']} release {item['release']} "
                     f"submitted {item['created_at'][:19]}"
                     + (f", released {item['released_at'][:19]}, package sha256 {item['package_sha256']}"
                        if item.get("released_at") else ""))
        for output in item["outputs"]:
            by = ", ".join(f"{a['checker']} ({a['at'][:19]})" for a in output["approved_by"]) or "-"
            files = ", ".join(f"{n} {h[:16]}" for n, h in sorted(output["files"].items()))
            lines.append(f"  output {output['output_id']}: {output['decision']}"
                         f"{' (left the site)' if output['released'] else ''}; approved by {by}; {files}")
    _emit(args, items, "\n".join(lines) if lines else f"no airlock requests by {args.recipient}")
    return EXIT_OK


def cmd_intake(args: argparse.Namespace) -> int:
    import time

    from deploy.airlock.intake import run_site_intake
    from deploy.records import Records

    site = _site(args)
    records = Records(site.db_url)
    try:
        while True:
            result = run_site_intake(site, records)
            summary = result.as_dict() if hasattr(result, "as_dict") else result
            if args.json:
                print(json.dumps(summary, sort_keys=True, default=str), flush=True)
            else:
                for item in summary.get("handled", []):
                    print(_printable(f"{item.get('recipient', '-')} request {item.get('request')} "
                                     f"{item.get('action')}: {item.get('outcome')} "
                                     f"{item.get('request_id') or item.get('reason') or ''}"), flush=True)
                for error in summary.get("errors", []):
                    print(_printable(f"error: {error}"), file=sys.stderr, flush=True)
            if args.once:
                return EXIT_OK if not summary.get("errors") else EXIT_FAILED
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        records.dispose()


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", help="site folder (default $SAFESHARE_SITE or /var/lib/safeshare)")
    parser.add_argument("--db", help="SQLAlchemy URL of the site database (default: SQLite in SITE/db)")
    parser.add_argument("--json", action="store_true", help="print JSON (stable fields)")


def register(subparsers: argparse._SubParsersAction) -> None:
    from outputs.airlock.states import STATES, VOTES  # names only: registering loads no SQLAlchemy

    top = subparsers.add_parser(
        "airlock", help="output requests: list, show, vote, return, release, withdraw, history, intake",
        description="The airlock: requests to take outputs out of an enclave, two-person review, signed release. "
                    "The same rules as the review pages: the requester never votes, each checker sees only their "
                    "own votes until two have voted, two approvals from different checkers approve an output, and "
                    "a release re-hashes every stored file first (\"checksum mismatch\" refuses it). Every step is "
                    "an airlock event (safeshare custodian events).")
    sub = top.add_subparsers(dest="airlock_command", metavar="ACTION")
    sub.required = True

    ls = sub.add_parser("list", help="requests, oldest first (the review queue: --state submitted)")
    ls.add_argument("--state", action="append", choices=STATES, help="only these states (repeatable)")
    ls.add_argument("--recipient")
    _common(ls)
    ls.set_defaults(func=_run("list", cmd_list))

    sh = sub.add_parser("show", help="one request: texts, outputs, checks, justifications, hashes, votes")
    sh.add_argument("request")
    sh.add_argument("--checker", help="show it as this checker sees it (own votes only until two have voted); "
                                      "without it, the audit view with every vote")
    _common(sh)
    sh.set_defaults(func=_run("show", cmd_show))

    vo = sub.add_parser("vote", help="vote on one output as a named checker")
    vo.add_argument("request")
    vo.add_argument("output")
    vo.add_argument("vote", choices=VOTES)
    vo.add_argument("--checker", required=True, help="the checker voting (an active person of the site)")
    vo.add_argument("--password-file", required=True, metavar="FILE",
                    help="the checker's password (first line of FILE; '-' reads it from standard input), checked "
                         "like a sign-in to the review pages: a wrong one is refused (exit 1) and audited")
    vo.add_argument("--round", type=int, default=None, metavar="N",
                    help="the round of the request you reviewed (`airlock show`): a vote for an older round, after "
                         "the researcher resubmitted, is refused instead of counting for content you did not see")
    vo.add_argument("--comment", default="", help="why (shown to the researcher once the request is decided)")
    _common(vo)
    vo.set_defaults(func=_run("vote", cmd_vote))

    rt = sub.add_parser("return", help="return a request to the researcher for changes")
    rt.add_argument("request")
    rt.add_argument("--reason", default="")
    _common(rt)
    rt.set_defaults(func=_run("return", cmd_return))

    rl = sub.add_parser("release", help="package and sign an approved request (SITE/airlock/<rid>/<id>/package.zip)")
    rl.add_argument("request")
    _common(rl)
    rl.set_defaults(func=_run("release", cmd_release))

    wd = sub.add_parser("withdraw", help="withdraw an open request")
    wd.add_argument("request")
    wd.add_argument("--reason", default="")
    _common(wd)
    wd.set_defaults(func=_run("withdraw", cmd_withdraw))

    hi = sub.add_parser("history", help="a recipient's airlock history: what left, when, approved by whom")
    hi.add_argument("recipient")
    _common(hi)
    hi.set_defaults(func=_run("history", cmd_history))

    it = sub.add_parser("intake", help="read the active recipients' workspaces: saved outputs, submissions, status")
    it.add_argument("--once", action="store_true", help="one pass, then exit")
    it.add_argument("--interval", type=float, default=1.0, help="seconds between passes (default 1)")
    _common(it)
    it.set_defaults(func=_run("intake", cmd_intake))


__all__ = ["register"]
