"""Pitman solver benchmark (issue 28): milliseconds per solve, for solves that find a root and for solves that find
none, on class-size histograms of CUP, ADULT and FARS, optionally beside another checkout of the repository.

The histograms are what a population-uniqueness search hands the solver: the classes of transformations of the
example policies' tables (`<dataset>-pu1.yaml`; nodes drawn with a fixed seed, half of them anywhere in the lattice,
half in its lower third where most records stay unique and solves find no root), each whole and with
the first 1/4, 1/2 and 3/4 of its classes suppressed (the points ARX's binary search over the classes to suppress
visits first). Duplicates are dropped, so every solve is timed without the help of a memo. Each checkout times every
histogram in its own process (`engine.risk.pitman_arx.arx_pitman_fit`, after a warm-up that compiles), the checkouts
alternating back to back, `--repeat` times; a histogram's time is its median over the repeats, and the table gives
the median and the mean of those per dataset and outcome (solved by the closed form, by the finite sums, or not at
all). Times are the solving thread's CPU time (`time.thread_time`), which other processes on a loaded machine disturb
far less than wall time (`--wall` for that). With `--before` it also checks that both checkouts give the same
estimate, parameters, try and evaluation count on every histogram (bit for bit), and exits 1 otherwise.

    .venv/bin/python benchmarks/pitman_bench.py [--before PATH] [--repeat 5] [--nodes 40] [--datasets cup adult fars]
                                                [--wall] [--json]

`--before PATH` is a checkout (e.g. `git worktree add /tmp/base bdb7e6c`) run with this interpreter.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = {"cup": "cup-pu1.yaml", "adult": "adult-pu1.yaml", "fars": "fars-subset-pu1.yaml"}
SUPPRESSED_SHARES = (0.0, 0.25, 0.5, 0.75)


# --- the histograms (this checkout's engine) ----------------------------------------------------------------------
def histograms_of(policy_file: Path, nodes: int, seed: int) -> tuple[float, list[tuple[np.ndarray, np.ndarray]]]:
    """(population, distinct histograms as (sizes, counts)) of `nodes` random transformations and their suppressions."""
    sys.path.insert(0, str(REPO))
    from engine.classes import ClassCache
    from engine.encoding import encode_table
    from engine.policy import load_policy
    from engine.risk import resolve_population
    from engine.table import load_input

    policy = load_policy(policy_file)
    loaded = load_input(policy)
    table = encode_table(loaded.frame, loaded.hierarchies, policy.source)
    population = next(float(resolve_population(m.population)) for m in policy.privacy
                      if m.model == "population_uniqueness")
    cache = ClassCache(table)
    rng = np.random.default_rng(seed)
    heights = table.heights
    seen: set[bytes] = set()
    out = []
    for index in range(nodes):
        top = [h if index % 2 == 0 else max(1, -(-h // 3)) for h in heights]
        node = tuple(int(rng.integers(0, t)) for t in top)
        _, sizes = cache.classes(node)
        sizes = np.asarray(sizes, dtype=np.int64)
        for share in SUPPRESSED_SHARES:
            kept = sizes[int(share * sizes.size):]
            if not kept.size:
                continue
            values, counts = np.unique(kept, return_counts=True)
            key = values.tobytes() + b"|" + counts.tobytes()
            if key not in seen:
                seen.add(key)
                out.append((values, counts.astype(np.int64)))
    cache.close()
    return population, out


# --- timing (the checkout under test's engine, one process) ---------------------------------------------------------
def time_checkout(repo: Path, data_file: Path, wall: bool) -> dict:
    """Per histogram: seconds of one arx_pitman_fit and what it returned. Runs inside the child process."""
    sys.path.insert(0, str(repo))
    from engine.risk.histogram import SizeHistogram
    from engine.risk.pitman_arx import arx_pitman_fit

    data = json.loads(data_file.read_text())
    out: dict[str, list] = {}
    warm = [SizeHistogram.from_counts({1: 1000}), SizeHistogram.from_counts({1: 300, 2: 40, 3: 9, 7: 2})]
    for histogram in warm:                                    # compile (or load the compiled cache) first
        arx_pitman_fit(histogram, 1e8)
    for name, entry in data.items():
        rows = []
        for sizes, counts in entry["histograms"]:
            histogram = SizeHistogram(np.asarray(sizes, dtype=np.int64), np.asarray(counts, dtype=np.int64))
            clock = time.perf_counter if wall else time.thread_time
            start = clock()
            uniques, params = arx_pitman_fit(histogram, entry["population"])
            seconds = clock() - start
            rows.append([seconds, _plain(uniques), _plain(params)])
        out[name] = rows
    return out


def _plain(value):
    """JSON-safe, NaN kept recognizable (floats as their repr, so equality is bit for bit)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, np.integer):
        return int(value)
    return value


