"""The compiled per-check path: roll-up, class sizes, the minimal-class-size decision and the quality sums of one
transformation, each one pass over the classes in numba.

Why: a search checks thousands of transformations and each check is a handful of numpy calls over a few thousand
classes (a key update per changed attribute, a hash factorization, a bincount, masks, dot products): the calls' fixed
costs and temporaries, not the arithmetic, dominate. Compiled, the roll-up is one loop with an open-addressing hash
table, and the decision and the quality sums ride along in the same loop over the new classes.

The numpy code in engine.classes, engine.search.evaluator and engine.quality stays the reference. Every result
here is the reference's to the last bit: classes are numbered in order of first appearance, sizes and the quality
sums are integers (the Loss sums are Σ size x hierarchy rows under the label, divided once; Non-Uniform Entropy's
suppressed records per value are counts), and what is floating point after that runs through the same numpy code on
both paths. tests/engine/test_compiled_checks.py compares the two.

Which path runs: the compiled one when numba is importable (a core dependency) unless the environment variable
SAFESHARE_REFERENCE_PATH is set to anything but "" or "0" (or SAFESHARE_NO_NUMBA, which hides numba from the whole
engine). numba is imported only when a search asks for the path, so commands that never search do not pay for
it, and the kernels are compiled once per machine (`cache=True`: later processes load them from numba's cache).
"""
from __future__ import annotations

import os

import numpy as np

REFERENCE_ENV = "SAFESHARE_REFERENCE_PATH"

_kernels = None          # the compiled functions, once loaded
_unavailable = False     # numba could not be imported


def reference_forced() -> bool:
    """True when the environment asks for the numpy reference path."""
    return os.environ.get(REFERENCE_ENV, "") not in ("", "0") or bool(os.environ.get("SAFESHARE_NO_NUMBA"))


def load():
    """The compiled kernels (a namespace), or None when the reference path is forced or numba is missing. Importing
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
        from . import _kernels_numba

        _kernels = _kernels_numba
    return _kernels


def enabled() -> bool:
    return load() is not None
