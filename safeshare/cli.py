"""Entry point of the `safeshare` command.

Each component owns its subcommands through a `register(subparsers)` function, so that this module stays a thin
dispatcher and the components stay importable on their own. Exit codes: safeshare.exitcodes.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Modules that expose `register(subparsers)`; kept as names so a component can be added without touching logic.
COMPONENT_CLIS = ("engine.cli", "proxy.cli", "enclave.kiosk.cli", "deploy.cli", "enclave.app.cli", "deploy.images.cli",
                  "deploy.dockerd", "deploy.custodian.cli", "deploy.audit.cli", "deploy.site.cli",
                  "deploy.airlock.cli", "outputs.airlock.verify_cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="safeshare",
        description="Controlled-access data enclave: de-identify and gate data, run the inspecting remote desktop.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    import importlib

    for name in COMPONENT_CLIS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:  # building the parser imports every component: Ctrl+C there is an interruption too, not a traceback
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("safeshare: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