def run_child(repo: Path, data_file: Path, wall: bool) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(repo), str(data_file)]
    if wall:
        command.append("--wall")
    process = subprocess.run(command, capture_output=True, text=True, cwd=repo)
    if process.returncode:
        raise SystemExit(f"timing in {repo} failed: {process.stderr.strip().splitlines()[-1:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


# --- report -----------------------------------------------------------------------------------------------------------
def outcome(params: dict) -> str:
    return "no root" if params.get("method") is None else params["method"]


def summarize(runs: list[dict], name: str) -> dict[str, dict]:
    """Outcome -> median and mean ms per solve (each histogram's median over the repeats), count."""
    per_histogram = np.array([[run[name][i][0] for run in runs] for i in range(len(runs[0][name]))]) * 1e3
    medians = np.median(per_histogram, axis=1)
    groups: dict[str, list[float]] = {}
    for i, row in enumerate(runs[0][name]):
        groups.setdefault(outcome(row[2]), []).append(medians[i])
    groups["all"] = list(medians)
    return {key: {"solves": len(v), "median_ms": float(np.median(v)), "mean_ms": float(np.mean(v)),
                  "total_ms": float(np.sum(v))} for key, v in groups.items()}


def differences(before: dict, after: dict) -> list[str]:
    found = []
    for name in after:
        for i, (b, a) in enumerate(zip(before[name], after[name])):
            if b[1:] != a[1:]:
                found.append(f"{name} histogram {i}: before {b[1:]} after {a[1:]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout to time beside this one")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes per checkout (median per histogram)")
    parser.add_argument("--nodes", type=int, default=40, help="random transformations per dataset")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--datasets", nargs="+", choices=sorted(DATASETS), default=["cup", "adult", "fars"])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--wall", action="store_true", help="wall-clock time instead of the thread's CPU time")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(time_checkout(Path(args.child[0]), Path(args.child[1]), args.wall)))
        return 0

    sys.path.insert(0, str(REPO))
    from tests.datasets import missing_for_examples

    data = {}
    for name in args.datasets:
        reason = missing_for_examples([DATASETS[name]])
        if reason:
            print(f"{name}: skipped, {reason}", file=sys.stderr)
            continue
        population, histograms = histograms_of(REPO / "policies" / "examples" / DATASETS[name], args.nodes, args.seed)
        data[name] = {"population": population, "histograms": [(s.tolist(), c.tolist()) for s, c in histograms]}
    checkouts = {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    runs: dict[str, list[dict]] = {label: [] for label in checkouts}
    with tempfile.TemporaryDirectory() as folder:
        data_file = Path(folder) / "histograms.json"
        data_file.write_text(json.dumps(data))
        for _ in range(args.repeat):
            for label, repo in checkouts.items():
                runs[label].append(run_child(repo, data_file, args.wall))

    report = {name: {label: summarize(runs[label], name) for label in checkouts} for name in data}
    problems = differences(runs["before"][0], runs["after"][0]) if "before" in runs else []
    if args.json:
        print(json.dumps({"datasets": report, "repeat": args.repeat, "clock": "wall" if args.wall else "cpu",
                          "differences": problems}))
    else:
        clock = "wall-clock" if args.wall else "CPU"
        print(f"Pitman solve, {clock} ms per solve (median over histograms of each one's median of {args.repeat}; "
              "mean)")
        print(f"{'dataset':8s} {'outcome':12s} {'solves':>6s}  " + "  ".join(
            f"{label + ' median':>14s} {label + ' mean':>12s}" for label in checkouts) + ("   speed-up (median, mean)"
                                                                                         if "before" in runs else ""))
        for name, by_label in report.items():
            for key in by_label["after"]:
                cells = "  ".join(f"{by_label[label][key]['median_ms']:14.3f} {by_label[label][key]['mean_ms']:12.3f}"
                                  for label in checkouts)
                line = f"{name:8s} {key:12s} {by_label['after'][key]['solves']:6d}  {cells}"
                if "before" in runs:
                    b, a = by_label["before"][key], by_label["after"][key]
                    line += f"   {b['median_ms'] / a['median_ms']:5.1f}x {b['mean_ms'] / a['mean_ms']:5.1f}x"
                print(line)
        if "before" in runs:
            print("same results before and after: " + ("yes, on every histogram" if not problems else
                                                       f"NO, {len(problems)} differ: {problems[:3]}"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
