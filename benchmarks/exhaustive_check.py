"""Checks an example policy's optimum by evaluating every transformation of its lattice (no pruning).

Slow by design (minutes for ADULT with population uniqueness): it is the independent evidence behind the claim that
the branch-and-bound search returns the true optimum. Prints both results and exits 1 if they differ.

    .venv/bin/python benchmarks/exhaustive_check.py policies/examples/adult-pu1.yaml
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import load_policy  # noqa: E402
from engine.deid import deidentify, privacy_configuration  # noqa: E402
from engine.lattice import Lattice  # noqa: E402
from engine.quality import make_quality_model  # noqa: E402
from engine.search import Evaluator  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy")
    args = parser.parse_args()
    policy = load_policy(args.policy)
    started = time.perf_counter()
    result = deidentify(policy)
    searched = time.perf_counter() - started
    table = result.table
    configuration = privacy_configuration(policy, table.n)
    quality = make_quality_model(policy.quality.model, table, policy.quality.aggregation, policy.quality.gs_factor)
    evaluator = Evaluator(table, configuration, quality)
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    best = None
    started = time.perf_counter()
    for node in tqdm(lattice, total=lattice.size, desc="exhaustive", unit="transformation"):
        evaluation = evaluator.evaluate(node)
        if evaluation.solution and (best is None or evaluation.loss < best.loss - 1e-12):
            best = evaluation
    exhaustive = time.perf_counter() - started
    print(f"search      {tuple(result.best.levels)} loss={result.best.loss:.12f} "
          f"suppressed={result.best.suppressed_records} checked={result.search.checked} in {searched:.2f} s")
    print(f"exhaustive  {tuple(best.levels)} loss={best.loss:.12f} suppressed={best.suppressed_records} "
          f"checked={lattice.size} in {exhaustive:.1f} s")
    same = tuple(best.levels) == tuple(result.best.levels) and abs(best.loss - result.best.loss) < 1e-12
    print("same optimum" if same else "DIFFERENT OPTIMUM")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
