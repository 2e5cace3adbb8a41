"""Test-side helpers for the analytics app tests (no tests here): sealed bundles from the example policy or from a
small synthetic table, free ports, and every URL the app serves."""
from __future__ import annotations

import hashlib
import json
import queue
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pandas as pd

from engine.bundle import seal_release
from engine.deid import parquet_bytes

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "demo"  # the demo table (ADULT), in the repository
EXAMPLES = REPO / "policies" / "examples"

with warnings.catch_warnings():  # starlette warns that its TestClient will move to another httpx package
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["TestClient"]  # re-exported for the tests


def adult_bundle(root: Path) -> Path:
    """The ADULT release of the example policy (population uniqueness <= 1 %), sealed: what a custodian ships."""
    from safeshare.cli import main

    out = root / "out"
    assert main(["deid", str(EXAMPLES / "adult-pu1.yaml"), "--out", str(out), "--quiet"]) in (0,)
    releases = root / "releases"
    sealed = seal_release(out, releases)
    return sealed


def write_output(folder: Path, frame: pd.DataFrame, dataset: str = "synth", gate_passed: bool = True,
                 quasi_identifiers: list[str] | None = None) -> dict:
    """A deid-style output folder for a synthetic table: data.parquet plus a manifest with correct hashes and the
    risk figures the gate computes on the table (`safeshare release` evaluates the gate again on the data and
    refuses figures that differ): the built-in floor's populations, and a population of 10^6 named Testland."""
    from engine.gate import evaluate_gate
    from engine.policy import GateSpec

    folder.mkdir(parents=True, exist_ok=True)
    data = parquet_bytes(frame)
    (folder / "data.parquet").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    qis = list(frame.columns) if quasi_identifiers is None else quasi_identifiers
    policy_sha256 = write_policy(folder, frame, dataset, qis)
    starred = (frame[qis] == "*").all(axis=1) if qis else pd.Series(False, index=frame.index)
    suppressed = int(starred.sum())
    sizes = frame[~starred].groupby(qis).size().to_numpy() if qis else pd.Series([len(frame)]).to_numpy()
    risk, _ = evaluate_gate(GateSpec(populations=[1e6]), sizes)
    risk["populations"][-1]["population"] = "Testland"
    manifest = {
        "format": "safeshare-release/1", "dataset": dataset, "policy_sha256": policy_sha256,
        "privacy": [{"model": "k_anonymity", "k": 2}], "transformation": {name: 1 for name in qis},
        "quality": {"loss": 0.8, "non_uniform_entropy": 0.7}, "records": len(frame),
        "suppressed_records": suppressed, "equivalence_classes": int(sizes.size),
        "smallest_class": int(sizes.min()) if sizes.size else 0,
        "risk": risk,
        "gate": {"passed": gate_passed, "reasons": [] if gate_passed else ["|PU|/|SU| 0.9 above 0.25"],
                 "max_pu_su_ratio": 0.25},
        "data_sha256": sha, "files": {"data.parquet": sha},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def policy_of(folder: Path) -> Path:
    """Where `write_output` puts the dataset policy of the output in `folder`: beside it, as a custodian keeps it
    (`safeshare release --policy`; never inside the output folder, whose writer must not choose it)."""
    return folder.with_name(f"{folder.name}.policy.yaml")


def write_policy(folder: Path, frame: pd.DataFrame, dataset: str, qis: list[str]) -> str:
    """A dataset policy for a synthetic output at `policy_of(folder)`: `qis` quasi-identifying, every other column
    insensitive (released as it is). Returns its sha256, the manifest's policy_sha256."""
    attributes = {name: ({"type": "quasi_identifying", "hierarchy": {"file": f"{name}.csv"}} if name in qis
                         else {"type": "insensitive"}) for name in frame.columns}
    text = json.dumps({"dataset": dataset, "attributes": attributes, "privacy": [{"model": "k_anonymity", "k": 2}],
                       "suppression_limit": 1.0}, indent=2) + "\n"   # JSON is YAML
    policy_of(folder).write_text(text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def synthetic_bundle(root: Path, frame: pd.DataFrame, dataset: str = "synth",
                     quasi_identifiers: list[str] | None = None) -> Path:
    """Seal a synthetic table through the engine's own seal_release, with its policy (which columns are released
    as they are)."""
    write_output(root / "out", frame, dataset, quasi_identifiers=quasi_identifiers)
    return seal_release(root / "out", root / "releases", policy=policy_of(root / "out"))


def forged_failed_gate_bundle(root: Path, frame: pd.DataFrame) -> Path:
    """A bundle whose gate failed but that carries a seal matching its manifest (seal_release would refuse it, so the
    seal is written by hand: only the app's own check of the gate verdict stands in the way)."""
    folder = root / "failed"
    write_output(folder, frame, gate_passed=False)
    manifest_sha = hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    (folder / "seal.json").write_text(json.dumps({"format": "safeshare-seal/1", "dataset": "synth",
                                                  "manifest_sha256": manifest_sha}))
    return folder


def small_frame() -> pd.DataFrame:
    """40 records, two suppressed, labels that sort naturally only when numbers are compared as numbers."""
    rows = []
    for i in range(38):
        rows.append({"sex": ["f", "m"][i % 2], "age": ["9-10", "10-19", "[20, 40[", "40+"][i % 4],
                     "site": ["north", "south", "east"][i % 3]})
    rows += [{"sex": "*", "age": "*", "site": "*"}] * 2
    return pd.DataFrame(rows)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PAGES = ["/", "/cohort", "/frequencies", "/crosstab", "/compare", "/analyses", "/outputs", "/requests",
         "/cohort?where=sex%3DMale&where=age%3D30-39&xs=1", "/frequencies?attr=age&where=sex%3DFemale",
         "/crosstab?row=sex&col=salary-class&pct=col&where=race%3DWhite",
         "/crosstab?row=age&col=education&pct=total", "/crosstab?row=sex&col=race&pct=none",
         "/compare?attr=salary-class&a=sex%3DMale&b=sex%3DFemale", "/compare?attr=race&a=sex%3DMale&b=age%3D10-19",
         "/descriptive", "/histogram", "/histogram?attr=age&where=sex%3DFemale",
         "/regression", "/regression?model=logit&y=salary-class&x=sex&x=age&ref=age%3D30-39&where=race%3DWhite"]
ASSETS = ["/static/guard.js", "/static/app.js", "/static/app.css", "/static/icon.svg"]

SAFESHARE = [sys.executable, "-c", "import sys; from safeshare.cli import main; sys.exit(main())"]


def read_ready(proc: subprocess.Popen, timeout: float) -> str:
    """The URL of the `app ready:` line of a `safeshare app` process, or fail with what the process said."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if line.startswith("app ready: "):
            return line.split("app ready: ", 1)[1].strip()
    proc.kill()
    raise AssertionError(f"no ready line: {seen!r} {proc.stderr.read()!r}")
