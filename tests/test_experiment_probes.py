"""The measurements behind the experiments catalogue (``make experiments``), each on the real
database: the share of jobs started out of claim order (experiment 9) and, further down, the
engines' lock probes."""

from __future__ import annotations

import psycopg
import pytest

from bench.config.run_config import build_config
from bench.engines import get_engine
from bench.engines.mariadb import db as maria_db
from bench.engines.postgres import db
from bench.errors import ConfigError
from conftest import CLEAN_INVARIANTS, MARIADB_DSN, run_and_load


@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
@pytest.mark.slow
def test_fifo_out_of_order_share_is_zero_for_one_worker_and_positive_under_contention(engine, dsn, maria_schema,
                                                                                       tmp_path):
    """Experiment 9: one worker claims a seeded backlog strictly in claim order (share 0.0
    exactly); 20 SKIP LOCKED workers claiming one job each start some jobs before a job ahead
    of them (share > 0). Both over the same backlog; the figure is a property, not an invariant."""
    target = ("--dsn", dsn) if engine == "postgres" else ("--dsn", MARIADB_DSN, "--schema", maria_schema[1])
    common = (*target[2:], "--policy", "skip_locked", "--batch", "1", "--backlog", "20000", "--work-ms", "0",
              "--warmup", "0s", "--duration", "3s")
    _, one, _ = run_and_load(target[1], tmp_path / "one", "--workers", "1", *common)
    _, many, _ = run_and_load(target[1], tmp_path / "many", "--workers", "20", *common)
    for s in (one, many):
        assert s["invariants"] == CLEAN_INVARIANTS
        assert "fifo_out_of_order_share" not in s["invariants"]
        assert s["audit"]["fifo_jobs_compared"] == s["audit"]["jobs_claimed_distinct"] > 100
    assert one["fifo_out_of_order_share"] == 0.0
    assert one["audit"]["fifo_jobs_out_of_order"] == 0
    assert 0.0 < many["fifo_out_of_order_share"] < 1.0, many["audit"]
    assert many["fifo_out_of_order_share"] == (
        many["audit"]["fifo_jobs_out_of_order"] / many["audit"]["fifo_jobs_compared"])


OFFSET_FACTS = {"offset_returned": 2, "skip_locked_got": 3, "locked_rows": [1, 2]}


@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_offset_in_a_locking_read_locks_the_rows_it_skips(engine, dsn, maria_schema):
    """Experiment 4, measured on each engine: A's ``OFFSET 1 LIMIT 1 FOR UPDATE`` returns 2 and holds
    1 and 2 (PostgreSQL: ``Limit`` above ``LockRows``; InnoDB: every record scanned), so B's
    SKIP LOCKED claim gets 3. The probe leaves nothing behind: it made the absent schema itself."""
    target, schema = (dsn, "qbench_probe_pg") if engine == "postgres" else maria_schema
    result = get_engine(engine).offset_lock_probe(target, schema)
    assert {k: result[k] for k in OFFSET_FACTS} == OFFSET_FACTS, result
    assert result["method"] == "nowait probe"
    if engine == "postgres":
        assert result["plan"].index("Limit") < result["plan"].index("LockRows"), result["plan"]
    assert _schema_absent(engine, target, schema)


