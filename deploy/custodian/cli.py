"""`safeshare provision|revoke|recipients|custodian`: the custodian's commands for per-recipient enclaves.

Exit codes: 0 done (or nothing to change), 1 refused or failed (no engine, kiosk not ready, no such recipient),
2 bad input (a policy or setting that cannot be used, named with its file and field).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safeshare.endpoints import parse_host_port, port_number
from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _site(args: argparse.Namespace):
    from deploy.site.folder import Site, default_site

    site = Site(Path(args.site) if args.site else default_site(), db_url=args.db)
    changed = site.configure(gateway_port=getattr(args, "gateway_port", None),
                             gateway_host=getattr(args, "gateway_host", None),
                             public_url=getattr(args, "public_url", None))
    if changed and (site.root / "site.json").exists():
        site.save_settings()
    return site


def _provisioner(args: argparse.Namespace):
    """The single-engine Provisioner, or the Swarm one (--orchestrator swarm, or a site provisioned on Swarm)."""
    from deploy.provision import Provisioner
    from deploy.swarm.reconcile import orchestrator_of

    site = _site(args)
    if (getattr(args, "orchestrator", None) or orchestrator_of(site.root)) != "swarm":
        return Provisioner(site)
    from deploy.swarm.provision import SwarmProvisioner

    recipient_node = getattr(args, "node", None)
    allow = bool(getattr(args, "allow_unencrypted_overlay", False))
    if allow:
        print("safeshare: --allow-unencrypted-overlay: enclave traffic between nodes is NOT encrypted (audited)",
              file=sys.stderr)
    pins = {}
    if recipient_node:
        from policies.recipient import PolicyError, load_recipient_policy

        try:
            pins[load_recipient_policy(Path(args.policy)).recipient] = recipient_node
        except PolicyError:
            pass  # provisioning reports the policy's error itself
    return SwarmProvisioner(site, pins=pins, allow_unencrypted=allow)


def _orchestrator_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--orchestrator", choices=("docker", "swarm"),
                        help="one Docker engine, or a Docker Swarm whose manager is this host's engine (default: "
                             "swarm once the site provisioned on a Swarm, else docker)")


def _fail(command: str, exc: Exception) -> int:
    from deploy.provision import ProvisionError

    print(f"safeshare {command}: {exc}", file=sys.stderr)
    return EXIT_REFUSED if isinstance(exc, ProvisionError) and not exc.bad_input else EXIT_BAD_INPUT


def cmd_provision(args: argparse.Namespace) -> int:
    from deploy.provision import ProvisionError, cli_actor
    from deploy.site.folder import SiteError
    from proxy.tokens import parse_ttl

    try:
        ttl = parse_ttl(args.ttl) if args.ttl else None
        provisioner = _provisioner(args)
    except (ValueError, SiteError) as exc:
        return _fail("provision", exc)
    try:
        result = provisioner.provision(args.policy, cli_actor(), new_token=args.new_token, ttl=ttl)
    except ProvisionError as exc:
        return _fail("provision", exc)
    finally:
        provisioner.close()
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
        return EXIT_OK
    print(f"{result.recipient}: {result.status} in {result.seconds:.1f} s (release {result.release}, "
          f"access until {result.expires_at:%Y-%m-%d %H:%M} UTC)")
    for note in result.notes:
        print(f"  note: {note}")
    if result.url:
        print(result.url)
    else:
        print(f"  token {result.token_id} stays valid (its URL was shown when it was issued; --new-token for a new "
              f"one)")
    return EXIT_OK


def cmd_revoke(args: argparse.Namespace) -> int:
    from deploy.provision import ProvisionError, cli_actor
    from deploy.site.folder import SiteError

    if bool(args.recipient) == bool(args.expired):
        print("safeshare revoke: give a RECIPIENT or --expired", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        provisioner = _provisioner(args)
    except SiteError as exc:
        return _fail("revoke", exc)
    try:
        if args.expired:
            results = provisioner.enforce_expiry(actor=cli_actor())
        else:
            results = [provisioner.revoke(args.recipient, cli_actor(), args.reason)]
    except ProvisionError as exc:
        return _fail("revoke", exc)
    finally:
        provisioner.close()
    if args.json:
        print(json.dumps([result.as_dict() for result in results], indent=2))
    else:
        for result in results:
            print(f"{result.recipient}: {result.status} in {result.seconds:.1f} s: {result.tokens_revoked} token(s) "
                  f"revoked, {len(result.sessions_ended)} live session(s) ended, "
                  f"{len(result.containers_removed)} container(s) and {len(result.networks_removed)} network(s) "
                  f"removed; session recordings kept")
        if not results:
            print("no expired recipients")
    return EXIT_OK


def cmd_recipients(args: argparse.Namespace) -> int:
    from deploy.site.folder import SiteError

    try:
        provisioner = _provisioner(args)
    except SiteError as exc:
        return _fail("recipients", exc)
    try:
        rows = provisioner.recipients(include_ended=args.all, with_containers=not args.no_engine)
        gateway = None if args.no_engine or args.json else provisioner.gateway_state()
    finally:
        provisioner.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if gateway is not None:  # running, stopped, absent (`safeshare site down` removed it) or unknown (no engine)
        print(f"gateway {gateway['state']}" + (f" ({gateway['container']}, {gateway['url']})"
                                               if gateway["container"] else ""))
    if not rows:
        print("no recipients")
        return EXIT_OK
    print(f"{'RECIPIENT':<24} {'STATUS':<8} {'RELEASE':<28} {'UNTIL':<11} {'TOKENS':>6} {'LIVE':>4}  CONTAINERS")
    for row in rows:
        until = (row["expires_at"] or "-")[:10]
        states = ", ".join(f"{k} {v}" for k, v in sorted(row["containers"].items())) or "-"
        print(f"{row['name']:<24} {row['status']:<8} {row['release']:<28} {until:<11} {len(row['tokens']):>6} "
              f"{len(row['live_sessions']):>4}  {states}")
    return EXIT_OK


def cmd_key_add(args: argparse.Namespace) -> int:
    from deploy.provision import cli_actor
    from deploy.records import Records

    records = Records(_site(args).db_url)
    try:
        key = records.add_key(args.name, args.role)
    except ValueError as exc:
        return _fail("custodian key add", exc)
    records.audit(cli_actor(), "api-key-add", "ok", None, key=args.name, role=args.role)
    print(json.dumps({"name": args.name, "role": args.role, "key": key}) if args.json else key)
    return EXIT_OK


def cmd_key_list(args: argparse.Namespace) -> int:
    from deploy.records import Records

    keys = Records(_site(args).db_url).keys()
    if args.json:
        print(json.dumps([key.as_dict() for key in keys], indent=2))
    else:
        for key in keys:
            print(f"{key.name:<30} {key.role:<10} {key.created_at:%Y-%m-%d} "
                  f"{'revoked ' + key.revoked_at.strftime('%Y-%m-%d') if key.revoked_at else 'active'}")
    return EXIT_OK


def cmd_key_revoke(args: argparse.Namespace) -> int:
    from deploy.provision import cli_actor
    from deploy.records import Records

    records = Records(_site(args).db_url)
    if not records.revoke_key(args.name):
        print(f"safeshare custodian key revoke: no active key named {args.name!r}", file=sys.stderr)
        return EXIT_REFUSED
    records.audit(cli_actor(), "api-key-revoke", "ok", None, key=args.name)
    print(f"revoked {args.name}")
    return EXIT_OK


def cmd_key_rotate(args: argparse.Namespace) -> int:
    """A new signing key replaces the site's release or gateway key. The old key stays in trust.json, retired now,
    with a record of the signatures it had made (the seals in SITE/releases, the signed lines of the logs in
    SITE/sessions): it still verifies those and nothing else, whatever date a copy of it writes into a signature. A
    running gateway re-reads its key file and signs its next line with the new key; releases are signed with it
    from now on."""
    import os

    from itertools import chain

    from deploy.site.key_rotation import file_signatures, site_signatures
    from deploy.provision import cli_actor
    from deploy.records import Records
    from deploy.site.folder import GATEWAY_UID, give_to_gateway
    from safeshare.signing import KeyFileError, TrustStore, rotate_key

    site = _site(args)
    gateway = args.purpose == "gateway"
    path = site.gateway_signing_key if gateway else site.release_signing_key
    if args.purpose == "outputs":  # the airlock's packages: what its ledger lists, else the packages in SITE/airlock
        from outputs.airlock.package import package_signatures
        from safeshare.signing import OUTPUTS_KEY, ledger_signatures

        path = site.root / OUTPUTS_KEY
        recorded_outputs = ledger_signatures(path)
        outputs_signed = recorded_outputs if recorded_outputs is not None else \
            list(package_signatures(site.airlock))
    try:
        kept_elsewhere = [record for name in args.also_signed for record in file_signatures(name)]
    except ValueError as exc:
        return _fail("custodian key rotate", ValueError(f"--also-signed {exc}"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        key, retired = rotate_key(path, site.trust_file, args.purpose, GATEWAY_UID if gateway else None,
                                  comment=f"{args.purpose} key of the site",
                                  signed=chain(outputs_signed if args.purpose == "outputs"
                                               else site_signatures(site, args.purpose), kept_elsewhere))
        recorded = {k.key_id: k.signed_count for k in TrustStore.load(site.trust_file).trusted(args.purpose)
                    if k.key_id in retired}
    except (OSError, KeyFileError) as exc:
        return _fail("custodian key rotate", ValueError(str(exc)))
    if gateway:
        give_to_gateway(path.parent)
        give_to_gateway(path)
    records = Records(site.db_url)
    try:
        records.audit(cli_actor(), "signing-key-rotate", "ok", None, purpose=args.purpose, key_id=key.key_id,
                      retired=retired, recorded=recorded)
    finally:
        records.dispose()
    if args.json:
        print(json.dumps({"purpose": args.purpose, "key_id": key.key_id, "path": str(path), "retired": retired,
                          "recorded": recorded, "trust": str(site.trust_file)}))
    else:
        print(f"{args.purpose} key {key.key_id} at {path}; retired: "
              f"{', '.join(f'{k} ({n} signature(s) recorded)' for k, n in recorded.items()) or 'none'} (still "
              f"trusted for those signatures only)")
    return EXIT_OK


def cmd_events(args: argparse.Namespace) -> int:
    from deploy.records import Records

    site = _site(args)
    events = Records(site.db_url).events(recipient=args.recipient, action=args.action, limit=args.limit)
    # the airlock's events (outputs saved, requested, voted, released, downloaded) beside the custodian's, by time
    from outputs.airlock.records import AirlockRecords

    airlock = AirlockRecords(site.db_url)
    try:
        airlock_events = airlock.events(recipient=args.recipient, action=args.action, limit=args.limit)
    finally:
        airlock.dispose()
    merged = sorted([(e.at, 0, e.id, e) for e in events] + [(e.at, 1, e.id, e) for e in airlock_events],
                    key=lambda item: item[:3])[-args.limit:] if args.limit > 0 else []
    events = [item[3] for item in merged]
    if args.json:
        print(json.dumps([{**event.as_dict(), "source": "airlock"} if hasattr(event, "request_id")
                          else event.as_dict() for event in events], indent=2))
    else:
        for event in events:  # nested details (an auth-failed summary's reasons) compactly, as JSON
            detail = ", ".join(f"{k}={json.dumps(v, separators=(',', ':')) if isinstance(v, (dict, list)) else v}"
                               for k, v in event.detail.items() if k not in ("containers",))
            if getattr(event, "request_id", None):
                detail = f"request={event.request_id}, {detail}" if detail else f"request={event.request_id}"
            line = (f"{event.at:%Y-%m-%d %H:%M:%S} {event.actor:<20} {event.action:<14} {event.outcome:<9} "
                    f"{event.recipient or '-':<20} {detail}")
            # details can hold what a client sent (a path, a reason): no control characters reach the terminal
            print("".join(c if c.isprintable() else repr(c)[1:-1] for c in line))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from deploy.custodian.api import parse_trusted_proxies, serve

    try:
        host, port = parse_host_port(args.listen)
        trusted = parse_trusted_proxies(args.trusted_proxy or ())
        return serve(_site(args), host, port, expiry_interval=args.expiry_interval, trusted_proxies=trusted)
    except ValueError as exc:
        return _fail("custodian serve", exc)


def _guarded(command: str, func):
    """A site folder whose settings cannot be used is bad input (exit 2) for every command."""
    def run(args: argparse.Namespace) -> int:
        from deploy.site.folder import SiteError

        try:
            return func(args)
        except SiteError as exc:
            return _fail(command, exc)
    return run


def _site_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", help="site folder: database, releases, policies, secrets, sessions "
                                       "(default $SAFESHARE_SITE or /var/lib/safeshare)")
    parser.add_argument("--db", help="SQLAlchemy URL of the site database (default: SQLite in SITE/db)")


def register(subparsers: argparse._SubParsersAction) -> None:
    pr = subparsers.add_parser(
        "provision", help="create (or check) a recipient's enclave from a recipient policy; prints the researcher URL",
        description="Create the recipient's app and kiosk containers on their own internal networks through the "
                    "Docker API, mount the sealed release the policy names read-only into the app, "
                    "join the site's gateway to the kiosk's VNC network and issue a session token. The release is "
                    "verified against SITE/trust.json (a release name only as its signed name record says: a name "
                    "re-pointed in SITE/releases, or one without a record, is refused), copied into "
                    "SITE/enclaves/<rid>/release/<dataset>/<id> (the custodian's, files 0444), the copy verified, "
                    "and the copy is what the app mounts: nothing a writer of SITE/releases adds or changes later "
                    "reaches the enclave (one copy of the release per recipient on disk; revoke removes it). "
                    "Running it "
                    "again with the same policy changes nothing; a changed policy or release replaces the enclave "
                    "and the token. Needs the images (`safeshare images build`) and a Docker engine.")
    pr.add_argument("policy", help="recipient policy YAML (recipient, release, expires, screen, limits)")
    _site_args(pr)
    pr.add_argument("--new-token", action="store_true", help="issue a new token (and URL) even if one is active")
    pr.add_argument("--ttl", help="token lifetime, e.g. 8h, 14d (default: until the policy's expiry, else 30d)")
    pr.add_argument("--gateway-port", type=port_number, help="host port of the site's gateway (default 6080)")
    pr.add_argument("--gateway-host", help="host address the gateway is published on (default 127.0.0.1)")
    pr.add_argument("--public-url", help="the URL researchers open when a TLS proxy is in front of the gateway")
    pr.add_argument("--json", action="store_true", help="print the result as JSON (stable fields)")
    _orchestrator_args(pr)
    pr.add_argument("--node", help="Swarm: the node (id or hostname) the enclave must run on (default: the node "
                                   "it runs on, else the node with the most free memory)")
    pr.add_argument("--allow-unencrypted-overlay", action="store_true",
                    help="Swarm: provision even where overlay networks cannot be encrypted (the kernel lacks IPsec "
                         "ESP with AES-GCM); audited. Only where the nodes' link is protected otherwise")
    pr.set_defaults(func=_guarded('provision', cmd_provision))

    rv = subparsers.add_parser(
        "revoke", help="end a recipient's access: live sessions, tokens, containers and networks (recordings kept)",
        description="Invalidate the recipient's tokens (the gateway ends live sessions within a second), remove "
                    "the kiosk and app containers, the networks and the VNC secret. Session recordings and the "
                    "policy as provisioned stay for the auditors. --expired does this for every recipient whose "
                    "policy expired (the custodian service does it every minute).")
    rv.add_argument("recipient", nargs="?", help="the recipient's name (as in the policy)")
    rv.add_argument("--expired", action="store_true", help="revoke every recipient whose `expires` day has ended")
    rv.add_argument("--reason", default="revoked by the custodian", help="recorded with the tokens and the event")
    _site_args(rv)
    rv.add_argument("--json", action="store_true")
    _orchestrator_args(rv)
    rv.set_defaults(func=_guarded('revoke', cmd_revoke))

    rc = subparsers.add_parser("recipients", help="who has access to what, until when, with live sessions")
    _site_args(rc)
    rc.add_argument("--all", action="store_true", help="include revoked and expired recipients")
    rc.add_argument("--no-engine", action="store_true", help="do not ask the Docker engine for container states")
    rc.add_argument("--json", action="store_true")
    _orchestrator_args(rc)
    rc.set_defaults(func=_guarded('recipients', cmd_recipients))

    cu = subparsers.add_parser("custodian", help="the custodian service (HTTP API) and its API keys and audit log")
    sub = cu.add_subparsers(dest="custodian_command", metavar="SUBCOMMAND")
    sub.required = True
    sv = sub.add_parser("serve", help="serve the custodian HTTP API (/openapi.json); enforces expiry every minute",
                        description="FastAPI service with the provisioning commands as endpoints. Every request "
                                    "needs `Authorization: Bearer <key>` (`safeshare custodian key add`); "
                                    "custodian keys may change things, auditor keys only read. The airlock's "
                                    "review pages are at /review: checkers sign in as people "
                                    "(`safeshare custodian person add NAME --role checker`).")
    _site_args(sv)
    sv.add_argument("--listen", default="127.0.0.1:8070", help="HOST:PORT (default 127.0.0.1:8070)")
    sv.add_argument("--expiry-interval", type=float, default=60.0, help="seconds between expiry checks (default 60)")
    sv.add_argument("--trusted-proxy", action="append", metavar="ADDRESS",
                    help="a reverse proxy (IP address or network) whose X-Forwarded-For/-Proto the service believes; "
                         "repeat for several. Default: none, the peer address is the source recorded for failed "
                         "authentications and their rate limit ($FORWARDED_ALLOW_IPS is ignored)")
    sv.set_defaults(func=_guarded('serve', cmd_serve))

    key = sub.add_parser("key", help="API keys for the custodian service")
    keys = key.add_subparsers(dest="key_command", metavar="ACTION")
    keys.required = True
    ka = keys.add_parser("add", help="create a key (printed once; only its hash is stored)")
    ka.add_argument("name")
    ka.add_argument("--role", choices=("custodian", "auditor"), default="custodian")
    ka.add_argument("--json", action="store_true")
    _site_args(ka)
    ka.set_defaults(func=_guarded('key add', cmd_key_add))
    kl = keys.add_parser("list", help="list keys (names and roles, never the keys)")
    kl.add_argument("--json", action="store_true")
    _site_args(kl)
    kl.set_defaults(func=_guarded('key list', cmd_key_list))
    kr = keys.add_parser("revoke", help="revoke a key")
    kr.add_argument("name")
    _site_args(kr)
    kr.set_defaults(func=_guarded('key revoke', cmd_key_revoke))
    kt = keys.add_parser(
        "rotate", help="replace the site's release or gateway signing key (what it signed stays valid)",
        description="Generate a new signing key in place of SITE/keys/release-signing.key (--purpose release) or "
                    "SITE/secrets/gateway/signing.key (--purpose gateway) and trust it in SITE/trust.json; the old "
                    "key is retired now, with a record in trust.json of the signatures it had made: the seals of "
                    "the bundles in SITE/releases (release), the signed lines (seals, checkpoints) of the session "
                    "logs in SITE/sessions (gateway). It verifies those and nothing else: a copy of the old key "
                    "cannot sign anything new, whatever time it writes into the signature. Signatures kept only "
                    "outside the site are recorded only from the files named with --also-signed. The running "
                    "gateway signs its next line with the new key (it re-reads the file).")
    kt.add_argument("--purpose", choices=("release", "gateway", "outputs"), default="gateway")
    kt.add_argument("--also-signed", action="append", default=[], metavar="FILE",
                    help="a file (JSON or JSON lines) whose signatures by the retiring key are recorded too: an "
                         "auditor's `safeshare audit checkpoint` export holds the seals of sessions that retention "
                         "has deleted from SITE/sessions since, which would otherwise no longer verify; name only "
                         "files kept out of reach of whoever may hold a copy of the old key (repeatable)")
    kt.add_argument("--json", action="store_true")
    _site_args(kt)
    kt.set_defaults(func=_guarded('key rotate', cmd_key_rotate))

    ev = sub.add_parser("events", help="the custodian audit log: who did what, when (also failed "
                                       "authentications, auth-failed, session views, session-viewed, and the "
                                       "airlock's events: output-saved, submitted, voted, released, downloaded ...)")
    ev.add_argument("--recipient")
    ev.add_argument("--action")
    ev.add_argument("--limit", type=int, default=1000)
    ev.add_argument("--json", action="store_true")
    _site_args(ev)
    ev.set_defaults(func=_guarded('events', cmd_events))

    from deploy.custodian.people_cli import register as register_people

    register_people(sub, _site_args, _guarded)
