"""P4's input read by the workers: the policy's Parquet or CSV file as Dask dataframe chunks.

The driver sees the table only through summaries the size of its domains: each chunk's record count, each
attribute's distinct values (to build the hierarchies) and, for sorted partitioning, each chunk's distinct
quasi-identifier combinations with their counts. From these it gives every (combination, chunk) segment its start in
the table's lexicographic order (ties in input order, as `np.lexsort` orders them), so a worker places each of its
records in that order by itself and the partitions are exactly those of the in-memory partitioning
(engine.parallel.partitioning). Each chunk then splits its records by partition, and each partition is assembled on
a worker from its pieces: records travel between workers, never through the driver.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..classes import Evaluation
from ..encoding import EncodedTable, encode_attribute
from ..errors import InputError
from ..policy import DatasetPolicy
from ..table import check_columns, input_file, resolve_hierarchy
from .partitioning import partition_sizes, random_assignment
from .worker import PartitionJob

ROW = "__safeshare_row"   # a chunk's records' positions in the whole table, while partitions are assembled


@dataclass
class DatasetInput:
    """The input as the driver knows it: chunks (executor handles of pandas frames on the workers), their record
    counts, and the hierarchies built from the attributes' distinct values."""

    chunks: list
    lengths: list[int]
    hierarchies: dict
    sensitive: dict
    values: dict[str, np.ndarray]   # each quasi-identifier's distinct values, in text order
    counts: dict[str, np.ndarray]   # and how many records have each
    distributions: dict[str, tuple[np.ndarray, np.ndarray]]   # per sensitive attribute: (values, counts)

    @property
    def records(self) -> int:
        return int(sum(self.lengths))

    @property
    def offsets(self) -> list[int]:
        return [int(v) for v in np.concatenate([[0], np.cumsum(self.lengths)[:-1]])] if self.lengths else []


def read_chunks(policy: DatasetPolicy, blocksize: int | str = "64MB") -> list:
    """The input file as Dask delayed pandas frames, read as `engine.table.read_table` reads it (text exactly as
    written); only the columns' names are read here."""
    import dask.dataframe as dd

    path, fmt = input_file(policy)
    try:
        if fmt == "parquet":
            frame = dd.read_parquet(str(path), split_row_groups=True)
        else:
            frame = dd.read_csv(str(path), sep=policy.input.separator, dtype=str, keep_default_na=False,
                                na_filter=False, encoding=policy.input.encoding, blocksize=blocksize)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(str(path), None, f"cannot read {fmt} table ({type(exc).__name__})") from None
    check_columns(policy, frame._meta, path)
    return list(frame.to_delayed())


def load_dataset(policy: DatasetPolicy, executor, blocksize: int | str = "64MB") -> DatasetInput:
    """Read the chunks on the workers and build the hierarchies from their distinct values."""
    chunks = executor.compute(read_chunks(policy, blocksize))
    names = list(policy.quasi_identifiers) + list(policy.sensitive_attributes)
    profiles = executor.map(profile_chunk, chunks, names=names)
    lengths = [p["records"] for p in profiles]
    if sum(lengths) == 0:
        raise InputError(str(policy.resolve(policy.input.path)), None, "the table has no records")
    counted = {name: _summed_counts(profiles, name) for name in names}
    hierarchies = {name: resolve_hierarchy(policy, name, counted[name][0]) for name in policy.quasi_identifiers}
    sensitive = {name: (None if policy.attributes[name].hierarchy is None
                        else resolve_hierarchy(policy, name, counted[name][0]))
                 for name in policy.sensitive_attributes}
    return DatasetInput(chunks, lengths, hierarchies, sensitive,
                        {name: counted[name][0] for name in policy.quasi_identifiers},
                        {name: counted[name][1] for name in policy.quasi_identifiers},
                        {name: counted[name] for name in policy.sensitive_attributes})


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns as pandas' own text dtype, as `engine.table.read_table` gives them (Parquet columns may be numbers;
    Dask reads CSV text as Arrow strings)."""
    return frame.astype(str)


def profile_chunk(frame: pd.DataFrame, names: Sequence[str]) -> dict:
    """The chunk's record count and, per attribute, its distinct values with their counts."""
    frame = as_text(frame)
    values = {}
    for name in names:
        counts = frame[name].value_counts(sort=False, dropna=False)
        values[name] = (counts.index.to_numpy(dtype=str), counts.to_numpy(dtype=np.int64))
    return {"records": int(len(frame)), "values": values}


def _summed_counts(profiles: Sequence[dict], name: str) -> tuple[np.ndarray, np.ndarray]:
    values = np.concatenate([p["values"][name][0] for p in profiles])
    counts = np.concatenate([p["values"][name][1] for p in profiles])
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, np.bincount(inverse, weights=counts, minlength=distinct.size).astype(np.int64)


