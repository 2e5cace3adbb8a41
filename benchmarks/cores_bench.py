"""What a second core gives the optimal searches on this machine: measured, so that the default stays an argument.

Issue 28 asks the optimal searches to use both cores where the algorithm allows it. The engine has one way to do
so, rolling up ahead on a worker thread (SAFESHARE_ROLL_AHEAD=1, engine.search.ahead_policy), and leaves it off by
default because it measured slower. This script measures the other way a search could use the second core, and the
machine's scaling itself, so that anyone on another machine can see whether the default should change there:

    compute   one dependent integer loop over n values, split in two halves on two threads (numba's OpenMP layer)
              against both halves on one: what the second core gives work that needs no memory traffic
    roll-up   the searches' own base roll-ups (`roll_up_base_levels_lazy`, captured from one search of each
              configuration), each split by rows into two halves, grouped and then merged in first appearance order
              (the same classes, checked against the engine's kernel before timing), the split run on one thread
              and on two: their ratio is what the second core gives the work that is 55-80 % of a check, and the
              engine's kernel beside them what the split itself costs
    ahead     warm search seconds with rolling up ahead on and off, alternating in separate processes
              (`engine_bench.py`, the fastest of --repeat warm runs)

Each figure is the median of many calls, so it holds on a machine whose speed drifts; speed-up > 1 means the two
threads were faster. Needs numba's thread-safe OpenMP layer (libgomp); without it the first two parts say so.

    .venv/bin/python benchmarks/cores_bench.py [--json] [--configurations NAME ...] [--repeat 3] [--skip-ahead]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

ROLL_UP_CONFIGURATIONS = ("fars-k2-supp10-entropy", "adult-k5-entropy", "cup-k5-entropy")
AHEAD_CONFIGURATIONS = ("adult-k5", "fars-k2-supp10-entropy", "cup-k5-entropy")
COMPUTE_SIZES = (20_000, 200_000, 2_000_000)
CALLS_KEPT = 24        # captured base roll-ups timed per configuration
TIMED_CALLS = 40       # calls per median


def median_microseconds(function, arguments: tuple, calls: int = TIMED_CALLS) -> float:
    function(*arguments)   # compiled and warm
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function(*arguments)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def thread_safe_layer() -> bool:
    """numba's OpenMP layer, chosen before any parallel kernel is compiled; False where libgomp is missing."""
    import numba

    try:
        from numba.np.ufunc import omppool  # noqa: F401
    except ImportError:
        return False
    numba.config.THREADING_LAYER = "omp"
    return True


