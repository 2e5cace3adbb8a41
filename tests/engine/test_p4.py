"""P4 partitioned anonymization (engine.parallel): each step on small tables against hand-computed results, P4 with
one partition against the single-machine optimum, every released class of a partitioned run against every model of
the policy on the merged output (population uniqueness recomputed on it), and the same run on a Dask cluster."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.deid import deidentify
from engine.parallel import DaskExecutor, LocalExecutor, P4NoSolution, run_p4
from engine.parallel.partitioning import harmonize, java_round, partition_sizes, random_partitions, sorted_partitions
from engine.policy import load_policy, parse_policy
from engine.risk import population_uniqueness
from engine.sitegate import BUILT_IN_GATE
from engine.table import load_input
from tests.engine.conftest import EXAMPLES


def test_partition_sizes_give_the_first_partitions_the_remainder():
    assert partition_sizes(10, 3) == [4, 3, 3]
    assert partition_sizes(9, 3) == [3, 3, 3]
    with pytest.raises(ValueError):
        partition_sizes(2, 3)
    with pytest.raises(ValueError):
        partition_sizes(1, 1)


def test_sorted_partitioning_is_lexicographic_by_quasi_identifiers():
    frame = pd.DataFrame({"a": ["b", "a", "b", "a", "c"], "b": ["2", "9", "1", "1", "0"]})
    # sorted by (a, b) as text: (a,1)=3, (a,9)=1, (b,1)=2, (b,2)=0, (c,0)=4 -> [3, 1, 2] and [0, 4]
    parts = sorted_partitions(frame, ["a", "b"], 2)
    assert [list(p) for p in parts] == [[1, 2, 3], [0, 4]]


def test_random_partitioning_covers_every_record_once():
    parts = random_partitions(100, 4, seed=3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(100))


def test_harmonization_rounds_half_up_like_java():
    assert java_round(2.5) == 3 and java_round(-2.5) == -2 and java_round(1.49) == 1
    assert harmonize([(0, 1, 2), (1, 2, 2)], "average") == (1, 2, 2)       # 0.5 -> 1, 1.5 -> 2
    assert harmonize([(0, 1, 2), (1, 2, 2)], "minimum") == (0, 1, 2)
    assert harmonize([(0, 3), (1, 0), (1, 0)], "average") == (1, 1)         # 0.667 -> 1, 1.0 -> 1


@pytest.fixture(scope="module")
def adult_k5(demo_dir):
    policy = load_policy(EXAMPLES / "adult-k5.yaml")
    return policy, load_input(policy)


def test_one_partition_equals_the_single_machine_optimum(adult_k5):
    policy, loaded = adult_k5
    single = deidentify(policy, site=BUILT_IN_GATE)
    p4 = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 1)
    assert p4.levels == tuple(single.best.levels)
    assert p4.suppressed_records == single.best.suppressed_records
    assert p4.quality == pytest.approx(single.quality[policy.quality.model], abs=1e-12)
    assert (p4.released.to_numpy() == single.released.to_numpy()).all()


def small_policy(tmp_path, privacy: str, limit: float = 0.2):
    rng = np.random.default_rng(7)
    n = 400
    frame = pd.DataFrame({"age": rng.integers(20, 60, n).astype(str), "zip": rng.choice(["101", "102", "103", "201",
                                                                                        "202", "301"], n),
                          "sex": rng.choice(["m", "f"], n), "dx": rng.choice(["a", "b", "c", "d"], n, p=[.4, .3, .2, .1])})
    frame.to_csv(tmp_path / "data.csv", sep=";", index=False)
    spec: dict = {
        "dataset": "small", "input": {"path": "data.csv"},
        "attributes": {
            "age": {"type": "quasi_identifying", "hierarchy": {"builder": "intervals", "widths": [5, 10, 20]}},
            "zip": {"type": "quasi_identifying", "hierarchy": {"builder": "masking"}},
            "sex": {"type": "quasi_identifying", "hierarchy": {"builder": "masking"}},
            "dx": {"type": "sensitive"},
        },
        "privacy": privacy, "suppression_limit": limit, "quality": {"model": "loss"},
    }
    import yaml

    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(spec))
    return parse_policy(spec, source=str(tmp_path / "policy.yaml"))


PRIVACY = {
    "k5": [{"model": "k_anonymity", "k": 5}],
    "k3-distinct-l2": [{"model": "k_anonymity", "k": 3}, {"model": "l_diversity", "attribute": "dx", "l": 2}],
    "t-equal-0.3": [{"model": "t_closeness", "attribute": "dx", "t": 0.3}],
    "pu-5pct": [{"model": "population_uniqueness", "threshold": 0.05, "population": 5000, "estimator": "pitman"}],
}


@pytest.mark.parametrize("name", sorted(PRIVACY))
@pytest.mark.parametrize("partitions", [2, 3])
@pytest.mark.parametrize("transformation", ["global", "local"])
def test_every_released_class_meets_every_model_on_the_merged_output(tmp_path, name, partitions, transformation):
    policy = small_policy(tmp_path, PRIVACY[name])
    loaded = load_input(policy)
    try:
        result = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, partitions,
                        transformation=transformation)
    except P4NoSolution:
        pytest.skip("no harmonized solution for this partitioning")
    released = result.released[~result.record_suppressed]
    assert result.suppressed_records == int(result.record_suppressed.sum())
    assert result.suppressed_records <= 0.2 * len(loaded.frame)
    qis = ["age", "zip", "sex"]
    groups = released.groupby(qis)
    sizes = groups.size().to_numpy()
    overall = loaded.frame["dx"].value_counts(normalize=True)
    for spec in PRIVACY[name]:
        if spec["model"] == "k_anonymity":
            assert sizes.min() >= spec["k"]
        elif spec["model"] == "l_diversity":
            assert groups["dx"].nunique().min() >= spec["l"]
        elif spec["model"] == "t_closeness":
            for _, group in groups:
                share = group["dx"].value_counts(normalize=True).reindex(overall.index, fill_value=0.0)
                assert 0.5 * (share - overall).abs().sum() <= spec["t"] + 1e-12
        elif spec["model"] == "population_uniqueness":
            estimate = population_uniqueness(sizes, spec["population"], estimator="pitman")
            assert estimate.solved and estimate.population_uniqueness <= spec["threshold"]


def test_dask_cluster_gives_the_local_result(tmp_path):
    distributed = pytest.importorskip("distributed")
    policy = small_policy(tmp_path, PRIVACY["k3-distinct-l2"])
    loaded = load_input(policy)
    local = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2, executor=LocalExecutor())
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        remote = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2, executor=DaskExecutor(client))
    assert remote.levels == local.levels
    assert remote.suppressed_records == local.suppressed_records
    assert remote.released.equals(local.released)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_scheduler_and_two_workers_give_the_local_result(tmp_path):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1, as a cluster of machines would run them."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    distributed = pytest.importorskip("distributed")
    dask = Path(sys.executable).with_name("dask")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = [open(tmp_path / f"{name}.log", "w") for name in ("scheduler", "worker1", "worker2")]
    processes = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                   "--no-dashboard"], stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        for log in logs[1:]:
            processes.append(subprocess.Popen([str(dask), "worker", address, "--nthreads", "1", "--no-dashboard",
                                               "--host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT))
        policy = small_policy(tmp_path, PRIVACY["pu-5pct"])
        loaded = load_input(policy)
        local = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2)
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            assert len(client.scheduler_info()["workers"]) == 2
            remote = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2,
                            executor=DaskExecutor(client))
        assert remote.levels == local.levels
        assert remote.suppressed_records == local.suppressed_records
        assert remote.released.equals(local.released)
    finally:
        for process in reversed(processes):
            process.terminate()
        deadline = time.monotonic() + 20
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def test_safeshare_deid_with_partitions_writes_a_p4_release(tmp_path, capsys):
    import json

    from safeshare.cli import main

    policy = small_policy(tmp_path, PRIVACY["pu-5pct"])
    out = tmp_path / "out"
    code = main(["deid", policy.source, "--out", str(out), "--partitions", "3", "--scheduler", "none", "--quiet"])
    assert code in (0, 1), capsys.readouterr().err   # 1: the site gate may refuse a small table
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["algorithm"] == "p4" and manifest["optimal"] is False
    record = manifest["parallel"]
    assert record["partitions"] == 3 and record["scheduler"] == "in process"
    assert record["risk_models_decided_on_merged_table"] is True
    assert set(record["seconds_per_step"]) == {"partition", "anonymize", "harmonize", "compliance", "merge"}
    released = pd.read_parquet(out / "data.parquet")
    kept = released[(released[["age", "zip", "sex"]] != "*").any(axis=1)]
    sizes = kept.groupby(["age", "zip", "sex"]).size().to_numpy()
    estimate = population_uniqueness(sizes, 5000, estimator="pitman")
    assert estimate.population_uniqueness <= 0.05
    # manifest and report say that population uniqueness was decided on the merged release, and what it is there
    recorded = manifest["risk"]["privacy_model_estimate"]
    assert recorded["population_uniqueness"] == pytest.approx(estimate.population_uniqueness, rel=1e-9)
    report = (out / "report.html").read_text()
    assert "Partitioned anonymization (P4)" in report and "on the merged release" in report


@pytest.mark.parametrize("parallel, field, words", [
    ({"partitions": 0}, "search.parallel.partitions", "greater than or equal to 1"),
    ({"partitions": 2, "scheduler": "http://x"}, "search.parallel.scheduler", "scheduler address"),
    ({"partitions": 2, "transformation": "both"}, "search.parallel.transformation", "'global' or 'local'"),
])
def test_bad_parallel_settings_name_the_field(tmp_path, parallel, field, words):
    from engine.errors import InputError

    policy = small_policy(tmp_path, PRIVACY["k5"])
    spec = policy.model_dump(exclude={"source", "sha256"})
    spec["search"]["parallel"] = parallel
    with pytest.raises(InputError) as error:
        parse_policy(spec, source=policy.source)
    assert error.value.field == field and words in error.value.problem


def test_gate_require_is_checked_on_a_p4_release(tmp_path):
    from engine.deid import deidentify

    policy = small_policy(tmp_path, PRIVACY["k5"])
    spec = policy.model_dump(exclude={"source", "sha256"})
    spec["gate"] = {"require": [{"model": "l_diversity", "attribute": "dx", "l": 4}]}
    policy = parse_policy(spec, source=policy.source)
    result = deidentify(policy, site=BUILT_IN_GATE, partitions=2, scheduler="none")
    required = result.gate.required[0]
    released = result.released[~result.record_suppressed]
    failing = released.groupby(["age", "zip", "sex"])["dx"].nunique() < 4
    assert required.failing_classes == int(failing.sum())
    assert required.passed == (not failing.any())


def test_raised_levels_go_from_the_harmonized_to_the_maximum_then_up_to_the_top(tmp_path):
    from engine.parallel.p4 import raised_levels

    policy = small_policy(tmp_path, PRIVACY["k5"])
    loaded = load_input(policy)
    tops = tuple(h.max_level for h in loaded.hierarchies.values())
    steps = list(raised_levels((1, 0, 0), [(0, 1, 0), (2, 0, 1)], loaded.hierarchies, policy))
    assert steps[:2] == [(1, 0, 0), (2, 1, 1)]
    assert steps[-1] == tops
    for before, after in zip(steps[1:], steps[2:]):
        assert all(b <= a <= max(b + 1, t) for b, a, t in zip(before, after, tops))


def test_table_statistics_give_each_partition_the_whole_tables_distribution(tmp_path):
    from engine.parallel.p4 import partition_jobs
    from engine.parallel.worker import encode

    policy = small_policy(tmp_path, PRIVACY["t-equal-0.3"])
    loaded = load_input(policy)
    overall = loaded.frame["dx"].value_counts().sort_index()
    for statistics in ("table", "partition"):
        for job in partition_jobs(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 3,
                                  statistics=statistics):
            encoded = encode(job).sensitive_attribute("dx")
            own = job.frame["dx"].value_counts().sort_index()
            expected = overall if statistics == "table" else own
            assert list(encoded.values) == list(expected.index)
            assert list(encoded.counts) == list(expected.to_numpy())
            # each record still holds its own value
            assert list(encoded.values[encoded.records]) == list(job.frame["dx"])


def test_local_transformation_with_one_partition_equals_single_machine_local_recoding(tmp_path):
    """P4's LOCAL setting on one partition is the engine's local recoding: same records, same values, same quality
    over the whole table (each record at its own iteration's levels)."""
    import yaml

    policy = small_policy(tmp_path, PRIVACY["k5"], limit=0.05)
    spec = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    spec["search"] = {"recoding": "local"}
    policy = parse_policy(spec, source=policy.source)
    single = deidentify(policy, site=BUILT_IN_GATE)
    assert len(single.local.iterations) > 1   # a table where local recoding does something
    spec["search"]["parallel"] = {"partitions": 1, "scheduler": "none", "transformation": "local"}
    p4 = deidentify(parse_policy(spec, source=policy.source), site=BUILT_IN_GATE)
    assert (p4.released.to_numpy() == single.released.to_numpy()).all()
    assert (p4.record_suppressed == single.record_suppressed).all()
    assert p4.quality == pytest.approx(single.quality, abs=1e-12)
    assert p4.parallel.transformation == "local" and p4.parallel.harmonization is None
    assert [i["transformation"] for i in p4.local.iterations] == \
        [i["transformation"] for i in single.local.iterations]


def test_local_transformation_beats_global_on_adult_and_releases_only_5_anonymous_classes(adult_k5):
    """P4's finding (local transformation keeps more utility than global) on ADULT k = 5 with 2 partitions, and every
    released class, by released values across partitions and iterations, has at least 5 records."""
    policy, loaded = adult_k5
    qis = list(loaded.hierarchies)
    results = {t: run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2, time_limit=20,
                         transformation=t) for t in ("global", "local")}
    local = results["local"]
    released = local.released[~local.record_suppressed]
    assert released.groupby(qis).size().min() >= 5
    assert local.suppressed_records <= int(policy.suppression_limit * len(loaded.frame))
    assert local.record_levels.shape == (len(qis), len(loaded.frame))
    assert local.quality > results["global"].quality


