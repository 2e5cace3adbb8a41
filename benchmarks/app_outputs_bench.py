"""Saving outputs in the analytics app: how long `POST /api/outputs` takes, checks and storage included (issue 26).

Builds the ADULT release resampled to N records (benchmarks/app_bench.py's `build_bundle`, sealed), creates the app in
this process on a fresh state folder and, through FastAPI's TestClient, saves REPEAT times each of: a frequency table,
a cross-tabulation (age by education, a filter), the same suppressed and rounded, a cohort comparison with its
chi-square test, and a logit of the salary class on three categorical predictors. Every save runs the analysis, its
per-cell checks, differencing against every earlier output, the remedy and the atomic write; the outputs pile up
as they would in a workspace, so the later saves also pay for differencing against the earlier ones. Prints JSON:
median and maximum seconds per kind, and the status each got.

    .venv/bin/python benchmarks/app_outputs_bench.py [--rows 30162] [--repeat 5] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


# categorical predictors whose every value has both outcomes in ADULT and its resamples (occupation's Armed-Forces and
# the age group 10-19, education Preschool and workclass Without-pay separate the salary class)
PREDICTORS = ["sex", "race", "marital-status"]
CASES = [
    ("frequencies", "frequencies", {"attribute": "education"}, None),
    ("crosstab", "crosstab", {"row": "age", "col": "education", "filters": {"sex": ["Female"]}}, None),
    ("crosstab suppressed", "crosstab", {"row": "age", "col": "education", "filters": {"sex": ["Female"]}},
     {"kind": "suppress"}),
    ("crosstab rounded", "crosstab", {"row": "age", "col": "education", "filters": {"sex": ["Female"]}},
     {"kind": "round"}),
    ("compare", "compare", {"attribute": "salary-class", "a": {"filters": {"sex": ["Male"]}},
                            "b": {"filters": {"sex": ["Female"]}}}, None),
    ("logit", "regression", {"model": "logit", "outcome": "salary-class",
                             "predictors": [{"attribute": a} for a in PREDICTORS],
                             "exclude_suppressed": True}, None),
]


def save_outputs(client, repeat: int) -> dict:
    """Median and maximum seconds of `POST /api/outputs` per case over `repeat` rounds, with the status each got.

    `client` is anything with httpx's `post`/`get` (FastAPI's TestClient in this process, or an httpx.Client on a
    running `safeshare app`, as benchmarks/app_bench.py uses it on the million-record release)."""
    times: dict[str, list[float]] = {name: [] for name, *_ in CASES}
    statuses: dict[str, str] = {}
    for _ in range(repeat):
        for name, kind, query, remedy in CASES:
            body = {"name": name, "kind": kind, "query": query, **({"remedy": remedy} if remedy else {})}
            t0 = time.perf_counter()
            response = client.post("/api/outputs", json=body)
            times[name].append(time.perf_counter() - t0)
            if response.status_code != 200:
                raise SystemExit(f"{name}: {response.status_code} {response.text}")
            statuses[name] = response.json()["status"]
    saved = len(client.get("/api/outputs").json())
    return {"outputs_saved": saved,
            "save_seconds": {name: {"median": round(statistics.median(v), 4), "max": round(max(v), 4),
                                    "status": statuses[name]} for name, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_162)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from benchmarks.app_bench import build_bundle  # app_bench imports save_outputs from here
    from enclave.app import create_app

    with tempfile.TemporaryDirectory() as temp:
        root = Path(args.keep or temp)
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        bundle = build_bundle(root, args.rows)
        app = create_app(bundle, state_dir=root / "state", trust=bundle.parents[2] / "trust.json")
        setup = time.perf_counter() - started
        with TestClient(app) as client:
            measured = save_outputs(client, args.repeat)
        print(json.dumps({"rows": args.rows, "setup_seconds": round(setup, 1), **measured}, indent=2))


if __name__ == "__main__":
    main()
