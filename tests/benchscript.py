"""A benchmark script (benchmarks/*.py, not a package) loaded as a module, so tests can call its functions.

The module is registered in sys.modules while it is in use (its dataclasses look their module up) and removed after,
so one test file's copy never leaks into another's."""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from tests.datasets import REPO


@contextmanager
def benchmark_module(script: str, name: str) -> Iterator[ModuleType]:
    """benchmarks/`script` executed as module `name`, registered in sys.modules until the block ends."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / script)
    assert spec is not None and spec.loader is not None, script
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