def test_local_recoding_needs_local_transformation_under_p4(tmp_path):
    from engine.errors import InputError

    policy = small_policy(tmp_path, PRIVACY["k5"])
    spec = policy.model_dump(exclude={"source", "sha256"})
    spec["search"]["recoding"] = "local"
    spec["search"]["parallel"] = {"partitions": 2, "scheduler": "none"}
    with pytest.raises(InputError) as error:
        deidentify(parse_policy(spec, source=policy.source), site=BUILT_IN_GATE)
    assert error.value.field == "search.parallel.transformation"


def test_auto_strategy_by_the_policys_models(tmp_path):
    from engine.parallel.p4 import resolve_strategy

    assert resolve_strategy(small_policy(tmp_path, PRIVACY["k5"]), "auto", "auto") == ("sorted", "partition")
    assert resolve_strategy(small_policy(tmp_path, PRIVACY["k3-distinct-l2"]), "auto", "auto") == \
        ("sorted", "partition")
    t = small_policy(tmp_path, PRIVACY["t-equal-0.3"])
    assert resolve_strategy(t, "auto", "auto") == ("random", "table")
    assert resolve_strategy(t, "sorted", "partition") == ("sorted", "partition")   # what the policy says wins
    result = deidentify(t, site=BUILT_IN_GATE, partitions=2, scheduler="none")
    assert (result.parallel.partitioning, result.parallel.statistics) == ("random", "table")


