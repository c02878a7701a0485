"""The two searches of a plan for one design: the fewest workers that pass at the target rate (from Little's
law, doubling then bisecting to :data:`WORKERS_RESOLUTION`, stopped early when doubling gains less than
:data:`MIN_GAIN`), and the headroom above it; docs/capacity-plan.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from bench.analysis.plan_answer import unmeasured_text
from bench.plan.steps import Step
from bench.sweep.capacity_search import RESOLUTION, ramp_and_bisect
from bench.usage import option

#: The workers search stops when the passing and failing counts are within 10 % (or one worker).
WORKERS_RESOLUTION = 0.10
#: Doubling the workers "helps" when the SLO measure falls, or throughput rises, by at least this share:
#: the search's own resolution, below which two steps are not told apart.
MIN_GAIN = 0.10
#: The headroom search's largest multiple of the target rate (2^6).
MAX_HEADROOM_STEPS = 8


def rate_text(rate: float) -> str:
    """A step's rate as the step was offered it: 1187.5 -> '1,187.5', 1000.0 -> '1,000'."""
    return f"{rate:,.1f}".removesuffix(".0")


def little_estimate(target_rate: float, probe_workers: int, probe_throughput: float) -> float:
    """Workers Little's law (L = λW) needs for ``target_rate`` jobs/s: the probe's cycle time per job and
    worker (``probe_workers / probe_throughput`` s) times the rate. Raises ValueError for a probe that
    completed nothing."""
    if probe_throughput <= 0:
        raise ValueError("the probe completed no job: no cycle time to estimate from")
    return target_rate * probe_workers / probe_throughput


def helps(before: Step, after: Step) -> bool:
    """True when ``after`` (more workers) improves on ``before`` by :data:`MIN_GAIN`."""
    if after.throughput_jobs_per_s >= (1 + MIN_GAIN) * before.throughput_jobs_per_s > 0:
        return True
    if before.slo_ratio is None or after.slo_ratio is None:
        return before.slo_ratio is None  # an unmeasured SLO before: doubling may yet measure it
    return after.slo_ratio <= (1 - MIN_GAIN) * before.slo_ratio


def _no_help(before: Step, after: Step) -> str:
    """Why doubling stopped, with the figures: 'doubling from 5 to 10 workers did not help: the SLO measure
    went from 0.38 to 0.60 of its threshold and throughput from 176 to 162 jobs/s (helping needs 10 %
    better)'."""
    def ratio(step: Step) -> str:
        return "not measured" if step.slo_ratio is None else f"{step.slo_ratio:,.3g}"
    return (f"doubling from {before.workers} to {after.workers} workers did not help: the SLO measure (measured over "
            f"threshold) went from {ratio(before)} to {ratio(after)} and throughput from "
            f"{before.throughput_jobs_per_s:,.1f} to {after.throughput_jobs_per_s:,.1f} jobs/s (helping needs "
            f"{MIN_GAIN:.0%} better in one of them)")


@dataclass
class WorkersAnswer:
    """``needed``: the fewest workers that passed (None: none did, or the search could not tell);
    ``failed_below``: the most that failed under it (0: none tried); ``stopped``: why the search gave up, when it
    did; ``unmeasured``: the workers of the step it stopped at because that step could not be measured
    (:attr:`Step.unmeasured`), else None; ``steps`` by workers."""

    needed: int | None
    failed_below: int
    stopped: str | None
    steps: dict[int, Step] = field(default_factory=dict)
    unmeasured: int | None = None


class _Unmeasured(Exception):
    """A step of the workers search failed untrusted (:attr:`Step.unmeasured`): the search stops at it."""

    def __init__(self, workers: int):
        super().__init__(workers)
        self.workers = workers


