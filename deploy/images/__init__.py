"""Offline container images (no registry, no network in any build step).

rootfs.py     Debian root filesystems on the host: debootstrap + apt in a chroot, cached by content
layers.py     those folders as Docker images: `docker import` (base), a layer of apt's changes (kiosk)
wheels.py     the Python wheels, built on the host: pinned dependencies and the project
dockercli.py  the few `docker` commands used
build.py      the chain base -> runtime -> kiosk layer -> app/gateway/kiosk; the API (build_all, image_refs)
hardening.py  how each image is meant to run (least privilege), for compose and provisioning
cli.py        `safeshare images build|list|prune`
"""
