"""The MariaDB engine against the real MariaDB on 127.0.0.1:3306 (no mocks): claim-policy semantics
with two connections, error kinds, FR-07 (empty claims with only an index on status), a whole run
with its audit and report, and bad input that this engine cannot honour."""

from __future__ import annotations

import concurrent.futures
import json
import time

import pymysql
import pytest

from bench.config.run_config import build_config
from bench.engines import get_engine
from bench.engines.base import EngineError, LockNotAvailable
from bench.engines.mariadb import db
from bench.engines.mariadb.dsn import connect_args
from bench.usage import typed
from conftest import CLEAN_INVARIANTS, MARIADB_DSN, qbench


def _cfg(schema: str, **overrides):
    return build_config("default", {"schema": schema, **overrides}, dsn=MARIADB_DSN)


def _prepared(schema: str, backlog: int = 20, **overrides):
    cfg = _cfg(schema, **overrides)
    conn = db.connect(MARIADB_DSN)
    db.prepare(conn, cfg, backlog, log=lambda _m: None)
    return cfg, conn


def test_a_mysql_dsn_picks_the_mariadb_engine_and_its_defaults(maria_schema):
    _, schema = maria_schema
    cfg = _cfg(schema)
    assert (cfg.engine, cfg.index, cfg.isolation) == ("mariadb", "composite", "repeatable_read")
    assert cfg.plan_cache == cfg.prepared == cfg.autovacuum == "n/a"
    pg = build_config("default", {})
    assert (pg.engine, pg.index, pg.isolation, pg.prepared) == ("postgres", "partial", "read_committed", True)


def test_a_workload_written_for_postgres_runs_on_mariadb(tmp_path):
    """A workload file's PLAN_CACHE (long_transaction, priority_flood) has no meaning on MariaDB: n/a,
    with a note, never a refusal of a value the user did not set. A file's value the engine supports
    only in part (INDEX=partial) is refused naming the workload, and the user can override it."""
    from bench.errors import ConfigError

    for workload in ("long_transaction", "priority_flood"):
        cfg = build_config(workload, {"engine": "mariadb"})
        assert cfg.plan_cache == "n/a" and any("PLAN_CACHE" in n and workload in n for n in cfg.notes), cfg.notes
    with pytest.raises(ConfigError, match="--plan-cache: does not apply on mariadb"):
        build_config("long_transaction", {"engine": "mariadb", "plan_cache": "force_custom_plan"})
    wl = tmp_path / "partial.toml"
    wl.write_text('index = "partial"\n')
    with pytest.raises(ConfigError, match=r"--index: 'partial' is not supported on mariadb.*from workload"):
        build_config(str(wl), {"engine": "mariadb"})
    assert build_config(str(wl), {"engine": "mariadb", "index": "composite"}).index == "composite"


@pytest.mark.parametrize("index", ["composite", "ready_table"])
def test_policies_with_two_connections(maria_schema, index):
    """wait blocks (a lock wait InnoDB shows), NOWAIT raises lock_not_available, SKIP LOCKED takes another row."""
    _, schema = maria_schema
    results = {}
    for policy in ("wait", "nowait", "skip_locked"):
        cfg, conn = _prepared(schema, policy=policy, index=index, batch=1)
        factory = get_engine("mariadb").sessions(MARIADB_DSN, cfg)
        holder, other = factory.worker_session("w-holder"), factory.worker_session("w-other")
        try:
            holder.begin()
            held = holder.claim()
            assert [r[0] for r in held] == [1]
            if policy == "wait":
                other.run("SET SESSION innodb_lock_wait_timeout = 10")
                # A thread, so a greenlet: conftest.py patches this process for gevent, and PyMySQL's socket
                # is gevent's, so the waiter blocked on the row lock yields to the loop below.
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    waiter = pool.submit(other.claim)
                    deadline = time.monotonic() + 5
                    waits = 0
                    while waits == 0 and time.monotonic() < deadline:
                        time.sleep(0.2)  # INNODB_LOCK_WAITS is a cache refreshed when last read > 0.1 s ago
                        waits = db.query(conn, "SELECT COUNT(DISTINCT requesting_trx_id) "
                                               "FROM information_schema.INNODB_LOCK_WAITS")[0][0]
                    assert not waiter.done() and waits == 1  # blocked on the row lock, seen as a lock wait
                    holder.commit()  # the lock goes; the waiter proceeds
                    results[policy] = [r[0] for r in waiter.result(timeout=5)]
            elif policy == "nowait":
                with pytest.raises(LockNotAvailable) as err:
                    other.claim()
                assert err.value.kind == "lock_not_available"
                results[policy] = None
            else:
                results[policy] = [r[0] for r in other.claim()]
        finally:
            holder.rollback()
            holder.close()
            other.close()
            conn.close()
    assert results["wait"] == [2]  # the holder committed row 1 as running: the waiter takes the next
    assert results["skip_locked"] == [2]


