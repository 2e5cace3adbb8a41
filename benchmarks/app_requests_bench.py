"""Release requests in the analytics app: how long a researcher waits on the request pages and API (issue 27).

Seals a small synthetic release (the outputs tests' table), creates the app in this process on a fresh state folder
and, through FastAPI's TestClient, saves OUTPUTS outputs, puts them all in one request with a justification each
(`PATCH /api/requests/{n}`: every output checked against the airlock's allowlist and bounds), renders the request's
page, and submits it REPEAT times (`POST /api/requests/{n}/submit`: every check again, the draft and the atomic
outbox entry written; between two submissions a host status "returned" is written, as the intake would). Prints JSON:
median and maximum milliseconds of each step.

    .venv/bin/python benchmarks/app_requests_bench.py [--outputs 50] [--repeat 10]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _timed(function, repeat: int) -> dict:
    seconds = []
    for i in range(repeat):
        started = time.perf_counter()
        function(i)
        seconds.append(time.perf_counter() - started)
    return {"median_ms": round(1000 * statistics.median(seconds), 1), "max_ms": round(1000 * max(seconds), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outputs", type=int, default=50, help="outputs in the request (the store's bound is 50)")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)

    from enclave.app import create_app
    from outputs.airlock.workspace import Layout
    from tests.enclave.test_app_outputs import outputs_frame
    from tests.enclave.test_app_support import TestClient, synthetic_bundle

    root = Path(tempfile.mkdtemp(prefix="requests-bench-"))
    try:
        bundle = synthetic_bundle(root, outputs_frame(), quasi_identifiers=["sex", "race", "age"])
        state = root / "state"
        layout = Layout(state)
        app = create_app(bundle, state_dir=state, trust=bundle.parents[2] / "trust.json", recipient="bench")
        with TestClient(app) as client:
            ids = []
            for i in range(args.outputs):
                query = {"attribute": "ward", "filters": {"batch": ["main"]}, "exclude_suppressed": bool(i % 2)}
                response = client.post("/api/outputs", json={"name": f"output {i}", "kind": "frequencies",
                                                              "query": query})
                ids.append(response.json()["id"])
            number = client.post("/api/requests", json={"context": "bench", "controls": "bench"}).json()["number"]
            body = {"outputs": [{"output_id": i, "justification": "bench"} for i in ids]}

            def patch(_: int) -> None:
                assert client.patch(f"/api/requests/{number}", json=body).status_code == 200

            def page(_: int) -> None:
                assert client.get(f"/requests/{number}").status_code == 200

            def submit(i: int) -> None:
                response = client.post(f"/api/requests/{number}/submit")
                assert response.status_code == 200, response.text
                layout.outbox_file(number).unlink()  # taken by the intake; it returns the request
                status = layout.status_file(number)
                status.parent.mkdir(parents=True, exist_ok=True)
                temp = status.with_name(f".{status.name}.tmp")
                temp.write_text(json.dumps({"state": "returned", "round": i + 1}))
                os.replace(temp, status)

            results = {"outputs": args.outputs, "repeat": args.repeat,
                       "patch_outputs": _timed(patch, args.repeat), "request_page": _timed(page, args.repeat),
                       "submit": _timed(submit, args.repeat)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
