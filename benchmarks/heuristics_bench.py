"""Heuristic search benchmark (issue 13; Meurers et al. 2021, Figs. 6 and 7).

Two experiments, each configuration in a fresh process (so one run's class cache and memory never help the next):

1. High-dimensional: each heuristic on the example policies creditcard-k5, creditcard-pu1, mach2019-k5 and
   mach2019-pu1 (Loss, arithmetic mean, gs 0.5, suppression limit 100 %) for each time limit (default 10 s and
   100 s). Prints the best quality reached, the second at which it was reached, the second at which ARX's value
   was first reached ("ARX at", nan if never), the checks made, and ARX's best published result on the same
   configuration (the best of its three heuristics at 100 s on an 8-core desktop, the benchmark data's README.md)
   with our quality as a share of it. `--seeds 0,1,2` runs each configuration once per genetic seed and counts the
   runs that reached ARX's value.
2. Low-dimensional (--low): the optimal search on the ADULT, CUP and FARS example policies (its optimum and its
   time), then each heuristic on the same policy with a time limit (default 300 s, as ARX's benchmark): the time at
   which it first reached the proven optimum's quality, or "not reached".

    .venv/bin/python benchmarks/heuristics_bench.py [--algorithms lightning,topdown,genetic,auto]
        [--policies creditcard-k5,mach2019-pu1] [--seconds 10,100] [--low] [--low-policies adult-k5,...]
        [--low-seconds 300] [--seeds 0,1,2] [--json]

`auto` runs what a policy gets by default (the heuristic `auto` chooses for the limit, the genetic algorithm then until
the limit and on both cores); the last column names the algorithm that ran. Each high-dimensional row also shows the
CPU seconds of the run (its process and the island processes it waited for, over the whole run: the search and the
de-identification around it) and the 1-minute load average when it started, since the machine may be shared.

Both experiments run by default; `--high-only` / `--low-only` choose one. The numbers are from whatever machine runs
this (2 cores for the figures in the issue), not from ARX's.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "policies" / "examples"
HIGH = ("creditcard-k5", "creditcard-pu1", "mach2019-k5", "mach2019-pu1")
LOW = ("adult-k5", "adult-pu1", "cup-k5", "cup-pu1", "fars-subset-k5", "fars-subset-pu1")
# ARX 3.9, best of bottom-up, top-down and genetic at 100 s (README.md of the benchmark data, tests/datasets.py).
ARX_BEST = {"creditcard-k5": 0.3387, "mach2019-k5": 0.4609, "creditcard-pu1": 0.5000, "mach2019-pu1": 0.6646}
ARX_BY_ALGORITHM = {
    "creditcard-k5": {"lightning": 0.3185, "topdown": 0.3174, "genetic": 0.3387},
    "mach2019-k5": {"lightning": 0.4484, "topdown": 0.4514, "genetic": 0.4609},
    "creditcard-pu1": {"lightning": 0.3410, "topdown": 0.4932, "genetic": 0.5000},
    "mach2019-pu1": {"lightning": 0.6401, "topdown": 0.6646, "genetic": 0.6599},
}
TOLERANCE = 1e-9   # quality at least the optimum's minus this counts as reaching it


def run_one(policy: str, algorithm: str, seconds: float | None,
            genetic_iterations: int | None | str = "policy", seed: int | None = None) -> dict:
    """De-identify `policy` with `algorithm` under a time limit in a fresh process; the search's figures.
    `genetic_iterations` replaces the policy's genetic iteration count (None: until the time limit, as under
    `auto`); "policy" keeps it. `seed` replaces the genetic algorithm's seed (islands use seed, seed + 1)."""
    code = f"""
import json, sys
from engine.deid import deidentify
from engine.policy import load_policy
policy = load_policy({str(EXAMPLES / (policy + '.yaml'))!r})
update = {{"algorithm": {algorithm!r}}}
genetic = {{}}
if {genetic_iterations!r} != "policy":
    genetic["iterations"] = {genetic_iterations!r}
if {seed!r} is not None:
    genetic["seed"] = {seed!r}
if genetic:
    update["genetic"] = policy.search.genetic.model_copy(update=genetic)
policy = policy.model_copy(update={{"search": policy.search.model_copy(update=update)}})
import os, resource
def cpu():
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))
load = os.getloadavg()[0]
cpu_before = cpu()
result = deidentify(policy, time_limit={seconds!r} if {seconds!r} is not None else 10**9)
search = result.search
print(json.dumps({{"algorithm": search.algorithm, "optimal": search.optimal, "seconds": search.seconds,
                  "checked": search.checked, "quality": result.quality[policy.quality.model],
                  "trace": search.quality_over_time, "stopped": search.stopped,
                  "cpu_seconds": round(cpu() - cpu_before, 2), "load": round(load, 2)}}))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def reached_at(trace: list[list[float]], quality: float) -> float | None:
    """The first second at which the best quality was at least `quality`, from a quality-over-time trace."""
    for seconds, value in trace:
        if value >= quality - TOLERANCE:
            return seconds
    return None


def high(algorithms: list[str], policies: list[str], limits: list[float], rows: list[dict],
         genetic_iterations: int | None | str = "policy", seeds: list[int | None] | None = None) -> None:
    seeds = seeds or [None]
    print(f"{'policy':<16}{'algorithm':<11}{'seed':>5}{'limit s':>8}{'quality':>9}{'at s':>8}{'ARX at':>8}"
          f"{'checked':>9}{'ARX best':>10}{'share':>8}{'ARX same alg':>13}{'cpu s':>7}{'load':>6}  ran")
    for policy in policies:
        for limit in limits:
            for algorithm in algorithms:
                reached = []
                for seed in seeds:
                    out = run_one(policy, algorithm, limit, genetic_iterations, seed)
                    row = {"experiment": "high", "policy": policy, "algorithm": algorithm, "limit": limit,
                           "seed": seed, **out}
                    rows.append(row)
                    shown = "-" if seed is None else str(seed)
                    if "error" in out:
                        print(f"{policy:<16}{algorithm:<11}{shown:>5}{limit:>8g}  error: {out['error']}", flush=True)
                        continue
                    at = reached_at(out["trace"], out["quality"])
                    arx = ARX_BEST.get(policy)
                    arx_at = reached_at(out["trace"], arx) if arx else None
                    row["arx_reached_at"] = arx_at
                    reached.append(arx_at is not None)
                    same = ARX_BY_ALGORITHM.get(policy, {}).get(algorithm)
                    share = f"{out['quality'] / arx:.1%}" if arx else "-"
                    print(f"{policy:<16}{algorithm:<11}{shown:>5}{limit:>8g}{out['quality']:>9.4f}"
                          f"{(at if at is not None else float('nan')):>8.1f}"
                          f"{(arx_at if arx_at is not None else float('nan')):>8.1f}{out['checked']:>9}"
                          f"{(arx or float('nan')):>10.4f}{share:>8}{(same or float('nan')):>13.4f}"
                          f"{out.get('cpu_seconds', float('nan')):>7.1f}{out.get('load', float('nan')):>6.2f}"
                          f"  {out['algorithm']}", flush=True)
                if len(seeds) > 1 and reached:
                    print(f"{policy:<16}{algorithm:<11} ARX's value reached in {sum(reached)} of {len(reached)} runs",
                          flush=True)


def low(algorithms: list[str], policies: list[str], limit: float, rows: list[dict]) -> None:
    print(f"{'policy':<18}{'algorithm':<11}{'optimum':>9}{'reached at s':>14}{'optimal search s':>18}"
          f"{'checked':>9}")
    for policy in policies:
        optimal = run_one(policy, "auto", None)
        rows.append({"experiment": "low", "policy": policy, "algorithm": "auto (optimal)", **optimal})
        if "error" in optimal:
            print(f"{policy:<18}{'optimal':<11}  error: {optimal['error']}", flush=True)
            continue
        optimum = optimal["quality"]
        print(f"{policy:<18}{optimal['algorithm']:<11}{optimum:>9.4f}{'-':>14}{optimal['seconds']:>18.2f}"
              f"{optimal['checked']:>9}", flush=True)
        for algorithm in algorithms:
            # As ARX's experiment 1 (gaIterations = Integer.MAX_VALUE): the GA runs until the limit or the optimum.
            out = run_one(policy, algorithm, limit, genetic_iterations=None)
            row = {"experiment": "low", "policy": policy, "algorithm": algorithm, "limit": limit,
                   "optimum": optimum, **out}
            rows.append(row)
            if "error" in out:
                print(f"{policy:<18}{algorithm:<11}  error: {out['error']}", flush=True)
                continue
            at = reached_at(out["trace"], optimum)
            row["reached_at"] = at
            shown = f"{at:.2f}" if at is not None else f"not ({out['quality']:.4f})"
            print(f"{policy:<18}{algorithm:<11}{optimum:>9.4f}{shown:>14}{optimal['seconds']:>18.2f}"
                  f"{out['checked']:>9}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", default="lightning,topdown,genetic,auto")
    parser.add_argument("--policies", default=",".join(HIGH))
    parser.add_argument("--seconds", default="10,100", help="time limits of the high-dimensional runs")
    parser.add_argument("--low-policies", default=",".join(LOW))
    parser.add_argument("--low-seconds", type=float, default=300.0, help="time limit of the low-dimensional runs")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--high-only", action="store_true")
    which.add_argument("--low-only", action="store_true")
    parser.add_argument("--seeds", default="",
                        help="genetic seeds to run each high-dimensional configuration with, e.g. 0,1,2 (default: "
                             "the policy's); with several, a line per configuration counts the runs that reached "
                             "ARX's value")
    parser.add_argument("--json", action="store_true", help="also print every run as JSON at the end")
    parser.add_argument("--genetic-iterations", default="policy",
                        help="the genetic algorithm's iterations in the high-dimensional runs: a number, 'none' "
                             "(until the time limit, as when auto chooses it) or 'policy' (the policy's; default)")
    args = parser.parse_args(argv)
    from engine.search import HEURISTICS

    algorithms = [a for a in args.algorithms.split(",") if a]
    unknown = [a for a in algorithms if a not in HEURISTICS and a != "auto"]
    if unknown:
        parser.error(f"not a heuristic: {', '.join(unknown)} (known: {', '.join(HEURISTICS)})")
    iterations: int | None | str = args.genetic_iterations
    if iterations == "none":
        iterations = None
    elif iterations != "policy":
        try:
            iterations = int(iterations)
        except ValueError:
            parser.error(f"--genetic-iterations: a number, 'none' or 'policy', got {iterations!r}")
    wanted = ([] if args.low_only else [p for p in args.policies.split(",") if p]) + \
        ([] if args.high_only else [p for p in args.low_policies.split(",") if p])
    sys.path.insert(0, str(REPO))
    from tests.datasets import missing_for_examples

    missing = missing_for_examples(wanted)
    if missing is not None:  # the benchmark tables are not in the repository
        print(f"heuristics_bench: {missing}", file=sys.stderr)
        return 2
    rows: list[dict] = []
    if not args.low_only:
        try:
            seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
        except ValueError:
            parser.error(f"--seeds: comma-separated whole numbers, got {args.seeds!r}")
        if any(seed < 0 for seed in seeds):
            parser.error(f"--seeds: seeds are not negative, got {args.seeds!r}")
        high(algorithms, [p for p in args.policies.split(",") if p],
             [float(s) for s in args.seconds.split(",") if s], rows, iterations, seeds or None)
    if not args.high_only:
        if not args.low_only:
            print()
        low(algorithms, [p for p in args.low_policies.split(",") if p], args.low_seconds, rows)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
