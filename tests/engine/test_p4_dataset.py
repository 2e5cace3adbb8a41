"""P4 on an input read by the workers (engine.parallel.dataset): the partitions assembled from chunks are exactly
the in-memory partitions (ties across chunk boundaries included), and the run that writes a partitioned Parquet
dataset releases exactly what the in-memory run releases, on this process and on a Dask cluster."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from engine.errors import InputError
from engine.parallel import DaskExecutor, LocalExecutor, run_p4, run_p4_dataset
from engine.parallel.dataset import load_dataset, partition_dataset
from engine.parallel.p4 import partition_jobs
from engine.policy import parse_policy
from engine.table import load_input
from tests.engine.test_p4 import PRIVACY, small_policy


def as_parquet(tmp_path, policy):
    """The same policy over the table written as Parquet in several row groups."""
    frame = pd.read_csv(tmp_path / "data.csv", sep=";", dtype=str)
    frame.to_parquet(tmp_path / "data.parquet", index=False, row_group_size=57)
    spec = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    spec["input"] = {"path": "data.parquet"}
    return parse_policy(spec, source=str(tmp_path / "policy.yaml"))


@pytest.mark.parametrize("partitioning", ["sorted", "random"])
@pytest.mark.parametrize("partitions", [1, 2, 3, 7])
@pytest.mark.parametrize("blocksize", [1_000, 2_500, "64MB"])
def test_chunked_partitions_are_the_in_memory_partitions(tmp_path, partitioning, partitions, blocksize):
    policy = small_policy(tmp_path, PRIVACY["k5"])
    loaded = load_input(policy)
    executor = LocalExecutor()
    dataset = load_dataset(policy, executor, blocksize)
    if blocksize == 1_000:
        assert len(dataset.chunks) > 3   # ties of one combination do straddle chunks
    assert dataset.records == len(loaded.frame)
    for name, hierarchy in loaded.hierarchies.items():
        assert np.array_equal(dataset.hierarchies[name].labels, hierarchy.labels)
    chunked = partition_dataset(policy, dataset, executor, partitions, partitioning, seed=3)
    memory = partition_jobs(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, partitions, partitioning,
                            seed=3)
    assert [job.index for job in chunked] == [job.index for job in memory]
    for a, b in zip(chunked, memory):
        assert np.array_equal(a.rows, b.rows)
        assert a.frame.equals(b.frame)
        assert a.total_records == b.total_records == len(loaded.frame)


def test_parquet_row_groups_give_the_same_partitions(tmp_path):
    policy = small_policy(tmp_path, PRIVACY["k5"])
    parquet = as_parquet(tmp_path, policy)
    loaded = load_input(parquet)
    executor = LocalExecutor()
    dataset = load_dataset(parquet, executor)
    assert len(dataset.chunks) > 1
    chunked = partition_dataset(parquet, dataset, executor, 3)
    memory = partition_jobs(parquet, loaded.frame, loaded.hierarchies, loaded.sensitive, 3)
    for a, b in zip(chunked, memory):
        assert np.array_equal(a.rows, b.rows) and a.frame.equals(b.frame)


def released_in_partition_order(result, jobs) -> pd.DataFrame:
    rows = np.concatenate([job.rows for job in jobs])
    return result.released.iloc[rows].reset_index(drop=True)


@pytest.mark.parametrize("name", sorted(PRIVACY))
def test_the_written_dataset_is_the_in_memory_release(tmp_path, name):
    policy = small_policy(tmp_path, PRIVACY[name])
    loaded = load_input(policy)
    memory = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2)
    out = tmp_path / "release"
    written = run_p4_dataset(policy, 2, LocalExecutor(), out, blocksize=1_500)
    assert written.levels == memory.levels
    assert written.suppressed_records == memory.suppressed_records
    assert written.loss == pytest.approx(memory.loss, abs=1e-12)
    assert [f.rsplit("/", 1)[-1] for f in written.files] == ["part-00000.parquet", "part-00001.parquet"]
    assert not list(out.glob(".*")) and not list(tmp_path.glob(".release*"))   # no temporary file or folder left
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == 400 and manifest["suppressed_records"] == memory.suppressed_records
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    parts = pd.concat([pd.read_parquet(f) for f in written.files], ignore_index=True)
    jobs = partition_jobs(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 2)
    assert parts.equals(released_in_partition_order(memory, jobs))
    assert set(written.seconds) == {"read", "partition", "anonymize", "harmonize", "compliance", "write"}


@pytest.mark.parametrize("quality", ["loss", "non_uniform_entropy", "discernibility"])
def test_the_whole_release_is_measured_as_the_in_memory_p4_measures_it(tmp_path, quality):
    """Quality over the whole release from value counts and released classes only equals deid's P4, which measures
    it on the whole table in memory."""
    from engine.deid import deidentify
    from engine.sitegate import BUILT_IN_GATE

    policy = small_policy(tmp_path, PRIVACY["k3-distinct-l2"])
    spec = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    spec["quality"] = {"model": quality}
    spec["search"] = dict(spec.get("search", {}), parallel={"partitions": 2, "scheduler": "none"})
    policy = parse_policy(spec, source=policy.source)
    memory = deidentify(policy, site=BUILT_IN_GATE)
    written = run_p4_dataset(policy, 2, LocalExecutor(), tmp_path / "release")
    assert written.quality == pytest.approx(memory.quality, abs=1e-12)
    assert written.attribute_quality.keys() == memory.attribute_quality.keys()
    for model, values in memory.attribute_quality.items():
        assert written.attribute_quality[model] == pytest.approx(values, abs=1e-12)
    assert np.array_equal(np.sort(written.release.sizes[~written.release.suppressed]),
                          np.sort(memory.best.sizes[~memory.best.suppressed]))
    manifest = json.loads((tmp_path / "release" / "manifest.json").read_text())
    assert manifest["quality"] == pytest.approx(memory.quality, abs=1e-12)


def test_the_dataset_run_on_a_dask_cluster_equals_the_local_run(tmp_path):
    distributed = pytest.importorskip("distributed")
    policy = small_policy(tmp_path, PRIVACY["k3-distinct-l2"])
    local = run_p4_dataset(policy, 3, LocalExecutor(), tmp_path / "local", blocksize=1_500)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        remote = run_p4_dataset(policy, 3, DaskExecutor(client), tmp_path / "remote", blocksize=1_500)
    assert remote.levels == local.levels and remote.suppressed_records == local.suppressed_records
    for a, b in zip(local.files, remote.files):
        assert pd.read_parquet(a).equals(pd.read_parquet(b))


def test_a_missing_column_names_the_attribute(tmp_path):
    policy = small_policy(tmp_path, PRIVACY["k5"])
    frame = pd.read_csv(tmp_path / "data.csv", sep=";", dtype=str).drop(columns=["zip"])
    frame.to_csv(tmp_path / "data.csv", sep=";", index=False)
    with pytest.raises(InputError) as error:
        load_dataset(policy, LocalExecutor())
    assert "attributes.zip" in str(error.value)


def test_a_run_again_replaces_its_dataset_and_a_failing_run_leaves_none(tmp_path):
    policy = small_policy(tmp_path, PRIVACY["k5"])
    out = tmp_path / "release"
    first = run_p4_dataset(policy, 3, LocalExecutor(), out)
    again = run_p4_dataset(policy, 2, LocalExecutor(), out)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "part-00000.parquet", "part-00001.parquet"]
    assert len(first.files) == 3 and len(again.files) == 2
    frame = pd.read_csv(tmp_path / "data.csv", sep=";", dtype=str)
    frame.loc[5, "zip"] = "10x"   # masking builds the hierarchy from the values: fine; a non-integer age is not
    frame.loc[7, "age"] = "forty"
    frame.to_csv(tmp_path / "data.csv", sep=";", index=False)
    failed = tmp_path / "failed"
    with pytest.raises(InputError) as error:
        run_p4_dataset(policy, 2, LocalExecutor(), failed)
    assert "age" in str(error.value)
    assert not failed.exists() and not list(tmp_path.glob(".failed*"))


def test_tuples_too_many_for_one_integer_key_are_matched_by_merging():
    from engine.parallel.dataset import _segments

    rng = np.random.default_rng(5)
    ranks = rng.integers(0, 3, size=(3, 50))
    starts = pd.DataFrame(np.unique(ranks.T, axis=0), columns=["a", "b", "c"]).assign(start=lambda f: f.index * 10)
    fast, fast_keys = _segments(ranks, starts, ["a", "b", "c"], [3, 3, 3])
    slow, slow_keys = _segments(ranks, starts, ["a", "b", "c"], [2 ** 31, 2 ** 31, 3])   # product above 2^62
    assert np.array_equal(fast, slow)
    assert (fast >= 0).all()
    # equal tuples get equal keys either way
    assert np.array_equal(pd.factorize(fast_keys)[0], pd.factorize(slow_keys)[0])


def test_table_statistics_give_the_in_memory_result(tmp_path):
    policy = small_policy(tmp_path, PRIVACY["t-equal-0.3"])
    loaded = load_input(policy)
    memory = run_p4(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 3, statistics="table")
    written = run_p4_dataset(policy, 3, LocalExecutor(), tmp_path / "release", blocksize=1_500, statistics="table")
    assert written.levels == memory.levels and written.suppressed_records == memory.suppressed_records
    parts = pd.concat([pd.read_parquet(f) for f in written.files], ignore_index=True)
    jobs = partition_jobs(policy, loaded.frame, loaded.hierarchies, loaded.sensitive, 3)
    assert parts.equals(released_in_partition_order(memory, jobs))


def test_local_transformation_is_refused_for_a_dataset_written_by_the_workers(tmp_path):
    small_policy(tmp_path, PRIVACY["k5"])
    spec = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    spec["search"] = {"parallel": {"partitions": 2, "transformation": "local"}}
    policy = parse_policy(spec, source=str(tmp_path / "policy.yaml"))
    with pytest.raises(InputError) as error:
        run_p4_dataset(policy, 2, LocalExecutor(), tmp_path / "out")
    assert error.value.field == "search.parallel.transformation"
    assert not (tmp_path / "out").exists()


def _slowly(function, item, **kwargs):
    """A step's function that first waits, so that a worker is surely killed while it runs the task."""
    import time

    time.sleep(1.5)
    return function(item, **kwargs)


