"""The steps of de-identifying one table, each importing only what lies below it: prepare (load, encode, build the
models and the search), apply (the transformation to every record), assess (quality, the gate's models), write (the
release folder), and the result they pass along. The runs (engine.runs) compose them; engine.deid picks a run.
"""
