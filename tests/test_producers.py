"""Open-loop producers (issue 3): arrivals at a fixed rate, latency from the intended time,
and the saturation verdict. Rates are chosen against the workers' capacity measured in the
same run (Little's law), not against absolute machine speed."""

from __future__ import annotations

import csv

import pytest

from conftest import CLEAN_INVARIANTS, run_and_load


@pytest.mark.slow
def test_open_loop_below_capacity_keeps_up(dsn, tmp_path):
    """100 jobs/s offered to 4 workers of 10 ms jobs (capacity ~300/s): all of it is completed,
    the oldest eligible age stays flat, and every produced job is accounted for."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--rate", "100", "--workers", "4", "--work-ms", "10",
                                 "--duration", "6s", "--warmup", "1s")
    assert abs(s["throughput_jobs_per_s"] - 100) / 100 <= 0.05, s["throughput_jobs_per_s"]
    assert abs(s["jobs_produced"] / s["measured_s"] - 100) / 100 <= 0.05
    assert s["saturated"] is False and abs(s["oldest_age_slope_s_per_s"]) < 0.05
    assert s["pickup_latency_ms"]["p50"] < 50, s["pickup_latency_ms"]
    assert s["backlog_exhausted"] is False  # an empty queue that keeps up is not a dry backlog
    assert s["invariants"] == CLEAN_INVARIANTS
    assert sum(s["status_counts"].values()) == s["audit"]["rows_expected"]


@pytest.mark.slow
def test_open_loop_above_capacity_is_saturated(dsn, tmp_path):
    """600 jobs/s offered to 2 workers of 10 ms jobs: the oldest eligible age grows about linearly,
    at 1 - completed/offered seconds per second, and the report says the queue is saturated."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--rate", "600", "--workers", "2", "--work-ms", "10",
                                 "--duration", "8s", "--warmup", "1s")
    assert s["saturated"] is True
    expected_slope = 1 - s["throughput_jobs_per_s"] / 600
    assert abs(s["oldest_age_slope_s_per_s"] - expected_slope) <= 0.15, (s["oldest_age_slope_s_per_s"], expected_slope)
    with (run_dir / "intervals.csv").open() as fh:
        ages = [float(r["oldest_eligible_age_s"]) for r in csv.DictReader(fh) if r["oldest_eligible_age_s"]]
    assert ages[-1] > ages[0] + 3 and all(b >= a - 0.2 for a, b in zip(ages, ages[1:])), ages
    page = (run_dir / "report.html").read_text()
    assert "saturated" in page
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
def test_bursts_raise_the_offered_rate_inside_their_window(dsn, tmp_path):
    """RATE 100 with a burst of 600 jobs/s from 2 s to 4 s: arrivals per second follow the schedule,
    and every produced job is in the database."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--rate", "100", "--bursts", "2-4@600", "--workers", "4",
                                 "--work-ms", "2", "--duration", "6s", "--warmup", "1s")
    with (run_dir / "intervals.csv").open() as fh:
        produced = {int(r["t_s"]): int(r["jobs_produced"] or 0) for r in csv.DictReader(fh)}
    assert all(abs(produced[t] - 600) <= 60 for t in (2, 3)), produced
    assert all(abs(produced[t] - 100) <= 15 for t in (0, 1, 5)), produced
    assert sum(s["status_counts"].values()) == s["audit"]["rows_expected"]
    assert s["invariants"] == CLEAN_INVARIANTS
