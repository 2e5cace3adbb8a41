"""Offline images: Debian root filesystems from debootstrap (rootfs.py) and the service images on them (build.py)."""
