"""Per-record risk (issue 29): how long the measures take, and what they say, on real tables.

For ADULT (30,162 records, 9 quasi-identifiers; the demo table) and, when it is there, CENSUS-INCOME-KDD (299,285
records; its first 9 quasi-identifiers, $SAFESHARE_BENCHMARK_DATA or ../shared/data), in the populations USA,
California and Los Angeles: seconds for the whole per-record report (engine.individual_report: grouping, the
negative-binomial risk of every key, the main-effects log-linear fit and its measures, the riskiest records), for the
negative-binomial risk alone, for one `individual_risk` privacy-model check on the table's classes (what the search
pays per transformation), and for the two-way log-linear fit on the first quasi-identifiers whose full table stays
under its cell limit; then the figures themselves (expected re-identifications under both models, tau1, tau2).

    .venv/bin/python benchmarks/individual_risk_bench.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.individual_report import individual_risk_report, table_codes  # noqa: E402
from engine.policy import load_policy  # noqa: E402
from engine.privacy.individual import IndividualRiskModel  # noqa: E402
from engine.risk import resolve_population  # noqa: E402
from engine.risk.individual import key_risk  # noqa: E402
from engine.risk.loglinear import MAX_DENSE_CELLS, fit_two_way  # noqa: E402
from engine.table import load_input  # noqa: E402

POPULATIONS = ("USA", "California", "Los Angeles")
TABLES = (("ADULT", REPO / "policies/examples/adult-k5.yaml", None),
          ("CENSUS-INCOME-KDD", REPO / "policies/examples/census-income-kdd-k5.yaml", 9))


def best_of(repeat: int, work) -> tuple[float, object]:
    seconds, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        seconds = min(seconds, time.perf_counter() - start)
    return seconds, result


def run(name: str, policy_path: Path, limit: int | None, repeat: int) -> None:
    try:
        policy = load_policy(policy_path)
        frame = load_input(policy).frame
    except Exception as exc:   # a benchmark table that is not on this machine
        print(f"{name}: skipped ({type(exc).__name__}: {exc})")
        return
    names = policy.quasi_identifiers[:limit] if limit else policy.quasi_identifiers
    populations = [(label, float(resolve_population(label))) for label in POPULATIONS]
    seconds, report = best_of(repeat, lambda: individual_risk_report(frame, names, populations))
    codes, cards = table_codes(frame, names)
    from engine.classes import group

    _, sizes, _ = group(codes, np.ones(codes.shape[1], dtype=np.int64), cards)
    nb_seconds, _ = best_of(repeat, lambda: key_risk(sizes, populations[-1][1]))
    model = IndividualRiskModel(populations[-1][1], max_record_risk=0.05, max_expected_reidentifications=100.0)
    check_seconds, _ = best_of(repeat, lambda: model.assess(sizes))
    print(f"{name}: {len(frame):,} records, {len(names)} quasi-identifiers, {sizes.size:,} classes, "
          f"{int((sizes == 1).sum()):,} sample uniques")
    print(f"  per-record report (NB + main-effects log-linear, 3 populations, top 10): {seconds:.3f} s")
    print(f"  negative-binomial risk of every key: {nb_seconds * 1000:.2f} ms; one individual_risk check: "
          f"{check_seconds * 1000:.2f} ms")
    cells, two_way = 1, []
    for attribute, card in zip(names, cards):
        if cells * card > MAX_DENSE_CELLS:
            break
        cells *= card
        two_way.append(attribute)
    if len(two_way) >= 2:
        sub, sub_cards = table_codes(frame, two_way)
        keys, _, _ = group(sub, np.ones(sub.shape[1], dtype=np.int64), sub_cards)
        ipf_seconds, _ = best_of(1, lambda: fit_two_way(sub, sub_cards, keys))
        print(f"  two-way log-linear fit on {', '.join(two_way)} ({cells:,} cells): {ipf_seconds:.2f} s")
    for entry in report["populations"]:
        nb, ll = entry["negative_binomial"], entry["loglinear"]
        print(f"  {entry['population']:<12} f={entry['sampling_fraction']:.2e}  NB: expected re-identifications "
              f"{nb['expected_reidentifications']:10.2f} (max record risk {nb['max_risk']:.4f})   log-linear: "
              f"tau1 {ll['tau1']:9.1f}  tau2 {ll['tau2']:9.1f}  expected {ll['expected_reidentifications']:10.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, path, limit in TABLES:
        run(name, path, limit, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
