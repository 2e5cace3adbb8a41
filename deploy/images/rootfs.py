"""Debian root filesystems built on the host: `debootstrap --variant=minbase`, then `apt-get install` in a chroot.

Why on the host: there is no image registry here (nor at an air-gapped enclave site) and containers cannot reach
package mirrors, but the host reaches its Debian mirror. So every Debian package that goes into an image is fetched
and installed here, in a chroot, with the mirror the host's own apt uses.

Two layers, each a folder `<cache>/<name>-<key>/rootfs`:
- `base`: minbase plus python3 (with venv) and tini, and noVNC's static files (only its files: the package's
  dependencies, nodejs and numpy among them, are not needed to serve JavaScript). Every image starts from it.
- `kiosk`: a copy of `base` plus Xvfb, x11vnc, Chromium and fonts. Only what apt changed is shipped as a Docker layer
  on top of the base (see `changes`), so the kiosk image does not carry a second copy of the base.

The key hashes everything that determines the content (suite, mirrors, packages, parent key, FORMAT): same inputs,
same folder, reused as it is. A folder is built under a temporary name and renamed into place when complete, so a
cached layer is never half-built. Package versions are whatever the mirror serves when the layer is first built;
bump FORMAT (or pass --force) to pick up security updates.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY = "http://deb.debian.org/debian-security"
DEFAULT_CACHE = Path(os.environ.get("SAFESHARE_IMAGE_CACHE", "/var/cache/safeshare/images"))
FORMAT = 2  # bump when the way a layer is built changes, so that old cached folders are not reused


class ImageBuildError(RuntimeError):
    """A step of the image build failed; the message names the step and its log."""


@dataclass(frozen=True)
class Layer:
    """A root filesystem: its parent (None: debootstrap), the Debian packages installed on top, and packages of which
    only some files are unpacked (package, path inside it), without their dependencies."""

    name: str
    packages: tuple[str, ...]
    parent: "Layer | None" = None
    files_from: tuple[tuple[str, str], ...] = ()

    def key(self, mirror: str, security: str) -> str:
        spec = {"format": FORMAT, "suite": SUITE, "mirror": mirror, "security": security, "name": self.name,
                "packages": sorted(self.packages), "files_from": sorted(self.files_from),
                "parent": self.parent.key(mirror, security) if self.parent else None}
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


# python3-venv: the images make their virtualenv with `python3 -m venv` (ensurepip). tini: PID 1 that reaps zombies
# and forwards signals, so `docker stop` ends the services cleanly. Xauthority files are written by the kiosk itself
# (no xauth); the kiosk finds libX11 through Chromium's and x11vnc's dependencies.
BASE = Layer("base", ("python3", "python3-venv", "tini"), files_from=(("novnc", "./usr/share/novnc"),))
KIOSK = Layer("kiosk", ("xvfb", "x11vnc", "chromium", "fonts-dejavu-core", "fonts-liberation"), parent=BASE)
LAYERS = {"base": BASE, "kiosk": KIOSK}

# Dead weight in an image (the copyright files stay: they are the licences of what ships).
_SLIM = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/linda",
         "var/cache/debconf/templates.dat-old", "var/log/apt", "var/log/dpkg.log", "var/log/alternatives.log",
         "var/log/bootstrap.log")


def host_mirrors() -> tuple[str, str]:
    """The Debian mirror and security mirror the host's apt uses (deb822 or one-line sources), else the defaults."""
    mirror, security = DEFAULT_MIRROR, DEFAULT_SECURITY
    paths = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
             *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in paths:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            urls: list[str] = []
            if line.startswith("URIs:"):
                urls = line.split()[1:]
            elif line.startswith("deb "):
                urls = [part for part in line.split() if part.startswith("http")][:1]
            for url in urls:
                url = url.rstrip("/")
                if url.endswith("/debian-security"):
                    security = url
                elif url.endswith("/debian"):
                    mirror = url
    return mirror, security


