"""Extrapolates a benchmark table to N records for scale tests, writing Parquet (never committed: generated on demand).

Rows are drawn with replacement from the original, so the joint distribution of every combination of values is kept;
integer attributes whose hierarchy groups values into intervals (ADULT's age) are then jittered within their finest
interval, so the extrapolation is not just copies of the same people and its classes at level 0 differ. Chunks of a
million rows are written one after the other into one Parquet file, so memory stays flat whatever N is.

    .venv/bin/python benchmarks/extrapolate.py adult 10000000 /tmp/adult-10m.parquet [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "demo"  # ADULT, the demo table in the repository
CHUNK = 1_000_000


def integer_intervals(values: pd.Series, hierarchy: Path) -> dict[str, tuple[int, int]] | None:
    """For an integer attribute, each value's finest interval [low, high] from its hierarchy's level 1, when every
    level-1 label reads 'low-high' (ADULT's age: '35-39'); None otherwise."""
    if not values.str.fullmatch(r"-?\d+").all():
        return None
    table = pd.read_csv(hierarchy, sep=";", header=None, dtype=str, keep_default_na=False)
    if table.shape[1] < 2:
        return None
    bounds = table[1].str.extract(r"^(-?\d+)-(-?\d+)$")
    if bounds.isna().any().any():
        return None
    return {value: (int(lo), int(hi)) for value, lo, hi in zip(table[0], bounds[0], bounds[1])}


def extrapolate(frame: pd.DataFrame, hierarchies: dict[str, Path], records: int, out: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    jitter = {name: integer_intervals(frame[name], path) for name, path in hierarchies.items()}
    jitter = {name: spans for name, spans in jitter.items() if spans}
    tmp = out.with_name(out.name + ".partial")
    writer = None
    try:
        written = 0
        while written < records:
            size = min(CHUNK, records - written)
            chunk = frame.iloc[rng.integers(0, len(frame), size)].reset_index(drop=True)
            for name, spans in jitter.items():
                lows = chunk[name].map(lambda v: spans[v][0]).to_numpy()
                highs = chunk[name].map(lambda v: spans[v][1]).to_numpy()
                chunk[name] = (lows + (rng.random(size) * (highs - lows + 1)).astype(np.int64)).astype(str)
            batch = pa.Table.from_pandas(chunk, preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(tmp, batch.schema, compression="zstd")
            writer.write_table(batch)
            written += size
    finally:
        if writer is not None:
            writer.close()
    tmp.replace(out)   # whole or nothing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=["adult"], help="table under data/demo/ (the repository's demo data)")
    parser.add_argument("records", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = DATA / args.dataset
    frame = pd.read_csv(folder / f"{args.dataset}.csv", sep=";", dtype=str, keep_default_na=False)
    hierarchies = {name: folder / f"{args.dataset}_hierarchy_{name}.csv" for name in frame.columns
                   if (folder / f"{args.dataset}_hierarchy_{name}.csv").is_file()}
    extrapolate(frame, hierarchies, args.records, args.out, args.seed)
    print(f"{args.out}: {args.records:,} records extrapolated from {len(frame):,} ({args.dataset})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
