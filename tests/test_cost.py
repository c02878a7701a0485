"""What a job costs the database (``summary.json`` ``cost_per_job``, ``intervals.csv`` ``wal_bytes``), against
the real servers: the tool's log figure against the log position the test reads itself over the same window
(PostgreSQL's WAL, MariaDB's InnoDB redo), a batch of 10 writing less of it per job than a batch of 1, HOT
updates only where no index holds status, and MariaDB's row counts against what the claim and completion
statements change."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import os
import time
from typing import Callable, ContextManager

import gevent
import psutil
import psycopg
import pymysql
import pytest

from bench.engines import get_engine
from bench.engines.mariadb import policies
from bench.engines.mariadb.dsn import connect_args
from bench.engines.server_cpu import ServerCpu
from bench.results.run_files import COST_COUNTERS
from bench.run_summary.cost import cost_per_job
from conftest import REPO, qbench, run_and_load

COST_COLUMNS = list(COST_COUNTERS.values())
SHORT = ("--workers", "4", "--duration", "5s", "--warmup", "1s")


def _log_position_at(samples: list[tuple[float, int]], t: float) -> float:
    """The log position (bytes) at wall time ``t``, interpolated between the test's samples around it."""
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


@contextlib.contextmanager
def _pg_wal(dsn: str):
    """A reader of PostgreSQL's WAL position (bytes) on a connection of the test's own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield lambda: int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()[0])


@contextlib.contextmanager
def _innodb_redo(dsn: str):
    """A reader of MariaDB's ``Innodb_os_log_written`` (bytes) on a connection of the test's own."""
    conn = pymysql.connect(**connect_args(dsn), autocommit=True)

    def read() -> int:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_os_log_written'")
            return int(cur.fetchone()[1])
    try:
        yield read
    finally:
        conn.close()


def _workers_connected(dsn: str) -> bool:
    """Whether the run's workers have connected (the load has started)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity "
                            "WHERE application_name LIKE 'queue-bench worker%'").fetchone()[0] > 0


def _run_reading_log(reader: Callable[[str], ContextManager[Callable[[], int]]], dsn: str, results, *args: str,
                     checkpoint_at_s: float | None = None) -> tuple[dict, list[dict], list[tuple[float, int]]]:
    """(summary, intervals rows, the test's own (wall time, log position) samples every 50 ms during the run);
    ``checkpoint_at_s``: a PostgreSQL CHECKPOINT that many seconds after the workers connected (full-page
    images follow it)."""
    samples: list[tuple[float, int]] = []
    checkpoint = [checkpoint_at_s]

    def sample() -> None:
        started = None
        with reader(dsn) as read:
            while True:
                samples.append((time.time(), read()))
                if checkpoint[0] is not None and started is None and _workers_connected(dsn):
                    started = time.time()
                elif checkpoint[0] is not None and started is not None and time.time() - started >= checkpoint[0]:
                    with psycopg.connect(dsn, autocommit=True) as conn:
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


def _tool_and_own_log_bytes(summary: dict, rows: list[dict], samples: list[tuple[float, int]]) -> tuple[int, float]:
    """(the tool's ``wal_bytes`` over the window, checked against its per-job figure; the test's own over the
    same window): from the sample in the middle of the second before the first measured one to the sample in
    the middle of the last measured second."""
    tool = sum(int(r["wal_bytes"]) for r in rows)
    assert summary["cost_per_job"]["wal_bytes"] == pytest.approx(tool / summary["jobs_completed"], abs=0.001)
    start, end = summary["_window"]
    return tool, _log_position_at(samples, end - 0.5) - _log_position_at(samples, start - 0.5)


