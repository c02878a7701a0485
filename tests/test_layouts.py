"""Layouts (where history lives), the covering index variant, and the claim's plans as a
prepared statement (custom and generic), against the real PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest
from conftest import CLEAN_INVARIANTS, run_and_load

from bench.engines.postgres import builtin_queue, captures, db, plans
from bench.config.run_config import build_config


@pytest.mark.slow
def test_archive_layout_moves_finished_rows_and_loses_none(dsn, tmp_path):
    """The mover empties the queue table of finished rows while the load runs; the audit,
    reading queue and archive together, finds every job."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--layout", "archive", "--history", "20000", "--workers", "8",
                                 "--batch", "5", "--duration", "4s", "--warmup", "1s")
    assert s["invariants"] == CLEAN_INVARIANTS
    assert s["archived_jobs"] > 0.5 * s["jobs_completed"], (s["archived_jobs"], s["jobs_completed"])
    sizes = s["table_sizes"]["before"]
    assert sizes["archive_bytes"] > 20000 * 50 and sizes["table_bytes"] > 0  # the seeded history went to the archive
    with psycopg.connect(dsn) as conn:
        queue_done = conn.execute("SELECT count(*) FROM qbench.jobs WHERE status = 'done'").fetchone()[0]
        archived = conn.execute("SELECT count(*), count(*) FILTER (WHERE status <> 'done') "
                                "FROM qbench.jobs_archive").fetchone()
    assert archived[1] == 0 and archived[0] >= 20000 + s["archived_jobs"] - 1
    assert queue_done < s["jobs_completed"]  # most completed rows left the queue table


@pytest.mark.slow
def test_partitioned_layout_routes_history_to_its_partition(dsn, tmp_path):
    """Completed rows move from jobs_live to jobs_history; claims use the live partition's index."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--layout", "partitioned", "--history", "20000", "--workers", "8",
                                 "--duration", "4s", "--warmup", "1s")
    assert s["invariants"] == CLEAN_INVARIANTS
    with psycopg.connect(dsn) as conn:
        live_done = conn.execute("SELECT count(*) FROM qbench.jobs_live WHERE status = 'done'").fetchone()[0]
        history = conn.execute("SELECT count(*) FROM qbench.jobs_history").fetchone()[0]
    assert live_done == 0 and history >= 20000 + s["jobs_completed"]
    assert "on jobs_live" in s["plans"]["custom"]["scan"], s["plans"]["custom"]
    assert s["table_sizes"]["before"]["table_bytes"] > 0  # summed over the partitions


def test_generic_plan_of_the_bound_claim_is_captured_beside_the_custom_one(dsn):
    """With 200k pending rows the custom plan claims through indexes alone; the generic plan,
    not knowing the LIMIT, joins the update with a sequential scan and reads far more buffers.
    PostgreSQL's auto mode keeps the custom plan, and the capture says so."""
    cfg = build_config("default", {"schema": "qbench_plans"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        db.prepare(conn, cfg, 200_000, log=lambda _: None)
        captured = captures.capture_plans(conn, cfg, builtin_queue.definition(cfg), "test")[0]
        pending = conn.execute("SELECT count(*) FROM qbench_plans.jobs WHERE status = 'pending'").fetchone()[0]
        db.OWNERSHIP.drop(conn, "qbench_plans")
    assert pending == 200_000  # every captured claim was rolled back
    custom, generic = captured["custom"], captured["generic"]
    assert "Seq Scan" not in custom["scan"] and "jobs_pending_claim_order_idx" in custom["scan"], custom["scan"]
    assert "Seq Scan on jobs j" in generic["scan"], generic["scan"]
    assert generic["shared_buffers"] > 10 * custom["shared_buffers"], (generic["shared_buffers"], custom["shared_buffers"])
    assert captured["auto"] == "custom"
    text = plans.plans_text(captured, "test")
    assert text.index("-- custom plan") < text.index("-- generic plan")
    # A statement prepared on the tool's own session says what each plan would do, never what the workers ran.
    assert "what each plan would do" in text and "used by the workers" not in text


def test_covering_variant_still_visits_the_heap_to_lock(dsn):
    """A locking read cannot be an Index Only Scan, whatever the index carries."""
    cfg = build_config("default", {"schema": "qbench_cover", "index": "covering", "history": 20000})
    with psycopg.connect(dsn, autocommit=True) as conn:
        db.prepare(conn, cfg, 5000, log=lambda _: None)
        captured = captures.capture_plans(conn, cfg, builtin_queue.definition(cfg), "test")[0]
        db.OWNERSHIP.drop(conn, "qbench_cover")
    scan = captured["custom"]["scan"]
    assert "jobs_status_claim_covering_idx" in scan and "Index Only Scan" not in scan, scan
