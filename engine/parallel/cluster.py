"""Where P4's partitions run: a Dask cluster started here (`local`: one worker process per core), an existing one
(a scheduler address), or this process alone (`none`). Connection problems are input errors naming the address."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ..errors import InputError
from .p4 import DaskExecutor, LocalExecutor


@contextlib.contextmanager
def executor_for(scheduler: str, workers: int | None = None, progress: bool | None = False
                 ) -> Iterator[tuple[object, str]]:
    """(executor, description) for `scheduler`; a cluster started here is closed on exit."""
    if scheduler == "none":
        yield LocalExecutor(progress), "in process"
        return
    try:
        import distributed
    except ImportError:   # the `parallel` extra is not installed
        raise InputError(None, "search.parallel.scheduler",
                         "Dask is not installed (pip install 'safeshare[parallel]'); use scheduler: none") from None
    if scheduler == "local":
        count = workers or max(1, os.cpu_count() or 1)
        with distributed.LocalCluster(n_workers=count, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            yield DaskExecutor(client, progress), f"local Dask cluster, {count} worker processes"
        return
    try:
        client = distributed.Client(scheduler, timeout=30)
    except OSError as exc:
        raise InputError(None, "search.parallel.scheduler", f"cannot reach the Dask scheduler {scheduler}: {exc}"
                         ) from None
    with client:
        yield DaskExecutor(client, progress), f"Dask scheduler {scheduler}, {len(client.scheduler_info()['workers'])} workers"
