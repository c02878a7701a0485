"""When open-loop jobs arrive (``BURSTS``, ``ARRIVAL``), for the tool's producers and a library's alike."""

from __future__ import annotations

import random

#: Largest number of due jobs one insert carries when a producer catches up.
MAX_DUE_PER_INSERT = 1000


def rate_at(t_s: float, base_rate: float, bursts: tuple) -> float:
    """Offered rate (jobs/s) at ``t_s`` seconds since the measured start: a burst's rate inside its window."""
    for start_s, end_s, rate in bursts:
        if start_s <= t_s < end_s:
            return rate
    return base_rate


def next_gap_s(rate: float, arrival: str, rng: random.Random) -> float:
    """Gap (s) to the next intended arrival at ``rate`` per second (exponential for Poisson arrivals)."""
    if rate <= 0:
        return 0.1  # no arrivals now: look again shortly (a burst may start)
    return rng.expovariate(rate) if arrival == "poisson" else 1.0 / rate