def test_a_lock_wait_timeout_is_not_lock_not_available(maria_schema):
    """MariaDB returns 1205 for NOWAIT and for a lock wait that timed out alike: classified by policy."""
    _, schema = maria_schema
    cfg, conn = _prepared(schema, policy="wait", batch=1)
    factory = get_engine("mariadb").sessions(MARIADB_DSN, cfg)
    holder, other = factory.worker_session("w-holder"), factory.worker_session("w-other")
    try:
        holder.begin()
        holder.claim()
        other.run("SET SESSION innodb_lock_wait_timeout = 1")
        with pytest.raises(EngineError) as err:
            other.claim()
        assert err.value.kind == "lock_wait_timeout" and not isinstance(err.value, LockNotAvailable)
        assert not other.in_transaction and not other.broken
    finally:
        holder.rollback()
        holder.close()
        other.close()
        conn.close()


def test_claim_complete_and_fail_are_fenced(maria_schema):
    _, schema = maria_schema
    cfg, conn = _prepared(schema, batch=3, lease_s=0.2)
    factory = get_engine("mariadb").sessions(MARIADB_DSN, cfg)
    w = factory.worker_session("w1")
    try:
        rows = w.claim()
        assert [r[0] for r in rows] == [1, 2, 3] and len({r[1] for r in rows}) == 3
        assert all(abs(r[4] - r[5] - 0.2) < 1e-3 for r in rows)  # lease_until - claimed_at = LEASE_S
        assert w.complete([(1, rows[0][1]), (2, rows[1][1] + 999)]) == {1}  # a wrong token is not applied
        assert w.complete([(1, rows[0][1])]) == set()  # done already: not applied twice
        assert w.fail(3, rows[2][1], 0.0, "boom") == "pending"
        assert w.fail(3, rows[2][1], 0.0, "boom") is None  # the attempt is over
        status = dict(db.query(conn, f"SELECT id, status FROM `{schema}`.jobs WHERE id <= 3"))
        assert status == {1: "done", 2: "running", 3: "pending"}
    finally:
        w.close()
        conn.close()


def _rows_locked(conn, connection_id: int) -> int:
    """trx_rows_locked of the open transaction of ``connection_id``. InnoDB serves INNODB_TRX from a
    cache it refreshes only when the previous read is more than 0.1 s old, so it may not list a
    transaction a moment old yet: ask again every 0.3 s until it does."""
    deadline = time.monotonic() + 5
    while True:
        rows = db.query(conn, "SELECT trx_rows_locked FROM information_schema.INNODB_TRX "
                              "WHERE trx_mysql_thread_id = %s", (connection_id,))
        if rows or time.monotonic() > deadline:
            assert rows, f"no open transaction of connection {connection_id} in INNODB_TRX"
            return rows[0][0]
        time.sleep(0.3)


