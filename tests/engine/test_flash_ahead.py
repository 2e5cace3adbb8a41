"""Flash rolling up ahead (FlashSearch(ahead=True)): the guess of the next check and the path it keeps for
find_path and check_path change nothing but where the classes are rolled up. Every check, in the same order with
the same answer, every path, every tag, the bound's prunings, the phases and the optimum equal those of the plain
search, on random tables, with and without suppression, with Loss and Non-Uniform Entropy. It is off unless asked
for (it cost more than it moved on a quiet 2-core machine)."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PrivacyConfiguration
from engine.quality import make_quality_model
from engine.search.common import Deadline, Incumbent, Progress
from engine.search.evaluator import Evaluator
from engine.search.flash import FlashSearch

from .lattice_tables import wide_table

pytestmark = pytest.mark.skipif(kernels.load() is None, reason="the worker thread rolls up compiled only")


class Recording(FlashSearch):
    """A FlashSearch that records its checks (node, answer, the bound's tags before it) and paths in order."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list = []

    def check(self, node, hint, following=None):
        tagged = (self.pruned_by_bound, int(self.insufficient.flags.sum()))   # the tags so far, by the bound
        answer = super().check(node, hint, following)
        self.log.append(("check", node, answer, tagged))
        return answer

    def find_path(self, head):
        path = super().find_path(head)
        self.log.append(("path", tuple(path), self.pruned_by_bound))
        return path


def run(seed: int, k: int, limit: float, quality: str, ahead: bool | None, n: int = 400, d: int = 6) -> dict:
    frame, hierarchies = wide_table(seed, n, d)
    table = encode_table(frame, hierarchies)
    model = make_quality_model(quality, table)
    configuration = PrivacyConfiguration([KAnonymity(k)], limit)
    lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    evaluator = Evaluator(table, configuration, model, compiled=kernels.load(), parallel=True)
    deadline = Deadline(None)
    incumbent = Incumbent(model, started=deadline.started)
    options = {} if ahead is None else {"ahead": ahead}
    search = Recording(evaluator, lattice, incumbent, deadline, Progress(lattice.size, False, "t"), **options)
    prefetched = []   # (checks recorded before, the guess)
    plain_prefetch = evaluator.cache.prefetch   # what the evaluator's prefetch calls too
    evaluator.cache.prefetch = lambda node, hint=None: (
        prefetched.append((sum(entry[0] == "check" for entry in search.log), node)), plain_prefetch(node, hint))
    try:
        counters = search.run()
    finally:
        evaluator.close()
    best = incumbent.best
    return {
        "ahead": search.ahead, "prefetched": prefetched, "log": search.log, "counters": counters,
        "checked": evaluator.checked, "seen": sorted(evaluator.seen),
        "tags": [t.flags.copy() for t in (search.anonymous, search.not_anonymous, search.insufficient)],
        "best": None if best is None else (tuple(best.levels), best.loss, int(best.suppressed_records)),
    }


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k, limit, quality", [
    (3, 0.0, "loss"),                  # Flash: monotone privacy and quality
    (2, 0.1, "non_uniform_entropy"),   # Flash2P, pruning by the bound in the first phase
    (5, 0.05, "loss"),                 # Flash2P
])
def test_rolling_up_ahead_changes_no_check(seed, k, limit, quality):
    ahead = run(seed, k, limit, quality, ahead=True)
    plain = run(seed, k, limit, quality, ahead=False)
    assert ahead["ahead"] and not plain["ahead"]
    assert ahead["prefetched"] and not plain["prefetched"]   # the guesses ran (and only with ahead)
    assert ahead["log"] == plain["log"]   # the same checks, answers, paths and prunings, in the same order
    assert ahead["counters"] == plain["counters"]
    assert ahead["checked"] == plain["checked"] and ahead["seen"] == plain["seen"]
    for mine, theirs in zip(ahead["tags"], plain["tags"]):
        assert np.array_equal(mine, theirs)
    assert ahead["best"] == plain["best"]
    # by default nothing is guessed, and the search is the plain one
    default = run(seed, k, limit, quality, ahead=None)
    assert not default["ahead"] and not default["prefetched"]
    for key in ("log", "counters", "checked", "seen", "best"):
        assert default[key] == plain[key]


def test_guesses_mostly_right():
    """The guess is the next check in most cases (else rolling up ahead would only cost): at least 3 of 4 checks
    that follow a failed one are the transformation guessed during it."""
    result = run(1, 2, 0.1, "non_uniform_entropy", ahead=True)
    checks = [entry for entry in result["log"] if entry[0] == "check"]
    guesses = dict(result["prefetched"])   # check index -> what was guessed during it
    after_failure = [i for i in range(len(checks) - 1) if not checks[i][2]]
    assert len(after_failure) > 20
    right = sum(1 for i in after_failure if guesses.get(i) == checks[i + 1][1])
    assert right >= 0.75 * len(after_failure)
