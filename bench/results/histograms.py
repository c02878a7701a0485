"""A run's latency histograms read back from ``histograms/<name>.hlog`` and merged over the measured window,
and their percentile spectrum (50 %, 90 %, 99 %, 99.9 %, … and the maximum)."""

from __future__ import annotations

from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from bench.measure.metrics import free_histogram, new_histogram

#: The percentiles of the spectrum (HdrHistogram's plotter's ladder, to five nines), then the maximum.
SPECTRUM_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999)


def sum_log(path: Path) -> tuple[int, HdrHistogram]:
    """(intervals, their exact sum in one histogram, µs) of the HdrHistogram log at ``path``, read one interval at
    a time, each freed once added (:func:`~bench.measure.metrics.free_histogram`: memory stays flat however long
    the run)."""
    widest = "pickup_latency_us"  # its range covers every name's
    total, reference = new_histogram(widest), new_histogram(widest)
    reader = HistogramLogReader(str(path), reference)
    n = 0
    try:
        while (interval := reader.get_next_interval_histogram()) is not None:
            total.add(interval)
            free_histogram(interval)
            n += 1
    finally:
        reader.close()
        free_histogram(reference)
    return n, total


def read_hlog(path: Path) -> HdrHistogram | None:
    """Every interval of the log at ``path`` added into one histogram (µs); None when the file is missing
    or holds no value."""
    if not Path(path).is_file():
        return None
    _, total = sum_log(path)
    return total if total.get_total_count() else None


def spectrum(hist: HdrHistogram) -> list[tuple[float, int]]:
    """(percentile, value in µs) at each of :data:`SPECTRUM_PERCENTILES` that the count can resolve (at
    least one value beyond it), then (100, the maximum)."""
    count = hist.get_total_count()
    points = [(p, hist.get_value_at_percentile(p)) for p in SPECTRUM_PERCENTILES if count * (1 - p / 100) >= 1]
    return points + [(100.0, hist.get_max_value())]
