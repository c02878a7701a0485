"""Client-side measurement: per-second HdrHistograms (integer µs) and counters, and the measured window's
running totals. Everything runs in one OS thread (gevent greenlets): no locking."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable

import numpy as np
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
#: ``dispatch_delay_us``: per job, under a queue library's own worker (``LIBRARY_MODE=worker``), from the
#: fetch that claimed it returning to its task starting (the library's dispatch: its buffers, its task
#: creation, its event loop).
HISTOGRAM_NAMES = ("claim_latency_us", "complete_latency_us", "pickup_latency_us", "producer_lag_us",
                   "batch_wait_us", "work_duration_us", "loop_lag_us", "nowait_backoff_us", "dispatch_delay_us")


def new_histogram(name: str) -> HdrHistogram:
    """Return an empty histogram for metric ``name`` (one of :data:`HISTOGRAM_NAMES`)."""
    highest = PICKUP_MAX_US if name == "pickup_latency_us" else LATENCY_MAX_US
    return HdrHistogram(1, highest, SIGNIFICANT_DIGITS)


def free_histogram(hist: HdrHistogram) -> None:
    """Free ``hist`` when its last reference goes rather than at the next full cyclic collection: cuts hdrh's
    histogram–encoder reference cycle (a dropped histogram's counts, about 100 KB, otherwise wait for it). It must
    not be encoded or added to afterwards."""
    hist.encoder.histogram = None


def record_values(hist: HdrHistogram, values: "list[int]", highest: int) -> None:
    """Record ``values`` (integer µs, clamped to ``[1, highest]``) into ``hist`` as ``record_value`` would one
    by one: each counts index by hdrh's ``_counts_index_for`` (HdrHistogram's ``countsArrayIndex``), in numpy.
    Raises ValueError for ``highest`` at or beyond 2**53 (the bit length is taken from a float64)."""
    if not values:
        return
    if highest >= 2 ** 53:
        raise ValueError(f"highest={highest}: must be below 2**53")
    v = np.clip(np.asarray(values, dtype=np.int64), 1, highest)
    _, exponent = np.frexp((v | hist.sub_bucket_mask).astype(np.float64))  # exponent = bit length
    bucket = exponent.astype(np.int64) - hist.unit_magnitude - (hist.sub_bucket_half_count_magnitude + 1)
    sub_bucket = v >> (bucket + hist.unit_magnitude)
    index = ((bucket + 1) << hist.sub_bucket_half_count_magnitude) + (sub_bucket - hist.sub_bucket_half_count)
    buckets, n = np.unique(index, return_counts=True)
    np.ctypeslib.as_array(hist.counts)[buckets] += n.astype(np.uint64)
    hist.total_count += len(v)
    hist.min_value = min(hist.min_value, int(v.min()))
    hist.max_value = max(hist.max_value, int(v.max()))


def values_at_percentiles(hist: HdrHistogram, percentiles: "Iterable[float]") -> list[int]:
    """``hist``'s values at ``percentiles`` (0–100), as ``hist.get_value_at_percentile`` gives them, from one
    numpy cumulative sum; 0s when empty."""
    percentiles = list(percentiles)
    if hist.get_total_count() == 0:
        return [0] * len(percentiles)
    cumulative = np.cumsum(np.ctypeslib.as_array(hist.counts))
    values = []
    for pct in percentiles:
        index = int(np.searchsorted(cumulative, hist.get_target_count_at_percentile(pct), side="left"))
        value = hist.get_value_from_index(index)
        values.append(hist.get_highest_equivalent_value(value) if pct else hist.get_lowest_equivalent_value(value))
    return values


def recorded_counts(hist: HdrHistogram) -> list[tuple[int, int]]:
    """``(value, count)`` of each non-empty bucket of ``hist``, in value order; the value is the bucket's
    highest equivalent value, as hdrh's recorded iterator (``value_iterated_to``) gives it."""
    counts = np.ctypeslib.as_array(hist.counts)
    return [(hist.get_highest_equivalent_value(hist.get_value_from_index(i)), int(counts[i]))
            for i in np.flatnonzero(counts).tolist()]


def mean_value(hist: HdrHistogram) -> float:
    """The mean of ``hist``, as ``hist.get_mean_value`` gives it (each bucket weighted as hdrh's
    ``_hdr_median_equiv_value``), over the non-zero buckets only; 0.0 when empty."""
    total_count = hist.get_total_count()
    if total_count == 0:
        return 0.0
    counts = np.ctypeslib.as_array(hist.counts)
    total = 0
    for index in np.flatnonzero(counts).tolist():
        lowest = hist.get_lowest_equivalent_value(hist.get_value_from_index(index))
        size = hist.get_highest_equivalent_value(lowest) - lowest + 1
        total += int(counts[index]) * (lowest + (size >> 1))
    return float(total) / total_count


@dataclasses.dataclass
class Interval:
    """One second (or less, at the end) of client measurements: ``index`` counts seconds since the load
    started (warm-up included); ``start_s``/``end_s`` are monotonic seconds since the load started."""

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
        """Free this interval's histograms now by cutting the histogram–encoder reference cycle; they must not
        be encoded afterwards."""
        for hist in self.histograms.values():
            free_histogram(hist)


