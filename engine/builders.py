"""Hierarchy builders: generalization hierarchies computed from a policy's builder spec and the values in the data.

A policy may give a quasi-identifier a `builder` instead of a hierarchy file (see `engine.policy`): `intervals`,
`masking`, `dates` or `ordered`. `build_hierarchy` turns the spec plus the attribute's distinct values into the same
`Hierarchy` a CSV file would give (ARX layout: one row per value, one column per level, level 0 the value itself), so
the rest of the engine cannot tell the difference and `safeshare hierarchy` can write it out for review.

Every builder ends with the level `*` (one group, the same label suppressed records get), and every builder is
monotone by construction: each level's groups are computed from the previous level's groups, never independently
from the raw values, so floating point or calendar quirks cannot make a group straddle two parents. Specs that could
not be monotone (an interval width that is not a multiple of the one before, ISO weeks mixed with months) are refused
with an `InputError` naming the field, rather than producing a hierarchy that would make the lattice meaningless. So
are specs that are meaningless with the data at hand: an interval width so small that more than `MAX_INTERVALS`
intervals lie between `start` and a value (`widths: [1e-300]` would overflow the bin index and put every age into
`[0, 0[`), bounds that overflow or print alike, and a width more than `MAX_FACTOR` times the one before.

Label formats:

* intervals: `[20, 25[` (half-open, ARX style; integral bounds printed without a decimal point), then `*`.
* masking: `1234*`, `123**`, ... right to left, length kept; shorter values are right-padded with the mask character
  to the longest length, so that every label of a level has the same length. The fully masked level is `*`.
* dates: `2024-W07` (ISO week), `2024-02`, `2024-Q1`, `2024`, `2020s`, then `*`.
* ordered: `Bachelors-Masters` (first and last member of a run of neighbours in `order`; a run of one keeps the
  value), then `*`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from .errors import InputError
from .hierarchy import Hierarchy
from .policy import DateBuilder, IntervalBuilder, MaskingBuilder, OrderedBuilder

TOP = "*"                     # the label of the last level of every builder (as in ARX, and as suppression prints)
_SHOWN = 5                    # offending values listed in an error message
_REL_TOL = 1e-9               # tolerance for "is a multiple of" and bin edges, relative to the magnitude involved
DATE_UNITS = ("week", "month", "quarter", "year", "decade")   # from fine to coarse
MAX_INTERVALS = 10**9         # intervals between `start` and the farthest value: bin indices stay exact integers
MAX_FACTOR = 10**9            # largest ratio between a width (or group size) and the one before

BuilderSpec = IntervalBuilder | MaskingBuilder | DateBuilder | OrderedBuilder


def build_hierarchy(spec: BuilderSpec, values: Sequence[str] | np.ndarray, name: str = "",
                    source: str | None = None) -> Hierarchy:
    """The hierarchy `spec` defines over `values` (the attribute's values in the data, as strings).

    `name` is the attribute (used in error fields as `attributes.<name>.hierarchy...`), `source` the policy file the
    spec came from (the file of the errors). Raises `InputError` for specs that cannot give a monotone hierarchy and
    for values the builder cannot place.
    """
    builders: dict[type, Callable[..., np.ndarray]] = {
        IntervalBuilder: interval_labels,
        MaskingBuilder: masking_labels,
        DateBuilder: date_labels,
        OrderedBuilder: ordered_labels,
    }
    builder = builders.get(type(spec))
    if builder is None:
        raise InputError(source, _field(name), f"not a hierarchy builder: {type(spec).__name__}")
    distinct = np.unique(np.asarray(values).astype(str))
    labels = builder(spec, distinct, name=name, source=source)
    hierarchy = Hierarchy(labels, name=name, source=source)
    # Cheap (a few thousand rows) and turns a builder bug into a clear error instead of a wrong lattice.
    hierarchy.validate()
    return hierarchy


# --- intervals ------------------------------------------------------------------------------------------------------
def interval_labels(spec: IntervalBuilder, values: np.ndarray, name: str = "", source: str | None = None
                    ) -> np.ndarray:
    """Bins `[start + k*w, start + (k+1)*w[` for each width w, then `*`; rows sorted numerically.

    Widths must grow by integer factors: a bin of width 5 lies inside one bin of width 10 only because 10 is a
    multiple of 5 and both grids share `start`. Level l+1's bin index is computed from level l's by integer floor
    division, so a value can never land in a parent bin that does not contain its child bin.
    """
    widths = [float(w) for w in spec.widths]
    start = float(spec.start)
    for i, width in enumerate(widths):
        if not (math.isfinite(width) and width > 0):
            raise InputError(source, f"{_field(name, 'widths')}[{i}]", f"a width must be a finite positive number, "
                                                                        f"got {width!r}")
    if not math.isfinite(start):
        raise InputError(source, _field(name, "start"), f"start must be a finite number, got {start!r}")
    factors = _integer_factors(widths, source, _field(name, "widths"), "width")
    numbers = _parse_numbers(values, name, source)
    order = np.lexsort((values, numbers))          # numerically, ties (e.g. "20" and "20.0") by text
    values, numbers = values[order], numbers[order]

    columns = [values.astype(object)]
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = (numbers - start) / widths[0]
    if ratio.size and not (np.isfinite(ratio).all() and np.abs(ratio).max() <= MAX_INTERVALS):
        far = numbers[np.argmax(np.where(np.isfinite(ratio), np.abs(ratio), np.inf))]
        raise InputError(source, f"{_field(name, 'widths')}[0]",
                         f"width {widths[0]:g} puts more than {MAX_INTERVALS:.0e} intervals between start "
                         f"{_number(start)} and the value {_number(far)}: use a wider first interval or a start "
                         f"nearer the data")
    nearest = np.round(ratio)
    # A value on a bin edge must open its bin even when the division lands a hair below (0.3 / 0.1 = 2.9999...).
    on_edge = np.abs(ratio - nearest) <= _REL_TOL * np.maximum(1.0, np.abs(ratio))
    index = np.where(on_edge, nearest, np.floor(ratio)).astype(np.int64)
    for level, width in enumerate(widths):
        if level > 0:
            index = np.floor_divide(index, factors[level - 1])
        with np.errstate(over="ignore", invalid="ignore"):
            low = start + index * width
            high = low + width
        field = f"{_field(name, 'widths')}[{level}]"
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise InputError(source, field, f"width {width:g} makes interval bounds overflow to infinity")
        labels = _interval_strings(low, high)
        if np.unique(labels.astype(str)).size != np.unique(index).size or (high <= low).any():
            raise InputError(source, field, f"width {width:g} is too small for values of this size: different "
                                            f"intervals would print the same bounds")
        columns.append(labels)
    columns.append(np.full(values.size, TOP, dtype=object))
    return np.column_stack(columns)


def _parse_numbers(values: np.ndarray, name: str, source: str | None) -> np.ndarray:
    numbers = np.empty(values.size, dtype=float)
    bad: list[str] = []
    for i, text in enumerate(values.tolist()):
        try:
            numbers[i] = float(text)
        except ValueError:
            bad.append(text)
            continue
        if not math.isfinite(numbers[i]):
            bad.append(text)
    if bad:
        raise InputError(source, _field(name, data=True),
                         f"the intervals builder needs numbers, but {len(bad)} distinct value(s) are not finite "
                         f"numbers, first: {_listing(bad)}")
    return numbers


def _interval_strings(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    # Few distinct bins per level: format each distinct bound once.
    bounds, inverse = np.unique(np.concatenate([low, high]), return_inverse=True)
    text = np.array([_number(b) for b in bounds.tolist()], dtype=object)
    low_text, high_text = text[inverse[:low.size]], text[inverse[low.size:]]
    return np.array([f"[{a}, {b}[" for a, b in zip(low_text, high_text)], dtype=object)


def _number(x: float) -> str:
    """`20` for integral bounds, else the shortest form that hides float noise (0.1 * 7 prints as 0.7)."""
    if abs(x) < 1e15 and abs(x - round(x)) <= _REL_TOL * max(1.0, abs(x)):
        return str(int(round(x)))
    return f"{x:.12g}"


# --- masking --------------------------------------------------------------------------------------------------------
def masking_labels(spec: MaskingBuilder, values: np.ndarray, name: str = "", source: str | None = None
                   ) -> np.ndarray:
    """Mask `characters_per_level` more characters from the right at each level, keeping the length.

    Values shorter than the longest are right-padded with the mask character first (ARX pads to the longest value
    too): `123` among 5-character ZIP codes becomes `123**` at level 1 and joins the group of every value starting
    with `123`. Each label is then a function of the previous level's label, which makes the hierarchy monotone.
    The fully masked level would be a single group, so it is the top level and is written `*`.
    """
    per_level, mask = int(spec.characters_per_level), spec.mask
    texts = values.tolist()
    longest = max((len(t) for t in texts), default=0)
    masked_levels = max(1, math.ceil(longest / per_level))
    padded = [t.ljust(longest, mask) for t in texts]
    columns = [values.astype(object)]
    for level in range(1, masked_levels):
        keep = longest - level * per_level
        columns.append(np.array([p[:keep] + mask * (longest - keep) for p in padded], dtype=object))
    columns.append(np.full(values.size, TOP, dtype=object))
    return np.column_stack(columns)


# --- dates ----------------------------------------------------------------------------------------------------------
def date_labels(spec: DateBuilder, values: np.ndarray, name: str = "", source: str | None = None) -> np.ndarray:
    """Calendar units from fine to coarse (`2024-W07`, `2024-02`, `2024-Q1`, `2024`, `2020s`), then `*`.

    `week` must stand alone: an ISO week can span two months, quarters, years and decades (2025-W01 starts on
    2024-12-30), so no coarser calendar unit contains every week and such a hierarchy could not be monotone.
    """
    units = list(spec.levels)
    field = _field(name, "levels")
    if len(set(units)) != len(units):
        raise InputError(source, field, f"each level may appear once: {units}")
    if "week" in units and len(units) > 1:
        raise InputError(source, field,
                         "'week' cannot be combined with other levels: an ISO week can span two months, quarters, "
                         "years or decades (2025-W01 starts on 2024-12-30), so the hierarchy would not be monotone; "
                         "use [week] alone or drop it")
    rank = [DATE_UNITS.index(u) for u in units]
    if rank != sorted(rank):
        raise InputError(source, field,
                         f"levels must go from fine to coarse ({', '.join(DATE_UNITS)}), got {units}")

    try:
        parsed = pd.to_datetime(pd.Series(values, dtype=object), format=spec.format, exact=True, errors="coerce")
    except ValueError as exc:   # a format the policy check let through but pandas cannot use
        raise InputError(source, _field(name, "format"), f"date format {spec.format!r} is not usable: {exc}") from None
    bad = values[parsed.isna().to_numpy()]
    if bad.size:
        raise InputError(source, _field(name, data=True),
                         f"{bad.size} distinct value(s) do not match the date format {spec.format!r} (or are out of "
                         f"range), first: {_listing(bad.tolist())}")
    order = np.lexsort((values, parsed.to_numpy()))     # chronologically, ties (same date, other spelling) by text
    values, parsed = values[order], parsed.iloc[order].reset_index(drop=True)

    year = parsed.dt.year.to_numpy()
    columns = [values.astype(object)]
    for unit in units:
        if unit == "week":
            iso = parsed.dt.isocalendar()
            labels = [f"{y:04d}-W{w:02d}" for y, w in zip(iso["year"].tolist(), iso["week"].tolist())]
        elif unit == "month":
            labels = [f"{y:04d}-{m:02d}" for y, m in zip(year.tolist(), parsed.dt.month.tolist())]
        elif unit == "quarter":
            labels = [f"{y:04d}-Q{q}" for y, q in zip(year.tolist(), parsed.dt.quarter.tolist())]
        elif unit == "year":
            labels = [f"{y:04d}" for y in year.tolist()]
        else:  # decade
            labels = [f"{y:04d}s" for y in (year // 10 * 10).tolist()]
        columns.append(np.array(labels, dtype=object))
    columns.append(np.full(values.size, TOP, dtype=object))
    return np.column_stack(columns)


# --- ordered categories ---------------------------------------------------------------------------------------------
def ordered_labels(spec: OrderedBuilder, values: np.ndarray, name: str = "", source: str | None = None
                   ) -> np.ndarray:
    """Runs of `group_sizes[l]` neighbours in `order` at level l+1, labelled `first-last`, then `*`.

    Groups are taken over the declared `order`, not over the values that happen to occur, so labels do not change
    with the data; rows are every value of `order` (the declared domain, like a hierarchy file). Each size must be a
    multiple of the one before, so that each run is a union of runs of the level below.
    """
    order = [str(v) for v in spec.order]
    seen: set[str] = set()
    dupes = [v for v in order if v in seen or seen.add(v)]
    if dupes:
        raise InputError(source, _field(name, "order"), f"values listed more than once: {_listing(dupes)}")
    # Only the check matters here: runs are computed from positions in `order` directly.
    _integer_factors([float(g) for g in spec.group_sizes], source, _field(name, "group_sizes"), "group size")
    missing = [v for v in values.tolist() if v not in seen]
    if missing:
        raise InputError(source, _field(name, data=True),
                         f"{len(missing)} distinct value(s) in the data are not in the builder's order, first: "
                         f"{_listing(missing)}")

    domain = np.array(order, dtype=object)
    position = np.arange(domain.size)
    columns = [domain]
    for level, size in enumerate(spec.group_sizes, start=1):
        first = position // size * size
        last = np.minimum(first + size, domain.size) - 1
        labels = np.array([a if i == j else f"{a}-{b}"
                           for a, b, i, j in zip(domain[first], domain[last], first, last)], dtype=object)
        if np.unique(labels.astype(str)).size != np.unique(first).size:
            raise InputError(source, _field(name, "order"),
                             f"level {level} labels are ambiguous (values containing '-' make two runs print the "
                             f"same 'first-last' label); rename the values")
        columns.append(labels)
    columns.append(np.full(domain.size, TOP, dtype=object))
    return np.column_stack(columns)


# --- shared helpers -------------------------------------------------------------------------------------------------
def _integer_factors(sizes: list[float], source: str | None, field: str, what: str) -> list[int]:
    """The integer factor between each size and the next; refuse sizes that do not grow by an integer factor >= 2."""
    factors: list[int] = []
    for i in range(1, len(sizes)):
        ratio = sizes[i] / sizes[i - 1]
        if not math.isfinite(ratio) or ratio > MAX_FACTOR:
            raise InputError(source, f"{field}[{i}]",
                             f"{what} {_number(sizes[i])} is more than {MAX_FACTOR:.0e} times the previous {what} "
                             f"{_number(sizes[i - 1])}")
        factor = round(ratio)
        if factor < 2 or abs(ratio - factor) > _REL_TOL * ratio:
            raise InputError(
                source, f"{field}[{i}]",
                f"{what} {_number(sizes[i])} is not a multiple (at least twice) of the previous {what} "
                f"{_number(sizes[i - 1])}: each level's groups must be unions of the groups of the level below, "
                f"or the hierarchy is not monotone",
            )
        factors.append(int(factor))
    return factors


def _field(name: str, key: str | None = None, data: bool = False) -> str:
    """`attributes.<name>.hierarchy.<key>` for spec problems, `attributes.<name>` for values that do not fit."""
    base = f"attributes.{name}" if name else ""
    if data:
        return base or "values"
    parts = [p for p in (base, "hierarchy", key) if p]
    return ".".join(parts)


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(repr(str(v)) for v in list(items)[:_SHOWN])
    return shown + (", ..." if len(items) > _SHOWN else "")