@pytest.mark.parametrize("isolation", ["repeatable_read", "read_committed"])
def test_fr07_with_two_sessions_the_second_skip_locked_claim_is_empty(maria_schema, isolation):
    """FR-07, step by step: one worker holds its claim of row 1 (transaction open); a second SKIP LOCKED
    claim gets nothing over the status index although 49 rows wait, and row 2 over the composite index.
    Over ``status`` the first claim's locking read scanned and locked every pending row before sorting
    them (InnoDB's trx_rows_locked of the holder is the whole backlog under REPEATABLE READ)."""
    _, schema = maria_schema
    got, locked = {}, {}
    for index in ("status", "composite"):
        cfg, conn = _prepared(schema, backlog=50, policy="skip_locked", index=index, batch=1, isolation=isolation)
        factory = get_engine("mariadb").sessions(MARIADB_DSN, cfg)
        holder, other = factory.worker_session("w-holder"), factory.worker_session("w-other")
        try:
            holder.begin()
            assert [r[0] for r in holder.claim()] == [1]
            locked[index] = _rows_locked(conn, holder.connection_id)
            got[index] = [r[0] for r in other.claim()]
            pending = db.query(conn, f"SELECT COUNT(*) FROM `{schema}`.jobs WHERE status = 'pending'")[0][0]
            assert pending >= 48, pending  # work was waiting when the claim came back
        finally:
            holder.rollback()
            holder.close()
            other.close()
            db.OWNERSHIP.drop(conn, schema)
            conn.close()
    assert got == {"status": [], "composite": [2]}, got
    if isolation == "repeatable_read":
        assert locked["status"] >= 50 > 2 >= locked["composite"], locked


@pytest.mark.parametrize("isolation,waits", [("repeatable_read", True), ("read_committed", False)])
def test_generated_index_under_repeatable_read_makes_skip_locked_wait(maria_schema, isolation, waits):
    """INDEX=generated (docs/mariadb.md; docs/measurements/engines.md): under REPEATABLE READ a second
    SKIP LOCKED claim, while the first is open, waits for a lock (it runs out of a 1 s lock wait
    timeout) instead of taking row 2, which is why its runs deadlock; under READ COMMITTED it takes row 2."""
    _, schema = maria_schema
    cfg, conn = _prepared(schema, backlog=50, policy="skip_locked", index="generated", batch=1, isolation=isolation)
    factory = get_engine("mariadb").sessions(MARIADB_DSN, cfg)
    holder, other = factory.worker_session("w-holder"), factory.worker_session("w-other")
    try:
        holder.begin()
        assert [r[0] for r in holder.claim()] == [1]
        other.run("SET SESSION innodb_lock_wait_timeout = 1")
        if waits:
            with pytest.raises(EngineError) as err:
                other.claim()
            assert err.value.kind == "lock_wait_timeout"
        else:
            assert [r[0] for r in other.claim()] == [2]
    finally:
        holder.rollback()
        holder.close()
        other.close()
        conn.close()


