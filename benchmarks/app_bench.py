"""Analytics app benchmark on a million-row release: import, start-up, memory, and latency of the live queries.

Builds the ADULT release with the example policy, resamples its rows to N records (numpy, fixed seed), writes
data.parquet and a manifest with the right hashes (the gate verdict of the ADULT release), seals it with the engine's
`seal_release`, then runs `safeshare app` as a separate process twice: first on an empty state folder (verify +
bulk import into SQLite + read into memory), then again on the same folder (the database already holds the release).
Against the running app it times REQUESTS requests each of a cohort count with two filters, the cohort builder's
count with facets, a cross-tabulation of two attributes with a filter, and the rendered cross-tab page. Prints JSON.

Regressions (issue 26): logit, probit and OLS (a linear probability model) of the salary class on five generalized
quasi-identifiers as categories (sex, age, race, marital status, occupation), timed in this process on the ADULT
release itself (30,162 records, 29,894 with a known salary class) and on the resampled release (the app's own
`regression.fit` on a CodedTable of the released data: design matrix, checks, statsmodels fit, figures), and through
the running app (POST /api/regression, the regression page). The targets: under 1 s on ADULT and under 10 s on a
million records. `--regression-only` skips the app server (no import into SQLite) and prints those figures alone.

Output checks (issue 26): saving each kind of output (frequencies, cross-tabulation plain, suppressed and rounded, a
cohort comparison, a logit; benchmarks/app_outputs_bench.py's cases), which runs the analysis, its per-cell SDC checks,
differencing against every earlier output, the remedy and the atomic write, timed through FastAPI's TestClient on
ADULT's own sealed release (`outputs_adult`) and through the running app on the resampled release
(`outputs_resampled`), OUTPUT_REPEAT rounds each.

    .venv/bin/python benchmarks/app_bench.py [--rows 1000000] [--requests 50] [--output-repeat 3] [--keep DIR]
                                             [--regression-only]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.bundle import seal_release  # noqa: E402
from engine.deid import deidentify, parquet_bytes, write_release  # noqa: E402

from benchmarks.app_outputs_bench import save_outputs  # noqa: E402

POLICY = REPO / "policies" / "examples" / "adult-pu1.yaml"


def build_bundle(root: Path, rows: int | None, seed: int = 7) -> Path:
    """The ADULT release resampled to `rows` records (None: ADULT's own records, as released) and sealed (its gate
    verdict carried over, or recomputed for the resampled table)."""
    base = root / "adult"
    if not base.exists():
        write_release(deidentify(POLICY), base)
    frame = pd.read_parquet(base / "data.parquet")
    if rows is None:
        big, rows = frame, len(frame)
    else:
        picked = np.random.default_rng(seed).integers(0, len(frame), size=rows)
        big = frame.iloc[picked].reset_index(drop=True)
    out = root / ("adult-sealed" if big is frame else "big")
    out.mkdir()
    data = parquet_bytes(big)
    (out / "data.parquet").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    manifest = json.loads((base / "manifest.json").read_text())
    qis = list(manifest["transformation"])
    manifest.update(records=rows, suppressed_records=int((big[qis] == "*").all(axis=1).sum()), data_sha256=sha,
                    files={"data.parquet": sha}, dataset="adult-1m" if big is not frame else "adult")
    # `release` evaluates the gate again on the released data and refuses figures that differ: record the resampled
    # table's own (a million draws of ADULT's classes leave no sample uniques).
    from engine.gate import evaluate_gate
    from engine.manifest import parse_manifest
    from engine.release_gate import release_gate, released_class_sizes
    from engine.sitegate import load_site_gate

    parsed = parse_manifest(manifest)
    kept = released_class_sizes(out, parsed, ["data.parquet"])
    risk, gate = evaluate_gate(release_gate(parsed, load_site_gate(root)), kept)
    manifest.update(risk=risk, gate={**manifest["gate"], **gate}, smallest_class=int(kept.min()),
                    equivalence_classes=int(kept.size))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return seal_release(out, root / "releases")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    values = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in status.splitlines()
              if line.startswith(("VmRSS", "VmHWM"))}
    return {"rss_mb": round(values["VmRSS"] / 2**20, 1), "peak_rss_mb": round(values["VmHWM"] / 2**20, 1)}


def start_app(bundle: Path, state: Path) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from safeshare.cli import main; sys.exit(main())",
                             "app", "--bundle", str(bundle), "--state", str(state), "--port", str(port),
                             "--trust", str(bundle.parents[2] / "trust.json")],  # the site of RELEASES/<ds>/<id>
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=600)
        except queue.Empty:
            proc.kill()
            raise SystemExit("app did not start within 600 s")
        if line.startswith("app ready: "):
            return proc, line.split(": ", 1)[1].strip(), time.perf_counter() - started


def stop_app(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def timed(client, requests: int, make) -> dict:
    """Median and p95 in ms over `requests` calls; `make(i)` issues call i and returns the response."""
    make(-1)  # warm-up (connection, first-touch of the code paths)
    times = []
    for i in range(requests):
        started = time.perf_counter()
        response = make(i)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    times.sort()
    return {"median_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)], 2),
            "max_ms": round(times[-1], 2)}


REGRESSION_PREDICTORS = ["sex", "age", "race", "marital-status", "occupation"]
REGRESSION_REPEATS = 3


def regression_query(model: str) -> dict:
    return {"model": model, "outcome": "salary-class", "predictors": [{"attribute": p} for p in REGRESSION_PREDICTORS]}


def regression_in_process(frame: pd.DataFrame, quasi_identifiers: list[str]) -> dict:
    """Seconds of the app's regression.fit (best and median of REGRESSION_REPEATS) per model on `frame`, with n and
    the number of parameters; the first fit of the process also pays for importing statsmodels (reported apart)."""
    from enclave.app.analyses import CohortSpec
    from enclave.app.regression import Predictor, RegressionSpec, fit
    from enclave.app.table import CodedTable

    table = CodedTable.from_frame(frame, quasi_identifiers)
    out: dict = {"records": len(frame)}
    started = time.perf_counter()
    import statsmodels.api  # noqa: F401

    out["statsmodels_import_seconds"] = round(time.perf_counter() - started, 2)
    for model in ("logit", "probit", "ols"):
        spec = RegressionSpec(model, "salary-class", [Predictor(p) for p in REGRESSION_PREDICTORS])
        times = []
        for _ in range(REGRESSION_REPEATS):
            started = time.perf_counter()
            result = fit(table, spec, CohortSpec(), quasi_identifiers)
            times.append(time.perf_counter() - started)
        out[model] = {"best_seconds": round(min(times), 3), "median_seconds": round(statistics.median(times), 3),
                      "n": result["n"], "parameters": result["parameters"]}
    return out


def regression_over_http(client, requests: int) -> dict:
    out = {}
    for model in ("logit", "probit", "ols"):
        out[f"regression_{model}_api"] = timed(client, requests,
                                               lambda i, m=model: client.post("/api/regression",
                                                                              json=regression_query(m)))
    params = [("model", "logit"), ("y", "salary-class")] + [("x", p) for p in REGRESSION_PREDICTORS]
    out["regression_logit_page_html"] = timed(client, requests, lambda i: client.get("/regression", params=params))
    return out


def measure(url: str, requests: int) -> dict:
    import httpx

    # Browsers send with TCP_NODELAY; without it a POST's body waits for the ACK of its headers (delayed ACK, ~40 ms).
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    with httpx.Client(base_url=url, timeout=60, transport=transport) as client:
        info = client.get("/api/release").json()
        values = {a["name"]: [v["label"] for v in a["values"] if v["label"] != "*"] for a in info["attributes"]}
        rng = np.random.default_rng(1)

        def pick(name: str, k: int) -> list[str]:
            return [str(v) for v in rng.choice(values[name], size=min(k, len(values[name])), replace=False)]

        def count(i: int):
            return client.post("/api/count", json={"filters": {"sex": pick("sex", 1), "age": pick("age", 3)}})

        def facets(i: int):
            return client.post("/api/count", json={"filters": {"sex": pick("sex", 1), "age": pick("age", 3)},
                                                   "facets": True})

        def crosstab(i: int):
            return client.post("/api/crosstab", json={"row": "education", "col": "occupation",
                                                      "filters": {"race": pick("race", 2)}})

        def page(i: int):
            return client.get("/crosstab", params={"row": "education", "col": "occupation",
                                                   "where": f"race={pick('race', 1)[0]}"})

        return {"app": info["app"], "records": info["records"],
                "cohort_count_2_filters": timed(client, requests, count),
                "cohort_count_with_facets": timed(client, requests, facets),
                "crosstab_with_filter": timed(client, requests, crosstab),
                "crosstab_page_html": timed(client, requests, page),
                **regression_over_http(client, max(1, min(requests, 5)))}


def outputs_in_process(bundle: Path, state: Path, args: argparse.Namespace) -> dict:
    """Saving outputs (analysis, per-cell checks, differencing, remedy, atomic write) on `bundle` through the app
    created in this process (FastAPI's TestClient): the check times of issue 26 on ADULT's own release."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from enclave.app import create_app

    app = create_app(bundle, state_dir=state, trust=bundle.parents[2] / "trust.json")
    with TestClient(app) as client:
        return {"records": json.loads((bundle / "manifest.json").read_text())["records"],
                **save_outputs(client, args.output_repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--output-repeat", type=int, default=3,
                        help="rounds of saving each kind of output (checks included), on ADULT and the resampled release")
    parser.add_argument("--regression-only", action="store_true",
                        help="only the regressions, in this process (ADULT and the resampled release)")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="safeshare-app-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        bundle = build_bundle(root, args.rows)
        result: dict = {"rows": args.rows, "requests": args.requests, "cpus": os.cpu_count(),
                        "load_average": [round(x, 2) for x in os.getloadavg()],
                        "bundle_seconds": round(time.perf_counter() - started, 2),
                        "parquet_mb": round((bundle / "data.parquet").stat().st_size / 2**20, 1)}
        qis = list(json.loads((bundle / "manifest.json").read_text())["transformation"])
        result["regression_adult"] = regression_in_process(
            pd.read_parquet(root / "adult" / "data.parquet").astype(str), qis)
        result["regression_resampled"] = regression_in_process(
            pd.read_parquet(bundle / "data.parquet").astype(str), qis)
        if args.regression_only:
            print(json.dumps(result, indent=2))
            return
        result["outputs_adult"] = outputs_in_process(build_bundle(root, None), root / "state-adult", args)
        state = root / "state"
        proc, url, cold = start_app(bundle, state)
        try:
            measured = measure(url, args.requests)
            import httpx

            with httpx.Client(base_url=url, timeout=600) as client:
                measured["outputs_resampled"] = save_outputs(client, args.output_repeat)
            result["cold_start"] = {"ready_seconds": round(cold, 2), **measured.pop("app"), **rss(proc.pid)}
            result.update(measured)
            result["cold_start"].update({f"after_requests_{k}": v for k, v in rss(proc.pid).items()})
        finally:
            stop_app(proc)
        result["sqlite_mb"] = round((state / "release.sqlite").stat().st_size / 2**20, 1)
        proc, url, warm = start_app(bundle, state)
        try:
            import httpx

            app_info = httpx.get(url + "api/release", timeout=60).json()["app"]
            result["warm_start"] = {"ready_seconds": round(warm, 2), **app_info, **rss(proc.pid)}
        finally:
            stop_app(proc)
        print(json.dumps(result, indent=2))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
