"""The checkers' review pages (deploy/airlock/review.py): how long a sign-in and a request page take.

A sign-in is one scrypt check at the site's parameters (N=2**15, r=8, p=1), plus a session row; a request page reads
and re-hashes every stored file of the request and draws each output's table from its data.csv, marking the cells
its checks flag. This builds a site in a temporary folder, submits through the airlock library one request per ROWS
whose output is a table of ROWS x 10 cells, every tenth cell flagged by a check (9999 rows and the header is the
store's CSV bound), and times, through FastAPI's TestClient in this process, REPEAT sign-ins and REPEAT loads of each
request page. Prints JSON: median and maximum seconds, and the page's size in bytes.

    .venv/bin/python benchmarks/review_bench.py [--rows 100 1000 9999] [--repeat 5]
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


def table_output(rows: int):
    from outputs.airlock.store import FrozenFile, FrozenOutput

    header = "group," + ",".join(f"c{j}" for j in range(10))
    lines = [header] + [f"g{i}," + ",".join(str((i * 10 + j) % 97) for j in range(10)) for i in range(rows)]
    flags = [{"row": i, "col": j, "rule": "threshold", "status": "fail"} for i in range(rows) for j in range(10)
             if (i * 10 + j) % 10 == 3]
    checks = [{"rule": "threshold", "status": "fail", "cells": [[f"g{f['row']}", f"c{f['col']}"] for f in flags],
               "reason": f"{len(flags)} cells have fewer than 10 records"}]
    meta = {"name": "wide table", "kind": "crosstab", "status": "fail", "checks": checks, "flags": flags,
            "query": {"row": "group", "col": "c"}, "cohorts": []}
    return FrozenOutput(output_id="1", name="wide table", kind="crosstab", status="fail", checks=checks,
                        justification="benchmark", files=(FrozenFile("data.csv", ("\n".join(lines) + "\n").encode()),
                                                          FrozenFile("meta.json", json.dumps(meta).encode())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100, 1000, 9999])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

    from deploy.custodian.api import create_app
    from deploy.custodian.people import People
    from deploy.provision import Provisioner
    from deploy.site.folder import Site
    from outputs.airlock.records import AirlockRecords
    from outputs.airlock.store import AirlockStore
    from outputs.airlock.workflow import Airlock
    from tests.deploy.review_helpers import PASSWORD, sign_in

    results: dict = {"repeat": args.repeat}
    with tempfile.TemporaryDirectory(prefix="safeshare-review-bench-") as folder:
        provisioner = Provisioner(Site(Path(folder) / "site"))
        People(provisioner.records.engine).add("carol", "checker", PASSWORD)  # the site's scrypt parameters
        airlock = Airlock(AirlockStore(provisioner.site.root), AirlockRecords(provisioner.records.engine))
        try:
            with TestClient(create_app(provisioner, expiry_interval=None)) as client:
                times = []
                for _ in range(args.repeat):
                    client.cookies.clear()
                    start = time.perf_counter()
                    assert sign_in(client, "carol").status_code == 303
                    times.append(time.perf_counter() - start)
                results["sign_in_seconds"] = {"median": round(statistics.median(times), 4),
                                              "max": round(max(times), 4)}
                pages = {}
                for number, rows in enumerate(args.rows, start=1):
                    request_id = airlock.submit(recipient=f"r{number}", rid=f"rid{number}", release="bench/1",
                                                app_number=1, context="benchmark", controls="benchmark",
                                                outputs=[table_output(rows)]).request_id
                    times, size = [], 0
                    for _ in range(args.repeat):
                        start = time.perf_counter()
                        page = client.get(f"/review/requests/{request_id}")
                        times.append(time.perf_counter() - start)
                        assert page.status_code == 200
                        size = len(page.content)
                    pages[str(rows)] = {"cells": rows * 10, "median": round(statistics.median(times), 4),
                                        "max": round(max(times), 4), "bytes": size}
                results["request_page_seconds"] = pages
        finally:
            provisioner.close()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