def test_auto_strategy_keeps_t_closeness_utility_on_adult(demo_dir):
    """ADULT, t = 0.2 (equal distance), suppression limit 100 % as in P4's experiments, 2 partitions: sorted partitions
    anonymized against their own distributions lose about half the optimum's quality on the merged table; random
    partitions against the table's distribution lose under 5 % (measured 1.3 %)."""
    policy = load_policy(EXAMPLES / "adult-tcloseness-equal-02.yaml")
    policy = policy.model_copy(update={"suppression_limit": 1.0})
    loaded = load_input(policy)
    optimum = deidentify(policy, site=BUILT_IN_GATE).quality["loss"]
    runs = {strategy: run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2, partitioning=strategy[0],
                             statistics=strategy[1]) for strategy in (("auto", "auto"), ("sorted", "partition"))}
    auto, sorted_ = runs[("auto", "auto")], runs[("sorted", "partition")]
    assert auto.details["partitioning"] == "random"
    assert auto.quality >= 0.95 * optimum > sorted_.quality


def test_in_memory_p4_that_loses_a_worker_fails_cleanly(tmp_path):
    """The in-memory run scatters its partitions from the driver: a worker killed during a step takes its partition
    with it, which Dask cannot recompute, so the run fails naming the step (safeshare deid exits 3 and writes
    nothing). The dataset run (--dataset) recomputes it instead (test_p4_dataset)."""
    import distributed

    from engine.parallel.p4 import P4ClusterError
    from tests.engine.test_p4_dataset import KillingExecutor, _cluster

    policy = small_policy(tmp_path, PRIVACY["pu-5pct"])
    loaded = load_input(policy)
    with _cluster() as cluster, distributed.Client(cluster) as client:
        with pytest.raises(P4ClusterError, match="during the anonymize step"):
            run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2,
                   executor=KillingExecutor(client, "anonymize"))
