"""The load generator's own memory: its resident set size (RSS, psutil's ``memory_info().rss``) once a minute
during the load, and its peak (``getrusage``'s ``ru_maxrss``: KiB on Linux, bytes on macOS; see getrusage(2));
``harness_rss_mb`` in ``summary.json``."""

from __future__ import annotations

import resource
import sys
from typing import Callable

import psutil

#: Seconds between RSS samples (counted from the load start, warm-up included).
RSS_EVERY_S = 60
#: Minutes whose sample summary.json names (``at_1m`` ...).
RSS_REPORTED_MIN = (1, 5, 10)
MIB = 1024 * 1024


def peak_rss_mb() -> float:
    """This process's peak RSS so far, MiB (``getrusage(RUSAGE_SELF).ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


class RssLog:
    """Samples ``proc`` (a :class:`psutil.Process`)'s RSS every :data:`RSS_EVERY_S` seconds of load and logs a
    ``harness RSS ...`` line to ``log`` each time."""

    def __init__(self, proc: psutil.Process, log: Callable[[str], None]):
        self.proc = proc
        self.log = log
        self.per_minute_mb: list[float] = []

    def tick(self, elapsed_s: int) -> None:
        """Call once per second with whole seconds since the load started; samples on each minute."""
        if elapsed_s <= 0 or elapsed_s % RSS_EVERY_S:
            return
        rss_mb = round(self.proc.memory_info().rss / MIB, 1)
        self.per_minute_mb.append(rss_mb)
        self.log(f"harness RSS {rss_mb:,.1f} MB at {elapsed_s // 60} min of load")

    def summary(self) -> dict:
        """``{at_1m, at_5m, at_10m, end, max, growth_mb_per_min, per_minute}`` in MiB: ``at_<n>m`` after n
        minutes of load (None if shorter), ``end`` now, ``max`` the peak, ``growth_mb_per_min`` from the first
        to the last minute sample (None with fewer than two), ``per_minute`` every sample."""
        samples = self.per_minute_mb
        end_mb = round(self.proc.memory_info().rss / MIB, 1)
        growth = (round((samples[-1] - samples[0]) / (len(samples) - 1), 2) if len(samples) > 1 else None)
        return {
            **{f"at_{m}m": samples[m - 1] if len(samples) >= m else None for m in RSS_REPORTED_MIN},
            "end": end_mb,
            # the kernel's high-water mark can trail a sample taken just before it
            "max": max(round(peak_rss_mb(), 1), end_mb, *samples),
            "growth_mb_per_min": growth,
            "per_minute": list(samples),
        }