@pytest.mark.slow
def test_fr07_status_index_gives_empty_claims_while_work_waits(maria_schema, tmp_path):
    """FR-07 in a run: 8 SKIP LOCKED workers on a 5,000-row backlog. Over the status index some claims
    come back empty while rows are certainly pending (summary.json empty_claims_while_work_waited: the
    pending rows the audit found at the end plus those claimed later), the plan warning names the
    filesort, and throughput is a fraction of composite's; over composite no claim comes back empty
    while work waits (its empty claims, if any, come after the backlog ran dry)."""
    dsn, schema = maria_schema
    runs = {}
    for index in ("status", "composite"):
        proc = qbench("run", "--dsn", dsn, "--schema", schema, "--index", index, "--workers", "8",
                      "--backlog", "5000", "--duration", "4s", "--warmup", "1s", "--results",
                      str(tmp_path / index), timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        run_dir = next(p for p in (tmp_path / index).iterdir() if p.is_dir())
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["invariants"] == CLEAN_INVARIANTS
        runs[index] = summary
    status, composite = runs["status"], runs["composite"]
    figures = {i: (s["empty_claims"], s["empty_claims_while_work_waited"], s["throughput_jobs_per_s"])
               for i, s in runs.items()}
    assert status["status_counts"].get("pending", 0) > 0, figures  # the backlog never ran dry
    assert status["empty_claims_while_work_waited"] == status["empty_claims"] > 0, figures
    assert composite["empty_claims_while_work_waited"] == 0, figures
    assert any("filesort" in w for w in status["plan_warnings"]) and composite["plan_warnings"] == [], (
        status["plan_warnings"], composite["plan_warnings"])
    assert status["throughput_jobs_per_s"] * 3 < composite["throughput_jobs_per_s"], figures


def test_a_whole_run_writes_the_results_contract(maria_schema, tmp_path):
    dsn, schema = maria_schema
    proc = qbench("run", "--dsn", dsn, "--schema", schema, "--workers", "20", "--batch", "5",
                  "--backlog", "2000", "--duration", "3s", "--warmup", "0s", "--fail-prob", "0.05",
                  "--results", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    run = json.loads((run_dir / "run.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run["config"]["engine"] == "mariadb" and run["config"]["prepared"] == "n/a"
    assert "MariaDB" in run["server_version"]
    assert summary["invariants"] == CLEAN_INVARIANTS
    assert summary["max_rows_per_claim"] <= 5
    assert (run_dir / "report.html").is_file() and (run_dir / "plots" / "history_list_length.png").is_file()
    header = (run_dir / "intervals.csv").read_text().splitlines()[0].split(",")
    assert "history_list_length" in header
    # the round trip on MariaDB's path (COM_PING), round trips per job at least the minimum path, a claim that found
    # rows two round trips (no UPDATE ... RETURNING), and the server's part said to be not measured, with why
    rtt, trips, split = summary["round_trip"], summary["round_trips"], summary["latency_split"]
    assert rtt["samples"] > 0 and 0 < rtt["p50_us"] <= rtt["p99_us"], rtt
    assert trips["per_job"] >= trips["minimum_per_job"] == 0.4 and 1 <= trips["per_claim"] <= 2, trips
    assert split["claim"]["server_us"] is None and "MariaDB" in split["claim"]["not_measured"], split
    assert "FORMAT=JSON" in (run_dir / "claim_plan.txt").read_text()
    # The report explains what MariaDB did in MariaDB's terms: no PostgreSQL view is named as a source.
    page = (run_dir / "report.html").read_text()
    assert "MariaDB has no prepared plans" in page and "rows examined per claim" in page
    assert "INNODB_LOCK_WAITS" in page and "TABLE_ROWS" not in page  # the axis label is in the PNG
    for pg_only in ("pg_prepared_statements", "pg_stat_activity", "EXPLAIN (ANALYZE, BUFFERS)"):
        assert pg_only not in page, pg_only
    # The wait events are PostgreSQL's: said in one place, with why, and no figure drawn.
    assert summary["wait_events"]["measured"] is False and "not measured on MariaDB" in page
    assert not (run_dir / "plots" / "wait_events.png").exists()
    assert run["client"]["driver_wait"]


@pytest.mark.slow
def test_two_load_generator_processes_on_mariadb(maria_schema, tmp_path):
    """PROCESSES=2 on MariaDB: each process runs its share of the workers on PyMySQL connections of
    its own, their figures add up to the run's, the claim plan comes from a worker's own session,
    a crash window takes workers of the whole swarm, and the audit is clean."""
    dsn, schema = maria_schema
    proc = qbench("run", "--dsn", dsn, "--schema", schema, "--processes", "2", "--workers", "6", "--batch", "2",
                  "--backlog", "3000", "--work-ms", "2", "--lease-s", "1", "--reaper-interval-s", "0.5",
                  "--faults", "crash_after_claim@0-2:share=0.5", "--duration", "4s", "--warmup", "1s",
                  "--results", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    s = json.loads((run_dir / "summary.json").read_text())
    procs = s["processes"]
    assert sorted(p["workers"] for p in procs) == [3, 3] and not any(p["lost"] for p in procs), procs
    for key in ("jobs_claimed", "jobs_completed"):
        assert sum(p["counters"][key] for p in procs) == s[key] > 0, key
    assert s["crashed_claims"] == 3, s["crashed_claims"]
    assert s["invariants"] == CLEAN_INVARIANTS
    assert "FORMAT=JSON" in (run_dir / "claim_plan.txt").read_text()


@pytest.mark.parametrize("args,name", [(("--layout", "partitioned"), "LAYOUT"),
                                       (("--plan-cache", "force_custom_plan"), "PLAN_CACHE"),
                                       (("--index", "partial"), "INDEX"), (("--no-prepared",), "PREPARED"),
                                       (("--no-autovacuum",), "AUTOVACUUM"), (("--wakeup", "notify"), "WAKEUP"),
                                       (("--fillfactor", "70"), "FILLFACTOR")])
def test_what_mariadb_cannot_honour_is_refused_with_one_line(maria_schema, tmp_path, args, name):
    dsn, schema = maria_schema
    proc = qbench("run", "--dsn", dsn, "--schema", schema, *args, "--results", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"qbench: {typed(name)}: ") and "allowed" in lines[0], lines
    assert not (tmp_path / "r").exists()
    conn = pymysql.connect(**connect_args(dsn))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (schema,))
            assert cur.fetchone()[0] == 0
    finally:
        conn.close()


def test_an_engine_the_dsn_contradicts_is_refused(tmp_path):
    proc = qbench("run", "--dsn", MARIADB_DSN, "--engine", "postgres", "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --engine:") and len(proc.stderr.splitlines()) == 1


def test_a_foreign_database_is_never_touched(maria_schema):
    dsn, schema = maria_schema
    conn = db.connect(dsn)
    try:
        db.execute(conn, f"CREATE DATABASE `{schema}`")
        db.execute(conn, f"CREATE TABLE `{schema}`.mine (x int)")
        with pytest.raises(Exception) as err:
            get_engine("mariadb").claim_schema(conn, schema, 5)
        assert "not created by queue-bench" in str(err.value)
        assert db.query(conn, f"SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{schema}'")[0][0] == 1
    finally:
        conn.close()


@pytest.mark.parametrize("dependent", ["foreign key", "view"])
@pytest.mark.slow
def test_a_database_others_depend_on_is_refused_and_left_whole(maria_schema, tmp_path, dependent):
    """The tool's own database, which a foreign key or a view in another database uses: the run is
    refused with one line naming them, exit 2, and no table of it is dropped (DROP DATABASE would
    fail halfway on the foreign key, or break the view)."""
    dsn, schema = maria_schema
    other = f"{schema}_dep"
    first = qbench("run", "--dsn", dsn, "--schema", schema, "--workers", "2", "--backlog", "100",
                   "--duration", "1s", "--warmup", "0s", "--results", str(tmp_path / "first"), timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    conn = db.connect(dsn)
    try:
        tables = lambda: db.query(conn, "SELECT COUNT(*) FROM information_schema.TABLES "  # noqa: E731
                                        "WHERE TABLE_SCHEMA = %s", (schema,))[0][0]
        before = tables()
        db.execute(conn, f"CREATE DATABASE `{other}`")
        if dependent == "foreign key":
            db.execute(conn, f"CREATE TABLE `{other}`.c (job_id BIGINT, FOREIGN KEY (job_id) "
                             f"REFERENCES `{schema}`.jobs (id)) ENGINE = InnoDB")
        else:
            db.execute(conn, f"CREATE VIEW `{other}`.v AS SELECT id FROM `{schema}`.jobs")
        proc = qbench("run", "--dsn", dsn, "--schema", schema, "--workers", "2", "--duration", "1s",
                      "--results", str(tmp_path / "second"), timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        line = proc.stderr.strip().splitlines()
        assert len(line) == 1 and line[0].startswith("qbench: --schema: objects outside database"), proc.stderr
        assert ("foreign key" if dependent == "foreign key" else f"view {other}.v") in line[0]
        assert tables() == before > 0
        assert not (tmp_path / "second").exists() or not any((tmp_path / "second").iterdir())
    finally:
        db.execute(conn, f"DROP DATABASE IF EXISTS `{other}`")
        conn.close()


@pytest.mark.parametrize("workers, backlog", [(50, 200_000), (8, 100_000)])
def test_claims_that_would_lock_more_than_innodb_holds_are_refused(maria_schema, tmp_path, workers, backlog):
    """INDEX=status locks every pending row each claim scans, in every worker: 50 workers over 200,000 rows,
    or 8 over 100,000 (which aborted a 128 MB pool's server), would fill the buffer pool with lock heaps
    (InnoDB aborts the server past 95 %), so it is refused."""
    dsn, schema = maria_schema
    proc = qbench("run", "--dsn", dsn, "--schema", schema, "--index", "status", "--workers", str(workers),
                  "--backlog", str(backlog), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("qbench: --index:") and "allowed" in line and "\n" not in line and "MiB" in line
    assert not (tmp_path / "r").exists()
    conn = db.connect(dsn)
    try:
        assert db.schema_state(conn, schema) == "absent"
    finally:
        conn.close()


@pytest.mark.slow
def test_a_sweep_with_an_engine_axis_puts_the_engines_side_by_side(dsn, maria_schema, tmp_path):
    """engine = [postgres, mariadb], each on its own server (DSN_POSTGRES, DSN_MARIADB), each with its
    own defaults. cells.csv and the comparison report say which index and isolation each engine ran,
    the base table gives each engine's value, MariaDB's plans have their own table, and the answer
    names the engine of its figure and gives the other engine's best cell."""
    import os
    import re

    mdsn, schema = maria_schema
    spec = tmp_path / "engines.toml"
    spec.write_text('description = "engines"\nworkload = "default"\nrepetitions = 1\n[fixed]\nworkers = 4\n'
                    'work_ms = 5\nbacklog = 20000\nduration = "3s"\nwarmup = "1s"\n'
                    '[matrix]\nengine = ["postgres", "mariadb"]\n')
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PGDATABASE")}
    env.update(DSN_POSTGRES=dsn, DSN_MARIADB=mdsn)
    proc = qbench("sweep", str(spec), "--schema", schema, "--results", str(tmp_path / "results"),
                  timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "embedded" not in proc.stdout + proc.stderr  # each engine ran on the server its DSN named
    sweep_dir = next((tmp_path / "results" / "sweeps").iterdir())
    import csv
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        rows = {r["engine"]: r for r in csv.DictReader(fh)}
    assert {e: (r["index"], r["isolation"]) for e, r in rows.items()} == {
        "postgres": ("partial", "read_committed"), "mariadb": ("composite", "repeatable_read")}
    assert all(r["status"] == "done" and r["invariants_ok"] == "True" for r in rows.values())
    maria = rows["mariadb"]
    assert maria["plan_workers"] == "text" and "jobs_status_claim_order_idx" in maria["plan_explain_scan"]
    assert float(maria["plan_explain_rows_examined"]) > 0
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    assert [c["config"]["index"] for c in meta["cells"]] == ["partial", "composite"]

    page = (sweep_dir / "compare.html").read_text()
    cells_table = page[page.index('<table id="cells">'):]
    cells_table = cells_table[:cells_table.index("</table>")]
    header = re.findall(r"<th>([^<]*)</th>", cells_table.split("</tr>")[0])
    assert header[:4] == ["cell", "engine", "isolation", "index"], header
    assert "PostgreSQL: partial; MariaDB: composite" in page
    assert "PostgreSQL: read_committed; MariaDB: repeatable_read" in page
    text_plans = page[page.index('<table id="text-plans">'):]
    assert "jobs_status_claim_order_idx" in text_plans[:text_plans.index("</table>")]
    answer = page[page.index('class="answer'):]
    answer = answer[:answer.index("</div>")]
    best, other = ("PostgreSQL", "MariaDB") if "this PostgreSQL database" in answer else ("MariaDB", "PostgreSQL")
    assert f"this {best} database sustains" in answer, answer
    assert f"On {other}, the best trustworthy cell is" in answer, answer
