"""Client-side measurement: per-second HdrHistograms and counters.

Latencies are recorded as integer microseconds in HdrHistograms (the ``hdrh``
package, a port of Gil Tene's HdrHistogram), one set per one-second interval;
whole-window histograms are the exact sum of the measured intervals, so every
figure can be recomputed from the interval log. A :class:`Window` keeps those sums
as running totals, so a run holds one second's histograms at a time however long it is. Locust's own statistics are not
used: they round sub-100 ms response times to whole milliseconds.

Everything here runs in one OS thread (gevent greenlets), so no locking is needed.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable

from hdrh.histogram import HdrHistogram

#: Histogram range: 1 µs to 1 hour for claim/complete, 1 µs to 7 days for pickup
#: (a seeded backlog can be old), 3 significant digits (0.1 % value precision).
LATENCY_MAX_US = 3_600_000_000
PICKUP_MAX_US = 7 * 86_400_000_000
SIGNIFICANT_DIGITS = 3

#: ``batch_wait_us``: per job, from the claim returning to the job starting (its wait
#: inside a batch behind the jobs claimed with it; about 0 at batch 1).
#: ``work_duration_us``: per job, the real elapsed time of its simulated work (a 1 ms
#: ``gevent.sleep`` can take several ms when the event loop is busy).
#: ``loop_lag_us``: how late the event loop's periodic timer woke (beyond its period).
#: ``nowait_backoff_us``: each back-off sleep actually taken after a 55P03 (NOWAIT).
HISTOGRAM_NAMES = ("claim_latency_us", "complete_latency_us", "pickup_latency_us", "producer_lag_us",
                   "batch_wait_us", "work_duration_us", "loop_lag_us", "nowait_backoff_us")


def new_histogram(name: str) -> HdrHistogram:
    """Return an empty histogram for metric ``name`` (one of :data:`HISTOGRAM_NAMES`)."""
    highest = PICKUP_MAX_US if name == "pickup_latency_us" else LATENCY_MAX_US
    return HdrHistogram(1, highest, SIGNIFICANT_DIGITS)


@dataclasses.dataclass
class Interval:
    """One second (or less, at the end) of client measurements.

    ``index`` counts seconds since the load started (warm-up included);
    ``start_s``/``end_s`` are monotonic seconds since the load started.
    """

    index: int
    start_s: float
    end_s: float
    histograms: dict[str, HdrHistogram]
    counters: Counter
    errors: Counter
    max_rows_per_claim: int = 0

    @property
    def seconds(self) -> float:
        """Length of the interval in seconds."""
        return self.end_s - self.start_s

    def release(self) -> None:
        """Free this interval's histograms now, once nothing will read them again.

        An ``hdrh`` histogram and its encoder refer to each other (``histogram.encoder``,
        ``encoder.histogram``), so a dropped histogram is a reference cycle that only
        Python's cyclic collector frees, and its full collections are rare: in a long run
        the per-second histograms (about 100 KB of counts each) pile up until one comes
        (measured: about 10 MB a minute of RSS growth at 10 workers). Cutting the
        encoder's back-reference lets reference counting free them at once. The
        histograms must not be encoded afterwards.
        """
        for hist in self.histograms.values():
            hist.encoder.histogram = None


class Recorder:
    """Accumulates the current interval's histograms and counters.

    Counters: ``claims`` (claim statements that returned, rows or not),
    ``jobs_claimed``, ``empty_claims``, ``jobs_completed`` (completions applied),
    ``stale_completions`` (completion updates that matched no row: token moved on),
    ``jobs_produced`` (inserted by open-loop producers),
    ``over_claims`` (claims returning more than ``batch`` rows), ``nowait_retries``.
    ``errors`` counts by SQLSTATE, or a named kind when there is none (:mod:`bench.error_kinds`).
    ``max_rows_per_claim`` is the largest claim of the interval.
    """

    def __init__(self, batch: int):
        self.batch = batch
        self._reset()

    def _reset(self) -> None:
        self.histograms = {name: new_histogram(name) for name in HISTOGRAM_NAMES}
        self.counters: Counter = Counter()
        self.errors: Counter = Counter()
        self.max_rows_per_claim = 0

    def claim(self, latency_us: int, rows: int, pickup_us: Iterable[int]) -> None:
        """Record one claim that returned ``rows`` rows after ``latency_us`` µs."""
        self.histograms["claim_latency_us"].record_value(max(1, latency_us))
        self.counters["claims"] += 1
        if rows == 0:
            self.counters["empty_claims"] += 1
            return
        self.counters["jobs_claimed"] += rows
        if rows > self.batch:
            self.counters["over_claims"] += 1
        if rows > self.max_rows_per_claim:
            self.max_rows_per_claim = rows
        pickup = self.histograms["pickup_latency_us"]
        for value in pickup_us:
            pickup.record_value(min(max(1, value), PICKUP_MAX_US))

    def complete(self, latency_us: int, applied: int, stale: int) -> None:
        """Record one completion statement: ``applied`` rows finished, ``stale`` rejected by the token."""
        self.histograms["complete_latency_us"].record_value(max(1, latency_us))
        self.counters["jobs_completed"] += applied
        self.counters["stale_completions"] += stale

    def batch_wait(self, wait_us: int) -> None:
        """Record one job's wait inside its batch: claimed, not yet started (µs)."""
        self.histograms["batch_wait_us"].record_value(min(max(1, wait_us), LATENCY_MAX_US))

    def work_duration(self, elapsed_us: int) -> None:
        """Record one job's simulated work as it really took (µs, measured around the sleep)."""
        self.histograms["work_duration_us"].record_value(min(max(1, elapsed_us), LATENCY_MAX_US))

    def loop_lag(self, lag_us: int) -> None:
        """Record how late (µs beyond its period) one wake-up of the loop-lag timer came."""
        self.histograms["loop_lag_us"].record_value(min(max(1, lag_us), LATENCY_MAX_US))

    def nowait_backoff(self, slept_us: int) -> None:
        """Record one back-off sleep after a 55P03, as really slept (µs)."""
        self.histograms["nowait_backoff_us"].record_value(min(max(1, slept_us), LATENCY_MAX_US))

    def produced(self, jobs: int, lags_us: Iterable[int]) -> None:
        """Record ``jobs`` inserted by a producer, each ``lag_us`` after its intended time."""
        self.counters["jobs_produced"] += jobs
        lag = self.histograms["producer_lag_us"]
        for value in lags_us:
            lag.record_value(min(max(1, value), LATENCY_MAX_US))

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (a SQLSTATE such as ``55P03``, or a :data:`bench.error_kinds.NAMED_KINDS` key)."""
        self.errors[kind] += 1

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self.counters[name] += n

    def rotate(self, index: int, start_s: float, end_s: float) -> Interval:
        """Close the current interval, return it, and start a new one."""
        closed = Interval(index, start_s, end_s, self.histograms, self.counters, self.errors,
                          self.max_rows_per_claim)
        self._reset()
        return closed


class Window:
    """Running totals of the measured window: the intervals added so far, without keeping them.

    ``histograms`` holds one histogram per :data:`HISTOGRAM_NAMES` name, the exact
    sum (``HdrHistogram.add``) of the added intervals'; ``counters`` and ``errors``
    their sums; ``start_s`` the first interval's start and ``end_s`` the last one's
    end (monotonic seconds since the load started, None while empty); ``seconds``
    the sum of their lengths and ``intervals`` how many were added. Memory is a
    fixed set of histograms (about 1 MB at :data:`SIGNIFICANT_DIGITS`), whatever
    the length of the run.
    """

    def __init__(self) -> None:
        self.histograms = {name: new_histogram(name) for name in HISTOGRAM_NAMES}
        self.counters: Counter = Counter()
        self.errors: Counter = Counter()
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.seconds = 0.0
        self.intervals = 0

    def add(self, interval: Interval) -> None:
        """Add ``interval``'s histograms and counters to the totals."""
        for name, total in self.histograms.items():
            total.add(interval.histograms[name])
        self.counters.update(interval.counters)
        self.errors.update(interval.errors)
        if self.start_s is None:
            self.start_s = interval.start_s
        self.end_s = interval.end_s
        self.seconds += interval.seconds
        self.intervals += 1


def merge(intervals: "list[Interval] | Window", name: str) -> HdrHistogram:
    """Exact sum of histogram ``name`` over ``intervals``; of a :class:`Window`, its running total."""
    if isinstance(intervals, Window):
        return intervals.histograms[name]
    total = new_histogram(name)
    for interval in intervals:
        total.add(interval.histograms[name])
    return total


def latency_summary(hist: HdrHistogram, scale: float = 1.0) -> dict[str, float | None]:
    """{p50, p95, p99, max, mean} of ``hist`` divided by ``scale``; all None when empty.

    Percentiles are HdrHistogram values (within 0.1 % at 3 significant digits).
    """
    if hist.get_total_count() == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    return {
        "p50": hist.get_value_at_percentile(50) / scale,
        "p95": hist.get_value_at_percentile(95) / scale,
        "p99": hist.get_value_at_percentile(99) / scale,
        "max": hist.get_max_value() / scale,
        "mean": round(hist.get_mean_value() / scale, 3),
    }
