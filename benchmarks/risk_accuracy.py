"""How close the population-uniqueness estimators come to the truth, measured on populations whose truth is known.

A table is taken as the whole population; simple random samples (without replacement) are drawn from it at given
sampling fractions and seeds, and every estimator of engine.risk estimates the number of population uniques of each
quasi-identifier set from the sample alone. Because the population is at hand, the true number is known: the report
gives, per population, QI set, fraction and estimator, the truth, the median estimate, the median relative error
(estimate - truth) / truth, and how often the estimate fell below the truth (the unsafe direction: a gate would pass
data riskier than it thinks), plus how often each estimator had no solution.

Populations:
  census   census-income-kdd (299,285 records) under $SAFESHARE_BENCHMARK_DATA (default ../shared/data), the table
           of the study in issue 29;
  synth    a synthetic population of --synthetic-size records (default 10,000,000) drawn from a Chow-Liu tree (every
           attribute conditioned on one parent, the tree of largest pairwise mutual information) fitted to the nine
           QI attributes of census-income-kdd. It keeps the strongest pairwise dependencies but creates combinations
           the real table does not have, so its uniques are not those of the real table, and the truth at ten
           million records is known exactly.

QI sets (the study's four): A age, sex, race; A+ A + marital status; B A+ + education, region of previous residence;
C B + detailed occupation, detailed industry, citizenship.

Everything is vectorized: each QI set's records are mapped once to integer class ids of the population, and a
sample's class sizes are one np.bincount of the sampled ids; the estimators only see the class-size histogram.

    nice -n 5 .venv/bin/python benchmarks/risk_accuracy.py [--populations census,synth] [--fractions 0.005,...]
        [--seeds 5] [--synthetic-size 10000000] [--json FILE] [--svg docs/risk_accuracy.svg]
        [--write-accuracy engine/risk/accuracy.json] [--runs FILE.jsonl]

The default run (both populations, 7 fractions, 5 seeds, 4 QI sets) takes about ten minutes on one core.
`--write-accuracy` writes the findings table the engine ships (engine.risk.accuracy): per estimator and sampling
fraction, over every QI set and population measured, the median and the range of the relative error and the share of
runs below the truth.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.atomic import write_text as write_text_atomic  # noqa: E402
from engine.risk import SizeHistogram, population_uniqueness  # noqa: E402
from engine.risk.estimate import ESTIMATORS  # noqa: E402

BENCHMARK_DATA_ENV = "SAFESHARE_BENCHMARK_DATA"
CENSUS = Path("census-income-kdd") / "census_income.csv.gz"
QI_SETS: dict[str, list[str]] = {
    "A": ["age", "sex", "race"],
    "A+": ["age", "sex", "race", "marital_stat"],
    "B": ["age", "sex", "race", "marital_stat", "education", "region_of_previous_residence"],
    "C": ["age", "sex", "race", "marital_stat", "education", "region_of_previous_residence",
          "detailed_occupation_recode", "detailed_industry_recode", "citizenship"],
}
ATTRIBUTES = QI_SETS["C"]
FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
# the synthetic population is large enough for the small fractions a national population gives (n / N < 0.5 %)
SYNTHETIC_FRACTIONS = (0.001, 0.002) + FRACTIONS
SYNTHETIC_SIZE = 10_000_000
SYNTHETIC_SEED = 20261126


def benchmark_data() -> Path:
    value = os.environ.get(BENCHMARK_DATA_ENV, "")
    return Path(value).expanduser().resolve() if value else REPO.parent / "shared" / "data"


@dataclass
class Population:
    """A population as integer codes: one column per attribute of ATTRIBUTES (codes 0..cardinality-1)."""

    name: str
    codes: np.ndarray          # (records, attributes), small ints
    cardinalities: list[int]
    description: str

    @property
    def size(self) -> int:
        return int(self.codes.shape[0])

    def class_ids(self, qi: list[str]) -> tuple[np.ndarray, int, int]:
        """Each record's class id under the QI set (dense, 0..classes-1), the number of classes and the true number
        of population uniques."""
        key = np.zeros(self.size, dtype=np.int64)
        for attribute in qi:
            j = ATTRIBUTES.index(attribute)
            key = key * self.cardinalities[j] + self.codes[:, j]
        _, ids, counts = np.unique(key, return_inverse=True, return_counts=True)
        return ids.astype(np.int32).ravel(), int(counts.size), int((counts == 1).sum())


def load_census(folder: Path | None = None) -> Population:
    """census-income-kdd's QI attributes as codes; a clear error naming the file when it is missing."""
    import pandas as pd

    path = (folder or benchmark_data()) / CENSUS
    if not path.is_file():
        raise SystemExit(f"risk_accuracy: {path} not found (set {BENCHMARK_DATA_ENV} to the folder holding "
                         "census-income-kdd/)")
    frame = pd.read_csv(path, sep=";", usecols=ATTRIBUTES, dtype=str, keep_default_na=False)
    columns, cardinalities = [], []
    for attribute in ATTRIBUTES:
        codes, uniques = pd.factorize(frame[attribute], sort=True)
        columns.append(codes.astype(np.int16))
        cardinalities.append(len(uniques))
    return Population("census", np.stack(columns, axis=1), cardinalities,
                      f"census-income-kdd, {len(frame):,} records")


