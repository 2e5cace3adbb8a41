"""Byte-for-byte check of release bundles written by two trees of the engine (issue 30: behaviour does not change).

Runs `safeshare deid` for each case below with the code of tree A and of tree B (each on its own PYTHONPATH, the
same policy files, data and empty site folder) and compares every file of the two output folders byte for byte.
Durations are made deterministic rather than normalised (see RUNNER: a clock that advances 1 ms per read from engine
code, a constant memory reading), so the only value normalised is the one wall-clock time:
  - report.html: the "generated" time (minute, UTC), and hence manifest.json's sha256 of report.html.
Everything else (data.csv, data.parquet, data/part-*.parquet, every manifest field, the rest of the report) must be
identical bytes; the script says where it normalised.

    python tests/release_bytes_check.py /work/base-h1 /work/main [--work DIR] [--only NAME ...]

Exit 0 when every case matches, 1 otherwise. Not a pytest test: it needs a second tree (a git worktree of the start
commit) and runs for minutes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "policies" / "examples"
DATA = REPO / "data" / "demo"

# name -> (example policy, extra YAML appended to it, extra CLI arguments)
CASES: dict[str, tuple[str, str, list[str]]] = {
    "adult-k5": ("adult-k5.yaml", "", []),
    "adult-k5-p4": ("adult-k5.yaml", "", ["--partitions", "4", "--scheduler", "none"]),
    "adult-k5-p4-dataset": ("adult-k5.yaml", "", ["--partitions", "4", "--scheduler", "none", "--dataset"]),
    "adult-k5-p4-local": ("adult-k5.yaml",
                          "search: {parallel: {partitions: 3, scheduler: none, transformation: local}}\n", []),
    "adult-k5-local": ("adult-k5.yaml", "search: {recoding: local, local_iterations: 4}\n", []),
    "adult-distinct-l3": ("adult-distinct-l3.yaml", "", []),
    "adult-tcloseness-hierarchical": ("adult-tcloseness-hierarchical-02.yaml", "", []),
    "adult-pu1": ("adult-pu1.yaml", "", []),
    "adult-average-risk": ("adult-average-risk-005.yaml", "", []),
    "adult-tcloseness-p4": ("adult-tcloseness-hierarchical-02.yaml", "", ["--partitions", "3", "--scheduler", "none"]),
}

# The run, with its clock made deterministic: time.perf_counter advances exactly 1 ms per call from the engine's
# own code (under a lock; reads by libraries, such as numba compiling on a tree's first run, do not advance it), and
# the search's memory reading is a constant. Durations in the manifest and the report (seconds, quality_over_time,
# seconds_per_check, seconds per P4 step, the report's search chart) are then the same for the same sequence of
# clock reads, so they are compared byte for byte instead of being normalised away: a change that reads the clock a
# different number of times shows as a difference. Same patch in both trees.
RUNNER = """
import sys, threading, time
_lock = threading.Lock()
_ticks = [0]
def _clock():
    with _lock:
        if sys._getframe(1).f_globals.get("__name__", "").startswith("engine"):
            _ticks[0] += 1
        return _ticks[0] / 1000.0
time.perf_counter = _clock
import engine.search.common as _common
_common.resident_bytes = lambda: 1 << 30
from safeshare.cli import main
sys.exit(main())
"""

GENERATED = re.compile(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")
REPORT_HASH = re.compile(rb'("report\.html": )"[0-9a-f]{64}"')


def write_policy(folder: Path, example: str, extra: str) -> Path:
    """The example policy with its data paths made absolute and `extra` appended, in `folder`."""
    text = (EXAMPLES / example).read_text(encoding="utf-8").replace("../../data/demo", str(DATA))
    policy = folder / "policy.yaml"
    policy.write_text(text + extra, encoding="utf-8")
    return policy


def run(tree: Path, policy: Path, out: Path, args: list[str], site: Path) -> int:
    """`safeshare deid` with the engine of `tree`; returns its exit code."""
    env = {**os.environ, "PYTHONPATH": str(tree), "SAFESHARE_SITE": str(site)}
    code = RUNNER
    done = subprocess.run([sys.executable, "-c", code, "deid", str(policy), "--out", str(out), "--quiet", *args],
                          cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        print(done.stderr[-2000:], file=sys.stderr)
    return done.returncode


def normalised(name: str, data: bytes) -> tuple[bytes, list[str]]:
    """The bytes to compare and the places normalised (wall-clock values only)."""
    notes: list[str] = []
    if name.endswith("report.html"):
        data, count = GENERATED.subn(b"<generated>", data)
        if count:
            notes.append(f"{name}: generated time x{count}")
    if name.endswith("manifest.json"):
        data, count = REPORT_HASH.subn(rb'\1"<sha256 of report.html>"', data)
        if count:
            notes.append(f"{name}: files[report.html] (the report's sha256)")
    return data, notes


def compare(a: Path, b: Path) -> tuple[list[str], list[str], list[str]]:
    """(files compared, differences, normalisations) between output folders a and b."""
    names_a = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    names_b = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    diffs = [f"only in one: {n}" for n in sorted(set(names_a) ^ set(names_b))]
    notes: list[str] = []
    for name in sorted(set(names_a) & set(names_b)):
        data_a, notes_a = normalised(name, (a / name).read_bytes())
        data_b, _ = normalised(name, (b / name).read_bytes())
        notes.extend(notes_a)
        if data_a != data_b:
            digests = [hashlib.sha256(data).hexdigest()[:12] for data in (data_a, data_b)]
            diffs.append(f"{name}: {digests[0]} != {digests[1]}")
        elif (a / name).read_bytes() != (b / name).read_bytes():
            notes.append(f"{name}: equal after normalisation only")
    return sorted(set(names_a) & set(names_b)), diffs, notes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree_a", type=Path)
    parser.add_argument("tree_b", type=Path)
    parser.add_argument("--work", type=Path, default=None, help="keep the outputs here (default: a temp folder)")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    options = parser.parse_args(argv)
    work = options.work or Path(tempfile.mkdtemp(prefix="release-bytes-"))
    failed = False
    for name, (example, extra, args) in CASES.items():
        if options.only and name not in options.only:
            continue
        case = work / name
        shutil.rmtree(case, ignore_errors=True)
        (case / "site").mkdir(parents=True)
        policy = write_policy(case, example, extra)
        codes = [run(tree, policy, case / label, args, case / "site")
                 for tree, label in ((options.tree_a, "a"), (options.tree_b, "b"))]
        if codes[0] != codes[1] or codes[0] not in (0, 1):
            print(f"{name}: exit codes {codes[0]} vs {codes[1]}", flush=True)
            failed = True
            continue
        files, diffs, notes = compare(case / "a", case / "b")
        status = "identical" if not diffs else "DIFFERENT"
        print(f"{name} (exit {codes[0]}): {status}; {len(files)} files: {', '.join(files)}", flush=True)
        for line in diffs:
            print(f"  diff: {line}")
        for line in sorted(set(notes)):
            print(f"  normalised: {line}")
        failed |= bool(diffs)
    if not options.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
