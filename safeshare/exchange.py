"""Swap two paths in one atomic step: what lets a writer replace a whole folder (a release, a frozen airlock
request) so that a reader sees the old one or the new one, never neither. Here, below every package, so that the
engine's atomic_folder (the engine knows only safeshare/) and the airlock store (outputs/) share one copy."""
from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap `a` and `b` (Linux renameat2 RENAME_EXCHANGE); False when the system cannot, so the caller falls back.
    Raises OSError (naming `b`) for any other failure."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))