# --- synthetic population: a Chow-Liu tree fitted to the real table ------------------------------------------------
def _mutual_information(x: np.ndarray, y: np.ndarray, kx: int, ky: int) -> float:
    joint = np.bincount(x.astype(np.int64) * ky + y, minlength=kx * ky).reshape(kx, ky).astype(np.float64)
    joint /= joint.sum()
    px, py = joint.sum(axis=1, keepdims=True), joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log(joint[nz] / (px @ py)[nz])).sum())


def chow_liu_parents(population: Population) -> list[int]:
    """Parent of each attribute in the maximum-mutual-information spanning tree rooted at attribute 0 (-1: root);
    Prim's algorithm on the dense matrix of pairwise mutual information."""
    m = len(population.cardinalities)
    mi = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1, m):
            mi[i, j] = mi[j, i] = _mutual_information(population.codes[:, i], population.codes[:, j],
                                                      population.cardinalities[i], population.cardinalities[j])
    parents = [-1] * m
    in_tree = np.zeros(m, dtype=bool)
    in_tree[0] = True
    best, best_from = mi[0].copy(), np.zeros(m, dtype=np.int64)
    for _ in range(m - 1):
        candidate = np.where(in_tree, -np.inf, best)
        j = int(np.argmax(candidate))
        in_tree[j] = True
        parents[j] = int(best_from[j])
        better = (mi[j] > best) & ~in_tree
        best[better], best_from[better] = mi[j][better], j
    return parents


def synthesize(real: Population, size: int, seed: int = SYNTHETIC_SEED) -> Population:
    """`size` records drawn from the Chow-Liu tree of `real` (ancestral sampling, one vectorized draw per attribute:
    the child's value is the inverse CDF of its conditional distribution given the parent's value)."""
    rng = np.random.default_rng(seed)
    parents = chow_liu_parents(real)
    order = [0]
    while len(order) < len(parents):
        order += [j for j, p in enumerate(parents) if p in order and j not in order]
    codes = np.zeros((size, len(parents)), dtype=np.int16)
    for j in order:
        k = real.cardinalities[j]
        if parents[j] < 0:
            cdf = np.cumsum(np.bincount(real.codes[:, j], minlength=k)) / real.size
            codes[:, j] = np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), k - 1)
            continue
        p, kp = parents[j], real.cardinalities[parents[j]]
        table = np.bincount(real.codes[:, p].astype(np.int64) * k + real.codes[:, j], minlength=kp * k)
        table = table.reshape(kp, k).astype(np.float64)
        cdf = np.cumsum(table, axis=1) / np.maximum(table.sum(axis=1, keepdims=True), 1.0)
        # offset each parent's row so one searchsorted over the flattened CDFs serves every record
        flat = (cdf + np.arange(kp)[:, None]).ravel()
        parent_values = codes[:, p].astype(np.int64)
        position = np.searchsorted(flat, parent_values + rng.random(size), side="right") - parent_values * k
        codes[:, j] = np.clip(position, 0, k - 1)
    names = ", ".join(f"{ATTRIBUTES[j]} <- {ATTRIBUTES[p]}" for j, p in enumerate(parents) if p >= 0)
    return Population("synth", codes, list(real.cardinalities),
                      f"{size:,} records from a Chow-Liu tree fitted to census-income-kdd ({names}), seed {seed}")


