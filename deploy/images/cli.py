"""`safeshare images build|list`: the enclave's container images, built offline (no registry needed)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED


def cmd_build(args: argparse.Namespace) -> int:
    from deploy.images.build import build_all, image_sizes
    from deploy.images.rootfs import DEFAULT_CACHE, ImageBuildError

    bases = {}
    for item in args.base_image or []:
        layer, sep, image = item.partition("=")
        if not sep or layer not in ("base", "kiosk") or not image:
            print(f"safeshare images build: --base-image wants base=IMAGE or kiosk=IMAGE, got {item!r}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        bases[layer] = image
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if args.json else (lambda text: print(text,
                                                                                                        flush=True))
    try:
        result = build_all(Path(args.cache) if args.cache else DEFAULT_CACHE, force=args.force, base=args.base,
                           base_images=bases, say=say)
    except ImageBuildError as exc:
        print(f"safeshare images build: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    sizes = image_sizes(result.images)
    if args.json:
        print(json.dumps({name: {**image.as_dict(), "size_bytes": sizes[name]}
                          for name, image in result.images.items()}, indent=2))
    else:
        print(f"images: done in {result.seconds:.1f} s")
        for name, image in result.images.items():
            state = "built" if image.built else "cached"
            print(f"{name:<8} {image.tag:<36} {state:<7} {sizes[name] / 1e6:8.0f} MB")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from deploy.images.build import image_refs
    from deploy.images.rootfs import DEFAULT_CACHE

    refs = image_refs(Path(args.cache) if args.cache else DEFAULT_CACHE)
    print(json.dumps(refs, indent=2) if args.json else "\n".join(f"{k:<8} {v}" for k, v in refs.items()))
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    from deploy.images.build import prune_images
    from deploy.images.rootfs import DEFAULT_CACHE, ImageBuildError

    try:
        removed, in_use = prune_images(Path(args.cache) if args.cache else DEFAULT_CACHE)
    except ImageBuildError as exc:
        print(f"safeshare images prune: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    for ref in removed:
        print(f"removed {ref}")
    for ref in in_use:
        print(f"kept    {ref} (in use by a container)")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    images = subparsers.add_parser("images", help="build the container images offline (debootstrap + docker import)")
    sub = images.add_subparsers(dest="images_command", metavar="SUBCOMMAND")
    sub.required = True
    build = sub.add_parser(
        "build", help="build (or reuse) the app, gateway and kiosk images and the layers below them",
        description="Debootstrap Debian bookworm, install the needed packages in a chroot from the host's mirror, "
                    "`docker import` it, add the project's wheels (built on the host) and build the service images "
                    "with no network in any build step. Every step is cached by a key of its inputs.")
    cache_help = "cache folder for root filesystems and wheels (default $SAFESHARE_IMAGE_CACHE or " \
                 "/var/cache/safeshare/images)"
    build.add_argument("--cache", help=cache_help)
    build.add_argument("--base", choices=("debootstrap", "registry"), default="debootstrap",
                       help="how the Debian layers are made: debootstrap on this host (offline; default) or apt in "
                            "RUN steps on debian:bookworm-slim (needs a registry and a reachable mirror)")
    build.add_argument("--force", action="store_true",
                       help="rebuild every step from scratch (debootstrap, wheels, docker build --no-cache)")
    build.add_argument("--base-image", action="append", metavar="LAYER=IMAGE",
                       help="use an existing image instead of building a layer: base=IMAGE (python3, python3-venv, "
                            "tini, noVNC) or kiosk=IMAGE (a runtime image with Xvfb, x11vnc, Chromium)")
    build.add_argument("--json", action="store_true", help="print the result as JSON (progress goes to stderr)")
    build.set_defaults(func=cmd_build)
    listing = sub.add_parser("list", help="the image tags of the last complete build (what provisioning runs)")
    listing.add_argument("--cache", help=cache_help)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    prune = sub.add_parser("prune", help="remove older safeshare image tags (not those of the last build, not those "
                                         "a container uses)")
    prune.add_argument("--cache", help=cache_help)
    prune.set_defaults(func=cmd_prune)
