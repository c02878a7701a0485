"""Fault injection inside the run (issue 3): crashes after claim, long transactions, backend kills.
Each test checks the database's end state and the run's own counters."""

from __future__ import annotations

import csv
import re

import pytest

from bench.engines.postgres.adapter.errors import NAMED_KINDS
from conftest import CLEAN_INVARIANTS, run_and_load

#: A SQLSTATE: five characters, digits and upper-case letters (PostgreSQL Appendix A).
SQLSTATE_RE = re.compile(r"^[0-9A-Z]{5}$")


def is_counted_kind(kind: str) -> bool:
    """True when ``kind`` is a SQLSTATE or one of :data:`NAMED_KINDS` (what error counters may hold)."""
    return bool(SQLSTATE_RE.match(kind)) or kind in NAMED_KINDS


def _rows(run_dir) -> list[dict]:
    with (run_dir / "intervals.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_crashed_workers_jobs_come_back_through_the_lease(dsn, tmp_path):
    """10 % of 10 workers crash right after a claim, lease 2 s, reaper every 0.5 s: at the end every
    job is done or dead, none is lost, and redeliveries cover at least the crashed claims. The
    backlog (4,000 jobs: 10 workers complete about 1,000 a second here) outlasts the window, so the
    chosen worker claims rows inside it, and drains well before the end; with 2,000 the queue was
    once empty within the window's first second and no worker crashed."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--workers", "10", "--backlog", "4000", "--work-ms", "5",
                                 "--lease-s", "2", "--reaper-interval-s", "0.5",
                                 "--faults", "crash_after_claim@0-2:share=0.1", "--duration", "7s", "--warmup", "1s")
    assert s["crashed_claims"] >= 1
    assert set(s["status_counts"]) <= {"done", "dead"}, s["status_counts"]
    assert sum(s["status_counts"].values()) == 4000
    assert s["redeliveries"] >= s["crashed_jobs"] >= 1
    assert s["lease_expiries"] >= s["crashed_jobs"]
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
def test_a_crash_window_at_the_loads_first_instant_still_crashes_a_worker(dsn, tmp_path):
    """WARMUP=0 and a window from 0 s: the window opens before Locust has created the users, and
    must still choose among all of them (it once chose among none and silently did nothing)."""
    _, s, _ = run_and_load(dsn, tmp_path, "--workers", "4", "--backlog", "3000", "--work-ms", "5",
                           "--lease-s", "1", "--reaper-interval-s", "0.5",
                           "--faults", "crash_after_claim@0-2:share=0.5", "--duration", "4s", "--warmup", "0s")
    assert s["crashed_claims"] >= 2, s["crashed_claims"]  # half of 4 workers, once each
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
def test_long_transaction_holds_xmin_and_the_queue_recovers(dsn, tmp_path):
    """Open-loop 200 jobs/s, a REPEATABLE READ snapshot held from 2 s to 5 s: the oldest snapshot's
    xmin age climbs only inside the window, dead tuples keep accumulating, and after the window the
    queue keeps up (oldest eligible age back under a second)."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--rate", "200", "--workers", "4", "--work-ms", "2",
                                 "--faults", "long_transaction@2-5", "--duration", "8s", "--warmup", "1s")
    rows = _rows(run_dir)
    xmin = {int(r["t_s"]): int(r["xmin_age"]) for r in rows if r["xmin_age"]}
    inside = [xmin[t] for t in (3, 4) if t in xmin]
    outside = [xmin[t] for t in (0, 1, 7) if t in xmin]
    assert inside and outside, xmin
    assert min(inside) > 10 * max(max(outside), 1) and min(inside) >= 200, xmin
    dead = [int(r["dead_tuples"]) for r in rows if r["dead_tuples"]]
    assert dead[-1] > dead[0]
    ages = [float(r["oldest_eligible_age_s"]) for r in rows if r["oldest_eligible_age_s"]]
    assert ages[-1] < 1.0, ages
    # summary.json lists each window with the options its kind uses (long_transaction uses none)
    assert s["faults"] == [{"kind": "long_transaction", "start_s": 2.0, "end_s": 5.0}]
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
def test_killed_backends_are_counted_and_workers_reconnect(dsn, tmp_path):
    """pg_terminate_backend on a worker every second from 1 s to 3 s: the kills are counted, the
    workers' errors are counted by kind — the SQLSTATE the server sent (57P01 admin_shutdown) or a
    named kind, never a Python class name — and the workers reconnect and go on completing jobs."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--workers", "4", "--work-ms", "5",
                                 "--faults", "backend_kill@1-3:every_s=1", "--duration", "6s", "--warmup", "1s")
    assert s["backend_kills"] >= 2
    assert sum(s["errors"].values()) >= 1
    assert all(is_counted_kind(kind) for kind in s["errors"]), s["errors"]
    assert s["errors"].get("57P01", 0) >= 1, s["errors"]
    assert all(is_counted_kind(kind) for kind in s["monitor_errors"]), s["monitor_errors"]
    late = [int(r["jobs_completed"]) for r in _rows(run_dir) if int(r["t_s"]) >= 4]
    assert late and min(late) > 0, late
    assert s["invariants"] == CLEAN_INVARIANTS
