"""P4 on Dask against the single-machine engine: ADULT and its extrapolations (benchmarks/extrapolate.py).

For each table size and configuration (k = 5, k = 50, t-closeness 0.2 on occupation, population uniqueness 1 %),
P4 runs on a local Dask cluster (one worker process per core) with the input read by the workers and the release
written by them as a partitioned Parquet dataset (engine.parallel.run_p4_dataset). Printed: seconds per step, the
speed-up against the single-machine engine on the same table, the utility loss of P4's quality (measured over the
whole release; the paper's row-weighted average is printed beside it) against the unpartitioned optimum, and the peak memory of the driver and of each worker. Each run is
a separate process, so each peak is that run's own.

    .venv/bin/python benchmarks/p4_bench.py                                  # ADULT, 1 M, 10 M, 30 M rows
    .venv/bin/python benchmarks/p4_bench.py --sizes 3000000 --configs k5    # the 60-second target
    .venv/bin/python benchmarks/p4_bench.py --single-max 3000000             # single-machine runs up to 3 M rows

Extrapolated tables are written to --workdir once and reused. The paper's targets on this 2-core machine: 3 million
rows k = 5 in under 60 s; 10 million rows in under 5 minutes with the driver under 2 GB; utility loss at 2
partitions under 1 % at 10 million rows.
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
sys.path.insert(0, str(REPO))
DATA = REPO / "data" / "demo" / "adult"  # the demo table, in the repository
EXAMPLES = REPO / "policies" / "examples"

CONFIGS = {
    "k5": ("adult-k5.yaml", None, {}),
    "k50": ("adult-k5.yaml", [{"model": "k_anonymity", "k": 50}], {}),
    "t02": ("adult-tcloseness-equal-02.yaml", None, {}),
    "pu1": ("adult-pu1.yaml", None, {}),
    # as the paper's experiments: suppression limit 100 % (ARX balances generalization and suppression freely)
    "t02-s100": ("adult-tcloseness-equal-02.yaml", None, {"suppression_limit": 1.0}),
}


def table_for(size: str, workdir: Path) -> Path:
    if size == "adult":
        return DATA / "adult.csv"
    path = workdir / f"adult-{int(size)}.parquet"
    if not path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "extrapolate.py"), "adult", str(int(size)),
                        str(path)], check=True)
    return path


def policy_for(config: str, table: Path):
    from engine.policy import load_policy, parse_policy

    name, privacy, overrides = CONFIGS[config]
    base = load_policy(EXAMPLES / name)
    spec = base.model_dump(mode="json", exclude_none=True)
    spec["input"] = dict(spec["input"], path=str(table))
    if table.suffix == ".parquet":
        spec["input"].pop("format", None)
    for attribute in spec["attributes"].values():   # hierarchy files stay where the example names them
        hierarchy = attribute.get("hierarchy")
        if isinstance(hierarchy, dict) and "file" in hierarchy:
            hierarchy["file"] = str(base.resolve(hierarchy["file"]))
    if privacy is not None:
        spec["privacy"] = privacy
    spec.update(overrides)
    # The benchmark measures de-identification: the default release gate's populations (Los Angeles, 3.9 M people)
    # are smaller than the larger extrapolations, which a gate refuses as input.
    spec["gate"] = {"populations": ["USA"]}
    return parse_policy(spec, source=str(EXAMPLES / name))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(mode: str, size: str, config: str, workdir: Path, partitions: int,
            statistics: str = "auto", partitioning: str = "auto") -> dict:
    """One measurement in this process (the parent starts a process per measurement)."""
    policy = policy_for(config, table_for(size, workdir))
    started = time.perf_counter()
    if mode == "single":
        from engine.deid import deidentify
        from engine.sitegate import SiteGate, SiteGateSource

        # The built-in floor requires populations (Los Angeles, 3.9 M people) smaller than the extrapolations.
        result = deidentify(policy, site=SiteGateSource(SiteGate(required_populations=["USA"]), "benchmark"))
        return {"seconds": time.perf_counter() - started, "quality": result.quality[policy.quality.model],
                "levels": list(result.best.levels), "records": int(result.table.n), "driver_mb": peak_mb()}
    import distributed

    from engine.parallel import DaskExecutor, run_p4_dataset

    out = workdir / f"release-{size}-{config}"
    with distributed.LocalCluster(n_workers=partitions, threads_per_worker=1, processes=True,
                                  dashboard_address=None, memory_limit=0) as cluster, \
            distributed.Client(cluster) as client:
        result = run_p4_dataset(policy, partitions, DaskExecutor(client), str(out), partitioning=partitioning,
                                statistics=statistics)
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"seconds": time.perf_counter() - started, "steps": result.seconds,
            "quality": result.quality[policy.quality.model], "quality_row_weighted": result.quality_row_weighted,
            "levels": list(result.levels), "records": result.records, "suppressed": result.suppressed_records,
            "driver_mb": peak_mb(), "workers_mb": sorted(workers.values()),
            "partitioning": result.details["partitioning"], "statistics": result.details["statistics"]}


def measure(mode: str, size: str, config: str, args) -> dict | None:
    command = [sys.executable, __file__, "--one", mode, size, config, "--workdir", str(args.workdir),
               "--partitions", str(args.partitions), "--statistics", args.statistics, "--partitioning",
               args.partitioning]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"  {mode} {size} {config}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="adult,1000000,10000000,30000000",
                        help="comma-separated: adult (the original 30,162 rows) or a number of records")
    parser.add_argument("--configs", default="k5,k50,t02,t02-s100,pu1", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--statistics", choices=["auto", "table", "partition"], default="auto",
                        help="sensitive distributions each partition is anonymized against (search.parallel.statistics)")
    parser.add_argument("--partitioning", choices=["auto", "sorted", "random"], default="auto",
                        help="search.parallel.partitioning")
    parser.add_argument("--single-max", type=float, default=10_000_000,
                        help="run the single-machine engine only up to this many records (it holds the whole table)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/safeshare-p4-bench"))
    parser.add_argument("--plot", type=Path, metavar="PREFIX",
                        help="write PREFIX-seconds.svg and PREFIX-utility.svg (P4 against the single machine) from "
                             "every run recorded in WORKDIR/results.jsonl")
    parser.add_argument("--one", nargs=3, metavar=("MODE", "SIZE", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(*args.one, args.workdir, args.partitions, args.statistics, args.partitioning)))
        return 0
    print(f"P4, {args.partitions} partitions on a local Dask cluster (a worker process per partition)")
    header = (f"{'table':>10} {'config':>6} {'P4 s':>8} {'read':>6} {'part':>6} {'anon':>6} {'harm':>6} {'comp':>6} "
              f"{'write':>6} {'single s':>9} {'speedup':>8} {'quality':>8} {'rows-w':>7} {'optimum':>8} {'loss %':>7} "
              f"{'driver MB':>10} {'workers MB':>14}")
    print(header)
    rows = []
    for size in filter(None, args.sizes.split(",")):
        table_for(size, args.workdir)
        records = 30_162 if size == "adult" else int(size)
        for config in args.configs.split(","):
            p4 = measure("p4", size, config, args)
            single = measure("single", size, config, args) if records <= args.single_max else None
            if p4 is None:
                continue
            rows.append((size, config, p4, single))
            with open(args.workdir / "results.jsonl", "a", encoding="utf-8") as out:
                out.write(json.dumps({"size": size, "config": config, "partitions": args.partitions, "p4": p4,
                                      "single": single}) + "\n")
            steps = p4["steps"]
            speedup = f"{single['seconds'] / p4['seconds']:.2f}" if single else "-"
            optimum = f"{single['quality']:.4f}" if single else "-"
            loss = f"{100 * (single['quality'] - p4['quality']) / single['quality']:.2f}" if single else "-"
            print(f"{size:>10} {config:>6} {p4['seconds']:8.1f} {steps['read']:6.1f} {steps['partition']:6.1f} "
                  f"{steps['anonymize']:6.1f} {steps['harmonize']:6.1f} {steps['compliance']:6.1f} "
                  f"{steps['write']:6.1f} {(single or {}).get('seconds', float('nan')):9.1f} {speedup:>8} "
                  f"{p4['quality']:8.4f} {p4['quality_row_weighted']:7.4f} {optimum:>8} {loss:>7} "
                  f"{p4['driver_mb']:10.0f} "
                  f"{'/'.join(f'{m:.0f}' for m in p4['workers_mb']):>14}", flush=True)
    if args.plot:
        write_plots(recorded(args.workdir, args.partitions), args.plot, args.partitions)
    return 0


def recorded(workdir: Path, partitions: int) -> list[tuple]:
    """Every measurement of this many partitions kept in WORKDIR/results.jsonl (the last per table and model, one
    with a single-machine run preferred), in table-size order: runs of different sizes plot together."""
    latest: dict[tuple[str, str], tuple] = {}
    path = workdir / "results.jsonl"
    for line in (path.read_text(encoding="utf-8").splitlines() if path.exists() else []):
        row = json.loads(line)
        if row["partitions"] != partitions:
            continue
        key = (row["size"], row["config"])
        if row["single"] is not None or key not in latest or latest[key][3] is None:
            latest[key] = (row["size"], row["config"], row["p4"], row["single"])
    order = list(CONFIGS)
    return sorted(latest.values(), key=lambda r: (0 if r[0] == "adult" else int(r[0]), order.index(r[1])))


def write_plots(rows, prefix: Path, partitions: int) -> None:
    """The speed/utility trade-off as two bar charts (the engine's own SVG charts, as in the release report)."""
    from engine.svgcharts import Series, grouped_bar_chart

    def label(size: str, config: str) -> str:
        records = "ADULT" if size == "adult" else f"{int(size) / 1e6:g} M"
        return f"{records} {config}"

    rows = [row for row in rows if row[3] is not None]   # compared with a single-machine run
    categories = [label(size, config) for size, config, _, _ in rows]
    seconds = grouped_bar_chart(
        categories, [Series(f"P4, {partitions} partitions", [p4["seconds"] for _, _, p4, _ in rows], "#2b6cb0"),
                     Series("single machine", [s["seconds"] for _, _, _, s in rows], "#a0aec0")],
        title="Seconds per de-identification: P4 on Dask against the single-machine engine",
        x_label="table and privacy model", y_label="seconds", as_percent=False, chart_id="p4-seconds")
    utility = grouped_bar_chart(
        categories, [Series("utility loss against the optimum",
                            [max(0.0, (s["quality"] - p4["quality"]) / s["quality"]) for _, _, p4, s in rows],
                            "#c05621")],
        title=f"Utility loss of P4 ({partitions} partitions) against the unpartitioned optimum",
        x_label="table and privacy model", y_label="share of the optimum's quality", chart_id="p4-utility")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for name, svg in (("seconds", seconds), ("utility", utility)):
        target = prefix.with_name(f"{prefix.name}-{name}.svg")
        temporary = target.with_name(target.name + ".tmp")
        # A file of its own needs the namespace that inline SVG in the report does without.
        temporary.write_text(svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1), encoding="utf-8")
        temporary.replace(target)
        print(f"wrote {target}")


if __name__ == "__main__":
    sys.exit(main())