@pytest.mark.slow
def test_wal_per_job_is_the_servers_own_and_a_batch_writes_less_of_it(walinspect_dsn, tmp_path):
    """A CHECKPOINT inside batch 10's window (the server writes each page's first change after it whole): the
    full-page images are counted apart, so the comparison of the rest cannot flip. Autovacuum off: its WAL on
    the freshly seeded table (hint bits, the visibility map) lands in one run's 5 s window and not another's,
    and is not the jobs' (measured here: 564-604 B a job at batch 10 against 659-667 at batch 1 without it)."""
    per_job, images = {}, {}
    for batch in (1, 10):
        for attempt in (1, 2):
            summary, rows, samples = _run_reading_log(_pg_wal, walinspect_dsn, tmp_path / f"b{batch}-{attempt}", *SHORT,
                                                      "--batch", str(batch), "--no-autovacuum",
                                                      checkpoint_at_s=3 if batch == 10 else None)
            cost = summary["cost_per_job"]
            # A checkpoint removes the WAL before its redo point at once: when the previous second's position was
            # in a segment it removed (58P01, seen once in a full run), that second's images cannot be read, and
            # the figure is null, never a smaller number. The race is the server's: run again.
            if cost["wal_fpi_bytes"] is not None:
                break
            assert cost["wal_bytes_without_fpi"] is None, cost
        assert cost["wal_bytes"] > 0 and "pg_current_wal_lsn" in cost["source"] and cost["log"] == "WAL", cost
        tool, own = _tool_and_own_log_bytes(summary, rows, samples)
        assert abs(tool - own) <= 0.10 * own, (tool, own)
        assert "pg_get_wal_stats over the WAL flushed" in cost["source"], cost
        per_job[batch], images[batch] = cost["wal_bytes_without_fpi"], cost["wal_fpi_bytes"]
        assert cost["wal_bytes_without_fpi"] == pytest.approx(cost["wal_bytes"] - cost["wal_fpi_bytes"], abs=0.01)
        # the partial index's predicate holds status, which the claim and the completion update: no HOT update;
        # each job is updated twice (claimed, completed), up to a second of statistics not yet flushed at each end
        assert cost["hot_update_share"] == 0 and cost["tuples_hot_updated"] == 0, cost
        assert 1.5 <= cost["tuples_updated"] <= 2.5 and cost["tuples_inserted"] == 0, cost
        # rows read from the queue table: each job at least by the claim's index scan and by the completion's
        # primary key lookup (2), less the same second of statistics at each end
        assert cost["rows_read"] >= 1.5, cost
    assert images[10] > 0, images  # the checkpoint's images were found
    assert per_job[10] < per_job[1], (per_job, images)


@pytest.mark.slow
def test_without_an_index_on_status_most_updates_are_hot(dsn, tmp_path):
    """INDEX=none: no index holds a column the claim updates, so most updates are HOT (pages with room)."""
    summary, _, _ = _run_reading_log(_pg_wal, dsn, tmp_path / "none", *SHORT, "--index", "none")
    assert summary["cost_per_job"]["hot_update_share"] > 0.3, summary["cost_per_job"]


