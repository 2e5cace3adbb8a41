"""`safeshare site init|down|deploy`: the custodian's site itself, as opposed to the enclaves in it.

    site init   create the site folder (settings, database folder, releases, secrets, sessions) and the two signing
                keys: SITE/keys/release-signing.key (signs releases, the custodian's user only) and
                SITE/secrets/gateway/signing.key (signs session seals, the gateway's uid only), both trusted in
                SITE/trust.json. Idempotent: existing keys are kept. Prints the key ids.
    site down   remove the site's gateway container and its front network (the last recipient's revocation leaves
                them running). Idempotent; refused while recipient enclaves remain unless --force.
    site deploy install or update the hosts of a site of several machines with Ansible (deploy/site/ansible/site.yml):
                prepares what they install here (deploy/site/artifacts.py), then runs ansible-playbook from this
                virtualenv. Idempotent: a second run changes nothing; --check shows what would change.

Exit codes: 0 done (or nothing to do), 1 refused or failed (no engine, enclaves remain, a host failed), 2 bad input
(an inventory: its file and problem), 3 (deploy) what the hosts install could not be prepared.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def _site(args: argparse.Namespace):
    from deploy.site.folder import Site, default_site

    return Site(Path(args.site) if args.site else default_site(), db_url=getattr(args, "db", None))


def cmd_init(args: argparse.Namespace) -> int:
    from deploy.site.folder import SiteError
    from safeshare.signing import KeyFileError, TrustStore

    try:
        site = _site(args)
        site.prepare()  # folders, settings and both keys
        release, gateway = site.ensure_keys()  # the keys as they are now (idempotent)
        trust = TrustStore.load(site.trust_file)
    except (SiteError, KeyFileError) as exc:
        print(f"safeshare site init: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"safeshare site init: {exc.filename or site.root}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = {"site": str(site.root), "site_id": site.site_id, "trust_file": str(site.trust_file),
              "release_key": {"key_id": release.key_id, "path": str(site.release_signing_key)},
              "gateway_key": {"key_id": gateway.key_id, "path": str(site.gateway_signing_key)},
              "trusted": [{"purpose": k.purpose, "key_id": k.key_id, "retired": k.retired} for k in trust.keys]}
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    print(f"site {site.site_id} at {site.root}")
    print(f"  release key  {release.key_id}  {site.release_signing_key}")
    print(f"  gateway key  {gateway.key_id}  {site.gateway_signing_key}")
    print(f"  trust store  {site.trust_file} ({len(trust.keys)} key(s), "
          f"{sum(1 for k in trust.keys if k.retired)} retired)")
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from deploy.provision import ProvisionError, Provisioner, cli_actor
    from deploy.site.folder import SiteError

    try:
        site = _site(args)
        if not (site.root / "site.json").is_file():
            raise SiteError(f"{site.root}: not a site folder (no site.json)")
        provisioner = Provisioner(site)
    except SiteError as exc:
        print(f"safeshare site down: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        result = provisioner.site_down(cli_actor(), force=args.force)
    except ProvisionError as exc:
        print(f"safeshare site down: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if exc.bad_input else EXIT_REFUSED
    finally:
        provisioner.close()
    if args.json:
        print(json.dumps(result, indent=2))
    elif result["containers_removed"] or result["networks_removed"]:
        print(f"site {result['site']}: removed {', '.join(result['containers_removed'] + result['networks_removed'])}")
    else:
        print(f"site {result['site']}: no gateway or front network to remove")
    return EXIT_OK


def cmd_deploy(args: argparse.Namespace) -> int:
    import time

    from deploy.site.playbook import (CONTROL_GROUP, ENCLAVE_GROUP, AnsibleMissing, InventoryError, load_inventory,
                                    playbook_command, run_playbook)
    from deploy.site.artifacts import (CONTROL_IMAGES, DEFAULT_ARTIFACTS, ENCLAVE_IMAGES, MANIFEST, ArtifactError,
                                       prepare)
    from safeshare.exitcodes import EXIT_FAILED

    started = time.monotonic()
    artifacts_dir = Path(args.artifacts) if args.artifacts else DEFAULT_ARTIFACTS
    try:
        inventory = load_inventory(Path(args.inventory),
                                   {CONTROL_GROUP: CONTROL_IMAGES, ENCLAVE_GROUP: ENCLAVE_IMAGES})
        manifest = artifacts_dir / MANIFEST
        if args.prepared:
            if not manifest.is_file():
                raise ArtifactError(f"--prepared: nothing prepared in {artifacts_dir} (no {MANIFEST})")
        else:
            prepare(artifacts_dir, inventory.image_names, say=lambda text: print(text, flush=True),
                    build=not args.no_build)
        argv = playbook_command(inventory.path.absolute(), manifest.absolute(), check=args.check, limit=args.limit,
                                verbose=args.verbose)
    except InventoryError as exc:
        print(f"safeshare site deploy: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (AnsibleMissing, ArtifactError) as exc:
        print(f"safeshare site deploy: {exc}", file=sys.stderr)
        return EXIT_FAILED
    code, recap = run_playbook(argv)
    changed = sum(host["changed"] for host in recap.values())
    verb = "would change" if args.check else "changed"
    summary = {"inventory": str(inventory.path), "check": args.check, "exit": code, "recap": recap,
               "changed": changed, "seconds": round(time.monotonic() - started, 1)}
    if args.json:
        print(json.dumps(summary))
    elif code == 0:
        print(f"site deploy: {len(recap)} host(s), {verb} {changed} thing(s) in {summary['seconds']} s")
    else:
        print(f"safeshare site deploy: ansible-playbook failed (exit {code})", file=sys.stderr)
    return EXIT_OK if code == 0 else EXIT_REFUSED


def register(subparsers: argparse._SubParsersAction) -> None:
    site = subparsers.add_parser("site", help="the custodian's site: create it and its signing keys, take its "
                                              "gateway down")
    sub = site.add_subparsers(dest="site_command", metavar="ACTION")
    sub.required = True

    def site_arg(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--site", help="site folder (default $SAFESHARE_SITE or /var/lib/safeshare)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    init = sub.add_parser(
        "init", help="create the site folder and its signing keys (idempotent); prints the key ids",
        description="Create the site folder and, unless they exist, the release signing key "
                    "(SITE/keys/release-signing.key, 0600 in a 0700 folder, the custodian's user; `safeshare "
                    "release --to SITE/releases` signs with it) and the gateway signing key "
                    "(SITE/secrets/gateway/signing.key, 0600, the gateway's uid when run as root), and trust both "
                    "public keys in SITE/trust.json (0644). Keys are otherwise created on first use. Run it as the "
                    "custodian's user: whoever can read SITE/keys can sign releases.")
    site_arg(init)
    init.set_defaults(func=cmd_init)

    down = sub.add_parser(
        "down", help="remove the site's gateway container and front network (idempotent)",
        description="Remove the site's gateway container and its front network, e.g. after the last recipient "
                    "was revoked. Refused (exit 1) while recipient enclaves remain, unless --force (their "
                    "researchers then lose access until the next provisioning brings the gateway back). Exit 0 "
                    "also when there is nothing to remove. Needs a Docker engine.")
    site_arg(down)
    down.add_argument("--db", help="SQLAlchemy URL of the site database, for the audit event (default: SQLite in "
                                   "SITE/db)")
    down.add_argument("--force", action="store_true", help="remove the gateway even while enclaves remain")
    down.set_defaults(func=cmd_down)

    deploy = sub.add_parser(
        "deploy", help="install or update a site's hosts with Ansible (control host, enclave hosts); idempotent",
        description="Turn the hosts of INVENTORY (groups safeshare_control: one host; safeshare_enclave: any number; "
                    "see deploy/site/ansible/inventory.example.yml) into a safeshare site. First prepares on this "
                    "machine what the hosts install, since they reach no registry: a local apt repository of their "
                    "Debian packages, the control host's wheels, and the offline images (`safeshare images build`, "
                    "saved as archives), all in --artifacts. Then runs deploy/site/ansible/site.yml with this "
                    "virtualenv's ansible-playbook. The control host gets the custodian service, the gateway, the "
                    "site database and the private signing keys; enclave hosts get Docker with its host firewall "
                    "rule, the images and the public keys (trust.json) only. Exit 0 done, 1 a host failed, 2 bad "
                    "inventory, 3 nothing could be prepared (Ansible not installed, no image build).")
    deploy.add_argument("inventory", help="Ansible inventory (YAML or INI)")
    deploy.add_argument("--check", action="store_true", help="show what would change (ansible-playbook --check "
                                                             "--diff); the hosts stay as they are")
    deploy.add_argument("--limit", help="only these hosts or groups (ansible-playbook --limit)")
    deploy.add_argument("--artifacts", help="folder for what the hosts install (default $SAFESHARE_SITE_CACHE or "
                                            "/var/cache/safeshare/site)")
    deploy.add_argument("--prepared", action="store_true", help="ship what --artifacts holds as it is (no new "
                                                                "image build, wheels or packages)")
    deploy.add_argument("--no-build", action="store_true", help="use the last image build instead of running "
                                                                "`safeshare images build`")
    deploy.add_argument("-v", "--verbose", action="count", default=0, help="ansible-playbook's -v (repeatable)")
    deploy.add_argument("--json", action="store_true", help="a JSON summary as the last line (recap per host)")
    deploy.set_defaults(func=cmd_deploy)