# --- the runs -------------------------------------------------------------------------------------------------------
def run_population(population: Population, fractions: list[float], seeds: int, estimators: tuple[str, ...],
                   progress=None, first_seed: int = 0) -> list[dict]:
    """One row per (QI set, fraction, seed, estimator): truth, estimate, relative error, model used, solved."""
    rows = []
    qi_ids = {name: population.class_ids(qi) for name, qi in QI_SETS.items()}
    for fraction in fractions:
        n = int(round(fraction * population.size))
        for seed in range(first_seed, first_seed + seeds):
            rng = np.random.default_rng([seed, int(fraction * 1e6), population.size])
            sample = rng.choice(population.size, size=n, replace=False)
            for qi_name, (ids, classes, truth) in qi_ids.items():
                sizes = np.bincount(ids[sample], minlength=classes)
                histogram = SizeHistogram.from_class_sizes(sizes[sizes > 0])
                for estimator in estimators:
                    started = time.perf_counter()
                    estimate = population_uniqueness(histogram, population.size, estimator=estimator)
                    value = estimate.population_uniques if estimate.solved else None
                    rows.append({
                        "population": population.name, "qi": qi_name, "fraction": fraction, "seed": seed,
                        "estimator": estimator, "model_used": estimate.model_used, "solved": value is not None,
                        "truth": truth, "estimate": value, "sample_uniques": histogram.c1,
                        "relative_error": None if value is None or truth == 0 else (value - truth) / truth,
                        "seconds": time.perf_counter() - started})
                if progress is not None:
                    progress.update(1)
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per (population, QI set, fraction, estimator): runs, unsolved, truth, median estimate, median/min/max relative
    error, median |relative error|, share below the truth (of the solved runs; an unsolved run is not below)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["population"], row["qi"], row["fraction"], row["estimator"]), []).append(row)
    cells = []
    for (population, qi, fraction, estimator), members in groups.items():
        errors = np.array([r["relative_error"] for r in members if r["relative_error"] is not None], dtype=float)
        estimates = [r["estimate"] for r in members if r["estimate"] is not None]
        models: dict[str, int] = {}
        for r in members:
            models[str(r["model_used"])] = models.get(str(r["model_used"]), 0) + 1
        cells.append({
            "population": population, "qi": qi, "fraction": fraction, "estimator": estimator,
            "runs": len(members), "unsolved": sum(not r["solved"] for r in members), "truth": members[0]["truth"],
            "median_estimate": float(np.median(estimates)) if estimates else None,
            "median_relative_error": float(np.median(errors)) if errors.size else None,
            "median_abs_relative_error": float(np.median(np.abs(errors))) if errors.size else None,
            "min_relative_error": float(errors.min()) if errors.size else None,
            "max_relative_error": float(errors.max()) if errors.size else None,
            "below_truth": int((errors < 0).sum()), "models_used": models})
    return cells


def overall(rows: list[dict], estimators: tuple[str, ...]) -> list[dict]:
    """Per estimator over every run: median |relative error|, runs below the truth, unsolved runs."""
    table = []
    for estimator in estimators:
        mine = [r for r in rows if r["estimator"] == estimator]
        errors = np.array([r["relative_error"] for r in mine if r["relative_error"] is not None], dtype=float)
        table.append({"estimator": estimator, "runs": len(mine), "unsolved": sum(not r["solved"] for r in mine),
                      "below_truth": int((errors < 0).sum()),
                      "median_abs_relative_error": float(np.median(np.abs(errors))) if errors.size else None,
                      "median_relative_error": float(np.median(errors)) if errors.size else None,
                      "worst_underestimate": float(errors.min()) if errors.size else None,
                      "seconds_per_estimate": float(np.mean([r["seconds"] for r in mine])) if mine else None})
    return table


def accuracy_table(rows: list[dict], estimators: tuple[str, ...], populations: list[Population]) -> dict:
    """The findings the engine ships (engine/risk/accuracy.json): per estimator and sampling fraction, over every
    QI set and population measured, runs, unsolved runs, runs below the truth, and the median, smallest and largest
    relative error; and per population and over all of them ("overall"), each estimator's runs, unsolved runs, runs
    below the truth, median |relative error| and worst underestimate."""
    by_fraction: dict[str, dict[str, dict]] = {}
    for estimator in estimators:
        entries = {}
        for fraction in sorted({r["fraction"] for r in rows}):
            mine = [r for r in rows if r["estimator"] == estimator and r["fraction"] == fraction]
            errors = np.array([r["relative_error"] for r in mine if r["relative_error"] is not None], dtype=float)
            entries[f"{fraction:g}"] = {
                "runs": len(mine), "unsolved": sum(not r["solved"] for r in mine),
                "below_truth": int((errors < 0).sum()),
                "median_relative_error": round(float(np.median(errors)), 4) if errors.size else None,
                "min_relative_error": round(float(errors.min()), 4) if errors.size else None,
                "max_relative_error": round(float(errors.max()), 4) if errors.size else None}
        by_fraction[estimator] = entries
    summary: dict[str, dict[str, dict]] = {}
    for name in [p.name for p in populations] + ["all"]:
        mine = [r for r in rows if name == "all" or r["population"] == name]
        summary[name] = {t["estimator"]: {key: (round(t[key], 4) if isinstance(t[key], float) else t[key])
                                           for key in ("runs", "unsolved", "below_truth",
                                                       "median_abs_relative_error", "worst_underestimate")}
                         for t in overall(mine, estimators)}
    return {
        "about": "Accuracy of each population-uniqueness estimator against a known population "
                 "(benchmarks/risk_accuracy.py): relative error (estimate - truth) / truth of the number of "
                 "population uniques, over the QI sets and populations below, per sampling fraction.",
        "benchmark": "benchmarks/risk_accuracy.py",
        "populations": [{"name": p.name, "records": p.size, "description": p.description} for p in populations],
        "qi_sets": QI_SETS,
        "seeds": len({r["seed"] for r in rows}),
        "fractions": sorted({r["fraction"] for r in rows}),
        "estimators": by_fraction,
        "overall": summary,
    }


