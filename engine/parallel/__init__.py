"""P4 partitioned anonymization (engine.parallel.p4) on a Dask cluster or in this process."""
from .p4 import DaskExecutor, LocalExecutor, P4DatasetResult, P4NoSolution, P4Result, run_p4, run_p4_dataset

__all__ = ["DaskExecutor", "LocalExecutor", "P4DatasetResult", "P4NoSolution", "P4Result", "run_p4",
           "run_p4_dataset"]
