"""Engine benchmark: search time, transformations checked and peak memory for named policy configurations.

A configuration is an example policy (policies/examples/*.yaml, named by its file stem), a variant of one (an example
with some keys replaced, e.g. `adult-k3-nosupp`; see VARIANTS) or a policy file given by path. Each configuration
runs in a fresh process so that peak resident memory (ru_maxrss) belongs to it alone. In that process the policy is
de-identified once cold (imports, first file reads) and then --repeat times warm; the warm run with the shortest
search is reported:

    search_seconds           the lattice search alone (result.search.seconds): what compares with ARX's anonymize()
    search_cpu_seconds       the process CPU seconds of that search (the least of the warm runs): on a loaded
                             machine wall seconds grow with the load, CPU seconds much less (`SearchClock`);
                             load_average is the 1-minute load when the configuration finished
    seconds                  the whole deidentify(): load, encode, search, apply, quality under every model
    cold_seconds             the first deidentify() in the process
    checked_transformations  transformations the search evaluated
    risk_model_evaluations   calls of a risk model (population uniqueness)
    lattice_size, algorithm, optimal, transformation, quality (of the model optimized for), suppressed_records,
    peak_rss_mb (of the whole process, cold run included), phases (checks per phase of a multi-phase search)
    ms_per_check             search_seconds / checked_transformations, in milliseconds
    profile                  where one more warm search spent its time (`CheckProfile`, run after the timed ones so
                             that the timers cannot slow them): roll-up (classes of a transformation from a finer
                             one), decision (the rest of a check: k-anonymity and suppression decision, class
                             models, bookkeeping), quality (loss and class bound), risk (risk-based models and
                             their suppression), search (the algorithm between checks); seconds and shares

With --arx (default: benchmarks/arx_reference.json when it exists) the table adds ARX's search seconds and checks for
the same configuration, the speed-up (ARX seconds / our search seconds) and the cost per check beside ARX's (ms per
check, ARX / ours, and their ratio). A configuration that fails is reported in its row; the benchmark then exits 1.

    .venv/bin/python benchmarks/engine_bench.py [--repeat 3] [--algorithm auto|flash|flash2p|bnb] [--json]
                                                [--arx FILE.json | --no-arx] [--no-profile] [--list]
                                                [NAME | POLICY.yaml ...]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:   # the parent process never imports the engine; only the per-configuration processes do
    from engine.deid import DeidResult
    from engine.policy import DatasetPolicy

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "policies" / "examples"
NOT_BENCHMARKS = {"recipient-demo"}              # example files that are not dataset policies
ARX_REFERENCE = Path(__file__).resolve().parent / "arx_reference.json"
ALGORITHMS = ("auto", "flash", "flash2p", "bnb")


def k_anonymity(k: int) -> list[dict[str, Any]]:
    return [{"model": "k_anonymity", "k": k}]


# name -> (example file it starts from, keys replaced; nested mappings are merged, lists and scalars replaced)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "adult-k3-nosupp": ("adult-k5.yaml", {"privacy": k_anonymity(3), "suppression_limit": 0.0}),
    "adult-k10-supp5": ("adult-k5.yaml", {"privacy": k_anonymity(10), "suppression_limit": 0.05}),
    "cup-k2-supp2": ("cup-k5.yaml", {"privacy": k_anonymity(2), "suppression_limit": 0.02}),
    "fars-k2-supp10-entropy": ("fars-subset-k5-entropy.yaml", {"privacy": k_anonymity(2), "suppression_limit": 0.10}),
    "adult-pu0.1-california": ("adult-pu1.yaml", {"privacy": [
        {"model": "population_uniqueness", "estimator": "pitman", "population": "California", "threshold": 0.001}]}),
    "cup-k3-pu1": ("cup-pu1.yaml", {"privacy": k_anonymity(3) + [
        {"model": "population_uniqueness", "estimator": "pitman", "population": 318900000, "threshold": 0.01}]}),
    "adult-k5-arith": ("adult-k5.yaml", {"quality": {"aggregation": "arithmetic_mean"}}),
    "adult-k2-supp2-entropy": ("adult-k5-entropy.yaml", {"privacy": k_anonymity(2), "suppression_limit": 0.02}),
    # The other attribute-disclosure and sample-risk models on ADULT's occupation (examples: adult-*-l3, -t*, -risk)
    "adult-grassberger-l3": ("adult-entropy-l3.yaml", {"privacy": [
        {"model": "l_diversity", "variant": "entropy", "estimator": "grassberger", "attribute": "occupation", "l": 3}]}),
    "adult-tcloseness-ordered-02": ("adult-tcloseness-equal-02.yaml", {"privacy": [
        {"model": "t_closeness", "distance": "ordered", "attribute": "occupation", "t": 0.2}]}),
    "adult-delta-disclosure-1.2": ("adult-distinct-l3.yaml", {"privacy": k_anonymity(2) + [
        {"model": "delta_disclosure", "attribute": "occupation", "delta": 1.2}]}),
    "adult-beta-likeness-1": ("adult-distinct-l3.yaml", {"privacy": [
        {"model": "beta_likeness", "variant": "enhanced", "attribute": "occupation", "beta": 1.0}]}),
    "adult-sample-uniqueness-001": ("adult-average-risk-005.yaml", {"privacy": [
        {"model": "sample_uniqueness", "threshold": 0.01}]}),
    "adult-kmap5-poisson-usa": ("adult-average-risk-005.yaml", {"privacy": [
        {"model": "k_map", "k": 5, "population": "USA", "estimator": "poisson"}]}),
    "adult-delta-presence-sample10": ("adult-average-risk-005.yaml", {"privacy": [
        {"model": "delta_presence", "delta_min": 0.0, "delta_max": 0.15, "subset": {"sample": 0.1, "seed": 1}}]}),
}


@dataclass(frozen=True)
class Configuration:
    name: str
    base: Path                                   # the policy file read (relative paths in it resolve against it)
    overrides: dict[str, Any] = field(default_factory=dict)


# --- configurations -------------------------------------------------------------------------------------------------
def example_configurations() -> dict[str, Configuration]:
    paths = sorted(EXAMPLES.glob("*.yaml"), key=lambda path: path.stem)
    return {path.stem: Configuration(path.stem, path) for path in paths if path.stem not in NOT_BENCHMARKS}


def named_configurations() -> dict[str, Configuration]:
    """Every example policy, then every variant, in a stable order."""
    configurations = example_configurations()
    for name, (example, overrides) in VARIANTS.items():
        configurations[name] = Configuration(name, EXAMPLES / example, overrides)
    return configurations


def resolve_configuration(spec: str, known: dict[str, Configuration]) -> Configuration:
    """A policy file path, else a configuration name (with or without .yaml); ValueError if it is neither."""
    path = Path(spec)
    if path.is_file():
        return Configuration(path.stem, path.resolve())
    name = spec[: -len(".yaml")] if spec.endswith(".yaml") else spec
    if name in known:
        return known[name]
    raise ValueError(f"{spec}: neither a policy file nor a configuration name (see --list)")


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied: nested mappings merge key by key, anything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def build_policy(configuration: Configuration, algorithm: str | None) -> DatasetPolicy:
    """The configuration's validated DatasetPolicy (with search.algorithm forced when `algorithm` is given)."""
    import yaml
    from engine.policy import parse_policy

    overrides = configuration.overrides
    if algorithm is not None:
        overrides = merge(overrides, {"search": {"algorithm": algorithm}})
    data = merge(yaml.safe_load(configuration.base.read_text(encoding="utf-8")), overrides)
    return parse_policy(data, source=str(configuration.base))


