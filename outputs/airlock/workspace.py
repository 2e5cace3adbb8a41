"""The airlock's part of an app workspace (STATE), named once, and safe IO for a host process touching it.

The enclave's app writes its workspace; the host-side intake reads it and writes status files back. Layout:

    STATE/outputs/<id>/                      saved outputs (enclave.app.output_store: data.csv, meta.json, ...)
    STATE/airlock/requests/<n>/request.json  the draft request the app writes
    STATE/airlock/requests/<n>/supporting/   supporting files for the checkers only (never released)
    STATE/airlock/outbox/<n>.json            the app's "please submit request n" (written atomically)
    STATE/airlock/status/<n>.json            written ONLY by the host side: state, site request id, decisions and
                                             visible checker comments, the reason of a refusal

Why safe IO: everything under STATE is writable by the enclave, which may plant a symlink (to the site's keys, to
another recipient's store) or a FIFO (to hang the intake) or a huge file where the host expects a small JSON. Every
path component is therefore opened relative to its parent's descriptor with O_NOFOLLOW; only directories and regular
files (with one link) are accepted; sizes are checked with fstat before a byte is read, and reads stop at the cap.
A symlink is refused with UnsafePathError, never followed. Writes (status files) go to a temporary file created
O_EXCL|O_NOFOLLOW in the folder's descriptor and are renamed over the name, which replaces a planted link itself.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

AIRLOCK_DIR = "airlock"
REQUESTS_DIR = "requests"
OUTBOX_DIR = "outbox"
STATUS_DIR = "status"
SUPPORTING_DIR = "supporting"
REQUEST_FILE = "request.json"
OUTPUTS_DIR = "outputs"  # STATE/outputs, where the app saves outputs (enclave.app.output_store names it from here)

MAX_JSON_BYTES = 256 * 1024  # request.json, outbox and status entries, an output's meta.json is read with its own cap
MAX_ENTRIES = 1000  # names read from one folder at most
MAX_APP_NUMBER = 999_999_999
_NUMBER = re.compile(r"[1-9][0-9]{0,8}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class WorkspaceError(ValueError):
    """Something in a workspace that the host will not read or write: names the path and the problem."""


class UnsafePathError(WorkspaceError):
    """A symlink, device, FIFO, hard-linked file or other non-plain entry where a plain file or folder was expected."""


class TooLargeError(WorkspaceError):
    """A file over its size cap (refused before it is read)."""


def valid_number(text: object) -> bool:
    """Whether `text` can be an app request number (a positive integer, no padding)."""
    return isinstance(text, (str, int)) and not isinstance(text, bool) and bool(_NUMBER.fullmatch(str(text)))


def valid_name(name: object) -> bool:
    """Whether `name` is a plain file name the airlock accepts (no path, no leading dot, bounded)."""
    return isinstance(name, str) and bool(_NAME.fullmatch(name)) and name not in (".", "..")


@dataclass(frozen=True)
class Layout:
    """The airlock paths of one workspace (STATE). For the app, which writes drafts and outbox entries (plain paths
    are fine inside the enclave); the host uses the relative parts with the safe-IO functions below."""

    state: Path

    @property
    def airlock(self) -> Path:
        return Path(self.state) / AIRLOCK_DIR

    @property
    def requests(self) -> Path:
        return self.airlock / REQUESTS_DIR

    @property
    def outbox(self) -> Path:
        return self.airlock / OUTBOX_DIR

    @property
    def status(self) -> Path:
        return self.airlock / STATUS_DIR

    @property
    def outputs(self) -> Path:
        return Path(self.state) / OUTPUTS_DIR

    def request_dir(self, number: int | str) -> Path:
        return self.requests / str(int(number))

    def request_file(self, number: int | str) -> Path:
        return self.request_dir(number) / REQUEST_FILE

    def supporting_dir(self, number: int | str) -> Path:
        return self.request_dir(number) / SUPPORTING_DIR

    def outbox_file(self, number: int | str) -> Path:
        return self.outbox / f"{int(number)}.json"

    def status_file(self, number: int | str) -> Path:
        return self.status / f"{int(number)}.json"

    def output_dir(self, output_id: int | str) -> Path:
        return self.outputs / str(int(output_id))


# Relative parts (for the safe-IO functions, which take a root and a tuple of names).
def rel_request(number: int | str) -> tuple[str, ...]:
    return (AIRLOCK_DIR, REQUESTS_DIR, str(int(number)), REQUEST_FILE)


def rel_supporting(number: int | str) -> tuple[str, ...]:
    return (AIRLOCK_DIR, REQUESTS_DIR, str(int(number)), SUPPORTING_DIR)


def rel_outbox() -> tuple[str, ...]:
    return (AIRLOCK_DIR, OUTBOX_DIR)


def rel_status() -> tuple[str, ...]:
    return (AIRLOCK_DIR, STATUS_DIR)


def rel_output(output_id: int | str) -> tuple[str, ...]:
    return (OUTPUTS_DIR, str(int(output_id)))


@dataclass(frozen=True)
class Workspace:
    """One recipient's workspace as the intake sees it: where it is and whose it is (from the custodian's records,
    never from anything in the workspace)."""

    path: Path
    recipient: str
    rid: str
    release: str  # dataset/id of the release the recipient was given
    release_seal_sha256: str | None = None

    @property
    def layout(self) -> Layout:
        return Layout(Path(self.path))


# --- safe IO -----------------------------------------------------------------------------------------------------

def _where(root: Path, parts: tuple[str, ...]) -> str:
    return str(Path(root, *parts))


def _check_part(root: Path, parts: tuple[str, ...], part: str) -> None:
    if not part or part in (".", "..") or "/" in part or "\0" in part:
        raise UnsafePathError(f"{_where(root, parts)}: {part!r} is not a plain name")


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise WorkspaceError(f"{root}: workspace folder not readable: {exc.strerror or exc}") from None


@contextmanager
def open_dir(root: str | os.PathLike[str], parts: tuple[str, ...] = (), create: bool = False) -> Iterator[int]:
    """A descriptor of folder ROOT/parts, each component opened with O_NOFOLLOW relative to its parent (created
    0o755 when `create`). FileNotFoundError when a component is missing (and not created); UnsafePathError for a
    symlink or anything but a folder. The root itself is given by the host (custodian's records) and trusted."""
    root = Path(root)
    fd = _open_root(root)
    try:
        for index, part in enumerate(parts):
            _check_part(root, parts[:index], part)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = _open_child_dir(root, parts[:index + 1], part, fd)
            except OSError as exc:
                raise _unsafe(root, parts[:index + 1], exc) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_child_dir(root: Path, parts: tuple[str, ...], part: str, parent: int) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _unsafe(root, parts, exc) from None


def _unsafe(root: Path, parts: tuple[str, ...], exc: OSError) -> WorkspaceError:
    import errno

    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return UnsafePathError(f"{_where(root, parts)}: not a plain folder (a symlink or a file); refused, not "
                               f"followed")
    return WorkspaceError(f"{_where(root, parts)}: {exc.strerror or exc}")


def _read_at(dir_fd: int, name: str, where: str, max_bytes: int) -> bytes:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        import errno

        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise UnsafePathError(f"{where}: a symlink; refused, not followed") from None
        raise WorkspaceError(f"{where}: not readable: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePathError(f"{where}: not a regular file")
        if info.st_nlink != 1:
            raise UnsafePathError(f"{where}: has {info.st_nlink} hard links; only a plain file is read")
        if info.st_size > max_bytes:
            raise TooLargeError(f"{where}: {info.st_size} bytes, more than the {max_bytes} allowed")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise TooLargeError(f"{where}: grew past the {max_bytes} bytes allowed while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(root: str | os.PathLike[str], parts: tuple[str, ...], max_bytes: int) -> bytes:
    """The bytes of ROOT/parts (a regular file with one link, at most `max_bytes`), never following a symlink.
    FileNotFoundError when missing; UnsafePathError / TooLargeError / WorkspaceError otherwise."""
    if not parts:
        raise WorkspaceError(f"{root}: no file named")
    root = Path(root)
    _check_part(root, parts[:-1], parts[-1])
    with open_dir(root, parts[:-1]) as fd:
        return _read_at(fd, parts[-1], _where(root, parts), max_bytes)


def read_json(root: str | os.PathLike[str], parts: tuple[str, ...], max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file read with `read_file`; WorkspaceError naming the file when it is not UTF-8 JSON."""
    data = read_file(root, parts, max_bytes)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # nested too deep: RecursionError, not ValueError
        raise WorkspaceError(f"{_where(Path(root), parts)}: not UTF-8 JSON: {exc}") from None


def list_dir(root: str | os.PathLike[str], parts: tuple[str, ...] = (),
             max_entries: int = MAX_ENTRIES) -> list[tuple[str, str]]:
    """(name, kind) of the entries of ROOT/parts, sorted, kind in file|dir|other (a symlink is `other`, lstat-ed
    relative to the folder's descriptor, never followed). [] when the folder is missing. Hidden names are skipped
    (temporary files of atomic writes). More than `max_entries` names is a WorkspaceError."""
    root = Path(root)
    try:
        ctx = open_dir(root, parts)
        fd = ctx.__enter__()
    except FileNotFoundError:
        return []
    try:
        names = []
        with os.scandir(fd) as entries:  # stops at max_entries + 1: a folder of millions is not read whole each pass
            for entry in entries:
                names.append(entry.name)
                if len(names) > max_entries:
                    raise WorkspaceError(f"{_where(root, parts)}: more than the {max_entries} entries read")
        out = []
        for name in sorted(names):
            if name.startswith("."):
                continue
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            kind = "file" if stat.S_ISREG(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode) else "other"
            out.append((name, kind))
        return out
    finally:
        ctx.__exit__(None, None, None)


def write_file(root: str | os.PathLike[str], parts: tuple[str, ...], data: bytes, mode: int = 0o644) -> None:
    """Replace ROOT/parts with `data` atomically (folders created as needed, each without following a link): a temp
    file made O_EXCL|O_NOFOLLOW in the folder, synced, renamed over the name (which replaces a planted symlink or
    file itself, never what it points to). A folder in the way is an UnsafePathError."""
    if not parts:
        raise WorkspaceError(f"{root}: no file named")
    root = Path(root)
    name = parts[-1]
    _check_part(root, parts[:-1], name)
    with open_dir(root, parts[:-1], create=True) as dir_fd:
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None and stat.S_ISDIR(info.st_mode):
                raise UnsafePathError(f"{_where(root, parts)}: a folder where a file is written; refused")
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise


def write_json(root: str | os.PathLike[str], parts: tuple[str, ...], document: Any) -> None:
    write_file(root, parts, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def remove_file(root: str | os.PathLike[str], parts: tuple[str, ...]) -> bool:
    """Unlink ROOT/parts (the entry itself: a symlink is removed, not followed); False when it was not there."""
    root = Path(root)
    _check_part(root, parts[:-1], parts[-1])
    try:
        with open_dir(root, parts[:-1]) as dir_fd:
            info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                raise UnsafePathError(f"{_where(root, parts)}: a folder, not a file")
            os.unlink(parts[-1], dir_fd=dir_fd)
            return True
    except FileNotFoundError:
        return False


def write_json_atomic(path: str | os.PathLike[str], document: Any) -> None:
    """For the app inside the enclave (its own folder): write `path` whole via a temp file and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write((json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["AIRLOCK_DIR", "Layout", "MAX_JSON_BYTES", "OUTBOX_DIR", "OUTPUTS_DIR", "REQUESTS_DIR", "REQUEST_FILE",
           "STATUS_DIR", "SUPPORTING_DIR", "TooLargeError", "UnsafePathError", "Workspace", "WorkspaceError",
           "list_dir", "open_dir", "read_file", "read_json", "rel_outbox", "rel_output", "rel_request", "rel_status",
           "rel_supporting", "remove_file", "valid_name", "valid_number", "write_file", "write_json",
           "write_json_atomic"]
