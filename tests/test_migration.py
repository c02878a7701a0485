"""FAULTS=migration (issue 25): a DDL on the queue table under load. Without a lock timeout its ACCESS
EXCLUSIVE request waits behind the long transaction's lock and every claim waits behind it; with one the stall
is bounded by the timeout; CREATE INDEX CONCURRENTLY does not stall the claims. Bad migrations are refused in
one line, exit 2, nothing created. Each bound is read from the same run's own figures."""

from __future__ import annotations

import csv
import json

import psycopg

from bench.engines.lock_queue import LockQueueFold
from bench.engines.mariadb.fault_actions import Migration as MariaDBMigration
from bench.engines.postgres.fault_actions import Migration as PostgresMigration
from bench.run_summary.migration import migration_figures
from conftest import CLEAN_INVARIANTS, qbench, run_and_load

#: long_transaction from 1 s to 6 s (it read the queue table: it holds ACCESS SHARE on it), the migration at 2 s.
_LONG = "long_transaction@1-6"
_ARGS = ("--workers", "4", "--work-ms", "5", "--duration", "10s", "--warmup", "1s")


def _rows(run_dir) -> list[dict]:
    with (run_dir / "intervals.csv").open() as fh:
        return list(csv.DictReader(fh))


def _migration(s: dict) -> dict:
    assert len(s["migrations"]) == 1, s["migrations"]
    return s["migrations"][0]


def test_without_a_lock_timeout_the_claims_stall_as_long_as_the_long_transaction(dsn, tmp_path):
    """The ALTER waits from about 2 s until the long transaction ends at 6 s; the claims queue behind it: the
    stall lasts about that long, seconds without a claim appear, and the migration is done only after 6 s."""
    run_dir, s, proc = run_and_load(dsn, tmp_path, *_ARGS, "--faults", f"{_LONG};migration@2-9:ddl=add_column")
    m = _migration(s)
    assert m["succeeded"] and m["attempts"] == 1 and m["lock_timeouts"] == 0, m
    first = run_dir.joinpath("run.json").read_text()
    assert '"outcome": "done"' in first
    held_s = 6.0 - 2.0  # what was left of the long transaction when the migration asked for its lock
    assert m["done_s"] >= 6.0 - 0.1, m
    assert m["longest_stall_s"] >= 0.75 * held_s, m
    assert m["claimless_s"] >= 2, m
    assert m["delayed_claims"] >= 1, m
    rows = _rows(run_dir)
    before = [int(r["claims"]) for r in rows if int(r["t_s"]) in (0, 1)]
    assert min(before) > 0, before  # the claims ran before the migration: the zeros are its stall
    waits = [float(r["migration_wait_s"]) for r in rows if r["migration_wait_s"]]
    assert max(waits) >= 0.75 * held_s, waits
    assert any(int(r["lock_queue_access_exclusive"] or 0) >= 1 for r in rows)
    # The monitor's age query gave up waiting behind the ALTER (not a cost: no spacing out), and the age is
    # sampled again once the stall is over, in most of the seconds left.
    skips = json.loads(first)["monitor_lock_skips"]
    assert skips["age"] >= 1, skips
    after = [r for r in rows if int(r["t_s"]) >= int(m["done_s"]) + 1]
    assert after and sum(1 for r in after if r["oldest_eligible_age_s"]) >= len(after) - 1, after
    assert any("gave up after waiting" in note for note in s["monitor_notes"]), s["monitor_notes"]
    assert "migration add_column (no lock timeout): 1 attempt" in proc.stdout
    assert "migration add_column checked on the prepared table, rolled back" in proc.stdout
    assert (run_dir / "plots" / "lock_queue.png").is_file()  # the report's lock queue plot, and its table rows
    assert "migration add_column (no lock timeout): attempts, lock timeouts, outcome" in (run_dir / "report.html").read_text()
    assert s["invariants"] == CLEAN_INVARIANTS


