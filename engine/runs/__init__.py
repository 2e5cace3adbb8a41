"""The runs of one policy, peers that compose the pipeline's steps (engine.pipeline): a global transformation
(global_recoding), ARX's local recoding (local_recoding), and P4 partitions on Dask or in this process
(partitioned). Each starts from an engine.pipeline.prepare.Prepared and returns an engine.pipeline.result.DeidResult;
engine.deid picks one. The partitioned dataset release, whose workers read and write the data, is
engine.parallel.release.
"""