class KillingExecutor(DaskExecutor):
    """Kills one worker process (SIGKILL, as the OOM killer or a lost machine would) while `step`'s tasks run."""

    def __init__(self, client, step: str) -> None:
        super().__init__(client)
        self.step = step
        self.killed = False

    def map(self, function, items, step=None, **kwargs):
        if step != self.step or self.killed:
            return super().map(function, items, step=step, **kwargs)
        import functools
        import os
        import signal
        import time

        pids = self.client.run(os.getpid)
        futures = self.client.map(functools.partial(_slowly, function), items, pure=False, **kwargs)
        keys = {future.key for future in futures}
        deadline = time.monotonic() + 30
        while not self.killed and time.monotonic() < deadline:
            time.sleep(0.2)
            for address, running in self.client.processing().items():
                if keys & set(running):
                    os.kill(pids[address], signal.SIGKILL)
                    self.killed = True
                    break
        from engine.parallel.p4 import cluster_errors

        with cluster_errors(step):
            return self.client.gather(futures)


def _cluster(**config):
    import dask
    import distributed

    with dask.config.set(config):
        return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)


@pytest.mark.parametrize("step", ["anonymize", "write"])
def test_a_worker_killed_during_a_step_is_retried_and_the_release_is_the_same(tmp_path, step):
    import distributed

    policy = small_policy(tmp_path, PRIVACY["pu-5pct"])
    expected = run_p4_dataset(policy, 2, LocalExecutor(), tmp_path / "expected")
    with _cluster() as cluster, distributed.Client(cluster) as client:
        executor = KillingExecutor(client, step)
        result = run_p4_dataset(policy, 2, executor, tmp_path / "out")
    assert executor.killed
    assert result.levels == expected.levels and result.suppressed_records == expected.suppressed_records
    for a, b in zip(expected.files, result.files):
        assert pd.read_parquet(a).equals(pd.read_parquet(b))


def test_a_cluster_that_cannot_finish_a_step_fails_the_run_and_writes_nothing(tmp_path):
    import distributed

    from engine.parallel.p4 import P4ClusterError

    policy = small_policy(tmp_path, PRIVACY["pu-5pct"])
    # no retry: the first worker lost while running a task fails that task (KilledWorker)
    with _cluster(**{"distributed.scheduler.allowed-failures": 0}) as cluster, \
            distributed.Client(cluster) as client:
        with pytest.raises(P4ClusterError, match="during the write step: KilledWorker"):
            run_p4_dataset(policy, 2, KillingExecutor(client, "write"), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
