"""`safeshare images build|list`: the enclave's container images, built offline (no registry needed)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def cmd_build(args: argparse.Namespace) -> int:
    from deploy.images.build import build_all, image_sizes
    from deploy.images.rootfs import DEFAULT_CACHE, ImageBuildError

    bases = {}
    for item in args.base_image or []:
        layer, sep, image = item.partition("=")
        if not sep or layer not in ("base", "kiosk"):
            print(f"safeshare images build: --base-image wants base=IMAGE or kiosk=IMAGE, got {item!r}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        bases[layer] = image
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if args.json else print
    try:
        images = build_all(Path(args.cache) if args.cache else DEFAULT_CACHE, force=args.force, base_images=bases,
                           say=say)
    except ImageBuildError as exc:
        print(f"safeshare images build: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    sizes = image_sizes(images)
    if args.json:
        print(json.dumps({name: {**image.as_dict(), "size_bytes": sizes[name]} for name, image in images.items()},
                         indent=2))
    else:
        for name, image in images.items():
            state = "built" if image.built else "cached"
            print(f"{name:<8} {image.tag:<36} {state:<7} {image.seconds:6.1f} s {sizes[name] / 1e6:8.0f} MB  "
                  f"on {image.base}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    images = subparsers.add_parser("images", help="build the container images offline (debootstrap + docker import)")
    sub = images.add_subparsers(dest="images_command", metavar="SUBCOMMAND")
    sub.required = True
    build = sub.add_parser("build", help="build (or reuse) the base layers and the app, gateway and kiosk images",
                           description="Debootstrap Debian bookworm, install the needed packages in a chroot from the "
                                       "host's mirror, `docker import` it, then build the service images with the "
                                       "project's wheels (no network inside any build step). Cached by content.")
    build.add_argument("--cache", help="cache folder for root filesystems and wheels "
                                       "(default $SAFESHARE_IMAGE_CACHE or /var/cache/safeshare/images)")
    build.add_argument("--force", action="store_true", help="rebuild the service images even if their tags exist")
    build.add_argument("--base-image", action="append", metavar="LAYER=IMAGE",
                       help="use an existing image as a base layer instead of the offline one (sites with a "
                            "registry: base=..., kiosk=...)")
    build.add_argument("--json", action="store_true", help="print the result as JSON")
    build.set_defaults(func=cmd_build)
