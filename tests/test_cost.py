"""What a job costs the database (``summary.json`` ``cost_per_job``, ``intervals.csv`` ``wal_bytes``), against
the real PostgreSQL: the tool's WAL figure against the WAL position the test reads itself over the same window,
a batch of 10 writing less WAL per job than a batch of 1, and HOT updates only where no index holds status."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import time

import gevent
import psycopg
import pytest

from bench.engines.server_cpu import ServerCpu
from conftest import qbench, run_and_load

SHORT = ("--workers", "4", "--duration", "5s", "--warmup", "1s")


def _wal_position_at(samples: list[tuple[float, int]], t: float) -> float:
    """The WAL position (bytes) at wall time ``t``, interpolated between the test's samples around it."""
    for (t0, lsn0), (t1, lsn1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return lsn0 + (lsn1 - lsn0) * (t - t0) / (t1 - t0)
    raise AssertionError(f"no sample around {t}")


@pytest.fixture(scope="module")
def walinspect_dsn(dsn):
    """The module's database with pg_walinspect created (the tool reads full-page image bytes with it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_walinspect")
    return dsn


def _run_reading_wal(dsn: str, results, *args: str,
                     checkpoint_at_s: float | None = None) -> tuple[dict, list[dict], list[tuple[float, int]]]:
    """(summary, intervals rows, the test's own (wall time, WAL position) samples every 50 ms during the run);
    ``checkpoint_at_s``: a CHECKPOINT that many seconds after the run starts (full-page images follow it)."""
    samples: list[tuple[float, int]] = []
    checkpoint = [checkpoint_at_s]

    def sample() -> None:
        started = time.time()
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                lsn = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()[0]
                samples.append((time.time(), int(lsn)))
                if checkpoint[0] is not None and time.time() - started >= checkpoint[0]:
                    conn.execute("CHECKPOINT")
                    checkpoint[0] = None
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
def test_wal_per_job_is_the_servers_own_and_a_batch_writes_less_of_it(walinspect_dsn, tmp_path):
    """A CHECKPOINT inside batch 10's window (the server writes each page's first change after it whole): the
    full-page images are counted apart, so the comparison of the rest cannot flip."""
    per_job, images = {}, {}
    for batch in (1, 10):
        summary, rows, samples = _run_reading_wal(walinspect_dsn, tmp_path / f"b{batch}", *SHORT, "--batch", str(batch),
                                                  checkpoint_at_s=5 if batch == 10 else None)
        cost = summary["cost_per_job"]
        assert cost["wal_bytes"] > 0 and "pg_current_wal_lsn" in cost["source"], cost
        tool = sum(int(r["wal_bytes"]) for r in rows)
        assert cost["wal_bytes"] == pytest.approx(tool / summary["jobs_completed"], abs=0.001)
        # the tool's window: from the sample in the middle of the second before the first measured one to the
        # sample in the middle of the last measured second
        start, end = summary["_window"]
        own = _wal_position_at(samples, end - 0.5) - _wal_position_at(samples, start - 0.5)
        assert abs(tool - own) <= 0.10 * own, (tool, own)
        per_job[batch], images[batch] = cost["wal_bytes_without_fpi"], cost["wal_fpi_bytes"]
        assert cost["wal_bytes_without_fpi"] == pytest.approx(cost["wal_bytes"] - cost["wal_fpi_bytes"], abs=0.01)
        assert "pg_walinspect, after the load" in cost["source"], cost
        # the partial index's predicate holds status, which the claim and the completion update: no HOT update;
        # each job is updated twice (claimed, completed), up to a second of statistics not yet flushed at each end
        assert cost["hot_update_share"] == 0 and cost["tuples_hot_updated"] == 0, cost
        assert 1.5 <= cost["tuples_updated"] <= 2.5 and cost["tuples_inserted"] == 0, cost
    assert images[10] > 0, images  # the checkpoint's images were found
    assert per_job[10] < per_job[1], (per_job, images)


@pytest.mark.slow
def test_without_an_index_on_status_most_updates_are_hot(dsn, tmp_path):
    """INDEX=none: no index holds a column the claim updates, so most updates are HOT (pages with room)."""
    summary, _, _ = _run_reading_wal(dsn, tmp_path / "none", *SHORT, "--index", "none")
    assert summary["cost_per_job"]["hot_update_share"] > 0.3, summary["cost_per_job"]


@pytest.mark.slow
def test_server_cpu_from_proc_is_at_least_the_statements_time(tmp_path):
    """The embedded server (on this host, with pg_stat_statements): its processes' CPU per job from /proc is at
    least its lower bound, the tool's statements' execution time per job, and the workers' backends used some."""
    proc = qbench("run", "--results", str(tmp_path), *SHORT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    cost = json.loads((run_dir / "summary.json").read_text())["cost_per_job"]
    assert cost["server_cpu_backends_us"] > 0 and cost["statements_exec_us"] > 0, cost
    assert cost["server_cpu_us"] >= cost["statements_exec_us"], cost
    assert cost["server_cpu_us"] == pytest.approx(cost["server_cpu_backends_us"] + cost["server_cpu_background_us"],
                                                  abs=0.01)
    assert "/proc" in cost["source"] and "µs of server CPU" in proc.stdout, cost


def test_a_process_that_is_not_a_database_server_gives_no_server_cpu():
    """The meter follows a server only: this test's own process (python, not postgres) gives None."""
    assert ServerCpu.local(os.getpid()) is None
