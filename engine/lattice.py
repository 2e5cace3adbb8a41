"""The generalization lattice: one level per quasi-identifier, ordered componentwise.

Nodes are never materialized; a node is its level vector, and its index (mixed radix over the attribute heights) is
what the search remembers as visited.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product


@dataclass(frozen=True)
class Lattice:
    lower: tuple[int, ...]   # smallest level allowed per attribute
    upper: tuple[int, ...]   # largest level allowed per attribute

    def __post_init__(self) -> None:
        if len(self.lower) != len(self.upper) or any(lo > hi for lo, hi in zip(self.lower, self.upper)):
            raise ValueError("each attribute needs lower <= upper")

    @property
    def bottom(self) -> tuple[int, ...]:
        return self.lower

    @property
    def top(self) -> tuple[int, ...]:
        return self.upper

    @property
    def size(self) -> int:
        total = 1
        for lo, hi in zip(self.lower, self.upper):
            total *= hi - lo + 1
        return total

    def index(self, node: Sequence[int]) -> int:
        value = 0
        for level, lo, hi in zip(node, self.lower, self.upper):
            value = value * (hi - lo + 1) + (level - lo)
        return value

    def successors(self, node: Sequence[int]) -> Iterator[tuple[int, ...]]:
        """Direct generalizations: one attribute one level up."""
        for i, (level, hi) in enumerate(zip(node, self.upper)):
            if level < hi:
                yield tuple(node[:i]) + (level + 1,) + tuple(node[i + 1:])

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(product(*(range(lo, hi + 1) for lo, hi in zip(self.lower, self.upper))))
