"""Output disclosure-control benchmark: the time of every check on a cross-tabulation of micro-data.

For ADULT's size (30,162 records) and a one-million-record release it draws integer codes with ADULT's shape (a
cross-tab of education, 16 values, by marital status, 7 values; a numeric attribute like hours per week for the
magnitude statistics), then times, each the median of `--repeat` runs:

- `cell_stats` for counts (one bincount over the combined cell index) and with values (bincount of totals, one
  lexsort for the two largest contributors per cell);
- `check_table` for counts (threshold, zeros), mean (threshold, NK, p%, negatives) and std (dof);
- the regression check on a df_resid number;
- differencing of a cohort against 20 earlier outputs' cohorts (boolean masks over every record);
- suppression with margins (secondary suppression audited by linear programs) and rounding of the counted table.

Numbers are printed (JSON with --json), not asserted: the machine is shared.

    .venv/bin/python benchmarks/outputs_bench.py [--records 30162 1000000] [--repeat 5] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from outputs.checks import cell_stats, check_model, check_table  # noqa: E402
from outputs.differencing import EarlierOutput, check_differencing  # noqa: E402
from outputs.remedies import primary_mask, round_table, suppress  # noqa: E402

ROWS, COLS = 16, 7   # education x marital status, as in ADULT


def _time(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(records: int, repeat: int, seed: int = 26) -> dict:
    rng = np.random.default_rng(seed)
    # skewed categories, so that a few cells are small (as in ADULT) and the checks have something to flag
    rows = rng.choice(ROWS, size=records, p=np.random.default_rng(1).dirichlet(np.ones(ROWS) * 0.7)).astype(np.int8)
    cols = rng.choice(COLS, size=records, p=np.random.default_rng(2).dirichlet(np.ones(COLS) * 0.7)).astype(np.int8)
    hours = rng.integers(1, 100, size=records).astype(np.float64)
    labels = [[f"edu{i}" for i in range(ROWS)], [f"marital{j}" for j in range(COLS)]]
    codes = [rows, cols]
    counts = cell_stats(codes, labels)
    magnitude = cell_stats(codes, labels, values=hours)
    verdict = check_table(counts, "crosstab")
    earlier = [EarlierOutput(f"out-{k}", f"cohort {k}", "r1", rng.random(records) < 0.5) for k in range(20)]
    cohort = rng.random(records) < 0.5
    result = {
        "records": records,
        "cells": ROWS * COLS,
        "failing_cells": int(primary_mask(verdict, counts.shape).sum()),
        "seconds": {
            "cell_stats_counts": _time(lambda: cell_stats(codes, labels), repeat),
            "cell_stats_values": _time(lambda: cell_stats(codes, labels, values=hours), repeat),
            "check_counts": _time(lambda: check_table(counts, "crosstab"), repeat),
            "check_mean": _time(lambda: check_table(magnitude, "mean"), repeat),
            "check_std": _time(lambda: check_table(counts, "std"), repeat),
            "check_regression": _time(lambda: check_model(records - 6.0, "ols"), repeat),
            "all_checks_from_codes": _time(lambda: (check_table(cell_stats(codes, labels), "crosstab"),
                                                    check_table(cell_stats(codes, labels, values=hours), "mean")),
                                           repeat),
            "differencing_20_earlier": _time(lambda: check_differencing(cohort, "r1", earlier, records), repeat),
            "rounding": _time(lambda: round_table(counts.count), repeat),
            "suppression_with_margins": _time(
                lambda: suppress(counts.count, primary_mask(verdict, counts.shape)), 1),
        },
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[30_162, 1_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import scipy.optimize  # noqa: F401  (import once, outside the timings)

    results = [bench(n, args.repeat) for n in args.records]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for result in results:
        print(f"{result['records']:>9,} records, {result['cells']} cells ({result['failing_cells']} failing):")
        for name, seconds in result["seconds"].items():
            print(f"  {name:<28} {seconds * 1000:9.2f} ms")


if __name__ == "__main__":
    main()
