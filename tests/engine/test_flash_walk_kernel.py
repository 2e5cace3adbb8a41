"""engine._flash_numba.find_path, the compiled `find_path` of Flash's flat sweep, against a reference written here
with the engine's own `Incumbent.rules_out` and `ExplicitTags.tag`: on random lattices, tags, level bounds drawn
from few values (so bounds often tie the incumbent's loss) and incumbents, the same path, the same insufficient
tags and the same count of transformations ruled out."""
from __future__ import annotations

import numpy as np
import pytest

from engine.lattice import Lattice
from engine.search.common import Incumbent
from engine.search.tags import ExplicitTags, make_tag_rows

pytest.importorskip("numba")


class BoundsQuality:
    """A quality model reduced to what `Incumbent` asks: the level bound of a transformation."""

    def __init__(self, bounds: np.ndarray) -> None:
        self.bounds = bounds

    def bound(self, node) -> float:
        return float(self.bounds[tuple(node)])


class Best:
    def __init__(self, levels, loss) -> None:
        self.levels, self.loss, self.solution = levels, loss, True


def reference_skip(step, tags, incumbent, prune) -> int:
    """`_sweep`'s `skip` with `ruled_out`, on level vectors: 0 kept, 1 tagged, 2 ruled out by the bound (and its
    up-set tagged)."""
    anonymous, not_anonymous, insufficient = tags
    if step in anonymous or step in not_anonymous:
        return 1
    if not prune or incumbent.key is None:
        return 0
    if step in insufficient:
        return 1
    bound = incumbent.quality.bound(step)
    loss = incumbent.key[0]
    if bound > loss or (bound == loss and incumbent.rules_out(step, bound)):
        insufficient.tag(step)
        return 2
    return 0


def reference_path(head, successors, tags, incumbent, prune):
    """`_sweep`'s find_path with `first_open`, on level vectors."""
    path, current, pruned = [head], head, 0
    while True:
        for step in successors(current):
            skipped = reference_skip(step, tags, incumbent, prune)
            pruned += skipped == 2
            if not skipped:
                break
        else:
            return path, pruned
        path.append(step)
        current = step


@pytest.mark.parametrize("seed", range(60))
def test_the_compiled_walk_is_the_reference_walk(seed):
    from engine import _flash_numba

    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 5))
    shape = tuple(int(h) for h in rng.integers(1, 5, size=d))
    lattice = Lattice((0,) * d, tuple(h - 1 for h in shape))
    size = int(np.prod(shape))
    ranks = rng.permutation(size).astype(np.int64)
    table, _ = _flash_numba.successor_table(ranks, np.asarray(shape, dtype=np.int64))
    strides = [int(np.prod(shape[a + 1:])) for a in range(d)]
    bounds = rng.choice(np.array([0.1, 0.25, 0.5, 0.75]), size=size).reshape(shape)
    quality = BoundsQuality(bounds)

    def successors(node):
        index = int(np.ravel_multi_index(node, shape))
        found = [node[:a] + (node[a] + 1,) + node[a + 1:] for a in range(d) if node[a] + 1 < shape[a]]
        assert sorted(int(np.ravel_multi_index(s, shape)) for s in found) == sorted(
            table[index, 1:table[index, 0] + 1].tolist())
        return sorted(found, key=lambda s: ranks[np.ravel_multi_index(s, shape)])

    for trial in range(8):
        prune = bool(rng.integers(0, 4))
        reference_tags = [ExplicitTags(lattice, upward) for upward in (True, False, True)]
        compiled_tags, rows = make_tag_rows(lattice, (True, False, True), explicit=True)
        for _ in range(int(rng.integers(0, 4))):   # some tags already set
            which = int(rng.integers(0, 3))
            node = tuple(int(v) for v in np.unravel_index(int(rng.integers(0, size)), shape))
            reference_tags[which].tag(node)
            compiled_tags[which].tag(node)
        incumbent = Incumbent(quality)
        if prune:
            best = tuple(int(v) for v in np.unravel_index(int(rng.integers(0, size)), shape))
            incumbent.offer(Best(best, float(rng.choice([0.1, 0.25, 0.5, 0.75]))))
        head = tuple(int(v) for v in np.unravel_index(int(rng.integers(0, size)), shape))
        expected, expected_pruned = reference_path(head, successors, reference_tags, incumbent, prune)
        path = np.empty(sum(shape) + 1, dtype=np.int64)
        path[0] = int(np.ravel_multi_index(head, shape))
        key = incumbent.key
        pruning = prune and key is not None
        dims = np.array([shape, strides], dtype=np.int64).reshape(2, d)
        length, pruned = _flash_numba.find_path(
            path, 1, table, rows, bounds.reshape(-1), dims, pruning, float(key[0]) if pruning else 0.0,
            float(key[1]) if pruning else 0.0, key[2] if pruning else 0,
            sum(l * s for l, s in zip(key[3], strides)) if pruning else 0)
        got = [tuple(int(v) for v in np.unravel_index(int(i), shape)) for i in path[:length]]
        assert got == expected, (seed, trial)
        assert pruned == expected_pruned
        for reference, compiled in zip(reference_tags, compiled_tags):
            assert np.array_equal(reference.flags, compiled.flags)
        # check_path's loop after a failing check: the successors not skipped, in rank order, and their ranks
        node = tuple(int(v) for v in np.unravel_index(int(rng.integers(0, size)), shape))
        expected_open, expected_pruned = [], 0
        for step in successors(node):
            skipped = reference_skip(step, reference_tags, incumbent, prune)
            expected_pruned += skipped == 2
            if not skipped:
                expected_open.append(int(ranks[np.ravel_multi_index(step, shape)]))
        out = np.empty(d, dtype=np.int64)
        count, pruned = _flash_numba.open_successors(
            out, int(np.ravel_multi_index(node, shape)), table, ranks, rows, bounds.reshape(-1), dims, pruning,
            float(key[0]) if pruning else 0.0, float(key[1]) if pruning else 0.0, key[2] if pruning else 0,
            sum(l * s for l, s in zip(key[3], strides)) if pruning else 0)
        assert out[:count].tolist() == expected_open and pruned == expected_pruned, (seed, trial)
        for reference, compiled in zip(reference_tags, compiled_tags):
            assert np.array_equal(reference.flags, compiled.flags)


