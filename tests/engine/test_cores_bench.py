"""benchmarks/cores_bench.py: the figures behind leaving rolling up ahead off by default (issue 28, "Both cores").

The split roll-up it times must group the same classes as the engine's serial kernel, or its speed-up would compare
different work: the script checks every captured call before timing it and fails otherwise. Run in its own process,
because it picks numba's OpenMP layer and compiles parallel kernels that the engine itself never uses."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.datasets import REPO, require_benchmark


def test_the_split_roll_up_groups_the_same_classes_and_the_figures_are_stable_json():
    require_benchmark("fars-subset")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cores_bench.py"), "--json", "--skip-ahead",
                          "--configurations", "fars-k2-supp10-entropy"], capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["cpus"] >= 1 and "ahead" not in figures
    if isinstance(figures["roll_up"], str):   # no OpenMP layer: said, not faked
        assert "OpenMP" in figures["roll_up"]
        return
    assert [row["values"] for row in figures["compute"]] == [20_000, 200_000, 2_000_000]
    (row,) = figures["roll_up"]
    assert row["configuration"] == "fars-k2-supp10-entropy" and row["calls"] > 0
    assert row["source_classes"] == 8641   # FARS subset's base classes: the roll-ups start from the base
    assert min(row["engine_us_per_call"], row["split_one_thread_us_per_call"], row["split_two_threads_us_per_call"],
               row["second_core_speed_up"], row["speed_up_over_engine"]) > 0