def test_offset_probe_reads_pgrowlocks_where_it_is_installed(dsn):
    """Where ``pgrowlocks`` is installed already (here by the test, in its throwaway database; the
    tool never creates an extension) the probe reads the rows A holds from it: the same 1 and 2."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgrowlocks")
        try:
            result = get_engine("postgres").offset_lock_probe(dsn, "qbench_probe_pg")
        finally:
            conn.execute("DROP EXTENSION pgrowlocks")
    assert {k: result[k] for k in OFFSET_FACTS} == OFFSET_FACTS, result
    assert result["method"] == "pgrowlocks"


def _schema_absent(engine: str, target: str, schema: str) -> bool:
    if engine == "postgres":
        with psycopg.connect(target) as conn:
            return conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()[0] == 0

    conn = maria_db.connect(target)
    try:
        return maria_db.schema_state(conn, schema) == "absent"
    finally:
        conn.close()


def test_the_probe_touches_only_the_tools_schema(dsn):
    """In the tool's existing schema the probe adds and drops only its own table (the queue's rows
    stay as they were); a schema someone else made is refused with one line, untouched."""
    with db.connect(dsn) as conn:
        db.prepare(conn, build_config("default", {"schema": "qbench_probe_own"}, dsn=dsn), backlog=5,
                   log=lambda _msg: None)
        conn.execute("CREATE SCHEMA qbench_probe_foreign")
        tables = "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind = 'r' ORDER BY 1"
        before = conn.execute(tables, ("qbench_probe_own",)).fetchall()
        assert get_engine("postgres").offset_lock_probe(dsn, "qbench_probe_own")["locked_rows"] == [1, 2]
        assert conn.execute(tables, ("qbench_probe_own",)).fetchall() == before
        assert conn.execute("SELECT count(*) FROM qbench_probe_own.jobs WHERE status = 'pending'").fetchone()[0] == 5
        with pytest.raises(ConfigError) as err:
            get_engine("postgres").offset_lock_probe(dsn, "qbench_probe_foreign")
        assert str(err.value).startswith("--schema: schema 'qbench_probe_foreign' exists and was not created by queue-bench")
        assert conn.execute(tables, ("qbench_probe_foreign",)).fetchall() == []
        db.OWNERSHIP.drop(conn, "qbench_probe_own")
        conn.execute("DROP SCHEMA qbench_probe_foreign")


def test_subselect_probe_overclaims_on_postgres_and_the_tools_claim_takes_its_limit(dsn):
    """Experiment 13 (FR-03) as an engine probe: under the FR-03 planner settings the sub-select
    claim is a Nested Loop Semi Join re-running its LIMIT 2 locking sub-select per outer row and
    updates all 11 rows; the tool's claim (its real claim_sql) returns exactly 2. Rolled back."""
    result = get_engine("postgres").subselect_overclaim_probe(dsn, "qbench_probe_pg", rows=11, limit=2)
    assert (result["limit"], result["subselect_rows"], result["tool_claim_rows"]) == (2, 11, 2), result
    assert "Nested Loop Semi Join" in result["plan"], result["plan"]
    assert result["plan"].index("Seq Scan on") < result["plan"].index("LockRows"), result["plan"]
    assert "CTE picked" in result["tool_plan"]
    assert "not_applicable" not in result
    assert _schema_absent("postgres", dsn, "qbench_probe_pg")


def test_subselect_probe_is_not_applicable_on_mariadb(maria_schema):
    """MariaDB refuses LIMIT in an IN sub-query (error 1235), measured by sending it; the tool's
    claim step still takes exactly its LIMIT."""
    target, schema = maria_schema
    result = get_engine("mariadb").subselect_overclaim_probe(target, schema, rows=11, limit=2)
    assert "error 1235" in result["not_applicable"] and "LIMIT & IN/ALL/ANY/SOME subquery" in result["not_applicable"]
    assert result["subselect_rows"] is None and result["plan"] is None
    assert result["tool_claim_rows"] == 2
    assert _schema_absent("mariadb", target, schema)


@pytest.mark.slow
def test_a_crash_under_txn_hold_returns_jobs_by_rollback_that_no_lease_accounts_for(dsn, tmp_path):
    """Experiment 6: 4 workers, a crash window. Under TXN=hold a crashed worker's claim rolls back:
    the jobs come back to pending with no lease expiry and attempts not raised, and the run counts
    them as rolled_back_claims. Under TXN=short the same window rolls nothing back: the crashed
    jobs stay running until their lease expires and the reaper's lease expiries account for them."""
    common = ("--workers", "4", "--backlog", "3000", "--work-ms", "5", "--lease-s", "1",
              "--reaper-interval-s", "0.2", "--faults", "crash_after_claim@0-2:share=0.5",
              "--duration", "4s", "--warmup", "0s")
    _, hold, _ = run_and_load(dsn, tmp_path / "hold", "--txn", "hold", *common)
    _, short, _ = run_and_load(dsn, tmp_path / "short", "--txn", "short", *common)
    for s in (hold, short):
        assert s["invariants"] == CLEAN_INVARIANTS
        assert s["crashed_jobs"] >= 2, s["crashed_jobs"]  # half of 4 workers, once each
        assert s["in_doubt_claims"] == 0
    assert hold["rolled_back_claims"] >= hold["crashed_jobs"]
    assert hold["lease_expiries"] == 0 and hold["audit"]["claims_beyond_attempts"] == 0
    assert short["rolled_back_claims"] == 0
    assert short["lease_expiries"] >= short["crashed_jobs"]
    assert short["redeliveries"] >= short["crashed_jobs"]