def run_logged(argv: Sequence[str], log: Path, what: str, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> None:
    """Run a command with its output appended to `log`; on failure raise with the log's tail."""
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        result = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
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
    (root / "etc/dpkg/dpkg.cfg.d/90safeshare-nodoc").write_text(
        "path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\npath-exclude /usr/share/man/*\n"
        "path-exclude /usr/share/info/*\npath-exclude /usr/share/locale/*\n")


def _finish(root: Path) -> None:
    """Remove what must not ship: apt lists and caches, the chroot's policy-rc.d and resolver, machine identity,
    documentation (but not the copyright files)."""
    for path in ("var/lib/apt/lists", "var/cache/apt"):
        target = root / path
        if target.is_dir():
            for child in target.rglob("*"):
                if child.is_file() and child.name != "lock":
                    child.unlink()
    for path in _SLIM:
        target = root / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
            target.mkdir()
        elif target.exists():
            target.unlink()
    docs = root / "usr/share/doc"
    if docs.is_dir():
        for item in docs.rglob("*"):
            if (item.is_file() or item.is_symlink()) and item.name != "copyright":
                item.unlink()
    (root / "usr/sbin/policy-rc.d").unlink(missing_ok=True)
    (root / "etc/resolv.conf").unlink(missing_ok=True)
    (root / "etc/resolv.conf").write_text("")
    (root / "etc/machine-id").write_text("")
    shutil.rmtree(root / "tmp", ignore_errors=True)
    (root / "tmp").mkdir()
    os.chmod(root / "tmp", 0o1777)


def _unpack_files(root: Path, package: str, inner: str, log: Path, env: dict[str, str]) -> None:
    """Unpack `inner` (a path in the package, e.g. ./usr/share/novnc) of a .deb fetched through the chroot's apt."""
    with tempfile.TemporaryDirectory(dir=root / "tmp") as tmp:
        inside = "/" + str(Path(tmp).relative_to(root))
        run_logged(["chroot", str(root), "sh", "-c", f"cd {inside} && apt-get download -qq {package}"], log,
                   f"apt-get download {package}", env)
        debs = sorted(Path(tmp).glob(f"{package}_*.deb"))
        if not debs:
            raise ImageBuildError(f"apt-get download {package} gave no .deb (log {log})")
        fsys = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(debs[0])], stdout=subprocess.PIPE)
        result = subprocess.run(["tar", "-x", "-C", str(root), inner], stdin=fsys.stdout, capture_output=True)
        assert fsys.stdout is not None
        fsys.stdout.close()
        if fsys.wait() != 0 or result.returncode != 0:
            raise ImageBuildError(f"unpacking {inner} of {debs[0].name} failed: {result.stderr.decode().strip()}")


def layer_folder(layer: Layer, cache: Path, mirror: str, security: str) -> Path:
    return cache / f"{layer.name}-{layer.key(mirror, security)}"


