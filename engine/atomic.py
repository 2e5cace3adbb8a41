"""Atomic output: write next to the target, fsync, then rename, so a reader never sees a half-written file or folder.

`atomic_path` does it for one file. `atomic_folder` does it for a whole folder (a release: data, report, manifest):
everything is written into a hidden temporary sibling (`.NAME.XXXX.partial`) and renamed into place at the end, by
an atomic exchange with the old folder where the kernel offers one (Linux renameat2 RENAME_EXCHANGE), so an
interrupted run leaves the previous output as it was and never new data beside an old manifest. `check_output_folder`
refuses targets that cannot be or must not be replaced (an existing file, /dev/null, a pseudo-filesystem such as
/proc, a folder holding something other than a previous release, an empty name) before any work is done.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Collection
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from safeshare.exchange import exchange as _exchange

from .errors import InputError


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success it replaces `target` in one rename."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp creates 0600; released files get the usual permissions
    try:
        yield tmp_path
        with open(tmp_path, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def check_output_file(target: str, option: str = "--out", kind: str = "") -> Path:
    """An output file must be named and must not be a folder or a device (which the atomic rename would try to
    replace); checked before the work, so that an output that cannot be written fails fast. `kind` names the file
    in the message ("CSV", "HTML")."""
    what = f"the {kind} file" if kind else "the file"
    if not target.strip():
        raise InputError(None, option, f"empty: name {what} to write")
    path = Path(target)
    if path.is_dir():
        raise InputError(None, option, f"{target} is a folder: name {what} to write")
    if path.exists() and not path.is_file():
        raise InputError(None, option, f"{target} exists and is not a regular file")
    return path


def check_output_folder(target: str | os.PathLike, replaceable: Collection[str], option: str = "--out") -> Path:
    """The absolute output folder `target`, after refusing what `atomic_folder` must not write or replace.

    An existing folder is replaced only when it is empty or holds a previous output (`manifest.json` and nothing but
    `replaceable` names): replacing a folder deletes its content, which must never hit a user's other files. The
    parent is probed by creating and removing a temporary folder, which catches read-only and pseudo filesystems
    (/proc, /sys) before the work starts. Raises InputError naming `option`."""
    text = os.fspath(target)
    if not str(text).strip():
        raise InputError(None, option, "empty: name the output folder")
    path = Path(text)
    if path.is_symlink():
        raise InputError(None, option, f"{text} is a symbolic link: name the folder itself")
    path = path.absolute()
    if path.parent == path:
        raise InputError(None, option, f"{text} cannot be replaced")
    if path.exists():
        if not path.is_dir():
            raise InputError(None, option, f"{text} exists and is not a folder")
        try:
            entries = {entry.name for entry in path.iterdir()}
        except OSError as exc:
            raise InputError(None, option, f"{text}: {exc.strerror}") from None
        foreign = sorted(entries - set(replaceable))
        if entries and (foreign or "manifest.json" not in entries):
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "") if foreign else "no manifest.json"
            raise InputError(None, option, f"{text} is a folder that does not hold a previous output ({shown}); "
                                           f"name a new or empty folder")
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(None, option, f"{text}: {ancestor} is not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=".probe.", dir=ancestor)
        os.rmdir(probe)
    except OSError as exc:
        raise InputError(None, option, f"{text}: cannot write in {ancestor} ({exc.strerror or exc})") from None
    return path


def _fsync_folder(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_file():
            with open(entry, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_folder(target: str | os.PathLike, replaceable: Collection[str] = (), option: str = "--out"
                  ) -> Iterator[Path]:
    """Yield a hidden temporary sibling of `target`; when the block succeeds it replaces `target` as a whole.

    On any exception (KeyboardInterrupt included) the temporary folder is removed and `target` is untouched. Only a
    kill between the rename and the clean-up can leave a hidden `.NAME.*.partial` or `.NAME.*.old` sibling behind,
    never a partial `target`."""
    path = check_output_folder(target, replaceable, option)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    except OSError as exc:
        raise InputError(None, option, f"{os.fspath(target)}: cannot create ({exc.strerror or exc})") from None
    umask = os.umask(0)
    os.umask(umask)
    aside: Path | None = None
    try:
        yield staging
        os.chmod(staging, 0o777 & ~umask)   # mkdtemp makes 0700; outputs get the usual permissions
        _fsync_folder(staging)
        if not path.exists():
            os.rename(staging, path)
        elif not _exchange(staging, path):
            # No atomic exchange here: move the old folder aside, move the new one in, put the old one back if that
            # fails. A crash between the two renames leaves the old output in the hidden `.old` sibling.
            aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.rename(path, aside / "old")
            try:
                os.rename(staging, path)
            except OSError:
                os.rename(aside / "old", path)
                raise
        # After an exchange `staging` holds the old output; the finally below removes it.
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        for leftover in (staging, aside):
            if leftover is not None and leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