def build_kernels():
    """The split kernels, compiled here only (never by the engine): parallel=True needs the layer chosen first."""
    import numba

    from engine._hash_numba import find, new_index, table_bits
    from engine._kernels_numba import SPARSER_BITS, _level_changes, origins_of

    @numba.njit(nogil=True)
    def chain(values, start, stop):
        total = 0
        for j in range(start, stop):
            total += (values[j] * 7) ^ (total >> 3)
        return total

    @numba.njit(nogil=True)
    def chain_one(values):
        half = values.size // 2
        return chain(values, 0, half) + chain(values, half, values.size)

    @numba.njit(parallel=True, nogil=True)
    def chain_two(values):
        half = values.size // 2
        out = np.zeros(2, np.int64)
        for part in numba.prange(2):
            out[part] = chain(values, part * half, values.size if part else half)
        return out[0] + out[1]

    @numba.njit(nogil=True, error_model="numpy")
    def group_rows(sizes, key, deltas, picked_rows, places, start, stop, cap, bits, keys_out, sizes_out, first, index,
                   keys):
        """The serial merge's loop over rows start..stop, each row's key computed here from the kept updates (into
        keys[start:stop]): the half a thread owns, read by that thread alone. Every array is allocated by the
        calling thread (a worker's own allocations fault pages in at every call)."""
        count = stop - start
        for j in range(count):
            keys[j] = key[start + j]
        for c in range(picked_rows.size):
            delta = deltas[picked_rows[c]]
            place = places[c]
            for j in range(count):
                keys[j] += np.int64(delta[start + j]) * place
        u = 0
        for offset in range(count):
            k = keys[offset]
            slot = find(index, keys_out, k, bits)
            t = index[slot]
            if t >= 0:
                sizes_out[np.uint64(t)] += sizes[start + offset]
            else:
                if u == cap:
                    return -1
                index[slot] = u
                keys_out[u] = k
                sizes_out[u] = sizes[start + offset]
                first[u] = start + offset
                u += 1
        return u

    def base_roll_up_split(codes, origin, sizes, key, levels, starts, maps, places, cards, minimal, deltas, ready,
                         rows):
        """`roll_up_base_levels_lazy` with its rows in two halves grouped on two threads, then the second half's
        classes merged into the first's in their order: the same classes, numbered by first appearance."""
        m = codes.shape[1]
        changed, where, bound = _level_changes(levels, starts, cards, m)
        half_d = levels.size // 2
        picked_rows = np.empty(changed.size, np.int64)
        picked_places = np.empty(changed.size, np.int64)
        for c in range(changed.size):
            i = changed[c]
            r = rows[i, levels[half_d + i]]
            picked_rows[c] = r
            picked_places[c] = places[i]
            if not ready[r]:
                delta = deltas[r]
                row = codes[i]
                for j in range(m):
                    v = np.int64(row[j])
                    delta[j] = maps[where[c] + v] - v
                ready[r] = True
        cap = m if bound < 0 or bound > m else bound
        bits = table_bits(cap)
        if bits <= SPARSER_BITS:
            bits += 1
        half = m // 2
        cap_b = min(cap, m - half)
        bits_b = table_bits(cap_b)
        if bits_b <= SPARSER_BITS:
            bits_b += 1
        keys_a = np.empty(cap, np.int64)
        sizes_a = np.empty(cap, np.int64)
        first_a = np.empty(cap, np.int64)
        keys_b = np.empty(cap_b, np.int64)
        sizes_b = np.empty(cap_b, np.int64)
        first_b = np.empty(cap_b, np.int64)
        index = new_index(bits)
        index_b = new_index(bits_b)
        keys_rows = np.empty(m, np.int64)
        counts = np.zeros(2, np.int64)
        for part in numba.prange(2):
            if part == 0:
                counts[0] = group_rows(sizes, key, deltas, picked_rows, picked_places, 0, half, cap, bits, keys_a,
                                       sizes_a, first_a, index, keys_rows[:half])
            else:
                counts[1] = group_rows(sizes, key, deltas, picked_rows, picked_places, half, m, cap_b, bits_b,
                                       keys_b, sizes_b, first_b, index_b, keys_rows[half:])
        u = counts[0]
        if u < 0 or counts[1] < 0:
            raise ValueError("roll-up: more classes than the product of the target levels' cardinalities")
        for t in range(counts[1]):
            k = keys_b[t]
            slot = find(index, keys_a, k, bits)
            c = index[slot]
            if c >= 0:
                sizes_a[np.uint64(c)] += sizes_b[t]
            else:
                index[slot] = u
                keys_a[u] = k
                sizes_a[u] = sizes_b[t]
                first_a[u] = first_b[t]
                u += 1
        below = np.int64(0)
        for t in range(u):
            if sizes_a[t] < minimal:
                below += sizes_a[t]
        return origins_of(origin, first_a, u), sizes_a[:u].copy(), keys_a[:u].copy(), below

    # the same split on one thread (prange is range outside a parallel kernel) and on two: their ratio is what the
    # second core gives this work; the split's own cost (two tables, the merge) shows against the engine's kernel
    split_one = numba.njit(nogil=True, error_model="numpy")(base_roll_up_split)
    split_two = numba.njit(parallel=True, nogil=True, error_model="numpy")(base_roll_up_split)
    return chain_one, chain_two, split_one, split_two


def captured_base_roll_ups(name: str) -> list[tuple]:
    """The arguments of the first CALLS_KEPT base roll-ups of one warm search of configuration `name`."""
    import engine._kernels_numba as compiled
    import engine_bench
    from engine.deid import deidentify

    policy = engine_bench.build_policy(engine_bench.named_configurations()[name], None)
    deidentify(policy)
    calls: list[tuple] = []
    kernel = compiled.roll_up_base_levels_lazy

    def keep(*arguments):
        if len(calls) < CALLS_KEPT:
            calls.append(tuple(a.copy() if isinstance(a, np.ndarray) else a for a in arguments))
        return kernel(*arguments)

    compiled.roll_up_base_levels_lazy = keep
    try:
        deidentify(policy)
    finally:
        compiled.roll_up_base_levels_lazy = kernel
    return calls