class Recorder:
    """The current interval's latencies (µs, folded into HdrHistograms by :meth:`rotate`) and counters (``claims``,
    ``jobs_claimed``, ``empty_claims``, ``jobs_completed``, ``stale_completions`` (matched no row), ``jobs_produced``,
    ``over_claims`` (> ``batch`` rows), ``nowait_retries``); ``errors`` by SQLSTATE or kind
    (:mod:`bench.engines.postgres.adapter.errors`); ``max_rows_per_claim``; ``rotations`` (intervals closed)."""

    def __init__(self, batch: int):
        self.batch = batch
        self.rotations = 0
        self._reset()

    def _reset(self) -> None:
        self._values: dict[str, list[int]] = {name: [] for name in HISTOGRAM_NAMES}
        self._claim_us = self._values["claim_latency_us"]
        self._pickup_us = self._values["pickup_latency_us"]
        self._complete_us = self._values["complete_latency_us"]
        self._batch_wait_us = self._values["batch_wait_us"]
        self._work_us = self._values["work_duration_us"]
        self._claims = self._empty_claims = self._jobs_claimed = 0
        self._jobs_completed = self._stale_completions = 0
        self.counters: Counter = Counter()
        self.errors: Counter = Counter()
        self.max_rows_per_claim = 0

    def claim(self, latency_us: int, rows: int, pickup_us: Iterable[int]) -> None:
        """Record one claim that returned ``rows`` rows after ``latency_us`` µs."""
        self._claim_us.append(latency_us)
        self._claims += 1
        if rows == 0:
            self._empty_claims += 1
            return
        self._jobs_claimed += rows
        if rows > self.batch:
            self.counters["over_claims"] += 1
        if rows > self.max_rows_per_claim:
            self.max_rows_per_claim = rows
        self._pickup_us.extend(pickup_us)

    def complete(self, latency_us: int, applied: int, stale: int) -> None:
        """Record one completion statement: ``applied`` rows finished, ``stale`` rejected by the token."""
        self._complete_us.append(latency_us)
        self._jobs_completed += applied
        self._stale_completions += stale

    def batch_wait(self, wait_us: int) -> None:
        """Record one job's wait inside its batch: claimed, not yet started (µs)."""
        self._batch_wait_us.append(wait_us)

    def dispatch_delay(self, delay_us: int) -> None:
        """Record one job's dispatch delay under a library's own worker: its task's start minus its fetch's return (µs)."""
        self._values["dispatch_delay_us"].append(delay_us)

    def work_duration(self, elapsed_us: int) -> None:
        """Record one job's simulated work as it really took (µs, measured around the sleep)."""
        self._work_us.append(elapsed_us)

    def loop_lag(self, lag_us: int) -> None:
        """Record how late (µs beyond its period) one wake-up of the loop-lag timer came."""
        self._values["loop_lag_us"].append(lag_us)

    def nowait_backoff(self, slept_us: int) -> None:
        """Record one back-off sleep after a 55P03, as really slept (µs)."""
        self._values["nowait_backoff_us"].append(slept_us)

    def produced(self, jobs: int, lags_us: Iterable[int]) -> None:
        """Record ``jobs`` inserted by a producer, each ``lag_us`` after its intended time."""
        self.counters["jobs_produced"] += jobs
        self._values["producer_lag_us"].extend(lags_us)

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (a SQLSTATE such as ``55P03``, or a :data:`bench.engines.driver.NAMED_KINDS` key)."""
        self.errors[kind] += 1

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self.counters[name] += n

    def rotate(self, index: int, start_s: float, end_s: float) -> Interval:
        """Close the current interval, return it with its histograms filled, and start a new one."""
        histograms = {}
        for name, values in self._values.items():
            hist = new_histogram(name)
            record_values(hist, values, PICKUP_MAX_US if name == "pickup_latency_us" else LATENCY_MAX_US)
            histograms[name] = hist
        counters = self.counters
        for name, n in (("claims", self._claims), ("empty_claims", self._empty_claims),
                        ("jobs_claimed", self._jobs_claimed), ("jobs_completed", self._jobs_completed),
                        ("stale_completions", self._stale_completions)):
            if n:
                counters[name] += n
        closed = Interval(index, start_s, end_s, histograms, counters, self.errors, self.max_rows_per_claim)
        self._reset()
        self.rotations += 1
        return closed


class Window:
    """The measured window's running totals (about 1 MB): ``histograms`` (exact sums), ``counters``, ``errors``,
    ``start_s``/``end_s`` (monotonic s since the load started, None while empty), ``seconds``, ``intervals``."""

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
    """{p50, p95, p99, max, mean} of ``hist`` divided by ``scale``; all None when empty (percentiles within
    0.1 % at 3 significant digits)."""
    if hist.get_total_count() == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    p50, p95, p99 = values_at_percentiles(hist, (50, 95, 99))
    return {
        "p50": p50 / scale,
        "p95": p95 / scale,
        "p99": p99 / scale,
        "max": hist.get_max_value() / scale,
        "mean": round(mean_value(hist) / scale, 3),
    }
