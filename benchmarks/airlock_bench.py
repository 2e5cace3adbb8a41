"""The airlock's host-side costs (issue 27): one intake pass, a release, and verify-output, at the request bounds.

Makes a workspace with OUTPUTS saved outputs (a data.csv of ROWS rows each, as the app writes them) and a draft
request of all of them; then times: the intake pass that freezes the submission (safe reads, checks, copy, hashes,
store rename, rows and events), an idle intake pass (nothing to do: what the custodian service's loop costs every
second per workspace), the release of the approved request (re-hash, package, sign, write), and verify_package on
the package (signature, hashes, deterministic rebuild). Prints JSON with seconds (median of REPEAT) and sizes.

    .venv/bin/python benchmarks/airlock_bench.py [--outputs 50] [--rows 2000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def one(outputs: int, rows: int) -> dict[str, float]:
    from outputs.airlock.intake import run_intake
    from outputs.airlock.package import verify_package
    from outputs.airlock.records import AirlockRecords
    from outputs.airlock.store import AirlockStore
    from outputs.airlock.workflow import Airlock
    from outputs.airlock.workspace import Layout, Workspace, write_json_atomic
    from safeshare.signing import ensure_outputs_key

    with tempfile.TemporaryDirectory() as tmp:
        site, state = Path(tmp) / "site", Path(tmp) / "state"
        (site / "db").mkdir(parents=True)
        url = f"sqlite:///{site / 'db' / 'safeshare.db'}"
        layout = Layout(state)
        csv = "group,count\n" + "".join(f"g{i},{100 + i}\n" for i in range(rows))
        for oid in range(1, outputs + 1):
            folder = layout.output_dir(oid)
            folder.mkdir(parents=True)
            (folder / "data.csv").write_text(csv)
            (folder / "rendering.html").write_text("<table></table>")
            (folder / "meta.json").write_text(json.dumps({
                "name": f"table {oid}", "kind": "table", "status": "pass", "checks": [],
                "release": {"dataset": "adult", "id": "r1", "seal_sha256": "0" * 64}}))
        write_json_atomic(layout.request_file(1), {"number": 1, "context": "bench", "controls": "bench",
                                                   "outputs": [{"output_id": i} for i in range(1, outputs + 1)]})
        write_json_atomic(layout.outbox_file(1), {"request": 1, "action": "submit"})
        workspace = Workspace(state, "alice", "ab12cd34ef", "adult/r1")
        airlock = Airlock(AirlockStore(site), AirlockRecords(url))
        started = time.perf_counter()
        result = run_intake(site, [workspace], airlock=airlock)
        intake = time.perf_counter() - started
        assert result.handled[0]["outcome"] == "ok", result.handled
        request_id = result.handled[0]["request_id"]
        started = time.perf_counter()
        run_intake(site, [workspace], airlock=airlock)
        idle = time.perf_counter() - started
        for oid in range(1, outputs + 1):
            airlock.vote(request_id, str(oid), "bob", "approve")
            airlock.vote(request_id, str(oid), "carol", "approve")
        key = ensure_outputs_key(site)
        started = time.perf_counter()
        airlock.release(request_id, key, "bench")
        release = time.perf_counter() - started
        package = airlock.store.package_file(request_id)
        started = time.perf_counter()
        verify_package(package, site / "trust.json")
        verify = time.perf_counter() - started
        size = package.stat().st_size
        airlock.close()
    return {"intake_submit": intake, "intake_idle": idle, "release": release, "verify": verify,
            "package_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outputs", type=int, default=50)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [one(args.outputs, args.rows) for _ in range(args.repeat)]
    report = {"outputs": args.outputs, "rows_per_csv": args.rows, "repeat": args.repeat,
              **{k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