# --- one configuration, in its own process --------------------------------------------------------------------------
PROFILE_PARTS = ("roll-up", "decision", "quality", "risk")


class CheckProfile:
    """Exclusive wall time per part of a check, by wrapping the engine's functions for one run (and restoring them).

    Each wrapped function charges the time until it returns, minus what the wrapped functions it calls take, to its
    part: a roll-up inside a check counts as roll-up, the quality loss inside risk-based suppression as quality. What
    lies outside every check is the search's own work. Functions a version of the engine does not have are skipped, so
    the profile still runs where the per-check path changes (its time then shows under the part that calls it).
    """

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PROFILE_PARTS, 0.0)
        self._stack: list[str] = []
        self._last = 0.0
        self._restore: list[tuple[type, str, Any]] = []

    def _charge(self) -> float:
        now = time.perf_counter()
        if self._stack:
            self.seconds[self._stack[-1]] += now - self._last
        self._last = now
        return now

    def wrap(self, owner: type, name: str, part: str) -> None:
        original = owner.__dict__.get(name)
        if original is None or not callable(original):
            return
        profile = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            profile._charge()
            profile._stack.append(part)
            try:
                return original(*args, **kwargs)
            finally:
                profile._charge()
                profile._stack.pop()

        setattr(owner, name, timed)
        self._restore.append((owner, name, original))

    def install(self) -> None:
        from engine.classes import ClassCache
        from engine.privacy.base import RiskBasedModel
        from engine.quality.base import QualityModel
        from engine.search.evaluator import Evaluator

        for name in ("evaluate", "m_anonymous"):
            self.wrap(Evaluator, name, "decision")
        for name in ("_joint", "_entry", "view"):   # _entry: the class cache since b7aa3ca
            self.wrap(ClassCache, name, "roll-up")
        for owner in _subclasses(QualityModel):
            for name in ("loss", "loss_without_suppression", "lower_bound_from_classes", "suppression_keys"):
                self.wrap(owner, name, "quality")
        for name in ("enforce", "assess"):
            self.wrap(RiskBasedModel, name, "risk")

    def remove(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()

    def report(self, search_seconds: float) -> dict[str, Any]:
        """Seconds and share of the search per part; `search` is what no check accounts for."""
        parts = {part: round(seconds, 4) for part, seconds in self.seconds.items()}
        parts["search"] = round(max(0.0, search_seconds - sum(self.seconds.values())), 4)
        total = search_seconds if search_seconds > 0 else 1.0
        return {"seconds": parts, "share": {part: round(seconds / total, 3) for part, seconds in parts.items()}}


def _subclasses(base: type) -> list[type]:
    found, todo = [base], [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def profiled_search(policy: DatasetPolicy) -> dict[str, Any]:
    """One more warm de-identification under `CheckProfile`: where the search's time goes."""
    profile = CheckProfile()
    profile.install()
    try:
        result, _ = timed_deidentify(policy)
    finally:
        profile.remove()
    return profile.report(result.search.seconds)


class SearchClock:
    """The process CPU seconds of each search, beside its wall seconds: on a loaded machine (other processes on the
    same cores) the wall time of a search grows with the load, its CPU time much less, so CPU seconds compare
    before/after runs made minutes apart. Wraps `engine.search.search` in every loaded module that holds it (the
    pipeline imports it by name), after the cold run has imported them; `remove` restores them."""

    def __init__(self) -> None:
        self.last: float | None = None
        self._restore: list[tuple[Any, Any]] = []

    def install(self) -> None:
        import engine.search as package

        original = package.search
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                clock.last = time.process_time() - started

        for module in list(sys.modules.values()):
            if getattr(module, "search", None) is original:
                module.search = timed
                self._restore.append((module, original))

    def remove(self) -> None:
        for module, original in self._restore:
            module.search = original
        self._restore.clear()


def timed_deidentify(policy: DatasetPolicy) -> tuple[DeidResult, float]:
    from engine.deid import deidentify

    started = time.perf_counter()
    result = deidentify(policy)
    return result, time.perf_counter() - started


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)   # Linux reports KiB


def measure(configuration: Configuration, repeat: int, algorithm: str | None, profile: bool = True
            ) -> dict[str, Any]:
    """Cold run, then `repeat` warm runs; the warm run with the shortest search is reported; then, unless `profile`
    is False, one profiled run (`profiled_search`)."""
    policy = build_policy(configuration, algorithm)
    _, cold = timed_deidentify(policy)
    clock = SearchClock()
    clock.install()
    warm, cpu = [], []
    try:
        for _ in range(repeat):
            warm.append(timed_deidentify(policy))
            cpu.append(clock.last)
    finally:
        clock.remove()
    result, seconds = min(warm, key=lambda run: run[0].search.seconds)
    search = result.search
    cpu_seconds = min((c for c in cpu if c is not None), default=None)
    row = {
        "name": configuration.name,
        "policy": str(configuration.base),
        "overrides": configuration.overrides,
        "search_seconds": round(search.seconds, 4),
        "seconds": round(seconds, 4),
        "cold_seconds": round(cold, 4),
        "warm_search_seconds": [round(run.search.seconds, 4) for run, _ in warm],
        "checked_transformations": int(search.checked),
        "risk_model_evaluations": int(search.risk_evaluations),
        "lattice_size": int(search.lattice_size),
        "algorithm": search.algorithm,
        "optimal": bool(search.optimal),
        "transformation": result.transformation,
        "optimized_for": policy.quality.model,
        "quality": round(float(result.quality[policy.quality.model]), 6),
        "suppressed_records": int(result.best.suppressed_records),
        "peak_rss_mb": peak_rss_mb(),
        "phases": search.phases,
        "ms_per_check": round(1000 * search.seconds / search.checked, 4) if search.checked else None,
        "search_cpu_seconds": None if cpu_seconds is None else round(cpu_seconds, 4),
        "warm_search_cpu_seconds": [None if c is None else round(c, 4) for c in cpu],
        "load_average": round(os.getloadavg()[0], 2),
    }
    if profile:
        row["profile"] = profiled_search(policy)
    return row


def encode_configuration(configuration: Configuration) -> str:
    return json.dumps({"name": configuration.name, "base": str(configuration.base),
                       "overrides": configuration.overrides})


def decode_configuration(text: str) -> Configuration:
    data = json.loads(text)
    return Configuration(data["name"], Path(data["base"]), data["overrides"])


def run_child(encoded: str, repeat: int, algorithm: str | None, profile: bool = True) -> int:
    """Entry point of the per-configuration process: one JSON line on stdout, exit 1 if the configuration failed."""
    sys.path.insert(0, str(REPO))
    configuration = decode_configuration(encoded)
    try:
        row = measure(configuration, repeat, algorithm, profile)
    except Exception as exc:  # noqa: BLE001 - any failure belongs in this configuration's row
        print(json.dumps({"name": configuration.name, "error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(row))
    return 0


def run_isolated(configuration: Configuration, repeat: int, algorithm: str | None, profile: bool = True
                 ) -> dict[str, Any]:
    """Measure one configuration in a fresh interpreter; a crash there becomes an error row."""
    command = [sys.executable, __file__, "--child", encode_configuration(configuration), "--repeat", str(repeat)]
    if algorithm is not None:
        command += ["--algorithm", algorithm]
    if not profile:
        command.append("--no-profile")
    process = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    lines = process.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        stderr = process.stderr.strip().splitlines()
        reason = stderr[-1] if stderr else f"exit code {process.returncode} without output"
        return {"name": configuration.name, "error": reason}


# --- ARX reference and output ---------------------------------------------------------------------------------------
def load_arx(path: Path) -> dict[str, dict[str, float]]:
    """Configuration name -> {"seconds", "checked"}; keys starting with "_" (notes) are skipped."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {name: entry for name, entry in data.items() if not name.startswith("_")}


def add_arx(row: dict[str, Any], arx: dict[str, dict[str, float]]) -> None:
    reference = arx.get(row["name"])
    if reference is None or "error" in row:
        return
    row["arx_seconds"] = reference["seconds"]
    row["arx_checked"] = reference["checked"]
    row["speedup"] = round(reference["seconds"] / row["search_seconds"], 2) if row["search_seconds"] > 0 else None
    row["arx_ms_per_check"] = round(1000 * reference["seconds"] / reference["checked"], 4) \
        if reference["checked"] else None
    ours = row.get("ms_per_check")
    row["check_cost_ratio"] = round(row["arx_ms_per_check"] / ours, 2) \
        if ours and row["arx_ms_per_check"] is not None else None


def columns(with_arx: bool) -> list[tuple[str, int]]:
    """Table columns (header, width); the last, unbounded column holds quality, transformation and phases."""
    table = [("search s", 8), ("cpu s", 7), ("seconds", 8), ("cold s", 7), ("checked", 8), ("ms/check", 8), ("risk ev", 8),
             ("lattice", 8), ("algorithm", 9), ("optimal", 7), ("suppr.", 7), ("peak MB", 8)]
    if with_arx:
        table += [("ARX s", 7), ("speed-up", 8), ("ARX checked", 11), ("ARX ms/check", 12), ("check x", 7)]
    return table


def cells(row: dict[str, Any], with_arx: bool) -> list[str]:
    per_check = row.get("ms_per_check")
    cpu = row.get("search_cpu_seconds")
    values = [f"{row['search_seconds']:.3f}", "-" if cpu is None else f"{cpu:.3f}", f"{row['seconds']:.3f}", f"{row['cold_seconds']:.2f}",
              str(row["checked_transformations"]), "-" if per_check is None else f"{per_check:.3f}",
              str(row["risk_model_evaluations"]), str(row["lattice_size"]),
              row["algorithm"], "yes" if row["optimal"] else "NO", str(row["suppressed_records"]),
              f"{row['peak_rss_mb']:.1f}"]
    if with_arx:
        if "arx_seconds" in row:
            speedup = f"{row['speedup']:.1f}x" if row["speedup"] is not None else "-"
            arx_per_check = "-" if row["arx_ms_per_check"] is None else f"{row['arx_ms_per_check']:.3f}"
            ratio = "-" if row["check_cost_ratio"] is None else f"{row['check_cost_ratio']:.1f}x"
            values += [f"{row['arx_seconds']:g}", speedup, str(row["arx_checked"]), arx_per_check, ratio]
        else:
            values += ["-"] * 5
    return values


def describe(row: dict[str, Any]) -> str:
    levels = ",".join(str(level) for level in row["transformation"].values())
    phases = " phases " + " ".join(f"{k}={v}" for k, v in row["phases"].items()) if row.get("phases") else ""
    return f"{row['optimized_for']}={row['quality']:.6f} at [{levels}]{phases}"


def header(name_width: int, with_arx: bool) -> str:
    titles = " ".join(f"{title:>{width}}" for title, width in columns(with_arx))
    return f"{'configuration':{name_width}} {titles}  quality at transformation"


def describe_profile(profile: dict[str, Any]) -> str:
    """`profile: roll-up 61% 0.912 s, decision ...` (the profiled run's search, part by part)."""
    parts = [f"{part} {100 * profile['share'][part]:.0f}% {profile['seconds'][part]:.3f} s"
             for part in (*PROFILE_PARTS, "search")]
    return "profile: " + ", ".join(parts)


def format_row(row: dict[str, Any], name_width: int, with_arx: bool) -> str:
    """The row, and under it the profile breakdown when it was measured."""
    if "error" in row:
        return f"{row['name']:{name_width}} ERROR {row['error']}"
    values = " ".join(f"{value:>{width}}" for value, (_, width) in zip(cells(row, with_arx), columns(with_arx)))
    line = f"{row['name']:{name_width}} {values}  {describe(row)}"
    if row.get("profile"):
        line += f"\n{'':{name_width}} {describe_profile(row['profile'])}"
    return line


# --- command line ---------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configurations", nargs="*", metavar="NAME|POLICY",
                        help="configuration names (see --list) or policy files (default: every named configuration)")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per configuration; the fastest is reported")
    parser.add_argument("--algorithm", choices=ALGORITHMS, help="force this search algorithm for every configuration")
    parser.add_argument("--json", action="store_true", help="one JSON object per configuration and line")
    parser.add_argument("--list", action="store_true", help="print the configuration names and exit")
    parser.add_argument("--arx", type=Path, default=ARX_REFERENCE if ARX_REFERENCE.is_file() else None,
                        metavar="FILE.json", help="ARX reference: name -> {seconds, checked} "
                                                  f"(default: {ARX_REFERENCE.name} when it exists)")
    parser.add_argument("--no-arx", action="store_true", help="leave out the ARX columns")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the extra profiled run (roll-up, decision, quality, risk, search)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def select(specs: list[str]) -> list[Configuration]:
    known = named_configurations()
    if not specs:
        return list(known.values())
    return [resolve_configuration(spec, known) for spec in specs]


def report(rows_to_come: Iterable[dict[str, Any]], names: list[str], as_json: bool,
           arx: dict[str, dict[str, float]] | None) -> bool:
    """Print each row as soon as it is measured; True if every configuration succeeded."""
    name_width = max(len("configuration"), *(len(name) for name in names))
    if not as_json:
        print(header(name_width, arx is not None), flush=True)
    ok = True
    for row in rows_to_come:
        ok = ok and "error" not in row
        if arx is not None:
            add_arx(row, arx)
        print(json.dumps(row) if as_json else format_row(row, name_width, arx is not None), flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child, args.repeat, args.algorithm, not args.no_profile)
    if args.list:
        print("\n".join(named_configurations()))
        return 0
    try:
        selected = select(args.configurations)
    except ValueError as exc:
        print(f"engine_bench: {exc}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from tests.datasets import missing_for_examples

    missing = missing_for_examples([c.base.name for c in selected if c.base.parent == EXAMPLES])
    if missing is not None:  # the benchmark tables are not in the repository; name the folder before any run
        print(f"engine_bench: {missing}; or name only ADULT configurations (the demo table)", file=sys.stderr)
        return 2
    try:
        arx = None if args.no_arx or args.arx is None else load_arx(args.arx)
    except (OSError, ValueError) as exc:
        print(f"engine_bench: --arx {args.arx}: {exc}", file=sys.stderr)
        return 2
    rows = (run_isolated(configuration, args.repeat, args.algorithm, not args.no_profile)
            for configuration in selected)
    return 0 if report(rows, [c.name for c in selected], args.json, arx) else 1


if __name__ == "__main__":
    sys.exit(main())
