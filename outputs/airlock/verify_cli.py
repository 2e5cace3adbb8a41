"""`safeshare verify-output PACKAGE`: proves a released output package's origin and integrity, for anyone holding it.

Origin: the signature over the manifest is by a key the site's trust store (`--trust SITE/trust.json`, or `--site
SITE`) trusts for `outputs`. Integrity: every file's sha256 and size, the members exactly those listed, and the archive
byte for byte the deterministic rebuild. Exit 0 verified; 1 a changed byte or an untrusted key; 2 bad input (no
package file, no trust store). The trust store comes from the site or the flag, never from beside the package.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED
from safeshare.signing import TRUST_FILE


def _trust_path(args: argparse.Namespace) -> Path | None:
    if args.trust:
        return Path(args.trust)
    site = args.site or os.environ.get("SAFESHARE_SITE")
    return Path(site) / TRUST_FILE if site else None


def cmd_verify_output(args: argparse.Namespace) -> int:
    from .package import PackageError, PackageInputError, verify_package

    trust = _trust_path(args)
    if trust is None:
        print("safeshare verify-output: give the site's trust store: --trust SITE/trust.json or --site SITE",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        manifest = verify_package(args.package, trust)
    except PackageInputError as exc:
        print(f"safeshare verify-output: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PackageError as exc:
        if args.json:
            print(json.dumps({"verified": False, "package": str(args.package), "reason": str(exc)}))
        print(f"safeshare verify-output: NOT VERIFIED: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    files = [{"output_id": o["output_id"], "name": name, "sha256": meta["sha256"], "size": meta["size"]}
             for o in manifest["outputs"] for name, meta in sorted(o["files"].items())]
    if args.json:
        print(json.dumps({"verified": True, "package": str(args.package), "request_id": manifest["request_id"],
                          "recipient": manifest["recipient"], "release": manifest.get("release"),
                          "released_at": manifest["released_at"], "key_id": manifest["key_id"], "files": files,
                          "approved_by": {o["output_id"]: [v["checker"] for v in o.get("votes", [])
                                                           if v.get("vote") == "approve"]
                                          for o in manifest["outputs"]}}, indent=2, sort_keys=True))
    else:
        print(f"verified: {args.package}: request {manifest['request_id']} of {manifest['recipient']}, released "
              f"{manifest['released_at']}, signed by outputs key {manifest['key_id']}")
        for item in files:
            print(f"  files/{item['output_id']}/{item['name']} sha256 {item['sha256']} ({item['size']} bytes)")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify-output", help="verify a released output package (signature, hashes, every byte)",
        description=__doc__.split("\n\n")[0] + " Exit 0 verified, 1 changed or untrusted, 2 bad input.")
    parser.add_argument("package", help="package.zip as downloaded")
    parser.add_argument("--trust", help="the site's trust store (trust.json)")
    parser.add_argument("--site", help="the site folder whose trust.json to use (default $SAFESHARE_SITE)")
    parser.add_argument("--json", action="store_true", help="print JSON: verified, request_id, files, key_id ...")
    parser.set_defaults(func=cmd_verify_output)


__all__ = ["cmd_verify_output", "register"]
