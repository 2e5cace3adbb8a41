"""Every case of tests/engine/test_arx_reference_models.py, the extended ones included (CUP: minutes per case): the
privacy models' decisions against ARX's own unit-test expectations. Prints one line per case; exits 1 on a mismatch
that is not a known one (XFAIL in the test module).

    .venv/bin/python benchmarks/arx_reference_check.py [CASE_ID ...]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine.test_arx_reference_models import CASES, XFAIL, test_arx_reference_case  # noqa: E402


def main() -> int:
    wanted = set(sys.argv[1:])
    failures = 0
    for case in CASES:
        if wanted and case.id not in wanted:
            continue
        started = time.perf_counter()
        try:
            test_arx_reference_case(case)
            outcome = "ok" if case.id not in XFAIL else "FIXED (listed as a known mismatch)"
        except AssertionError as exc:
            outcome = "known mismatch" if case.id in XFAIL else f"MISMATCH: {str(exc).splitlines()[0]}"
            failures += case.id not in XFAIL
        print(f"{case.id:8} {case.dataset:6} {time.perf_counter() - started:7.1f} s  {outcome}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