@pytest.mark.parametrize("shape,node", [((3,), (1,)), ((2, 3), (0, 1)), ((3, 2, 4), (1, 0, 2)), ((2, 2), (1, 1))])
def test_tagging_an_up_set_by_hand(shape, node):
    """The up-set of `node`: every level from its own to the top, counted by hand."""
    from engine import _flash_numba

    flags = np.zeros(int(np.prod(shape)), dtype=bool)
    strides = [int(np.prod(shape[a + 1:])) for a in range(len(shape))]
    dims = np.array([shape, strides], dtype=np.int64).reshape(2, len(shape))
    _flash_numba.tag_up_set(flags, int(np.ravel_multi_index(node, shape)), dims)
    expected = int(np.prod([h - level for h, level in zip(shape, node)]))
    assert flags.sum() == expected
    marked = {tuple(int(v) for v in p) for p in np.argwhere(flags.reshape(shape))}
    assert all(all(m >= n for m, n in zip(point, node)) for point in marked)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("upward", [True, False])
def test_tagging_every_set_as_the_numpy_slices_do(seed, upward):
    """Every transformation of random lattices (trailing levels at 0, at the top or neither): the compiled up-set
    (down-set) tag sets exactly the flags `ExplicitTags.tag` sets with one slice per axis."""
    from engine import _flash_numba

    rng = np.random.default_rng((100 if upward else 200) + seed)
    d = int(rng.integers(1, 6))
    shape = tuple(int(h) for h in rng.integers(1, 5, size=d))
    lattice = Lattice((0,) * d, tuple(h - 1 for h in shape))
    strides = [int(np.prod(shape[a + 1:])) for a in range(d)]
    dims = np.array([shape, strides], dtype=np.int64).reshape(2, d)
    tag = _flash_numba.tag_up_set if upward else _flash_numba.tag_down_set
    for index in range(int(np.prod(shape))):
        node = tuple(int(v) for v in np.unravel_index(index, shape))
        expected = ExplicitTags(lattice, upward=upward)
        expected.tag(node)
        flags = np.zeros(int(np.prod(shape)), dtype=bool)
        tag(flags, index, dims)
        assert np.array_equal(flags, expected.flags.reshape(-1)), node
        counted = [h - level for h, level in zip(shape, node)] if upward else [level + 1 for level in node]
        assert flags.sum() == np.prod(counted)   # counted by hand
