"""glibc's malloc told to keep the memory a search frees, instead of handing it back to the kernel and faulting it in
again at the next roll-up (Linux with glibc only; called once, when the compiled kernels load).

Why: a roll-up from a large base (CUP's 63,441 classes, ADULT's 19,502) allocates its hash table and work arrays,
about 1-2 MB, and frees them on return. glibc serves an allocation above its mmap threshold with fresh pages and
unmaps them on free, and gives the top of its heap back to the kernel once more than its trim threshold is free
(thresholds it adapts at run time, from 128 KB). So a roll-up touched fresh pages, and each 4 KB page costs a
page fault, with the kernel zeroing the page: measured on the 2-vCPU VM (2026-11-27), replaying a search's
base roll-ups, 250 faults per CUP roll-up and 130 per ADULT k=5 one, half to two thirds of the kernel's time (CUP
1,100-1,550 -> 580-735 us, ADULT 450-540 -> 150-200 us of thread CPU); in whole warm searches 11,000-15,000 faults
per CUP k=5 Entropy search and ~950 per ADULT k=3 one, gone with these settings (search CPU -6..-14 % and
-13..-30 %, engine_bench). Both settings are needed: the trim threshold alone leaves arrays above 128 KB to mmap
(setting a threshold also stops glibc adapting the other), the mmap threshold alone lets the heap's top go.

The cost: the process keeps up to TRIM_THRESHOLD of freed heap mapped (peak memory of the benchmark rows: +0 to
+12 MB), and arrays below MMAP_THRESHOLD come from the heap. A user who tunes malloc through the environment
(MALLOC_*_ threshold variables, glibc.malloc tunables) is left alone. Results do not depend on it.
"""
from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1    # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20   # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): a search's work arrays stay in the heap
TRIM_THRESHOLD = 64 << 20   # freed heap kept: many roll-ups' worth (CUP's ~2 MB each)

_kept: bool | None = None   # the outcome, once tried in this process


USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def user_tuned(environ=os.environ) -> bool:
    """Whether the environment sets glibc malloc's thresholds itself (left alone then): its MALLOC_*_ variables or a
    glibc.malloc tunable."""
    return any(name in environ for name in USER_SETTINGS) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process (see the module's docstring); True when they are
    set (now or before), False where this is not glibc on Linux or the user tunes malloc."""
    global _kept
    if _kept is None:
        _kept = _set_thresholds()
    return _kept


def _set_thresholds() -> bool:
    if not sys.platform.startswith("linux") or user_tuned():
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version   # glibc only: musl has mallopt as a stub
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
