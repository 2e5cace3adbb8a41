"""Base root filesystems built offline from Debian packages: debootstrap, then apt-get inside a chroot, then
`docker import`.

There is no image registry here (nor at an air-gapped enclave site), and containers cannot reach package mirrors:
everything that goes into an image is fetched by the host. A layer is a folder under the cache directory named by
the hash of everything that determines its content (suite, mirror, package list, parent layer); building it again
with the same inputs reuses the folder, and importing it again reuses the Docker image with that tag, so a rebuild
with nothing changed takes seconds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY = "http://deb.debian.org/debian-security"
DEFAULT_CACHE = Path(os.environ.get("SAFESHARE_IMAGE_CACHE", "/var/cache/safeshare/images"))
FORMAT = 1  # bump when the way a layer is built changes, so old cached folders are not reused


class ImageBuildError(RuntimeError):
    """A step of the image build failed; the message names the step and its log."""


@dataclass(frozen=True)
class Layer:
    """A root filesystem: its parent layer (None: debootstrap) and the Debian packages added on top."""

    name: str
    packages: tuple[str, ...]
    parent: "Layer | None" = None
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def key(self, mirror: str, security: str) -> str:
        spec = {"format": FORMAT, "suite": SUITE, "mirror": mirror, "security": security, "name": self.name,
                "packages": sorted(self.packages), "extra": self.extra,
                "parent": self.parent.key(mirror, security) if self.parent else None}
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


# What each image needs from Debian. Python and the project's virtualenv come in every image (the Dockerfiles
# install the project's wheels on top); the kiosk layer adds the display, VNC server, browser and fonts.
BASE = Layer("base", ("python3", "python3-venv", "ca-certificates", "tini", "novnc", "iproute2"))
KIOSK = Layer("kiosk", ("xvfb", "x11vnc", "chromium", "fonts-dejavu-core", "fonts-liberation", "xauth"), parent=BASE)
LAYERS = {"base": BASE, "kiosk": KIOSK}


def host_mirrors() -> tuple[str, str]:
    """The Debian mirror and security mirror the host's apt uses (deb822 or one-line sources), else the defaults."""
    mirror, security = DEFAULT_MIRROR, DEFAULT_SECURITY
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
                 *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        try:
            texts.append(path.read_text())
        except OSError:
            continue
    for text in texts:
        for line in text.splitlines():
            line = line.strip()
            urls = []
            if line.startswith("URIs:"):
                urls = line.split()[1:]
            elif line.startswith("deb "):
                urls = [part for part in line.split() if part.startswith("http")][:1]
            for url in urls:
                if url.rstrip("/").endswith("debian-security"):
                    security = url.rstrip("/")
                elif url.rstrip("/").endswith("/debian"):
                    mirror = url.rstrip("/")
    return mirror, security