# --- output ---------------------------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value * 100:+.0f}%"


def format_tables(cells: list[dict], totals: list[dict], estimators: tuple[str, ...]) -> str:
    """Per population and QI set: median relative error per fraction and estimator, with [below truth / unsolved]."""
    lines = []
    index = {(c["population"], c["qi"], c["fraction"], c["estimator"]): c for c in cells}
    for population in dict.fromkeys(c["population"] for c in cells):
        for qi in QI_SETS:
            mine = [c for c in cells if c["population"] == population and c["qi"] == qi]
            if not mine:
                continue
            what = ("median estimate (median relative error)" if mine[0]["truth"] else
                    "no population uniques: median estimate")
            lines.append(f"\n{population} / QI {qi} ({len(QI_SETS[qi])} attributes), true population uniques "
                         f"{mine[0]['truth']:,}: {what} [runs below truth, unsolved]")
            lines.append("| fraction | " + " | ".join(estimators) + " |")
            lines.append("|---" * (len(estimators) + 1) + "|")
            for fraction in sorted({c["fraction"] for c in mine}):
                row = [f"{fraction * 100:g}%"]
                for estimator in estimators:
                    c = index[(population, qi, fraction, estimator)]
                    marks = []
                    if c["below_truth"]:
                        marks.append(f"{c['below_truth']} below")
                    if c["unsolved"]:
                        marks.append(f"{c['unsolved']} unsolved")
                    estimate = "n/a" if c["median_estimate"] is None else f"{c['median_estimate']:,.0f}"
                    shown = f"{estimate} ({_pct(c['median_relative_error'])})" if c["truth"] else estimate
                    row.append(shown + (f" [{', '.join(marks)}]" if marks else ""))
                lines.append("| " + " | ".join(row) + " |")
    lines.append("\nevery run: median |relative error|, runs below the truth, unsolved, worst underestimate")
    lines.append("| estimator | runs | median abs. rel. error | below truth | unsolved | worst underestimate |")
    lines.append("|---|---|---|---|---|---|")
    for t in totals:
        lines.append(f"| {t['estimator']} | {t['runs']} | {_pct(t['median_abs_relative_error']).lstrip('+')} | "
                     f"{t['below_truth']} | {t['unsolved']} | {_pct(t['worst_underestimate'])} |")
    return "\n".join(lines)


def render_svg(cells: list[dict], estimators: tuple[str, ...], sizes: dict[str, int] | None = None) -> str:
    """One grouped bar chart per population: median |relative error| per sampling fraction (over the QI sets and
    seeds) for each estimator, on a log-like scale clipped at 300 %, titled with the runs below the truth."""
    from engine.svgcharts import Series, grouped_bar_chart

    colors = {"pitman": "#2f6aa8", "zayatz": "#9ca3af", "snb": "#c2410c", "dankar": "#6b21a8",
              "calibrated": "#15803d"}
    charts = []
    for population in dict.fromkeys(c["population"] for c in cells):
        mine = [c for c in cells if c["population"] == population]
        fractions = sorted({c["fraction"] for c in mine})
        series = []
        for estimator in estimators:
            values = []
            for fraction in fractions:
                errors = [abs(c["median_relative_error"]) for c in mine
                          if c["fraction"] == fraction and c["estimator"] == estimator
                          and c["median_relative_error"] is not None]
                values.append(min(float(np.median(errors)), 3.0) if errors else 0.0)
            below = sum(c["below_truth"] for c in mine if c["estimator"] == estimator)
            series.append(Series(f"{estimator} ({below} below)", values,
                                 colors.get(estimator, "#475569")))
        charts.append(grouped_bar_chart(
            [f"{f * 100:g}%" for f in fractions], series,
            title=f"{population}{f' (N = {sizes[population]:,})' if sizes and population in sizes else ''}: "
                  "median |relative error| of population uniques, QI sets A to C (clipped at 300%)",
            x_label="sampling fraction; (n below): runs below the truth", y_label="median |relative error|",
            chart_id=f"risk-accuracy-{population}",
            width=900, height=380))
    body = "".join(f'<g transform="translate(0,{i * 390})">{chart}</g>' for i, chart in enumerate(charts))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="900" height="{390 * len(charts)}" '
            f'viewBox="0 0 900 {390 * len(charts)}">{body}</svg>\n')


