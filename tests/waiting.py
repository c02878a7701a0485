"""Waiting in tests for something that can be observed, with a deadline, instead of a fixed sleep.

``wait_until(predicate, timeout_s, what)`` polls ``predicate`` until it returns a true value and
returns that value; past ``timeout_s`` seconds it fails the test with ``what`` did not happen.
The other helpers are predicates' building blocks: what a run has written so far.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.05) -> T:
    """Poll ``predicate`` every ``poll_s`` s until it returns a true value, and return that value.

    Raises AssertionError ``"waited <timeout_s> s for <what>: it did not happen"`` when it is still
    false ``timeout_s`` seconds after the first call (the predicate is called at least once more
    after the deadline passes, so a slow poll never fails a wait that was met)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}: it did not happen")
        time.sleep(poll_s)


def measured_seconds(results: Path, name: str = "claim_latency_us") -> list[int]:
    """Measured seconds written so far by each run under ``results`` (searched at any depth: a
    sweep's, plan's or catalogue's runs too), oldest run first (run ids begin with their start
    time): the complete interval lines of its ``histograms/<name>.hlog``, which a run appends
    second by second once its measured window has begun. [] while no run has such a log."""
    logs = sorted(Path(results).rglob(f"histograms/{name}.hlog"), key=lambda p: p.parent.parent.name)
    return [_complete_interval_lines(log) for log in logs]


def _complete_interval_lines(log: Path) -> int:
    text = log.read_text()
    lines = text[:text.rfind("\n") + 1].splitlines()
    return sum(1 for line in lines if line and not line.startswith(("#", '"')))