@pytest.mark.slow
def test_server_cpu_from_proc_is_at_least_the_statements_time_with_one_worker(tmp_path):
    """The embedded server (on this host, with pg_stat_statements): its processes' CPU per job from /proc is at
    least the tool's statements' execution time per job, and the workers' backends used some. One worker: a
    statement's time is then its backend's CPU and I/O, which the backend's CPU plus commit and the server's
    other processes exceed; with more backends than cores, statement time also counts waits for a core and
    can exceed the CPU (measured: 251 µs of statement time against 154 of CPU per job at 10 workers, batch 10)."""
    proc = qbench("run", "--results", str(tmp_path), "--workers", "1", "--duration", "5s", "--warmup", "1s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    cost = json.loads((run_dir / "summary.json").read_text())["cost_per_job"]
    assert cost["server_cpu_backends_us"] > 0 and cost["statements_exec_us"] > 0, cost
    # the statements' own buffers: pg_stat_statements' sum over the window per job completed in it
    summary = json.loads((run_dir / "summary.json").read_text())
    assert cost["statements_buffers_hit"] == pytest.approx(
        summary["pg_stat_statements"]["statements_blks_hit"] / summary["jobs_completed"], abs=0.001), cost
    assert cost["statements_buffers_hit"] > 0, cost
    assert cost["server_cpu_us"] >= cost["statements_exec_us"], cost
    assert cost["server_cpu_us"] == pytest.approx(cost["server_cpu_backends_us"] + cost["server_cpu_background_us"],
                                                  abs=0.01)
    assert "/proc" in cost["source"] and "µs of server CPU" in proc.stdout, cost


def test_a_process_that_is_not_a_database_server_gives_no_server_cpu():
    """The meter follows a server only: this test's own process (python, not postgres) gives None."""
    assert ServerCpu.local(os.getpid()) is None


def _burn_and_close(dsn: str, meter: ServerCpu | None = None, kinds: dict | None = None) -> int:
    """Another session burns CPU on the server and closes; ``meter`` reads once while it runs. Returns the CPU µs
    its backend used (read from /proc before it closed), once the backend is gone."""
    with psycopg.connect(dsn) as other:
        pid = other.info.backend_pid
        other.execute("SELECT count(md5(g::text)) FROM generate_series(1, 600000) g")
        if meter is not None:
            meter.read(kinds)
        other.execute("SELECT count(md5(g::text)) FROM generate_series(1, 600000) g")
        times = psutil.Process(pid).cpu_times()
        used_us = int((times.user + times.system) * 1e6)
    for _ in range(200):  # the server ends the closed session a moment later
        if not psutil.pid_exists(pid):
            break
        time.sleep(0.01)
    return used_us


def _parent_pid(pid: int) -> int:
    """The parent of process ``pid``, from /proc/<pid>/stat (its fourth field, after the command's parentheses)."""
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_another_sessions_cpu_is_not_the_runs_when_it_exits(dsn):
    """The server's children time grows by a session's whole life when it exits: a session the run does not own
    (another database's), seen while it ran or never seen, adds none of it to the run's server CPU (before: its
    whole life went to ``background``, 2.18 s in one second beside a run)."""
    with psycopg.connect(dsn) as ours:
        kinds = {ours.info.backend_pid: "backends"}
        meter = ServerCpu.local(ours.info.backend_pid)
        assert meter.root_pid == _parent_pid(ours.info.backend_pid)  # the server's root found from our backend
        meter.read(kinds)
        burned_us = [_burn_and_close(dsn, meter, kinds), _burn_and_close(dsn)]
        counted = meter.read(kinds)
    assert min(burned_us) > 100_000, burned_us  # each burn used the CPU it is meant to leave out
    assert sum(counted.values()) < 0.25 * sum(burned_us), (counted, burned_us)


def test_the_servers_processes_serving_the_run_leave_out_other_sessions(dsn):
    """The machine's busy meter counts the server's processes that serve the run as the run's (``pids``): the
    root first, this run's sessions, and not another session of the same server (another program's load)."""
    with psycopg.connect(dsn) as ours, psycopg.connect(dsn) as other:
        meter = ServerCpu.local(ours.info.backend_pid)
        assert meter.root_pid == _parent_pid(ours.info.backend_pid)  # the server's root found from our backend
        meter.read({ours.info.backend_pid: "backends"})
        assert meter.pids[0] == meter.root_pid and ours.info.backend_pid in meter.pids
        assert other.info.backend_pid not in meter.pids


@pytest.mark.slow
def test_mariadb_redo_per_job_is_the_servers_own_and_rows_changed_follow_the_statements(maria_schema, tmp_path):
    """On MariaDB: InnoDB redo bytes per job (``Innodb_os_log_written``) against the test's own reading of it
    over the same window; the row counts (server-wide ``Handler_*``) against what the claim and completion
    statements change per job; the figures MariaDB has no counter for are None and named; batch 10 against 1."""
    dsn, schema = maria_schema
    claim, complete = policies.claim_update(schema, [1], "w", 30), policies.complete_one(schema, 1, 1)
    # Per job: the claim's UPDATE and the completion's UPDATE each change its row once, and the claim draws one
    # attempt token from the NOCACHE sequence, which writes the sequence's row (a Handler_write) at each value.
    updates = sum(statement.removeprefix(policies.WORKER_MARK).startswith("UPDATE") for statement in (claim, complete))
    assert "attempt_token_seq NOCACHE" in (REPO / "bench/data/schemas/mariadb/table.sql").read_text()
    writes = claim.count("NEXTVAL(")
    per_job = {}
    for batch in (1, 10):
        summary, rows, samples = _run_reading_log(_innodb_redo, dsn, tmp_path / f"b{batch}", "--schema", schema,
                                                  *SHORT, "--batch", str(batch))
        cost = summary["cost_per_job"]
        assert cost["wal_bytes"] > 0 and "Innodb_os_log_written" in cost["source"] and cost["log"] == "InnoDB redo", cost
        tool, own = _tool_and_own_log_bytes(summary, rows, samples)
        assert abs(tool - own) <= 0.10 * own, (tool, own)
        assert [cost[k] for k in ("wal_records", "wal_fpi", "tuples_hot_updated", "hot_update_share")] == [None] * 4
        assert "no counter on MariaDB for wal_records, wal_fpi, tuples_hot_updated" in cost["source"], cost
        # the counters' window is the jobs' shifted by half a second: within 15 % of the statements' count
        assert cost["tuples_updated"] == pytest.approx(updates, rel=0.15), cost
        assert cost["tuples_inserted"] == pytest.approx(writes, rel=0.15) and cost["tuples_deleted"] == 0, cost
        assert cost["rows_read"] > 0 and cost["buffers_hit"] > 0 and cost["buffers_read"] is not None, cost
        per_job[batch] = cost["wal_bytes"]
    assert per_job[10] < per_job[1], per_job


def test_a_column_the_engine_lacks_is_none_and_a_second_without_a_sample_voids_only_its_figures():
    """A cost column MariaDB has no counter for is None and named in ``source``; the others are given; a second
    whose sample failed makes the figures it lacks None, with the reason, and leaves the rest."""
    engine = get_engine("mariadb").capabilities.recorded()
    absent = set(engine["cost_absent"])
    assert absent == {"wal_records", "wal_fpi", "tuples_hot_updated", "wal_fpi_bytes", "server_cpu_monitor_us",
                      "server_cpu_background_us"}, absent
    second = {"jobs_completed": 5, "wal_bytes": 3000, "tuples_inserted": 10, "tuples_updated": 20, "tuples_deleted": 0,
              "buffers_hit": 900, "buffers_read": 1, "rows_read": 400} | dict.fromkeys(absent)
    cost = cost_per_job([second, second], 10, {"engine_capabilities": engine})
    assert (cost["wal_bytes"], cost["tuples_updated"], cost["rows_read"]) == (600.0, 4.0, 80.0), cost
    assert all(cost[c] is None for c in absent) and cost["hot_update_share"] is None and cost["log"] == "InnoDB redo"
    assert cost["source"].startswith("MariaDB: ") and "no counter on MariaDB for wal_records, wal_fpi, tuples_hot_updated" in cost["source"]
    assert "failed" not in cost["source"], cost["source"]
    failed = cost_per_job([second, second | {"wal_bytes": None, "rows_read": None}], 10,
                          {"engine_capabilities": engine})
    assert failed["wal_bytes"] is None and failed["rows_read"] is None and failed["tuples_updated"] == 4.0, failed
    assert "the monitor read no wal_bytes, rows_read in some second (a sample that failed)" in failed["source"]


def test_counters_published_late_are_taken_over_the_whole_load_and_a_first_second_without_a_sample_is_left_out():
    """PostgreSQL publishes its row and buffer statistics up to a second late: those figures come from the counters
    before the first worker connected and after the last left, over every job of the load; WAL bytes from the
    window, from its first second that has a sample before it (WARMUP=0: the first has none)."""
    engine = get_engine("postgres").capabilities.recorded()
    first = {"jobs_completed": 7} | dict.fromkeys(COST_COLUMNS)
    second = {"jobs_completed": 5, "wal_bytes": 3000} | {c: 1 for c in engine["cost_delayed"]}
    whole = {"start": {"tuples_updated": 100, "buffers_hit": 0}, "end": {"tuples_updated": 140, "buffers_hit": 600},
             "jobs_completed": 20}
    cost = cost_per_job([first, second, second], 17, {"engine_capabilities": engine, "cost_whole_load": whole})
    assert cost["wal_bytes"] == 600.0 and cost["tuples_updated"] == 2.0 and cost["buffers_hit"] == 30.0, cost
    assert cost["tuples_inserted"] is None and "over the whole load" in cost["source"], cost
