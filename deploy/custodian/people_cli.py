"""`safeshare custodian person add|list|disable`: the people who sign in to the review pages (people.py).

`add NAME --role checker` reads the password from `--password-file FILE` (one line, at least 12 characters), or
generates one and prints it once; only its scrypt hash is stored. Each change is an audit event. Exit codes: 0 done,
1 refused (no such active person), 2 bad input (a name, role or password file that cannot be used).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _stores(args: argparse.Namespace):
    from deploy.custodian.cli import _site
    from deploy.custodian.people import People
    from deploy.records import Records

    records = Records(_site(args).db_url)
    return records, People(records.engine)


def cmd_person_add(args: argparse.Namespace) -> int:
    from deploy.custodian.people import PersonError, generate_password
    from deploy.provision import cli_actor

    generated = args.password_file is None
    if generated:
        password = generate_password()
    else:
        try:
            password = Path(args.password_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"safeshare custodian person add: --password-file {args.password_file}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    records, people = _stores(args)
    try:
        try:
            person = people.add(args.name, args.role, password)
        except PersonError as exc:
            where = f"--password-file {args.password_file}: " if "password" in str(exc) and not generated else ""
            print(f"safeshare custodian person add: {where}{exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        records.audit(cli_actor(), "person-add", "ok", None, person=person.name, role=person.role,
                      password="generated" if generated else "from file")
    finally:
        records.dispose()
    if args.json:
        print(json.dumps({**person.as_dict(), "password": password if generated else None}))
    elif generated:
        print(f"{person.name} ({person.role}) added; password (shown once, only its hash is stored):")
        print(password)
    else:
        print(f"{person.name} ({person.role}) added")
    return EXIT_OK


def cmd_person_list(args: argparse.Namespace) -> int:
    records, people = _stores(args)
    try:
        listed = people.list()
    finally:
        records.dispose()
    if args.json:
        print(json.dumps([person.as_dict() for person in listed], indent=2))
        return EXIT_OK
    if not listed:
        print("no people")
    for person in listed:
        state = f"disabled {person.disabled_at:%Y-%m-%d}" if person.disabled_at else "active"
        print(f"{person.name:<30} {person.role:<10} {person.created_at:%Y-%m-%d} {state}")
    return EXIT_OK


def cmd_person_disable(args: argparse.Namespace) -> int:
    from deploy.provision import cli_actor

    records, people = _stores(args)
    try:
        if not people.disable(args.name):
            print(f"safeshare custodian person disable: no active person named {args.name!r}", file=sys.stderr)
            return EXIT_REFUSED
        records.audit(cli_actor(), "person-disable", "ok", None, person=args.name)
    finally:
        records.dispose()
    print(f"disabled {args.name} (their sessions have ended)")
    return EXIT_OK


def register(sub: argparse._SubParsersAction, site_args, guarded) -> None:
    """Add `person` to the `safeshare custodian` subcommands."""
    from deploy.custodian.people_roles import ROLES  # not .people: building the parser loads no SQLAlchemy

    pe = sub.add_parser("person", help="people who sign in to the review pages (checkers)",
                        description="Per-person credentials for the custodian service's review pages "
                                    "(/review): each checker signs in as themselves; votes name them.")
    acts = pe.add_subparsers(dest="person_command", metavar="ACTION")
    acts.required = True
    add = acts.add_parser("add", help="add a person (password read from a file, or generated and printed once)")
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, default="checker")
    add.add_argument("--password-file", metavar="FILE",
                     help="a file holding the password (one line, at least 12 characters); default: generate one "
                          "and print it once")
    add.add_argument("--json", action="store_true")
    site_args(add)
    add.set_defaults(func=guarded("custodian person add", cmd_person_add))
    ls = acts.add_parser("list", help="list people (names, roles, state; never passwords)")
    ls.add_argument("--json", action="store_true")
    site_args(ls)
    ls.set_defaults(func=guarded("custodian person list", cmd_person_list))
    ds = acts.add_parser("disable", help="disable a person: no more sign-ins, their sessions end")
    ds.add_argument("name")
    site_args(ds)
    ds.set_defaults(func=guarded("custodian person disable", cmd_person_disable))
