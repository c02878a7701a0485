"""Waiting for a quiet machine before a test measures what another program's load would move.

A run the tool judges busy (``machine_busy``: more than ``SUSPECT_OUTSIDE_CPU_PCT`` of the machine's CPU
outside the run) is a correct verdict, not a failure of what a test checks, and it makes a test that needs a
trusted figure fail for a reason outside the project. Such a test waits here until the machine is quiet by the
same limit, or measures again once when its run was judged busy. The waiting is bounded for the whole suite
(:data:`SUITE_BUDGET_S`); once spent, the test measures at once and its assertion judges. Every wait is printed
at the end of the suite with the busiest processes seen (conftest's ``pytest_terminal_summary``).
"""

from __future__ import annotations

import os
import time

import psutil
import pytest

from bench.measure.machine_cpu import OtherProcesses, all_proc_times, machine_times
from bench.results.model import machine_busy
from bench.run_summary.suspect import SUSPECT_OUTSIDE_CPU_PCT

#: The whole suite's waiting, at most: the suite takes about 55 min, CI allows 90.
SUITE_BUDGET_S = 20 * 60.0
#: The machine is quiet after this many consecutive windows of :data:`WINDOW_S` at or under the limit.
QUIET_WINDOWS, WINDOW_S = 2, 1.5

#: Each wait: (what waited, seconds waited, quiet at the end or not, the busiest processes in its first window).
WAITS: list[tuple[str, float, bool, list[dict]]] = []
_spent_s = 0.0


#: This process's own CPU while it only waits (% of one core) above which something it left running (a watcher on
#: a socket at end of file wakes gevent's loop for ever) takes a core from every later test: the suite stops.
SELF_SPIN_PCT = 50.0


def busy_pct(window_s: float = WINDOW_S) -> tuple[float, list[dict]]:
    """The CPU of every process but this one, plus the steal, over the next ``window_s`` seconds, in % of all the
    machine's cores (as a run judges it: the kernel's own work left out), and the busiest of those processes
    (``OtherProcesses.busiest``). Fails the test when this process itself used more than :data:`SELF_SPIN_PCT`
    of a core meanwhile."""
    others, me = OtherProcesses(), psutil.Process()
    before, mine = machine_times(), sum(me.cpu_times()[:2])
    others.start(all_proc_times())
    time.sleep(window_s)
    after, mine = machine_times(), sum(me.cpu_times()[:2]) - mine
    others.add(all_proc_times(), {os.getpid()})
    if 100.0 * mine / window_s > SELF_SPIN_PCT:
        pytest.fail(f"the test process used {100.0 * mine / window_s:.0f} % of a core while it only waited: "
                    "something an earlier test left running (a thread, a selector on a closed socket) spins in it",
                    pytrace=False)
    total = after.total_s - before.total_s
    used = sum(p["cpu_s"] for p in others.busiest(n=None)) + (after.steal_s - before.steal_s)
    return (100.0 * used / total if total > 0 else 0.0), others.busiest()


def wait_for_quiet(what: str) -> None:
    """Return once the machine has been quiet (:data:`QUIET_WINDOWS` windows at or under
    ``SUSPECT_OUTSIDE_CPU_PCT``), or at once when the suite's budget is spent; a wait that was needed is recorded
    in :data:`WAITS`."""
    global _spent_s
    started, quiet, first = time.monotonic(), 0, None
    while quiet < QUIET_WINDOWS and _spent_s + (time.monotonic() - started) < SUITE_BUDGET_S:
        pct, busiest = busy_pct()
        first = first if first is not None else busiest
        quiet = quiet + 1 if pct <= SUSPECT_OUTSIDE_CPU_PCT else 0
    waited = time.monotonic() - started
    if waited > QUIET_WINDOWS * WINDOW_S * 1.5:  # more than the quiet windows themselves: it was busy
        _spent_s += waited
        WAITS.append((what, waited, quiet >= QUIET_WINDOWS, first or []))


def judged_busy(summary: dict) -> bool:
    """Whether the run of ``summary`` was judged busy (the rule: ``machine_busy``)."""
    return machine_busy(summary) is not None
