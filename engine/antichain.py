"""Predictive properties stored as antichains in a prefix tree (Prasser, Kohlmayer, Kuhn et al. 2016).

An upward-closed property ("this transformation and all its generalizations are pruned") is fully described by its
minimal elements, an antichain. Storing only those, in a prefix tree with one node per attribute level, keeps memory
proportional to the frontier instead of the lattice, which is what lets lattices of millions of transformations be
searched. Each tree node keeps the smallest rank (sum of levels) stored beneath it, so a query for an element
`e <= q` skips every subtree whose minimum rank already exceeds rank(q).

`DownwardAntichain` stores a downward-closed property ("this transformation and all its specializations fail") by
mirroring levels (l -> top - l), which turns it into the upward-closed case.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence


class _Node:
    __slots__ = ("level", "children", "min_rank")

    def __init__(self, level: int) -> None:
        self.level = level
        self.children: dict[int, _Node] = {}
        self.min_rank = 1 << 62


class UpwardAntichain:
    """Minimal elements of an upward-closed set of level vectors."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._root = _Node(-1)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        def walk(node: _Node, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
            if len(prefix) == self.dimensions:
                yield prefix
                return
            for level in sorted(node.children):
                yield from walk(node.children[level], prefix + (level,))

        yield from walk(self._root, ())

    def covers(self, query: Sequence[int]) -> bool:
        """True when some stored element e satisfies e <= query (so query has the property)."""
        query = tuple(query)
        rank = sum(query)

        def search(node: _Node, depth: int) -> bool:
            if depth == self.dimensions:
                return True
            for level, child in node.children.items():
                if level <= query[depth] and child.min_rank <= rank and search(child, depth + 1):
                    return True
            return False

        return self._root.min_rank <= rank and search(self._root, 0)

    def add(self, element: Sequence[int]) -> bool:
        """Insert `element` unless already covered; remove the stored elements it dominates. Returns True if stored."""
        element = tuple(int(x) for x in element)
        if len(element) != self.dimensions:
            raise ValueError(f"expected {self.dimensions} levels, got {len(element)}")
        if self.covers(element):
            return False
        self._remove_generalizations(element)
        rank = sum(element)
        node = self._root
        node.min_rank = min(node.min_rank, rank)
        for level in element:
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node(level)
            child.min_rank = min(child.min_rank, rank)
            node = child
        self._size += 1
        return True

    def _remove_generalizations(self, element: tuple[int, ...]) -> None:
        """Delete every stored e >= element (now redundant) and recompute min ranks on the way back up."""
        self._size -= self._count_generalizations(element)

        def prune(node: _Node, depth: int) -> bool:
            """Prune below `node`; True when `node` is left empty and must go."""
            if depth == self.dimensions:
                return True  # a stored element >= element: remove it
            for level in [lv for lv in node.children if lv >= element[depth]]:
                if prune(node.children[level], depth + 1):
                    del node.children[level]
            node.min_rank = min((c.min_rank for c in node.children.values()), default=1 << 62)
            return not node.children

        prune(self._root, 0)

    def _count_generalizations(self, element: tuple[int, ...]) -> int:
        def count(node: _Node, depth: int) -> int:
            if depth == self.dimensions:
                return 1
            return sum(count(c, depth + 1) for lv, c in node.children.items() if lv >= element[depth])

        return count(self._root, 0)


class DownwardAntichain:
    """Maximal elements of a downward-closed set: `covers(q)` is True when some stored e >= q."""

    def __init__(self, tops: Sequence[int]) -> None:
        self._tops = tuple(int(t) for t in tops)
        self._tree = UpwardAntichain(len(self._tops))

    def _mirror(self, element: Sequence[int]) -> tuple[int, ...]:
        return tuple(t - int(x) for t, x in zip(self._tops, element))

    def __len__(self) -> int:
        return len(self._tree)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return (self._mirror(e) for e in self._tree)

    def covers(self, query: Sequence[int]) -> bool:
        return self._tree.covers(self._mirror(query))

    def add(self, element: Sequence[int]) -> bool:
        return self._tree.add(self._mirror(element))
