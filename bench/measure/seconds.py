"""The run's clock and its seconds: one intervals.csv row per measured second, the progress line,
and the event-loop lag probe."""

from __future__ import annotations

import datetime as dt

import time

import gevent

from bench.measure import metrics
from bench.results.run_files import COST_COUNTERS


PROGRESS_EVERY_S = 5


#: Period of the event-loop lag probe: a greenlet sleeps this long, over and over, and
#: records how much later than asked it woke (``loop_lag_us``).
LOOP_LAG_PERIOD_S = 0.010


def fmt_ms(us: float | None) -> str:
    """``us`` µs as milliseconds text (``"12.345 ms"``), or ``"-"`` for None."""
    return "-" if us is None else f"{us / 1000:.3f} ms"


class Clock:
    """Per-second ticks relative to the load start (monotonic), with Unix time of the start."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.unix0 = time.time()

    def now_s(self) -> float:
        return time.monotonic() - self.t0

    def sleep_until(self, t_s: float) -> None:
        delay = t_s - self.now_s()
        if delay > 0:
            gevent.sleep(delay)


def p99_of(hist) -> int:
    """The 99th percentile of ``hist`` (µs), as hdrh gives it (:func:`metrics.values_at_percentiles`)."""
    return metrics.values_at_percentiles(hist, (99,))[0]


def interval_row(interval: metrics.Interval, t_s: int, sample, cpu_pct: tuple[float, float, float]) -> dict:
    """One intervals.csv row; ``cpu_pct`` is the harness's (total, user, system) % of a core (:class:`CpuMeter`)."""
    claim = interval.histograms["claim_latency_us"]
    complete = interval.histograms["complete_latency_us"]
    row = {
        "t_s": t_s,
        "claims": interval.counters["claims"],
        "jobs_claimed": interval.counters["jobs_claimed"],
        "jobs_completed": interval.counters["jobs_completed"],
        "empty_claims": interval.counters["empty_claims"],
        "errors": sum(interval.errors.values()),
        "harness_cpu_pct": round(cpu_pct[0], 1),
        "harness_user_pct": round(cpu_pct[1], 1),
        "harness_system_pct": round(cpu_pct[2], 1),
    }
    if claim.get_total_count():
        p50, p95, p99 = metrics.values_at_percentiles(claim, (50, 95, 99))
        row.update(claim_p50_us=p50, claim_p95_us=p95, claim_p99_us=p99, claim_max_us=claim.get_max_value())
    if complete.get_total_count():
        row["complete_p99_us"] = p99_of(complete)
    pickup = interval.histograms["pickup_latency_us"]
    if pickup.get_total_count():  # the jobs claimed in the second: their eligible time to the claim
        row["pickup_p99_ms"] = round(p99_of(pickup) / 1000, 3)
    loop_lag = interval.histograms["loop_lag_us"]
    if loop_lag.get_total_count():
        row["loop_lag_p99_us"] = p99_of(loop_lag)
    for counter in ("worker_round_trips", "producer_round_trips"):  # present once counted (0 included)
        if counter in interval.counters:
            row[counter] = interval.counters[counter]
    lag = interval.histograms["producer_lag_us"]
    if interval.counters["jobs_produced"]:
        row["jobs_produced"] = interval.counters["jobs_produced"]
        row["producer_lag_p99_us"] = p99_of(lag)
    row.update(sample_columns(sample))
    return row


def sample_columns(sample: dict | None) -> dict:
    """The intervals.csv columns of one second's monitor sample (none when it was not sampled)."""
    return {k: v for k, v in (sample or {}).items() if k != "age_by_priority" and k not in COST_COUNTERS}


def cost_columns(samples: dict[int, dict], k: int) -> dict[str, int | None]:
    """intervals.csv's cost columns of second ``k``: each :data:`COST_COUNTERS` counter's growth from the
    sample of second ``k - 1`` to that of second ``k`` (each taken at the middle of its second), None when
    either sample lacks it."""
    before, now = samples.get(k - 1, {}), samples.get(k, {})
    return {column: None if before.get(total) is None or now.get(total) is None else now[total] - before[total]
            for total, column in COST_COUNTERS.items()}


def vacuum_columns(passes: list[tuple[float, float]], k: int) -> dict:
    """intervals.csv's ``vacuum_passes`` (passes that started in second ``k`` of the load, 0 when none) and
    ``vacuum_ms`` (their summed duration, ms; empty when none) from ``(start_s, duration_s)`` pairs."""
    durations = [d for start, d in passes if int(start) == k]
    return {"vacuum_passes": len(durations), "vacuum_ms": round(sum(durations) * 1000, 3) if durations else None}


def loop_lag_probe(recorder: metrics.Recorder, period_s: float = LOOP_LAG_PERIOD_S) -> None:
    """Sleep ``period_s`` over and over (in a greenlet until killed), recording in ``loop_lag_us`` how late
    each wake-up came beyond it (µs, at least 1): how long a ready greenlet waited for a core."""
    while True:
        started = time.perf_counter()
        gevent.sleep(period_s)
        recorder.loop_lag(int((time.perf_counter() - started - period_s) * 1e6))


def progress_line(log, elapsed_s: int, n_warm: int, n_meas: int, intervals: list, sample) -> None:
    """A ``pgbench -P`` style line over the last :data:`PROGRESS_EVERY_S` measured seconds; its
    claim p99 is that of those seconds' claim histograms merged into one, never the largest
    per-second p99. Runs during the load, so it takes only the percentile it prints."""
    total = n_warm + n_meas
    if elapsed_s <= n_warm or not intervals:
        log(f"progress: {elapsed_s:.1f}/{total} s (warm-up)")
        return
    last = intervals[-PROGRESS_EVERY_S:]
    jobs_s = sum(iv.counters["jobs_completed"] for iv in last) / len(last)
    claims = metrics.merge(last, "claim_latency_us")
    p99_us = p99_of(claims) if claims.get_total_count() else None
    age = (sample or {}).get("oldest_eligible_age_s")
    age = "-" if age is None else f"{age:.1f} s"
    errors = sum(sum(iv.errors.values()) for iv in last)
    log(f"progress: {elapsed_s:.1f}/{total} s, {jobs_s:,.1f} jobs/s, claim p99 {fmt_ms(p99_us)}, "
        f"oldest age {age}, errors {errors}")


def iso_at(unix_s: float) -> str:
    """Unix seconds as an ISO 8601 UTC timestamp with milliseconds (the result files' times)."""
    return dt.datetime.fromtimestamp(unix_s, dt.timezone.utc).isoformat(timespec="milliseconds")
