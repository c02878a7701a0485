"""Leases, reaper, fencing, retries and dead letters against a real PostgreSQL (issue 3, first part).

Each test runs ``qbench run`` as a user would and checks the end state in the
database and the run's own counters.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from conftest import CLEAN_INVARIANTS, run_and_load


@pytest.mark.slow
def test_late_completions_are_fenced(dsn, tmp_path):
    """Lease 1 s, jobs of 3 s, reaper every 0.5 s: every completion arrives after the lease
    expired and the reaper re-queued the job, so the token rejects it; none is applied,
    no job is done twice, and each expiry shows as a redelivery or a dead letter."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--workers", "4", "--backlog", "8", "--work-ms", "3000",
                                 "--lease-s", "1", "--reaper-interval-s", "0.5", "--max-attempts", "100",
                                 "--duration", "7s", "--warmup", "0s", timeout=120)
    assert s["invariants"] == CLEAN_INVARIANTS
    assert s["jobs_completed"] == 0, "every completion came after its lease: none may be applied"
    assert s["stale_completions"] >= 4, s["stale_completions"]
    assert s["lease_expiries"] >= s["stale_completions"]
    assert s["redeliveries"] >= 1
    assert s["status_counts"].get("done", 0) == 0


@pytest.mark.slow
def test_poison_jobs_end_dead_after_max_attempts_with_growing_backoff(dsn, tmp_path):
    """10 % poison of 500 jobs, max_attempts 3, back-off base 1 s: every poison job ends dead after
    exactly 3 attempts, no other job dies, and the gaps between a poison job's attempts grow: each
    is at least its back-off floor (base/2, then base) and the second is on average well above the
    first.

    A retry due while seeded jobs still wait is claimed after them (claim order is run_at), which
    lengthens the first gap only: the backlog is kept small (500 rows, drained in well under a
    second) so that this wait stays small beside the back-off. With 1,000 rows a slow second of the
    server once made the drain take 2 s and the first gaps 0.4 s longer on average."""
    base_s = 1.0
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--workload", "poison", "--backlog", "500", "--poison-share", "0.1",
                                 "--workers", "10", "--work-ms", "1", "--retry-base-s", str(base_s),
                                 "--duration", "7s", "--warmup", "0s", timeout=120)
    audit = s["audit"]
    assert audit["poison_jobs"] >= 30
    assert audit["poison_dead"] == audit["poison_jobs"], audit
    assert audit["poison_dead_attempts_min"] == audit["poison_dead_attempts_max"] == 3
    assert s["status_counts"].get("dead", 0) == audit["poison_jobs"]
    assert s["status_counts"].get("done", 0) == 500 - audit["poison_jobs"]
    assert s["invariants"] == CLEAN_INVARIANTS
    gaps = json.loads((run_dir / "retry_gaps.json").read_text())
    assert len(gaps) == audit["poison_jobs"]
    assert all(len(g) == 2 for g in gaps), "3 attempts make 2 gaps"
    # Equal jitter: the k-th back-off lies in [base * 2^(k-1) / 2, base * 2^(k-1)].
    assert all(g[0] >= 0.5 * base_s and g[1] >= 1.0 * base_s for g in gaps), gaps[:5]
    assert sum(g[1] for g in gaps) > 1.5 * sum(g[0] for g in gaps)


@pytest.mark.slow
def test_nowait_retries_are_bounded_by_the_backoff(dsn, tmp_path):
    """NOWAIT at 50 workers: every 55P03 is followed by a jittered back-off, so lock errors
    per worker per second stay far below a tight loop's (one per claim round trip)."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--policy", "nowait", "--workers", "50",
                                 "--duration", "5s", "--warmup", "1s", timeout=120)
    errors = s["errors"].get("55P03", 0)
    assert errors > 0, "50 NOWAIT workers on one queue head must collide"
    assert s["nowait_retries"] == errors
    per_worker_s = errors / 50 / s["measured_s"]
    claims_per_worker_s = s["claims_per_s"] / 50
    # A tight loop would retry at the round-trip rate (~1,000/s); the back-off (>= 1 ms, doubling) keeps it low.
    assert per_worker_s < 200, per_worker_s
    assert s["invariants"] == CLEAN_INVARIANTS
    assert claims_per_worker_s > 0
