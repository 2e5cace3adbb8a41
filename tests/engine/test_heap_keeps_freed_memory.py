"""engine._heap: loading the compiled kernels raises glibc's mmap and trim thresholds, so a large roll-up's freed work
arrays are reused by the next one instead of being faulted in again (page by page); a user's own malloc tuning is
left alone. Each case runs in a fresh interpreter: the thresholds are process-wide and cannot be unset."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine import _heap, kernels
from tests.engine.conftest import REPO

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                           reason="glibc's mallopt only")

# Ten groupings of 60,000 rows into ~40,000 classes (the merge's table and work arrays, ~2 MB, allocated and freed
# per call, the result dropped: a pattern where glibc's adaptive thresholds unmap them every time; in searches the
# faults come and go with the heap's state), after five to warm up: the minor page faults of the ten, and the
# classes.
PROBE = (
    "import resource, sys\n"
    "import numpy as np\n"
    "from engine import kernels\n"
    "{setup}\n"
    "kn = kernels.load() if {via_load} else __import__('engine._kernels_numba', fromlist=['x'])\n"
    "rows = np.random.default_rng(1).integers(0, 40, size=(4, 60000)).astype(np.int32)\n"
    "places = np.array([1, 40, 1600, 64000], np.int64)\n"
    "def digest(classes): return tuple(int(part.sum()) for part in classes) + (classes[1].size,)\n"
    "first = digest(kn.group_rows(rows, places))\n"
    "for _ in range(5): kn.group_rows(rows, places)\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(10): kn.group_rows(rows, places)\n"
    "faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
    "print(faults, digest(kn.group_rows(rows, places)) == first, first[-1])\n"
)


def _probe(via_load: bool, setup: str = "", **environ: str) -> tuple[int, bool, int]:
    env = {k: v for k, v in os.environ.items() if k not in (kernels.REFERENCE_ENV, "GLIBC_TUNABLES")
           and not (k.startswith("MALLOC_") and k.endswith("_"))}
    env.update(environ)
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup, via_load=via_load)], capture_output=True,
                         text=True, cwd=REPO, env=env, timeout=300)
    faults, same, classes = out.stdout.split()
    return int(faults), same == "True", int(classes)


@glibc
def test_loaded_kernels_reuse_freed_work_arrays():
    """With the kernels loaded through engine.kernels.load(), repeated large roll-ups fault no page in; the
    kernels imported without it (glibc's defaults) fault hundreds per roll-up here, which is what the thresholds
    remove. The classes are the same either way."""
    faults, same, classes = _probe(True)
    assert same and classes > 30000
    assert faults < 50   # the interpreter's own allocations, not ~1,000 pages per roll-up
    default_faults, _, default_classes = _probe(False)
    assert default_classes == classes
    assert default_faults > 10 * max(faults, 10), "glibc's defaults no longer fault: the setting may be moot"


@glibc
def test_the_thresholds_are_set_once_and_reported():
    faults, _, _ = _probe(False, setup="from engine import _heap; assert _heap.keep_freed_memory(); "
                                       "assert _heap.keep_freed_memory()")
    assert faults < 50


@pytest.mark.parametrize("environ, tuned", [({"MALLOC_TRIM_THRESHOLD_": "131072"}, True),
                                            ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
                                            ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, True),
                                            ({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}, False),
                                            ({"MALLOC_ARENA_MAX": "2"}, False), ({}, False)])
def test_a_users_malloc_thresholds_are_told_apart(environ, tuned):
    """The threshold variables and malloc tunables are the user's; other glibc settings are not about thresholds."""
    assert _heap.user_tuned(environ) is tuned


@glibc
def test_a_user_tuned_process_is_not_changed():
    """Under the user's MALLOC_TRIM_THRESHOLD_ the kernels load without raising the thresholds (they report False)."""
    script_setup = "from engine import _heap; print(_heap.keep_freed_memory(), end=' ')"
    env = {k: v for k, v in os.environ.items() if k != kernels.REFERENCE_ENV}
    env["MALLOC_TRIM_THRESHOLD_"] = "131072"
    out = subprocess.run([sys.executable, "-c", script_setup], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=120)
    assert out.stdout.split() == ["False"], out.stderr[-2000:]
