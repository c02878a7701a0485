"""What a job costs the database (``summary.json`` ``cost_per_job``, ``intervals.csv`` ``wal_bytes``), against
the real PostgreSQL: the tool's WAL figure against the WAL position the test reads itself over the same window,
a batch of 10 writing less WAL per job than a batch of 1, and HOT updates only where no index holds status."""

from __future__ import annotations

import csv
import datetime as dt
import json
import time

import gevent
import psycopg
import pytest

from conftest import run_and_load

SHORT = ("--workers", "4", "--duration", "5s", "--warmup", "1s")


def _wal_position_at(samples: list[tuple[float, int]], t: float) -> float:
    """The WAL position (bytes) at wall time ``t``, interpolated between the test's samples around it."""
    for (t0, lsn0), (t1, lsn1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return lsn0 + (lsn1 - lsn0) * (t - t0) / (t1 - t0)
    raise AssertionError(f"no sample around {t}")


def _run_reading_wal(dsn: str, results, *args: str) -> tuple[dict, list[dict], list[tuple[float, int]]]:
    """(summary, intervals rows, the test's own (wall time, WAL position) samples every 50 ms during the run)."""
    samples: list[tuple[float, int]] = []

    def sample() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                lsn = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()[0]
                samples.append((time.time(), int(lsn)))
                gevent.sleep(0.05)

    sampler = gevent.spawn(sample)
    try:
        run_dir, summary, _ = run_and_load(dsn, results, *args)
    finally:
        sampler.kill()
    with (run_dir / "intervals.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    run = json.loads((run_dir / "run.json").read_text())
    summary["_window"] = tuple(dt.datetime.fromisoformat(run[k]).timestamp() for k in ("measured_start", "measured_end"))
    return summary, rows, samples


@pytest.mark.slow
def test_wal_per_job_is_the_servers_own_and_a_batch_writes_less_of_it(dsn, tmp_path):
    per_job = {}
    for batch in (1, 10):
        summary, rows, samples = _run_reading_wal(dsn, tmp_path / f"b{batch}", *SHORT, "--batch", str(batch))
        cost = summary["cost_per_job"]
        assert cost["wal_bytes"] > 0 and "pg_current_wal_lsn" in cost["source"], cost
        tool = sum(int(r["wal_bytes"]) for r in rows)
        assert cost["wal_bytes"] == pytest.approx(tool / summary["jobs_completed"], abs=0.001)
        # the tool's window: from the sample in the middle of the second before the first measured one to the
        # sample in the middle of the last measured second
        start, end = summary["_window"]
        own = _wal_position_at(samples, end - 0.5) - _wal_position_at(samples, start - 0.5)
        assert abs(tool - own) <= 0.10 * own, (tool, own)
        per_job[batch] = cost["wal_bytes"]
        # the partial index's predicate holds status, which the claim and the completion update: no HOT update;
        # each job is updated twice (claimed, completed), up to a second of statistics not yet flushed at each end
        assert cost["hot_update_share"] == 0 and cost["tuples_hot_updated"] == 0, cost
        assert 1.5 <= cost["tuples_updated"] <= 2.5 and cost["tuples_inserted"] == 0, cost
    assert per_job[10] < per_job[1], per_job


@pytest.mark.slow
def test_without_an_index_on_status_most_updates_are_hot(dsn, tmp_path):
    """INDEX=none: no index holds a column the claim updates, so most updates are HOT (pages with room)."""
    summary, _, _ = _run_reading_wal(dsn, tmp_path / "none", *SHORT, "--index", "none")
    assert summary["cost_per_job"]["hot_update_share"] > 0.3, summary["cost_per_job"]