def compute_figures(chain_one, chain_two) -> list[dict[str, Any]]:
    rows = []
    for size in COMPUTE_SIZES:
        values = np.arange(size, dtype=np.int64)
        if chain_one(values) != chain_two(values):
            raise AssertionError("the split loop differs from the serial one")
        one = median_microseconds(chain_one, (values,), 200)
        two = median_microseconds(chain_two, (values,), 200)
        rows.append({"values": size, "one_thread_us": round(one, 1), "two_threads_us": round(two, 1),
                     "speed_up": round(one / two, 2)})
    return rows


def roll_up_figures(names: list[str], split_one, split_two) -> list[dict[str, Any]]:
    from engine import kernels

    compiled = kernels.load()
    rows = []
    for name in names:
        calls = captured_base_roll_ups(name)
        if not calls:
            rows.append({"configuration": name, "calls": 0})
            continue
        engine_total = one_total = two_total = 0.0
        for arguments in calls:
            serial = compiled.roll_up_base_levels_lazy(*arguments)
            for split in (split_one, split_two):
                out = split(*arguments)
                if not all(np.array_equal(a, b) for a, b in zip(serial[:3], out[:3])) or serial[3] != out[3]:
                    raise AssertionError(f"{name}: the split roll-up's classes differ from the serial kernel's")
            engine_total += median_microseconds(compiled.roll_up_base_levels_lazy, arguments)
            one_total += median_microseconds(split_one, arguments)
            two_total += median_microseconds(split_two, arguments)
        calls_made = len(calls)
        rows.append({"configuration": name, "calls": calls_made, "source_classes": int(calls[0][2].size),
                     "engine_us_per_call": round(engine_total / calls_made, 1),
                     "split_one_thread_us_per_call": round(one_total / calls_made, 1),
                     "split_two_threads_us_per_call": round(two_total / calls_made, 1),
                     "second_core_speed_up": round(one_total / two_total, 2),
                     "speed_up_over_engine": round(engine_total / two_total, 2)})
    return rows


def search_seconds(name: str, ahead: bool, repeat: int) -> float:
    environment = dict(os.environ, SAFESHARE_ROLL_AHEAD="1" if ahead else "0")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "engine_bench.py"), "--json", "--no-arx",
                          "--no-profile", "--repeat", str(repeat), name], capture_output=True, text=True,
                         env=environment, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["search_seconds"])


def ahead_figures(names: list[str], repeat: int, rounds: int = 2) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        off, on = [], []
        for _ in range(rounds):   # alternating, so that a drift of the machine's speed falls on both
            off.append(search_seconds(name, False, repeat))
            on.append(search_seconds(name, True, repeat))
        rows.append({"configuration": name, "ahead_off_s": [round(s, 3) for s in off],
                     "ahead_on_s": [round(s, 3) for s in on], "speed_up": round(min(off) / min(on), 2)})
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object with every figure")
    parser.add_argument("--configurations", nargs="+", default=list(ROLL_UP_CONFIGURATIONS),
                        help="configurations whose base roll-ups are timed (engine_bench.py --list)")
    parser.add_argument("--ahead-configurations", nargs="+", default=list(AHEAD_CONFIGURATIONS))
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per search in the ahead part")
    parser.add_argument("--skip-ahead", action="store_true", help="leave out the searches with rolling up ahead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2)}
    if thread_safe_layer():
        chain_one, chain_two, split_one, split_two = build_kernels()
        figures["compute"] = compute_figures(chain_one, chain_two)
        figures["roll_up"] = roll_up_figures(args.configurations, split_one, split_two)
    else:
        figures["compute"] = figures["roll_up"] = "numba's OpenMP threading layer is not available (libgomp)"
    if not args.skip_ahead:
        figures["ahead"] = ahead_figures(args.ahead_configurations, args.repeat)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"cpus {figures['cpus']}, load {figures['load_average']}")
    for part in ("compute", "roll_up", "ahead"):
        if part not in figures:
            continue
        print(f"\n{part}:")
        rows = figures[part]
        if isinstance(rows, str):
            print("  " + rows)
            continue
        for row in rows:
            print("  " + "  ".join(f"{key} {value}" for key, value in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