def _ranks(frame: pd.DataFrame, domains: dict[str, np.ndarray]) -> np.ndarray:
    """Each record's rank tuple: per quasi-identifier the position of its value among the table's distinct values in
    text order (what `pd.factorize(sort=True)` gives on the whole table)."""
    return np.stack([pd.Index(domain).get_indexer(frame[name]) for name, domain in domains.items()]).astype(np.int64)


def combinations_chunk(frame: pd.DataFrame, domains: dict[str, np.ndarray]) -> pd.DataFrame:
    """The chunk's distinct rank tuples and how many records have each."""
    ranks = _ranks(as_text(frame), domains)
    table = pd.DataFrame(ranks.T, columns=list(domains))
    return table.value_counts(sort=False).rename("count").reset_index()


def segment_starts(combinations: Sequence[pd.DataFrame], names: Sequence[str]) -> list[pd.DataFrame]:
    """Per chunk, each of its rank tuples with the position in the table's sorted order of the first of its records
    in that chunk: tuples in lexicographic order, and within a tuple the chunks in input order."""
    table = pd.concat([c.assign(chunk=i) for i, c in enumerate(combinations)], ignore_index=True)
    keys = [table["chunk"].to_numpy()] + [table[name].to_numpy() for name in reversed(list(names))]
    order = np.lexsort(keys)
    counts = table["count"].to_numpy()[order]
    starts = np.empty(len(table), dtype=np.int64)
    starts[order] = np.cumsum(counts) - counts
    table["start"] = starts
    return [part.drop(columns=["chunk", "count"]).reset_index(drop=True)
            for _, part in table.groupby("chunk", sort=True)] if len(table) else []


def split_chunk(frame: pd.DataFrame, offset: int, how: str, p: int, bounds: np.ndarray | None = None,
                domains: dict[str, np.ndarray] | None = None, starts: pd.DataFrame | None = None,
                seed: int = 0) -> dict[int, pd.DataFrame]:
    """The chunk's records by partition, each with its position in the whole table (column ROW)."""
    frame = as_text(frame).reset_index(drop=True)
    rows = offset + np.arange(len(frame), dtype=np.int64)
    if how == "random":
        assignment = random_assignment(rows.astype(np.uint64), p, seed)
    else:
        names = list(domains)
        radix = [domain.size for domain in domains.values()]
        # The record's place in the sorted table: its segment's start plus how many records of the same tuple
        # come before it in this chunk.
        segment, keys = _segments(_ranks(frame, domains), starts, names, radix)
        if (segment < 0).any():
            raise RuntimeError("internal error: a chunk's tuple has no place in the sorted order")
        ordinal = pd.Series(keys).groupby(keys, sort=False).cumcount().to_numpy()
        position = starts["start"].to_numpy(dtype=np.int64)[segment] + ordinal
        assignment = np.searchsorted(bounds, position, side="right") - 1
    frame[ROW] = rows
    return {int(i): frame[assignment == i] for i in np.unique(assignment)}


def _tuple_keys(ranks: np.ndarray, radix: Sequence[int]) -> np.ndarray | None:
    """One integer per rank tuple (mixed radix), or None when the domains' product does not fit 62 bits."""
    if float(np.prod([float(r) for r in radix])) >= 2.0 ** 62:
        return None
    keys = np.zeros(ranks.shape[1], dtype=np.int64)
    for column, size in zip(ranks, radix):
        keys = keys * int(size) + column
    return keys


def _segments(ranks: np.ndarray, starts: pd.DataFrame, names: list[str], radix: Sequence[int]
              ) -> tuple[np.ndarray, np.ndarray]:
    """(row of `starts` of each record's tuple, a key per record equal for equal tuples)."""
    keys = _tuple_keys(ranks, radix)
    if keys is not None:
        return pd.Index(_tuple_keys(starts[names].to_numpy().T, radix)).get_indexer(keys), keys
    keyed = pd.DataFrame(ranks.T, columns=names)
    segment = keyed.merge(starts[names].assign(_segment=np.arange(len(starts))), on=names, how="left",
                          validate="many_to_one")["_segment"]
    segment = segment.fillna(-1).to_numpy(dtype=np.int64)
    return segment, segment


def piece(split: dict[int, pd.DataFrame], index: int) -> pd.DataFrame | None:
    return split.get(index)


