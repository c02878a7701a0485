"""One second of measurements encoded to cross a process boundary (str, int and float only; histograms in
HdrHistogram's compressed V2 encoding, as in the ``.hlog`` files), and the exact merge of several processes'
seconds, histograms added bucket by bucket."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from hdrh.histogram import HdrHistogram

from bench.measure.metrics import HISTOGRAM_NAMES, Interval, free_histogram, new_histogram

__all__ = ["encode", "decode", "merge"]


def encode(interval: Interval) -> dict[str, Any]:
    """``interval`` as ``{"index", "start_s", "end_s", "max_rows_per_claim", "counters": {name: n},
    "errors": {kind: n}, "histograms": {name: str}}``; an empty histogram is left out (it decodes as
    empty). Must be called before ``interval.release()``."""
    return {
        "index": interval.index, "start_s": interval.start_s, "end_s": interval.end_s,
        "max_rows_per_claim": interval.max_rows_per_claim,
        "counters": dict(interval.counters), "errors": dict(interval.errors),
        "histograms": {name: hist.encode().decode("ascii") for name, hist in interval.histograms.items()
                       if hist.get_total_count()},
    }


def decode(data: dict[str, Any]) -> Interval:
    """The :class:`Interval` that :func:`encode` gave ``data`` for. Raises ValueError (or KeyError)
    when ``data`` is not such a dict or a histogram does not decode."""
    histograms = {}
    for name in HISTOGRAM_NAMES:
        text = (data.get("histograms") or {}).get(name)
        hist = new_histogram(name)
        if text:
            part = HdrHistogram.decode(text.encode("ascii"))
            hist.add(part)
            free_histogram(part)
        histograms[name] = hist
    return Interval(int(data["index"]), float(data["start_s"]), float(data["end_s"]), histograms,
                    Counter(data.get("counters") or {}), Counter(data.get("errors") or {}),
                    int(data.get("max_rows_per_claim") or 0))


def merge(index: int, parts: Iterable[Interval]) -> Interval:
    """One interval of second ``index`` holding every part's values: histograms added bucket by bucket,
    counters and errors summed, the largest claim kept. It spans the first part's start and end (the run's
    clock's part comes first; the others' times must not stretch the window); with no parts, an empty interval
    of length 0."""
    parts = list(parts)
    histograms = {name: new_histogram(name) for name in HISTOGRAM_NAMES}
    counters, errors = Counter(), Counter()
    for part in parts:
        for name, total in histograms.items():
            total.add(part.histograms[name])
        counters.update(part.counters)
        errors.update(part.errors)
    start = parts[0].start_s if parts else 0.0
    end = parts[0].end_s if parts else start
    return Interval(index, start, end, histograms, counters, errors,
                    max((p.max_rows_per_claim for p in parts), default=0))
