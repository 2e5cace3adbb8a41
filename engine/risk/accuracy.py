"""What the calibration benchmark found about each estimator's accuracy, shipped with the engine (accuracy.json).

A population-uniqueness figure is only as good as its model, and no model is exact: benchmarks/risk_accuracy.py
measures each estimator against populations whose true number of uniques is known and writes, per estimator and
sampling fraction, the median and range of the relative error and how many runs fell below the truth (the unsafe
direction). The manifest and the release report put that finding next to every risk figure, so a custodian sees how
far to trust it; at a sampling fraction the benchmark did not measure (a national population gives n / N far below
0.1 %) the finding says so rather than borrowing the nearest one.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

ACCURACY_FILE = "accuracy.json"
# A measured fraction g stands for f when f / g lies within this factor (the benchmark's fractions are about
# a factor of two apart).
NEAREST_FACTOR = 1.5


@lru_cache(maxsize=1)
def accuracy_table() -> dict:
    """The shipped findings (engine/risk/accuracy.json, written by benchmarks/risk_accuracy.py --write-accuracy)."""
    return json.loads(resources.files(__package__).joinpath(ACCURACY_FILE).read_text(encoding="utf-8"))


def benchmark_finding(estimator: str, fraction: float, table: dict | None = None) -> dict:
    """The benchmark's finding for `estimator` at sampling fraction `fraction` (n / N).

    Measured: {"measured": True, "fraction": the measured fraction used, "runs", "unsolved", "below_truth",
    "median_relative_error", "min_relative_error", "max_relative_error", "populations", "benchmark"}.
    Not measured (estimator absent, or no measured fraction within a factor of NEAREST_FACTOR):
    {"measured": False, "note": why, "measured_fractions": [smallest, largest] or None, "benchmark"}."""
    table = accuracy_table() if table is None else table
    source = table.get("benchmark", "benchmarks/risk_accuracy.py")
    entries = (table.get("estimators") or {}).get(estimator)
    if not entries:
        return {"measured": False, "note": f"the benchmark did not measure {estimator}", "measured_fractions": None,
                "benchmark": source}
    measured = sorted(float(key) for key in entries)
    span = [measured[0], measured[-1]]
    if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and fraction > 0):
        return {"measured": False, "note": f"no sampling fraction ({fraction!r})", "measured_fractions": span,
                "benchmark": source}
    nearest = min(measured, key=lambda g: abs(math.log(fraction / g)))
    if abs(math.log(fraction / nearest)) > math.log(NEAREST_FACTOR):
        return {"measured": False, "measured_fractions": span, "benchmark": source,
                "note": f"sampling fraction {fraction:.3g} was not measured (measured {span[0]:g} to {span[1]:g})"}
    entry = next(value for key, value in entries.items() if float(key) == nearest)
    return {"measured": True, "fraction": nearest, **entry,
            "populations": [p.get("name") for p in table.get("populations", [])], "benchmark": source}


def finding_text(finding: dict | None) -> str:
    """One line for a report: the median and range of the relative error and the runs below the truth."""
    if not finding:
        return "not measured"
    if not finding.get("measured"):
        return finding.get("note") or "not measured"

    def pct(value: object) -> str:
        return "n/a" if value is None else f"{float(value) * 100:+.0f}%"

    below = finding.get("below_truth", 0)
    unsolved = finding.get("unsolved", 0)
    text = (f"at {finding['fraction'] * 100:g}%: median error {pct(finding.get('median_relative_error'))} "
            f"(range {pct(finding.get('min_relative_error'))} to {pct(finding.get('max_relative_error'))}), "
            f"below the truth in {below} of {finding.get('runs', 0)} runs")
    return text + (f", no solution in {unsolved}" if unsolved else "")
