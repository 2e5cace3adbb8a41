"""One BLAS thread for the app's linear algebra (regressions), set once through OpenBLAS's own call.

The app serves one researcher, on a host that runs other enclaves (or, in tests, other work). OpenBLAS starts a
thread per core and its threads spin while waiting for each other: on busy cores a regression's matrix products
then took 5 to 30 times longer than on one thread (measured on ADULT: X'WX of 30,000 x 32 in 30-290 ms against
5-9 ms). numpy and scipy each carry their own OpenBLAS; both are set, found among the libraries the process has
loaded. Without OpenBLAS (another BLAS, another platform) nothing changes.
"""
from __future__ import annotations

import ctypes
import threading

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_done = False
_lock = threading.Lock()


def loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return []
    return sorted(paths)


def single_threaded() -> int:
    """Set every loaded OpenBLAS to one thread (once per process; numpy and scipy.linalg must be imported first).
    Returns how many libraries were set."""
    global _done
    with _lock:
        if _done:
            return 0
        _done = True
        count = 0
        for path in loaded_openblas():
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for name in _SETTERS:
                setter = getattr(library, name, None)
                if setter is not None:
                    setter(1)
                    count += 1
                    break
        return count
