"""Where tests and benchmarks find their tables: one place.

- The demo table (ADULT with its hierarchies) is in the repository, `data/demo/adult/`: always there, so a test that
  needs only ADULT never skips.
- The benchmark tables (CUP, FARS, creditcard, mach2019, Census-Income KDD) are not: they are read from the folder
  named by $SAFESHARE_BENCHMARK_DATA, default `../shared/data` next to the repository, the same rule the example
  policies spell as `${SAFESHARE_BENCHMARK_DATA:-../../../shared/data}` (engine.pathvars).

A test that needs a benchmark table which is missing fails under CI (the variable CI set to true, as .ci/run and CI
services set it), naming the folder and the variable, so that CI never passes by skipping; anywhere else it skips with
that reason (a clone on a laptop has no benchmark tables, and the demo path must still be testable).
"""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "policies" / "examples"
DEMO_DATA = REPO / "data" / "demo"
BENCHMARK_DATA_ENV = "SAFESHARE_BENCHMARK_DATA"
DEFAULT_BENCHMARK_DATA = REPO.parent / "shared" / "data"


def benchmark_data() -> Path:
    """The benchmark tables' folder: $SAFESHARE_BENCHMARK_DATA (relative to the working directory), else the default."""
    value = os.environ.get(BENCHMARK_DATA_ENV, "")
    return Path(value).expanduser().resolve() if value else DEFAULT_BENCHMARK_DATA


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def missing_benchmark(*tables: str) -> str | None:
    """Why the benchmark tables named (their folders, e.g. "cup") cannot be used, or None when they are there."""
    folder = benchmark_data()
    absent = [table for table in tables if not (folder / table).is_dir()] if tables else []
    if folder.is_dir() and not absent:
        return None
    what = f"the benchmark tables {', '.join(absent)} are" if absent and folder.is_dir() else "the benchmark data is"
    return (f"{what} not at {folder} (set {BENCHMARK_DATA_ENV} to the folder holding adult/, cup/, fars-subset/, "
            "creditcard/, mach2019/ and census-income-kdd/)")


def require_benchmark(*tables: str) -> Path:
    """The benchmark folder, for a test that needs the tables named; fails under CI and skips elsewhere when missing."""
    import pytest

    reason = missing_benchmark(*tables)
    if reason is not None:
        if in_ci():
            pytest.fail(f"{reason}; CI must run every benchmark test", pytrace=False)
        pytest.skip(reason)
    return benchmark_data()


def example_tables(policy: str) -> list[str]:
    """The benchmark tables (folders) the example policy named reads; [] for a policy on the demo table."""
    import re

    name = policy if policy.endswith(".yaml") else f"{policy}.yaml"
    text = (EXAMPLES / name).read_text()
    return sorted(set(re.findall(r"\$\{" + BENCHMARK_DATA_ENV + r"[^}]*\}/([^/\"]+)/", text)))


def example_data(policy: str) -> Path:
    """The tables' folder for the example policy named (a file of policies/examples): the demo folder for a policy
    that reads the demo table, else the benchmark folder, required as `require_benchmark` does."""
    tables = example_tables(policy)
    return require_benchmark(*tables) if tables else DEMO_DATA


def missing_for_examples(policies: list[str]) -> str | None:
    """For benchmark scripts: why some of these example policies cannot run here (None: all can)."""
    tables = sorted({table for policy in policies for table in example_tables(policy)})
    return missing_benchmark(*tables) if tables else None