def test_a_lock_timeout_bounds_the_stall_and_the_migration_retries(dsn, tmp_path):
    """lock_timeout_ms=300, retry_ms=1500, the same long transaction: each attempt gives up after 300 ms, the
    longest stall stays within the timeout and the 0.1 s sampling's resolution (plus a sample's delay on a
    busy machine: 1 s), and the migration is done by an attempt after the long transaction ended."""
    _, s, _ = run_and_load(dsn, tmp_path, *_ARGS, "--faults",
                           f"{_LONG};migration@2-9:ddl=add_column,lock_timeout_ms=300,retry_ms=1500")
    m = _migration(s)
    assert m["lock_timeouts"] >= 2 and m["attempts"] == m["lock_timeouts"] + 1, m
    assert m["succeeded"] and m["done_s"] >= 6.0 - 0.1, m
    assert m["longest_stall_s"] <= 0.3 + 1.0, m
    assert m["timeout_set"] == "lock_timeout 300ms", m  # SHOW lock_timeout on the migration's connection
    assert m["stall_s"] > 0, m  # the attempts did stall the claims, for a bounded time each
    assert m["longest_stall_s"] < 0.75 * (6.0 - 2.0), m
    assert s["invariants"] == CLEAN_INVARIANTS


def test_create_index_concurrently_does_not_stall_the_claims(dsn, tmp_path):
    """SHARE UPDATE EXCLUSIVE does not conflict with the claims' ROW SHARE / ROW EXCLUSIVE: no stalled sample, a
    claim in every second of the window (no long transaction here: the build waits for older snapshots)."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, *_ARGS, "--faults", "migration@2-8:ddl=create_index_concurrently")
    m = _migration(s)
    assert m["succeeded"] and m["error"] is None, m
    assert m["stall_s"] == 0 and m["delayed_claims"] == 0 and m["claimless_s"] == 0, m
    assert all(int(r["claims"]) > 0 for r in _rows(run_dir)), [r["claims"] for r in _rows(run_dir)]


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_' "
                                           "AND nspname <> 'information_schema'").fetchall()}


def test_a_migration_that_fails_is_refused_before_the_load(dsn, tmp_path):
    """A workload file's sql naming a column the table lacks: checked after prepare in a transaction rolled
    back, refused in one line naming FAULTS, exit 2, the schema dropped, no run directory."""
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "bad_migration.toml").write_text(
        '[[faults]]\nkind = "migration"\nstart_s = 1\nend_s = 3\n'
        'sql = """CREATE INDEX qbench_bad ON jobs (no_such_column)"""\n')
    before = _schemas(dsn)
    results = tmp_path / "results"
    proc = qbench("run", "--dsn", dsn, "--results", str(results), "--workload", "bad_migration", "--duration", "3s",
                  "--warmup", "0s", "--schema", "qbench_mig_bad", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--faults:" in lines[0] and "no_such_column" in lines[0], proc.stderr
    assert _schemas(dsn) == before
    assert not results.exists() or not any(results.iterdir())


def test_a_negative_lock_timeout_and_sql_on_the_command_line_are_refused(dsn, tmp_path):
    """lock_timeout_ms=-1, and sql given on the command line: one line each, exit 2, nothing created."""
    before = _schemas(dsn)
    for faults, says in (("migration@1-2:ddl=add_column,lock_timeout_ms=-1", "lock_timeout_ms"),
                         ("migration@1-2:sql=DROP TABLE jobs", "workload file")):
        proc = qbench("run", "--dsn", dsn, "--results", str(tmp_path / "r"), "--faults", faults, "--duration", "3s")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("qbench: --faults: ") and says in lines[0], proc.stderr
    assert _schemas(dsn) == before and not (tmp_path / "r").exists()


def test_mariadb_the_metadata_lock_stalls_the_claims_and_lock_wait_timeout_bounds_it(maria_schema, tmp_path):
    """MariaDB: the ALTER waits for the long transaction's metadata lock ('Waiting for table metadata lock') and
    the claims queue behind it; lock_timeout_ms=300 becomes lock_wait_timeout 1 s (whole seconds, rounded up),
    which bounds the longest stall (1 s, plus the 0.1 s sampling and a sample's delay: 1 s)."""
    dsn, schema = maria_schema
    args = ("--dsn", dsn, "--schema", schema, *_ARGS)
    _, s, _ = run_and_load(dsn, tmp_path / "none", *args, "--faults", f"{_LONG};migration@2-9:ddl=add_column")
    unbounded = _migration(s)
    assert unbounded["succeeded"] and unbounded["done_s"] >= 6.0 - 0.1, unbounded
    assert unbounded["longest_stall_s"] >= 0.75 * (6.0 - 2.0) and unbounded["delayed_claims"] >= 1, unbounded
    _, s, _ = run_and_load(dsn, tmp_path / "bounded", *args, "--faults",
                           f"{_LONG};migration@2-9:ddl=add_column,lock_timeout_ms=300,retry_ms=1500")
    bounded = _migration(s)
    assert bounded["lock_timeouts"] >= 1 and bounded["succeeded"], bounded
    assert bounded["timeout_set"] == "lock_wait_timeout 1 s: 300 ms rounded up to whole seconds", bounded
    assert 0 < bounded["longest_stall_s"] <= 1.0 + 1.0, bounded
    assert bounded["longest_stall_s"] < unbounded["longest_stall_s"], (bounded, unbounded)
    assert s["invariants"] == CLEAN_INVARIANTS


def test_mariadb_an_online_index_build_does_not_stall_the_claims(maria_schema, tmp_path):
    """create_index_concurrently on MariaDB is ALGORITHM=INPLACE, LOCK=NONE: no stalled sample, a claim every
    second; a migration's own sql is refused there in one line (its DDL commits: it cannot be checked)."""
    dsn, schema = maria_schema
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--dsn", dsn, "--schema", schema, *_ARGS,
                                 "--faults", "migration@2-8:ddl=create_index_concurrently")
    m = _migration(s)
    assert m["succeeded"] and m["stall_s"] == 0 and m["claimless_s"] == 0, m
    assert all(int(r["claims"]) > 0 for r in _rows(run_dir))
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "own_sql.toml").write_text(
        '[[faults]]\nkind = "migration"\nstart_s = 1\nend_s = 3\nsql = """ALTER TABLE jobs ADD COLUMN y INT"""\n')
    proc = qbench("run", "--dsn", dsn, "--schema", schema, "--workload", "own_sql", "--results",
                  str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("qbench: --faults: ") and "MariaDB" in proc.stderr, proc.stderr


def test_the_stall_rule_counts_only_samples_with_a_blocking_migration_and_a_worker_waiting():
    """The fold: a sample stalls only with both; a stall's run carries across seconds and restarts after a gap
    (``ongoing_stall_ms`` is the stall in progress, not the longest so far: a later, shorter stall shows its own
    length, while summary.json's ``longest_stall_s`` keeps the longest); a worker's wait (backend, start) is
    counted once however many samples see it."""
    fold = LockQueueFold()
    first, second, third = fold.new_second(), fold.new_second(), fold.new_second()
    fold.fold(first, ({"AccessExclusiveLock": 1}, [], 0.1, True), 100)  # blocking, nobody waits: no stall
    fold.fold(first, ({"AccessExclusiveLock": 1, "RowExclusiveLock": 2}, [(7, "t0"), (8, "t0")], 0.2, True), 100)
    fold.fold(first, ({"RowExclusiveLock": 2}, [(7, "t0"), (8, "t0")], 0.3, True), 100)
    fold.fold(second, ({"RowExclusiveLock": 1}, [(7, "t0")], 0.4, True), 100)
    fold.fold(second, ({}, [(9, "t1")], None, False), 100)  # a worker waits behind something else: no stall
    fold.fold(second, ({"AccessExclusiveLock": 1}, [(9, "t2")], 0.1, True), 100)
    assert (first["stall_ms"], first["ongoing_stall_ms"], first["delayed_claims"]) == (200, 200, 2)
    assert (second["stall_ms"], second["ongoing_stall_ms"], second["delayed_claims"]) == (200, 300, 1)
    fold.fold(third, ({}, [], None, False), 100)  # the stall ended: the next one starts from 0
    fold.fold(third, ({"AccessExclusiveLock": 1}, [(10, "t3")], 0.1, True), 100)
    assert (third["stall_ms"], third["ongoing_stall_ms"], third["delayed_claims"]) == (100, 100, 1)
    assert first["lock_queue_row_exclusive"] == 2 and first["lock_queue_share"] == 0 and second["migration_wait_s"] == 0.4
    record = {"start_s": 1.0, "end_s": 5.0, "ddl": "add_column", "statement": "ALTER", "lock_timeout_ms": 0.0, "timeout_set": "no lock timeout",
              "retry_ms": 1000.0, "attempts": [{"start_s": 1.2, "end_s": 3.9, "outcome": "done", "error": None}]}
    rows = [{"t_s": 0, "claims": 5, **fold.new_second()}, {"t_s": 1, "claims": 0, **first},
            {"t_s": 2, "claims": 3, **second}, {"t_s": 3, "claims": 1, **third}, {"t_s": 4, "claims": 0, **fold.new_second()}]
    m = migration_figures(record, rows)
    assert (m["stall_s"], m["longest_stall_s"], m["delayed_claims"], m["claimless_s"]) == (0.5, 0.3, 4, 1), m
    assert m["succeeded"] and m["done_s"] == 3.9 and m["lock_queue_max"] == 3, m


def test_mariadb_the_lock_queue_counts_the_workers_not_the_producers_insert(maria_schema, tmp_path):
    """MariaDB with producers (RATE): the producer's INSERT waits behind the ALTER's metadata lock too, but it is
    not a worker: the workers waiting at one sample are at most WORKERS, and with one attempt each worker's wait
    is one delayed claim at most (the wait a worker is in when the migration gets through)."""
    dsn, schema = maria_schema
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--dsn", dsn, "--schema", schema, "--rate", "200", "--workers", "3",
                                 "--work-ms", "5", "--duration", "10s", "--warmup", "1s",
                                 "--faults", f"{_LONG};migration@2-9:ddl=add_column")
    m = _migration(s)
    assert m["succeeded"] and m["attempts"] == 1 and m["longest_stall_s"] >= 0.75 * (6.0 - 2.0), m
    waiting = [int(r["lock_queue_workers"]) for r in _rows(run_dir) if r["lock_queue_workers"]]
    assert 1 <= max(waiting) <= 3, waiting
    assert 1 <= m["delayed_claims"] <= 3, m


def test_the_timeout_recorded_is_the_one_the_server_has(dsn, maria_schema):
    """timeout_set is read back from the migration's session: PostgreSQL keeps lock_timeout in whole ms (1.5 ms
    asked is 2ms there), MariaDB's lock_wait_timeout whole seconds (1,500 ms is 2 s); 0 is no timeout."""
    for migration, says in ((PostgresMigration(dsn, "public", "SELECT 1", 1.5), "lock_timeout 2ms, 1.5 ms asked"),
                            (PostgresMigration(dsn, "public", "SELECT 1", 0), "no lock timeout"),
                            (MariaDBMigration(maria_schema[0], maria_schema[1], "SELECT 1", 1500),
                             "lock_wait_timeout 2 s: 1500 ms rounded up to whole seconds")):
        try:
            assert migration.timeout_set == says, migration.timeout_set
        finally:
            migration.close()
