"""The round-trip probe's process seen from the run: started before the workers, its samples read as they come,
folded into each second's ``round_trip_p50_us``/``round_trip_p99_us`` and the measured window's ``round_trip``
block (the probe itself: :mod:`bench.engines.round_trip`; why a process of its own: docs/network.md)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter

import gevent

from bench.measure import metrics
#: How long the probe may take to exit once told to (s) before it is killed.
STOP_WAIT_S = 2.0


def histogram(values_us: list[int]):
    """An HdrHistogram of ``values_us`` (µs), the claim latency's range and precision."""
    hist = metrics.new_histogram("claim_latency_us")
    metrics.record_values(hist, values_us, metrics.LATENCY_MAX_US)
    return hist


class RoundTripProbe:
    """The probe process started from ``(argv, env)`` (:func:`bench.engines.round_trip.command`): ``samples``
    ``(monotonic s, µs)``, ``failures`` ``(monotonic s, message)``, ``pid``. :meth:`stop` ends it."""

    def __init__(self, argv: list[str], env: dict[str, str], period_s: float):
        self.period_s = period_s
        self.samples: list[tuple[float, int]] = []
        self.failures: list[tuple[float, str]] = []  # (monotonic s, message) of each failed sample
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **env}, text=True)
        self.pid = self.proc.pid
        self.stderr = ""
        self._reader = gevent.spawn(self._read)

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = line.split(maxsplit=2)
            if parts and parts[0] == "E" and len(parts) > 1:
                self.failures.append((float(parts[1]), parts[2].strip() if len(parts) > 2 else "error"))
            elif len(parts) == 2:
                self.samples.append((float(parts[0]), max(1, round(int(parts[1]) / 1000))))

    def stop(self) -> None:
        """Close its standard input (it exits at its next wake-up), wait :data:`STOP_WAIT_S`, else kill it; keep
        the samples read and the end of what it wrote to stderr. Never raises; a second call does nothing."""
        if self.proc.stdin.closed:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=STOP_WAIT_S)
        self.stderr = self.proc.stderr.read()[-2000:]
        self.proc.stderr.close()

    def _between(self, start_mono: float, end_mono: float) -> list[int]:
        return [us for at, us in self.samples if start_mono <= at < end_mono]

    def add_columns(self, rows: list[dict], n_warm: int, t0: float) -> None:
        """Each intervals.csv row's ``round_trip_p50_us``, ``round_trip_p99_us`` from the samples taken in its second (second ``k`` of
        the load is ``[t0 + k, t0 + k + 1)`` in monotonic s); none for a second without a sample."""
        for row in rows:
            k = row["t_s"] + n_warm
            values = self._between(t0 + k, t0 + k + 1)
            if values:
                p50, p99 = metrics.values_at_percentiles(histogram(values), (50, 99))
                row.update(round_trip_p50_us=p50, round_trip_p99_us=p99)

    def window(self, start_mono: float, end_mono: float) -> dict:
        """The measured window's figures, summary.json's ``round_trip`` block: ``p50_us``, ``p99_us``, ``mean_us``
        (None without samples), ``samples``, ``errors`` (failed samples), ``period_ms``, ``error_kinds``; with no
        sample, ``not_measured``: why (the failures, or the probe's last words)."""
        values = self._between(start_mono, end_mono)
        summary = metrics.latency_summary(histogram(values))
        failed = Counter(message for at, message in self.failures if start_mono <= at < end_mono)
        out = {"p50_us": summary["p50"], "p99_us": summary["p99"], "mean_us": summary["mean"],
               "samples": len(values), "errors": sum(failed.values()),
               "period_ms": round(self.period_s * 1000, 3), "error_kinds": dict(failed.most_common(3))}
        if not values:
            last = (self.stderr.strip().splitlines() or ["it wrote nothing"])[-1]
            out["not_measured"] = (f"every sample failed ({next(iter(failed))})" if failed
                                   else f"the probe process gave no sample ({last})")
        return out
