"""The compiled per-check path: roll-up, class sizes, the minimal-class-size decision and the quality sums of one
transformation, each one pass over the classes in numba.

Why: a search checks thousands of transformations and each check is a handful of numpy calls over a few thousand
classes (a key update per changed attribute, a hash factorization, a bincount, masks, dot products): the calls' fixed
costs and temporaries, not the arithmetic, dominate. Compiled, the roll-up is one loop with an open-addressing hash
table, and the decision and the quality sums ride along in the same loop over the new classes.

The numpy code in engine.classes, engine.search.evaluator and engine.quality stays the reference. Every result
here is the reference's to the last bit: classes are numbered in order of first appearance, sizes and the quality
sums are integers (the Loss sums are Σ size x hierarchy rows under the label, divided once; Non-Uniform Entropy's
suppressed records per value are counts), and what is floating point after that either runs through the same numpy
code on both paths or replays numpy's order of operations (Non-Uniform Entropy's terms, engine._entropy_numba, used
only once a check in the process shows its sums equal numpy's). tests/engine/test_compiled_checks.py compares the
two.

Which path runs (`for_search`): the numpy reference when the environment variable SAFESHARE_REFERENCE_PATH is set
to anything but "" or "0" (or SAFESHARE_NO_NUMBA hides numba from the whole engine); otherwise the compiled one for
every search once numba is loaded in the process, and for the first search of a process when it is big enough to pay
for loading numba (lattice size x records >= MIN_WORK; about a second: importing numba and loading the kernels, which
are compiled once per machine, `cache=True`) or when SAFESHARE_COMPILED_PATH is set (tests use it to run small
searches compiled). Commands that never search, and small searches, never import numba.
"""
from __future__ import annotations

import os

REFERENCE_ENV = "SAFESHARE_REFERENCE_PATH"
COMPILED_ENV = "SAFESHARE_COMPILED_PATH"
THREADS_ENV = "SAFESHARE_SEARCH_THREADS"
# Rolling up ahead on a worker thread (Flash2P's floor sweep, branch and bound) only when asked for ("1"): since the
# roll-ups got cheap (lazy class tables, round 3) the two threads' GIL hand-overs cost the search more than the
# roll-ups it moves, at every load measured on this 2-core machine (2026-11-27, threads off / on: ADULT k=5
# 0.24-0.25 / 0.31-0.33 s, ADULT t-closeness 0.41 / 0.60-0.62 s, CUP k=5 Entropy 0.28-0.32 / 0.43-0.47 s)
ROLL_AHEAD_ENV = "SAFESHARE_ROLL_AHEAD"
# Lattice size x records from which a search loads numba: ADULT's 12,960 transformations x 30,162 records (3.9e8)
# save more than the load costs; the small tables of the tests (< 1e5) finish before numba would be imported.
MIN_WORK = 1e8

_kernels = None          # the compiled functions, once loaded
_unavailable = False     # numba could not be imported


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def reference_forced() -> bool:
    """True when the environment asks for the numpy reference path."""
    return _flag(REFERENCE_ENV) or bool(os.environ.get("SAFESHARE_NO_NUMBA"))


def load():
    """The compiled kernels (a module), or None when the reference path is forced or numba is missing. Importing
    numba and loading the kernels happens on the first call only."""
    global _kernels, _unavailable
    if reference_forced() or _unavailable:
        return None
    if _kernels is None:
        try:
            import numba  # noqa: F401
        except ImportError:   # pragma: no cover - numba is a core dependency; depends on the installation
            _unavailable = True
            return None
        from . import _heap, _kernels_numba

        _heap.keep_freed_memory()   # the roll-ups' work arrays stay mapped instead of faulting in again (_heap)
        _kernels = _kernels_numba
    return _kernels


def loaded():
    """The kernels if already loaded in this process and the reference path is not forced; never imports numba."""
    return None if reference_forced() else _kernels


def default():
    """For class tables built outside a search (one view for a report, a partition's check): the kernels when
    already loaded, or when SAFESHARE_COMPILED_PATH asks for them; never imports numba otherwise."""
    if reference_forced():
        return None
    return load() if _flag(COMPILED_ENV) else _kernels


def for_search(lattice_size: int, records: int):
    """The kernels a search of this size should use, or None for the reference path (see the module's docstring)."""
    if reference_forced():
        return None
    if _kernels is not None or _flag(COMPILED_ENV) or float(lattice_size) * float(records) >= MIN_WORK:
        return load()
    return None


def threads_allowed() -> bool:
    """Whether a search may roll up ahead on a worker thread (engine.classes.ClassCache.prefetch): unless
    SAFESHARE_SEARCH_THREADS is "1" (or "0"); the results are the same either way."""
    return os.environ.get(THREADS_ENV, "") not in ("0", "1")


def roll_ahead_allowed() -> bool:
    """Whether a search rolls up ahead on a worker thread: only where SAFESHARE_ROLL_AHEAD is "1" (and threads are
    allowed). Off by default: measured, the hand-overs cost more than the roll-ups moved (ROLL_AHEAD_ENV's comment);
    the results are the same either way."""
    return threads_allowed() and os.environ.get(ROLL_AHEAD_ENV, "") == "1"


def enabled() -> bool:
    return load() is not None


def compiled_signatures() -> int:
    """How many compiled signatures the engine's numba functions hold in this process: it grows when a call compiles
    a kernel or loads it from numba's cache. `auto` uses it to tell a sampled check that paid such a one-time cost
    (on a fresh clone several kernels compile at different checks: the roll-up at the first, the roll-up source at
    a later one) from a check's own cost. Never imports numba.

    Called twice per sampled check, so the scan is remembered: the engine's modules are listed again only when
    sys.modules changes size, and a module's numba functions only when its namespace does (a function added to a
    module later is found, as the test of this counter does); what is summed each call is the signatures of the
    functions found."""
    import sys

    if "numba" not in sys.modules:
        return 0
    from numba.core.dispatcher import Dispatcher

    global _scanned_modules
    if _scanned_modules is None or _scanned_modules[0] != len(sys.modules):
        engine_modules = [module for name, module in list(sys.modules.items())
                          if module is not None and (name == "engine" or name.startswith("engine."))]
        _scanned_modules = (len(sys.modules), {id(module): [module, -1, []] for module in engine_modules})
    count = 0
    for entry in _scanned_modules[1].values():
        namespace = vars(entry[0])
        if len(namespace) != entry[1]:
            entry[1] = len(namespace)
            entry[2] = [value for value in list(namespace.values()) if isinstance(value, Dispatcher)]
        for dispatcher in entry[2]:
            count += len(dispatcher.overloads)   # what `signatures` lists, without building the list
    return count


# (len(sys.modules) when scanned, {id: [engine module, size of its namespace when scanned, its numba functions]})
_scanned_modules: tuple[int, dict] | None = None