def search_workers(step: Callable[[int], Step], start: int, least: int, most: int) -> WorkersAnswer:
    """The fewest workers in ``least..most`` for which ``step(workers)`` passes, from ``start``. A step that
    fails untrusted (:attr:`Step.unmeasured`), while doubling or bisecting, stops the search with no answer:
    it is neither a miss (doubling on would answer "needs more workers") nor a pass."""
    steps: dict[int, Step] = {}

    def passes(n: int) -> bool:
        if n not in steps:
            steps[n] = step(n)
        if steps[n].unmeasured:
            raise _Unmeasured(n)
        return steps[n].passed

    try:
        return _climb_and_bisect(passes, steps, start, least, most)
    except _Unmeasured as stop:
        trusted_fails = [n for n, s in steps.items() if not s.passed and s.unmeasured is None and n < stop.workers]
        return WorkersAnswer(None, max(trusted_fails, default=0), _unmeasured_text(steps, stop.workers), steps,
                             unmeasured=stop.workers)


def _climb_and_bisect(passes: Callable[[int], bool], steps: dict[int, Step], start: int, least: int,
                      most: int) -> WorkersAnswer:
    """:func:`search_workers` over ``passes(workers)``, which fills ``steps``."""
    n, low, previous = min(max(start, least), most), least - 1, None  # low: the most workers known to fail
    while not passes(n):
        low = n
        if n >= most:
            return WorkersAnswer(None, low, f"{most} workers ({option('plan_max_workers')}) did not meet it", steps)
        if previous is not None and not helps(steps[previous], steps[n]):
            return WorkersAnswer(None, low, _no_help(steps[previous], steps[n]), steps)
        previous, n = n, min(2 * n, most)
    high = n
    while low < least < high:  # the first step passed: halve until one fails
        m = max(least, high // 2)
        high, low = (m, low) if passes(m) else (high, m)
    while low >= least and high - low > max(1, math.floor(WORKERS_RESOLUTION * high)):
        m = (low + high) // 2
        high, low = (m, low) if passes(m) else (high, m)
    return WorkersAnswer(high, max(low, 0), None, steps)


def _unmeasured_text(steps: dict[int, Step], workers: int) -> str:
    """'could not be measured at 6 workers: <why> (measured twice); the search stopped there rather than take
    it for a miss' (with the fewest workers that passed before it, if any)."""
    at, passed = steps[workers], [n for n, s in steps.items() if s.passed]
    return (f"{unmeasured_text(workers, at.unmeasured, bool(at.retried))}; the search stopped there rather than take it "
            "for a miss" + (f" ({min(passed)} workers passed; whether fewer do was not measured)" if passed else ""))


@dataclass
class Headroom:
    """``rate``: the highest rate that passed (jobs/s); ``factor``: it over the target; ``at_least``: the
    search could not see the end (the failing step could not be measured, :attr:`Step.unmeasured`, or nothing
    failed)."""

    rate: float
    factor: float
    at_least: bool
    first_failed: float | None
    why: str
    steps: dict[float, Step] = field(default_factory=dict)


def search_headroom(step: Callable[[float], Step], target_rate: float) -> Headroom:
    """The highest rate for which ``step(rate)`` passes, ramping from twice ``target_rate`` (which passed)."""
    steps: dict[float, Step] = {}

    def passes(rate: float) -> bool:
        rate = round(rate, 1)
        steps[rate] = step(rate)
        return steps[rate].passed

    good, bad = ramp_and_bisect(passes, 2 * target_rate, known_good=target_rate, max_steps=MAX_HEADROOM_STEPS)
    limited = steps[round(bad, 1)].unmeasured if bad is not None else None
    if bad is None:
        why = f"every step up to {rate_text(good)} jobs/s passed: the search stopped before one failed"
    elif limited:
        why = f"the first step that failed ({rate_text(bad)} jobs/s) could not be measured: {limited}"
    else:
        why = f"{rate_text(bad)} jobs/s failed (within {RESOLUTION:.0%})"
    return Headroom(good, good / target_rate, bad is None or bool(limited), bad, why, steps)