def _fractions(parser: argparse.ArgumentParser, option: str, text: str) -> list[float]:
    try:
        values = [float(f) for f in text.split(",") if f.strip()]
    except ValueError:
        parser.error(f"{option}: not a list of numbers: {text!r}")
    if not values or not all(0 < f < 1 for f in values):
        parser.error(f"{option}: every fraction must lie in (0, 1), got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--populations", default="census,synth", help="comma-separated: census, synth")
    parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS),
                        help="sampling fractions for census (default %(default)s)")
    parser.add_argument("--synthetic-fractions", default=",".join(f"{f:g}" for f in SYNTHETIC_FRACTIONS),
                        help="sampling fractions for synth (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed .. first-seed + seeds - 1 "
                        "(another range checks the findings on samples they were not tuned on)")
    parser.add_argument("--synthetic-size", type=int, default=SYNTHETIC_SIZE)
    parser.add_argument("--synthetic-seed", type=int, default=SYNTHETIC_SEED, help="seed of the synthetic population")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--json", metavar="FILE", help="write cells, totals and the accuracy table as JSON")
    parser.add_argument("--runs", metavar="FILE", help="write every run as JSON lines")
    parser.add_argument("--svg", metavar="FILE", help="write the chart (e.g. docs/risk_accuracy.svg)")
    parser.add_argument("--write-accuracy", metavar="FILE", help="write the engine's findings table "
                        "(engine/risk/accuracy.json)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    fractions = {"census": _fractions(parser, "--fractions", args.fractions),
                 "synth": _fractions(parser, "--synthetic-fractions", args.synthetic_fractions)}
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be at least 1 and --first-seed at least 0")
    if args.synthetic_size < 1000:
        parser.error(f"--synthetic-size: at least 1000 records, got {args.synthetic_size}")
    estimators = tuple(e.strip() for e in args.estimators.split(",") if e.strip())
    unknown = [e for e in estimators if e not in ESTIMATORS]
    if unknown:
        parser.error(f"--estimators: unknown {', '.join(unknown)}; use {', '.join(ESTIMATORS)}")
    wanted = [p.strip() for p in args.populations.split(",") if p.strip()]
    if not wanted or any(p not in ("census", "synth") for p in wanted):
        parser.error("--populations: census and/or synth")

    from tqdm import tqdm

    started = time.perf_counter()
    census = load_census()
    populations = []
    for name in wanted:
        if name == "census":
            populations.append(census)
        else:
            t0 = time.perf_counter()
            populations.append(synthesize(census, args.synthetic_size, args.synthetic_seed))
            print(f"synthetic population: {populations[-1].description} ({time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr)
    rows: list[dict] = []
    total = sum(len(fractions[p.name]) for p in populations) * args.seeds * len(QI_SETS)
    with tqdm(total=total, desc="samples x QI sets", disable=args.no_progress, file=sys.stderr) as progress:
        for population in populations:
            rows += run_population(population, fractions[population.name], args.seeds, estimators, progress,
                                   args.first_seed)
    cells, totals = summarize(rows), overall(rows, estimators)
    print(f"risk accuracy: {'; '.join(p.description for p in populations)}; fractions "
          + "; ".join(f"{p.name} {', '.join(f'{f:g}' for f in fractions[p.name])}" for p in populations)
          + f"; seeds {args.first_seed}..{args.first_seed + args.seeds - 1}; {time.perf_counter() - started:.0f} s")
    print(format_tables(cells, totals, estimators))
    table = accuracy_table(rows, estimators, populations)
    if args.json:
        write_text_atomic(Path(args.json), json.dumps({"cells": cells, "overall": totals, "accuracy": table},
                                                      indent=1) + "\n")
    if args.runs:
        write_text_atomic(Path(args.runs), "".join(json.dumps(r) + "\n" for r in rows))
    if args.svg:
        write_text_atomic(Path(args.svg), render_svg(cells, estimators, {p.name: p.size for p in populations}))
    if args.write_accuracy:
        write_text_atomic(Path(args.write_accuracy), json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
