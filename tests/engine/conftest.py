from __future__ import annotations

from pathlib import Path

import pytest

from tests.datasets import DEMO_DATA, EXAMPLES, REPO, require_benchmark

__all__ = ["DEMO_DATA", "EXAMPLES", "REPO"]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark tables' folder (tests.datasets: fails under CI, skips elsewhere, when it is missing)."""
    return require_benchmark()


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    """The demo tables' folder in the repository (`adult/` with its hierarchies): always there."""
    assert (DEMO_DATA / "adult" / "adult.csv").is_file(), f"the demo table is missing from {DEMO_DATA}"
    return DEMO_DATA