def build_layer(layer: Layer, cache: Path = DEFAULT_CACHE, mirror: str | None = None, security: str | None = None,
                force: bool = False, say: Callable[[str], None] = print) -> Path:
    """The layer's folder (`rootfs/`, `layer.json`, and for a derived layer `changes.json`), built now unless the
    cache holds it complete. `force` rebuilds this layer (its parent is reused if cached)."""
    if mirror is None or security is None:
        host_mirror, host_security = host_mirrors()
        mirror, security = mirror or host_mirror, security or host_security
    key = layer.key(mirror, security)
    target = layer_folder(layer, cache, mirror, security)
    if (target / ".complete").is_file() and not force:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    parent = build_layer(layer.parent, cache, mirror, security, False, say) if layer.parent else None
    staging = Path(tempfile.mkdtemp(prefix=f".{layer.name}-{key}.", dir=cache))
    log = cache / f"{layer.name}-{key}.log"
    log.write_text("")
    root = staging / "rootfs"
    started = time.monotonic()
    try:
        if parent is None:
            say(f"images: debootstrap --variant=minbase {SUITE} from {mirror} (log {log})")
            run_logged(["debootstrap", "--variant=minbase", SUITE, str(root), mirror], log, "debootstrap")
            since_ns = 0
        else:
            say(f"images: layer {layer.name}: copy of {parent.name}")
            run_logged(["cp", "-a", "--reflink=auto", str(parent / "rootfs"), str(root)], log, "copying the parent")
            # Everything apt touches from here on gets a newer ctime than this (the ctime of copied files is the
            # time of the copy): that is how `changes` finds what this layer adds. The pauses cover the coarse
            # clock the kernel stamps inodes with.
            time.sleep(0.1)
            since_ns = time.time_ns()
            time.sleep(0.1)
        _write_apt_config(root, mirror, security)
        (root / "etc/resolv.conf").unlink(missing_ok=True)
        shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        say(f"images: layer {layer.name}: apt-get install {' '.join(layer.packages)}")
        with _Mounts(root):
            run_logged(["chroot", str(root), "apt-get", "update", "-qq"], log, "apt-get update in the chroot", env)
            run_logged(["chroot", str(root), "apt-get", "install", "-y", "-qq", *layer.packages], log,
                       "apt-get install in the chroot", env)
            for package, inner in layer.files_from:
                _unpack_files(root, package, inner, log, env)
            run_logged(["chroot", str(root), "apt-get", "clean"], log, "apt-get clean", env)
        _finish(root)
        if parent is not None:
            added, removed = changes(parent / "rootfs", root, since_ns)
            (staging / "changes.json").write_text(json.dumps({"added": added, "removed": removed}))
        installed = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
                                   capture_output=True, text=True).stdout.split("\n")
        (staging / "layer.json").write_text(json.dumps(
            {"name": layer.name, "key": key, "parent": parent.name if parent else None, "suite": SUITE,
             "mirror": mirror, "security": security, "packages": list(layer.packages),
             "files_from": [list(item) for item in layer.files_from], "installed": [p for p in installed if p],
             "seconds": round(time.monotonic() - started, 1)}, indent=2))
        (staging / ".complete").write_text("")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            subprocess.run(["umount", "-R", "-l", str(root / "proc"), str(root / "sys"), str(root / "dev")],
                           stderr=subprocess.DEVNULL, check=False)
            shutil.rmtree(staging, ignore_errors=True)
    return target


def changes(parent: Path, child: Path, since_ns: int) -> tuple[list[str], list[str]]:
    """What turns `parent` into `child`: paths (relative, "./..." as tar wants them) created or changed after
    `since_ns` (by inode change time), and paths of the parent that the child no longer has."""
    added: list[str] = []
    for dirpath, dirnames, filenames in os.walk(child):
        base = Path(dirpath)
        for name in dirnames + filenames:
            path = base / name
            if os.lstat(path).st_ctime_ns > since_ns:
                added.append("./" + str(path.relative_to(child)))
    removed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(parent):
        base = Path(dirpath)
        relative = base.relative_to(parent)
        if not os.path.lexists(child / relative):
            dirnames[:] = []  # the whole folder is gone: its parent entry covers it
            continue
        for name in dirnames + filenames:
            if not os.path.lexists(child / relative / name):
                removed.append("/" + (relative / name).as_posix())
    return sorted(added), sorted(removed)


def prune(cache: Path, keep: set[Path]) -> list[Path]:
    """Remove cached layer folders (and logs) of the known layers that are not in `keep`: a rootfs is hundreds of
    megabytes, and a changed package list leaves the old one behind."""
    removed = []
    for name in LAYERS:
        for folder in cache.glob(f"{name}-*"):
            if folder.is_dir() and folder not in keep:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
                (cache / f"{folder.name}.log").unlink(missing_ok=True)
    return removed
