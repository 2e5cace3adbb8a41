from itertools import product

from hypothesis import given, settings, strategies as st

from engine.antichain import DownwardAntichain, UpwardAntichain


def test_paper_example():
    tree = UpwardAntichain(3)
    for element in [(1, 1, 1), (1, 3, 0), (3, 2, 0)]:
        assert tree.add(element)
    assert tree.covers((1, 2, 2))          # found through (1, 1, 1)
    assert not tree.covers((0, 3, 3))      # nothing stored is <= it
    assert tree.add((1, 1, 0))
    stored = set(tree)
    assert (1, 1, 1) not in stored and (1, 3, 0) not in stored
    # (3, 2, 0) >= (1, 1, 0) as well, so it is dominated too; only the new minimal element remains.
    assert stored == {(1, 1, 0)}
    assert len(tree) == 1


def test_covered_element_is_not_stored():
    tree = UpwardAntichain(2)
    tree.add((1, 1))
    assert not tree.add((2, 1))
    assert set(tree) == {(1, 1)}


def test_downward_antichain_mirrors():
    tree = DownwardAntichain((3, 3))
    tree.add((2, 1))
    assert tree.covers((0, 0)) and tree.covers((2, 1)) and not tree.covers((3, 0))
    tree.add((2, 2))
    assert set(tree) == {(2, 2)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 3)] * 3), max_size=25), st.tuples(*[st.integers(0, 3)] * 3))
def test_matches_brute_force(elements, query):
    tree = UpwardAntichain(3)
    for element in elements:
        tree.add(element)
    expected = any(all(e <= q for e, q in zip(element, query)) for element in elements)
    assert tree.covers(query) == expected
    stored = set(tree)
    # Stored elements form an antichain and are exactly the minimal ones.
    minimal = {e for e in elements if not any(o != e and all(a <= b for a, b in zip(o, e)) for o in elements)}
    assert stored == minimal
