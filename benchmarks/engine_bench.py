"""Engine benchmark: seconds, transformations checked and peak memory for the example policies.

Each run happens in a fresh process so that peak resident memory (ru_maxrss) belongs to that run alone; within it the
policy is de-identified twice and the second (warm) run is reported as `seconds` (load, encode, search, apply, quality),
the first as `cold_seconds` (adds interpreter-level imports). Prints a table and, with --json, one JSON object per run.

    .venv/bin/python benchmarks/engine_bench.py [--repeat 3] [--json] [POLICY ...]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = ["adult-k5.yaml", "adult-k5-entropy.yaml", "cup-k5.yaml", "cup-k5-entropy.yaml", "fars-subset-k5.yaml",
           "fars-subset-k5-entropy.yaml",
           "adult-pu1.yaml", "adult-pu5.yaml", "adult-dankar-usa.yaml", "adult-pu1-entropy.yaml", "cup-pu1.yaml",
           "fars-subset-pu1.yaml"]


def run_one(policy_path: str) -> dict:
    sys.path.insert(0, str(REPO))
    from engine import load_policy
    from engine.deid import deidentify

    policy = load_policy(policy_path)
    started = time.perf_counter()
    deidentify(policy)                      # cold: imports scipy/pyarrow, reads the files for the first time
    cold = time.perf_counter() - started
    started = time.perf_counter()
    result = deidentify(policy)             # warm: what a running service pays per request
    seconds = time.perf_counter() - started
    return {
        "policy": Path(policy_path).name,
        "seconds": round(seconds, 3),
        "cold_seconds": round(cold, 3),
        "search_seconds": round(result.search.seconds, 3),
        "checked_transformations": result.search.checked,
        "risk_model_evaluations": result.search.risk_evaluations,
        "lattice_size": result.search.lattice_size,
        "transformation": list(result.best.levels),
        "optimized_for": policy.quality.model,
        "quality": round(result.quality[policy.quality.model], 6),
        "suppressed_records": result.best.suppressed_records,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="*", help="policy files (default: every example policy)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per policy; the fastest is reported")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    examples = REPO / "policies" / "examples"
    policies = [p if Path(p).exists() else str(examples / (p if p.endswith(".yaml") else p + ".yaml"))
                for p in args.policies] or [str(examples / name) for name in DEFAULT]
    if not args.json:
        print(f"{'policy':28} {'seconds':>8} {'cold s':>7} {'search s':>8} {'checked':>8} {'risk ev':>8} {'lattice':>8} {'peak MB':>8}  quality")
    for policy in policies:
        runs = [json.loads(subprocess.run([sys.executable, __file__, "--one", policy], check=True,
                                          capture_output=True, text=True).stdout) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["seconds"])
        best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        if args.json:
            print(json.dumps(best))
        else:
            print(f"{best['policy']:28} {best['seconds']:8.3f} {best['cold_seconds']:7.2f} {best['search_seconds']:8.3f} "
                  f"{best['checked_transformations']:8d} {best['risk_model_evaluations']:8d} {best['lattice_size']:8d} {best['peak_rss_mb']:8.1f}  "
                  f"{best['optimized_for']}={best['quality']:.6f} at {best['transformation']}")


if __name__ == "__main__":
    main()
