"""When rolling up ahead on the worker thread pays: measured, not assumed.

The worker runs only where asked for (SAFESHARE_ROLL_AHEAD=1, engine.kernels.roll_ahead_allowed): since the
roll-ups got cheap, the hand-overs below cost more than the roll-ups moved on the machine measured, at every load.

On a quiet machine the search's thread and the worker (engine.ahead, engine.classes.ClassCache.prefetch) run on two
cores, and a roll-up done ahead costs the search nothing. On a loaded one (other processes on the cores) the two
threads hand the GIL back and forth, and a thread the OS preempts while it holds the GIL stalls the other: ADULT
k=5 took 1.3 s with the worker at a load of 3, 0.76 s without it. So the branch and bound asks this policy, once per
check, whether to prefetch, and the policy compares the two modes on the search itself.

A probe runs PROBE checks alternating the modes every SLICE checks (interleaved, so that the drift of a check's cost
along the search, as classes shrink, falls on both modes alike) and times each check: the wall seconds from one
tick to the next hold the check served by the tick before's prefetch (or its absence) while the worker runs the
latest tick's, so an interval counts for a mode only when both ticks chose it (a switch's first interval would
charge one mode with the other's roll-up). The cheaper mode (the current one unless the other costs at most
SWITCH_GAIN of it, so that noise does not flip the choice) then runs for a stretch of checks, doubled while the same
mode keeps winning (FIRST_STRETCH up to LONGEST_STRETCH), before the next probe sees whether the load changed.
Prefetching never changes a result, only where roll-ups run, so the checks, the optimum and everything else are the
same in either mode; only the time differs.

The probes are for a loaded machine only: on a quiet one (a core idle by the load average when the search starts,
`idle_core`) the policy rolls up ahead at every check. There the probes' own cost and their noise lost more than
they found: ADULT k=5 0.36-0.52 s measured against 0.34-0.39 s always ahead (five runs each, 2026-11-27).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

WARM_UP = 16            # checks rolled up ahead before the first probe (the first roll-ups start from the base)
PROBE = 64              # checks per probe
SLICE = 8               # consecutive checks in one mode within a probe
FIRST_STRETCH = 256     # checks in the chosen mode after a probe that changed the mode
LONGEST_STRETCH = 4096  # at most this many
SWITCH_GAIN = 0.9       # a probe changes the mode (initially: ahead) only for checks at most 90 % as costly


def idle_core() -> bool:
    """Whether another core is likely idle for the worker thread: the load average of the last minute leaves at
    least half a core free."""
    try:
        load = os.getloadavg()[0]
    except OSError:   # pragma: no cover - platforms without a load average
        return False
    return load <= (os.cpu_count() or 1) - 0.5


class AheadPolicy:
    """Decides, check by check, whether the search hands the next roll-up to the worker thread (`tick`)."""

    def __init__(self, available: bool, clock: Callable[[], float] = time.perf_counter,
                 measure: bool | None = None) -> None:
        """`available`: the class cache has a worker thread (otherwise `tick` is always False). `measure`: probe
        the two modes (True) or always roll up ahead (False); None: probe only when no core is idle now."""
        self.available = available
        self.measure = (not idle_core()) if measure is None else measure
        self.clock = clock
        self.ahead = available             # the mode chosen at the latest tick
        self._last: float | None = None    # the latest tick's time
        self._previous = self.ahead        # the mode chosen at the tick before the latest
        self._left = WARM_UP               # checks left in the current stretch (or probe)
        self._probe_at = -1                # checks into the probe, -1 outside one
        self._sums = {True: 0.0, False: 0.0}
        self._counts = {True: 0, False: 0}
        self._stretch = FIRST_STRETCH
        self.chosen: list[bool] = []       # each probe's choice (reports, tests)

    def tick(self) -> bool:
        """One check more; whether to roll its successor up ahead."""
        if not self.available:
            return False
        if not self.measure:
            return True
        now = self.clock()
        if self._probe_at > 0 and self._previous == self.ahead:
            self._sums[self.ahead] += now - self._last
            self._counts[self.ahead] += 1
        self._last = now
        self._previous = self.ahead
        if self._probe_at >= 0:
            if self._probe_at >= PROBE:
                self._decide()
            else:
                self.ahead = (self._probe_at // SLICE) % 2 == 1   # off first: the stretch before was mostly on
                self._probe_at += 1
                return self.ahead
        self._left -= 1
        if self._left <= 0:
            self._probe_at = 0
            self._sums = {True: 0.0, False: 0.0}
            self._counts = {True: 0, False: 0}
        return self.ahead

    def _decide(self) -> None:
        self._probe_at = -1
        mean = {mode: self._sums[mode] / self._counts[mode] if self._counts[mode] else float("inf")
                for mode in (True, False)}
        current = self.chosen[-1] if self.chosen else True
        # the other mode must be clearly cheaper (by SWITCH_GAIN) to be taken: a noisy probe does not flip a choice
        best = current if mean[not current] > SWITCH_GAIN * mean[current] else not current
        if self.chosen and self.chosen[-1] == best:
            self._stretch = min(self._stretch * 2, LONGEST_STRETCH)
        else:
            self._stretch = FIRST_STRETCH
        self.chosen.append(best)
        self.ahead = best
        self._left = self._stretch