def assemble(pieces: Sequence[pd.DataFrame | None], index: int, policy: DatasetPolicy, hierarchies: dict,
             sensitive: dict, total_records: int, distributions: dict | None = None) -> PartitionJob:
    """One partition from its pieces, in input order, as `engine.parallel.p4.partition_jobs` builds it."""
    frame = pd.concat([p for p in pieces if p is not None and len(p)], ignore_index=True)
    frame = frame.sort_values(ROW, kind="stable").reset_index(drop=True)
    rows = frame.pop(ROW).to_numpy(dtype=np.int64)
    return PartitionJob(index, policy, hierarchies, sensitive, frame, rows, total_records, distributions)


def partition_dataset(policy: DatasetPolicy, dataset: DatasetInput, executor, partitions: int,
                      partitioning: str = "sorted", seed: int = 0, statistics: str = "partition") -> list:
    """Handles of the partitions' jobs, assembled on the workers."""
    n = dataset.records
    try:
        sizes = partition_sizes(n, partitions)
    except ValueError as exc:
        raise InputError(policy.source, "search.parallel.partitions", str(exc)) from None
    names = list(dataset.hierarchies)
    if partitioning == "sorted":
        domains = {name: dataset.values[name] for name in names}
        combinations = executor.map(combinations_chunk, dataset.chunks, domains=domains)
        starts = segment_starts(combinations, names)
        bounds = np.cumsum([0] + sizes)
        splits = [executor.submit(split_chunk, chunk, offset, "sorted", partitions, bounds=bounds, domains=domains,
                                  starts=start)
                  for chunk, offset, start in zip(dataset.chunks, dataset.offsets, starts)]
    elif partitioning == "random":
        splits = [executor.submit(split_chunk, chunk, offset, "random", partitions, seed=seed)
                  for chunk, offset in zip(dataset.chunks, dataset.offsets)]
    else:
        raise ValueError(f"unknown partitioning {partitioning!r}")
    distributions = dataset.distributions if statistics == "table" and dataset.distributions else None
    # Random partitioning can leave a partition empty: it is left out and the others numbered on, as in the
    # in-memory partitioning.
    counts = np.sum([[sizes.get(i, 0) for i in range(partitions)] for sizes in executor.map(_split_sizes, splits)],
                    axis=0)
    jobs = []
    for index in np.flatnonzero(counts):
        pieces = [executor.submit(piece, split, int(index)) for split in splits]
        jobs.append(executor.submit(assemble, pieces, len(jobs), policy, dataset.hierarchies, dataset.sensitive, n,
                                    distributions))
    return jobs


def _split_sizes(split: dict[int, pd.DataFrame]) -> dict[int, int]:
    return {index: int(len(frame)) for index, frame in split.items()}


def summary_table(policy: DatasetPolicy, dataset: DatasetInput) -> EncodedTable:
    """The whole table as the quality models see it, built from each quasi-identifier's value counts: the same codes,
    labels and per-level record counts as `encode_table` on the whole table, without the records themselves."""
    attributes = []
    for name, hierarchy in dataset.hierarchies.items():
        spec = policy.attributes[name]
        encoded = encode_attribute(name, dataset.values[name], hierarchy, policy.source, spec.min_level,
                                   spec.max_level)
        present = encoded.records   # one per distinct value, in the order of dataset.values
        counts = [np.bincount(encoded.to_level[level][present], weights=dataset.counts[name],
                              minlength=encoded.cardinality(level)).astype(np.int64)
                  for level in range(encoded.levels)]
        attributes.append(replace(encoded, counts=counts, records=np.zeros(0, dtype=np.int64)))
    return EncodedTable(attributes, dataset.records)


def release_evaluation(table: EncodedTable, levels: tuple[int, ...], released: Sequence[pd.DataFrame]) -> Evaluation:
    """The whole release's classes from the partitions' released classes (labels, size, suppressed): classes meet by
    their labels and by whether they were suppressed (a class can be kept in one partition and suppressed in
    another), with the codes of `table` at `levels`."""
    names = table.names
    merged = (pd.concat(released, ignore_index=True).groupby(names + ["suppressed"], sort=True, dropna=False)
              ["size"].sum().reset_index())
    codes = np.empty((len(names), len(merged)), dtype=np.int64)
    for i, (attribute, level) in enumerate(zip(table.attributes, levels)):
        index = pd.Index(attribute.labels[level].astype(str))
        found = index.get_indexer(merged[names[i]].astype(str))
        if (found < 0).any():
            raise RuntimeError(f"internal error: a released label of {names[i]} is not in the table's hierarchy")
        codes[i] = found
    sizes = merged["size"].to_numpy(dtype=np.int64)
    suppressed = merged["suppressed"].to_numpy(dtype=bool)
    return Evaluation(tuple(levels), codes, sizes, suppressed, int(sizes[suppressed].sum()), True)
