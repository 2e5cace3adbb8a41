"""Predictive tags on the lattice: a property inherited by all generalizations (upward) or specializations (downward).

Two representations behind one interface (Prasser, Kohlmayer, Kuhn 2016):

* `ExplicitTags`: one boolean per transformation in an n-dimensional numpy array, so tagging the up-set of x is one
  slice assignment `a[x:] = True`. O(lattice) memory, the fastest choice while the lattice fits (Flash "explicit");
* `AntichainTags`: only the minimal (or maximal) transformations carrying the property, in the prefix tree of
  engine.antichain; memory follows the frontier, not the lattice (Flash "implicit").
"""
from __future__ import annotations

import numpy as np

from ..antichain import DownwardAntichain, UpwardAntichain
from ..lattice import Lattice

Node = tuple[int, ...]
EXPLICIT_LIMIT = 1 << 24   # transformations; above this the implicit representation is used


class ExplicitTags:
    def __init__(self, lattice: Lattice, upward: bool, storage: np.ndarray | None = None) -> None:
        """`storage`: zeroed flat booleans to hold the flags (one row of a search's three tag arrays, so a compiled
        walk reads all three through one argument); fresh ones when None."""
        self.lower = lattice.lower
        self.upward = upward
        shape = [hi - lo + 1 for lo, hi in zip(lattice.lower, lattice.upper)]
        self.flags = np.zeros(shape, dtype=bool) if storage is None else storage.reshape(shape)
        # The same flags as bytes, flat: a sweep that numbers transformations by their flat (C-order) index reads
        # `buffer[index]`, a Python int (a third of `flags.item`'s cost), while tagging a whole up-set or down-set
        # stays one slice assignment on `flags`. A view, not a bytearray: np.zeros leaves the pages of a large
        # lattice untouched until tagged, a bytearray would write them all at once.
        self.buffer = memoryview(self.flags.reshape(-1)).cast("B")
        self._shifted = any(lattice.lower)   # with every lower level 0 a transformation is its own index
        # The slices of a tag per level, made once (a search tags hundreds of times): level -> level: or :level + 1
        height = max((hi - lo + 1 for lo, hi in zip(lattice.lower, lattice.upper)), default=1)
        self._slices = [slice(level, None) if upward else slice(0, level + 1) for level in range(height)]

    def tag(self, node: Node) -> None:
        if not self._shifted:
            self.flags[tuple(map(self._slices.__getitem__, node))] = True
        elif self.upward:
            self.flags[tuple(slice(level - lo, None) for level, lo in zip(node, self.lower))] = True
        else:
            self.flags[tuple(slice(0, level - lo + 1) for level, lo in zip(node, self.lower))] = True

    def __contains__(self, node: Node) -> bool:
        if self._shifted:
            node = tuple(level - lo for level, lo in zip(node, self.lower))
        return self.flags.item(node)   # a Python bool, without a numpy scalar

    def minimal(self) -> list[Node]:
        """Minimal tagged transformations (upward tags): tagged, and no direct specialization tagged."""
        flags = self.flags
        minimal = flags.copy()
        for axis in range(flags.ndim):
            below = np.zeros_like(flags)
            index = [slice(None)] * flags.ndim
            index[axis] = slice(1, None)
            source = [slice(None)] * flags.ndim
            source[axis] = slice(0, -1)
            below[tuple(index)] = flags[tuple(source)]
            minimal &= ~below
        return [tuple(int(v) + lo for v, lo in zip(point, self.lower)) for point in np.argwhere(minimal)]


class AntichainTags:
    def __init__(self, lattice: Lattice, upward: bool) -> None:
        self.upward = upward
        self.tree = UpwardAntichain(len(lattice.upper)) if upward else DownwardAntichain(lattice.upper)

    def tag(self, node: Node) -> None:
        self.tree.add(node)

    def __contains__(self, node: Node) -> bool:
        return self.tree.covers(node)

    def minimal(self) -> list[Node]:
        return sorted(self.tree)


def make_tags(lattice: Lattice, upward: bool, explicit: bool | None = None):
    if explicit is None:
        explicit = lattice.size <= EXPLICIT_LIMIT
    return ExplicitTags(lattice, upward) if explicit else AntichainTags(lattice, upward)


def make_tag_rows(lattice: Lattice, upwards: tuple[bool, ...], explicit: bool | None = None):
    """`make_tags` for each of `upwards`; explicit ones share one (len(upwards), size) boolean array (returned too,
    else None) whose rows are their flags in flat C order."""
    if explicit is None:
        explicit = lattice.size <= EXPLICIT_LIMIT
    if not explicit:
        return [AntichainTags(lattice, upward) for upward in upwards], None
    rows = np.zeros((len(upwards), lattice.size), dtype=bool)
    return [ExplicitTags(lattice, upward, rows[i]) for i, upward in enumerate(upwards)], rows