def _run(argv: Sequence[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        result = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise ImageBuildError(f"{what} failed (exit {result.returncode}; log {log}):\n{tail}")


class _Mounts:
    """/proc, /sys and /dev inside the chroot while packages install (some maintainer scripts need them)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounted: list[Path] = []

    def __enter__(self) -> "_Mounts":
        for source, target, args in (("proc", "proc", ["-t", "proc"]), ("/sys", "sys", ["--rbind"]),
                                     ("/dev", "dev", ["--rbind"])):
            path = self.root / target
            path.mkdir(exist_ok=True)
            subprocess.run(["mount", *args, source, str(path)], check=True)
            if "--rbind" in args:
                subprocess.run(["mount", "--make-rslave", str(path)], check=False)
            self.mounted.append(path)
        return self

    def __exit__(self, *exc: object) -> None:
        for path in reversed(self.mounted):
            subprocess.run(["umount", "-R", "-l", str(path)], check=False)


def _write_apt_config(root: Path, mirror: str, security: str) -> None:
    (root / "etc/apt/sources.list").write_text(
        f"deb {mirror} {SUITE} main\ndeb {mirror} {SUITE}-updates main\ndeb {security} {SUITE}-security main\n")
    (root / "etc/apt/apt.conf.d/90safeshare").write_text(
        'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\nAcquire::Retries "3";\n')
    # No service starts inside the chroot (Debian's policy-rc.d convention).
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    # Documentation and man pages are dead weight in an image.
    (root / "etc/dpkg/dpkg.cfg.d/90safeshare-nodoc").write_text(
        "path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\n"
        "path-include /usr/share/doc/*/copyright\n")


def _finish(root: Path) -> None:
    """Remove what must not ship: apt lists and caches, the chroot's policy-rc.d, machine identity."""
    for path in ("var/lib/apt/lists", "var/cache/apt/archives"):
        target = root / path
        if target.is_dir():
            for child in target.iterdir():
                if child.is_file():
                    child.unlink()
    (root / "usr/sbin/policy-rc.d").unlink(missing_ok=True)
    (root / "etc/machine-id").write_text("")
    shutil.rmtree(root / "tmp", ignore_errors=True)
    (root / "tmp").mkdir(mode=0o1777)
    os.chmod(root / "tmp", 0o1777)


def build_layer(layer: Layer, cache: Path = DEFAULT_CACHE, mirror: str | None = None, security: str | None = None,
                say: Callable[[str], None] = print) -> Path:
    """The layer's root filesystem folder, built now if the cache does not hold it (built in a temporary folder and
    renamed into place: a cached layer is always complete)."""
    if mirror is None or security is None:
        host_mirror, host_security = host_mirrors()
        mirror, security = mirror or host_mirror, security or host_security
    key = layer.key(mirror, security)
    target = cache / f"{layer.name}-{key}"
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    parent = build_layer(layer.parent, cache, mirror, security, say) if layer.parent else None
    staging = Path(tempfile.mkdtemp(prefix=f".{layer.name}-{key}.", dir=cache))
    log = cache / f"{layer.name}-{key}.log"
    log.write_text("")
    root = staging / "rootfs"
    try:
        if parent is None:
            say(f"images: debootstrap {SUITE} for layer {layer.name} (log {log})")
            _run(["debootstrap", "--variant=minbase", SUITE, str(root), mirror], log, "debootstrap")
        else:
            say(f"images: layer {layer.name} from {parent.name}")
            _run(["cp", "-a", "--reflink=auto", str(parent / "rootfs"), str(root)], log, "copying the parent layer")
        _write_apt_config(root, mirror, security)
        shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        say(f"images: installing {len(layer.packages)} package(s) into {layer.name}: {' '.join(layer.packages)}")
        with _Mounts(root):
            _run(["chroot", str(root), "apt-get", "update", "-qq"], log, "apt-get update in the chroot", env)
            _run(["chroot", str(root), "apt-get", "install", "-y", "-qq", *layer.packages], log,
                 "apt-get install in the chroot", env)
            _run(["chroot", str(root), "apt-get", "clean"], log, "apt-get clean", env)
        (root / "etc/resolv.conf").write_text("")
        _finish(root)
        (staging / "layer.json").write_text(json.dumps({"name": layer.name, "key": key, "packages":
                                                        list(layer.packages), "mirror": mirror}, indent=2))
        (staging / ".complete").write_text("")
        os.replace(staging, target)
    finally:
        if staging.exists():
            subprocess.run(["umount", "-R", "-l", str(root / "proc"), str(root / "sys"), str(root / "dev")],
                           stderr=subprocess.DEVNULL, check=False)
            shutil.rmtree(staging, ignore_errors=True)
    return target


def import_layer(folder: Path, repository: str, docker: str = "docker") -> str:
    """`docker import` the layer as REPOSITORY:KEY unless an image with that tag exists; returns the tag."""
    info = json.loads((folder / "layer.json").read_text())
    tag = f"{repository}:{info['key']}"
    if subprocess.run([docker, "image", "inspect", tag], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return tag
    tar = subprocess.Popen(["tar", "-C", str(folder / "rootfs"), "--numeric-owner", "-c", "."],
                           stdout=subprocess.PIPE)
    result = subprocess.run([docker, "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                             "/usr/bin:/sbin:/bin", "--change", "ENV LANG=C.UTF-8", "-", tag],
                            stdin=tar.stdout, capture_output=True, text=True)
    assert tar.stdout is not None
    tar.stdout.close()
    tar.wait()
    if tar.returncode != 0 or result.returncode != 0:
        raise ImageBuildError(f"docker import of {folder} as {tag} failed: {result.stderr.strip()}")
    return tag
