"""WAKEUP=poll|notify (field case FR-10): idle workers woken by the producers' NOTIFY instead of
polling every POLL_MS, and the monitor's count of commits waiting on the notify lock.

Against the real PostgreSQL: a wait that yields to other greenlets and ends on a notification; the
lock a committing NOTIFY holds, driven on purpose (on a server of the module's own, with fsync on) and
seen by the monitor as ``notify_lock_waiters``;
and two short open-loop runs, poll and notify, whose pickup latencies are compared.
"""

from __future__ import annotations

import json
import time

import gevent
import psycopg
import pytest
from psycopg import sql

from bench.engines.postgres.embedded import embedded_postgres
from bench.engines.postgres.monitor import Monitor
from bench.engines.postgres.policies import insert_sql, notify_channel
from bench.engines.postgres.adapter.wire import PreparedSession
from conftest import CLEAN_INVARIANTS, run_and_load

#: Scratch schema of the tests that build their own tables (dropped after each); runs use RUN_SCHEMA.
SCHEMA = "wakeup_scratch"
RUN_SCHEMA = "qbench_wakeup"


def _drop_scratch(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


def _listening_session(dsn: str, channel: str) -> PreparedSession:
    session = PreparedSession(psycopg.connect(dsn, autocommit=True), {})
    session.query(sql.SQL("LISTEN {}").format(sql.Identifier(channel)).as_string(None).encode())
    return session


def test_the_wait_for_a_notification_yields_to_other_greenlets_and_ends_when_one_comes(dsn):
    """No notification: the wait lasts its timeout (False) while another greenlet keeps running;
    a NOTIFY from another connection ends it at once (True), and one that came while the session
    was busy is found by the next wait without waiting."""
    session = _listening_session(dsn, "wake_test")
    ticks = []

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    beat = gevent.spawn(ticker)
    try:
        started = time.monotonic()
        assert session.wait_notification(0.3) is False
        waited = time.monotonic() - started
        assert 0.29 <= waited < 0.6, waited
        assert len([t for t in ticks if t >= started]) >= 15, "the wait blocked the other greenlet"

        def notify_later():
            gevent.sleep(0.05)
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_notify('wake_test', '')")

        sender = gevent.spawn(notify_later)
        started = time.monotonic()
        assert session.wait_notification(5.0) is True
        assert time.monotonic() - started < 1.0
        sender.join()

        with psycopg.connect(dsn, autocommit=True) as other:  # sent while nobody waits
            other.execute("NOTIFY wake_test")
        session.query(b"SELECT 1")  # a statement runs; the notification is kept by libpq
        started = time.monotonic()
        assert session.wait_notification(5.0) is True and time.monotonic() - started < 0.5
        assert session.wait_notification(0.05) is False  # taken: it does not wake twice
    finally:
        beat.kill()
        session.close()


def test_the_producers_insert_notifies_once_in_its_own_transaction(dsn):
    """WAKEUP=notify's insert statement: the rows and one notification on ``<schema>_jobs``, delivered
    only at its commit (a rolled-back insert sends none)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE TABLE {} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, priority smallint, "
                             "run_at timestamptz, max_attempts int)").format(sql.Identifier(SCHEMA, "jobs")))
    listener = _listening_session(dsn, notify_channel(SCHEMA))
    try:
        insert = insert_sql(SCHEMA, 5, notify=True).replace("$1", "%s").replace("$2", "%s")
        with psycopg.connect(dsn) as producer:
            ids = [r[0] for r in producer.execute(insert, ([0, 0, 0], [1.0, 2.0, 3.0])).fetchall()]
            assert len(ids) == 3
            assert listener.wait_notification(0.2) is False  # not committed yet
            producer.commit()
            assert listener.wait_notification(2.0) is True
            assert listener.wait_notification(0.2) is False  # one notification for the three rows
            producer.execute(insert, ([0], [4.0]))
            producer.rollback()
            assert listener.wait_notification(0.3) is False
        assert "pg_notify" not in insert_sql(SCHEMA, 5)
    finally:
        listener.close()
        _drop_scratch(dsn)


def _send(conn: psycopg.Connection, query: bytes) -> None:
    """Send ``query`` on ``conn`` without waiting for its result."""
    conn.pgconn.send_query(query)


def _finish(conn: psycopg.Connection) -> None:
    while conn.pgconn.get_result() is not None:
        pass


@pytest.fixture(scope="module")
def fsync_dsn():
    """A throwaway server of this module's own with fsync on (``commit_delay`` sleeps only then), so
    the notify-lock test never depends on how the shared test server is configured."""
    with embedded_postgres(20, log=lambda _line: None) as dsn:
        yield dsn


def test_the_monitor_counts_commits_waiting_on_the_notify_lock_and_not_other_lock_waits(fsync_dsn):
    """Drive the lock: one transaction that inserted a row and sent NOTIFY commits with
    ``commit_delay`` = 100 ms (it sleeps before its WAL flush, after ``PreCommit_Notify`` took the lock
    on "database 0", so it holds the lock for those 100 ms), three more notifying transactions commit behind it, and one session
    waits on a row lock. The monitor's one stats query then counts 4 lock waiters, 3 of them on the
    notify lock; pg_locks shows each of those 3 waiting on the object lock of pg_database, oid 0."""
    dsn = fsync_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SHOW fsync").fetchone()[0] == "on"  # else nothing would hold the notify lock
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(sql.Identifier(SCHEMA, "jobs")))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(sql.Identifier(SCHEMA, "jobs")))
    monitor = Monitor(lambda app: psycopg.connect(dsn, autocommit=True, application_name=app), SCHEMA)
    holder, *committers = [psycopg.connect(dsn, autocommit=True) for _ in range(4)]
    row_holder, row_waiter = psycopg.connect(dsn, autocommit=True), psycopg.connect(dsn, autocommit=True)
    jobs = sql.Identifier(SCHEMA, "jobs").as_string(None)
    try:
        monitor.sample_stats()  # opens its connection before the window
        row_holder.execute(f"BEGIN; SELECT * FROM {jobs} WHERE id = 1 FOR UPDATE")
        _send(row_waiter, f"UPDATE {jobs} SET id = 1 WHERE id = 1".encode())
        holder.execute("SET commit_delay = 100000")  # µs, its maximum
        holder.execute("SET commit_siblings = 0")  # sleep whatever else is running
        for conn in (holder, *committers):
            conn.execute("BEGIN")
            conn.execute("SELECT pg_notify('qbench_wakeup_test', '')")
        # A commit flushes WAL (and sleeps commit_delay first) only when its transaction wrote some,
        # as a producer's insert does; a NOTIFY alone does not.
        holder.execute(f"INSERT INTO {jobs} VALUES (2)")
        _send(holder, b"COMMIT")
        time.sleep(0.01)
        for conn in committers:
            _send(conn, b"COMMIT")
        time.sleep(0.02)
        sample = monitor.sample_stats()
        with psycopg.connect(dsn, autocommit=True) as look:
            waiting = look.execute(
                "SELECT l.locktype, l.classid = 'pg_database'::regclass, l.objid, l.database, a.query "
                "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE NOT l.granted AND a.wait_event = 'object'").fetchall()
        assert sample["notify_lock_waiters"] == 3, sample
        assert sample["lock_waiters"] == 4, sample  # the row-lock waiter is a lock waiter, not a notify one
        assert sorted(waiting) == [("object", True, 0, 0, "COMMIT")] * 3, waiting
        for conn in (holder, *committers):
            _finish(conn)
        row_holder.execute("ROLLBACK")
        _finish(row_waiter)
        after = monitor.sample_stats()
        assert (after["notify_lock_waiters"], after["lock_waiters"]) == (0, 0), after
    finally:
        monitor.close()
        for conn in (holder, *committers, row_holder, row_waiter):
            conn.close()
        _drop_scratch(dsn)


@pytest.mark.slow
def test_notify_wakes_idle_workers_within_a_round_trip_where_polling_waits_half_the_interval(dsn, tmp_path):
    """RATE=20 jobs/s, 4 workers, POLL_MS=200, no work: workers are idle most of the time. Polling, a
    job waits for the next claim of a worker: the workers start together and stay close in step,
    so about half the interval (p50 between 0.25 and 0.75 × POLL_MS). With NOTIFY the producer's
    commit wakes them: p50 below half the polling run's (measured in this test). Every job produced
    is done exactly once (clean invariants) in both runs."""
    poll_ms = 200
    common = ("--rate", "20", "--workers", "4", "--poll-ms", str(poll_ms), "--duration", "6s", "--warmup", "1s",
              "--schema", RUN_SCHEMA)
    summaries = {}
    for wakeup in ("poll", "notify"):
        run_dir, summary, _ = run_and_load(dsn, tmp_path / wakeup, *common, "--wakeup", wakeup, timeout=180)
        run = json.loads((run_dir / "run.json").read_text())
        assert (run["config"]["wakeup"], run["config"]["poll_ms"]) == (wakeup, poll_ms)
        assert summary["invariants"] == CLEAN_INVARIANTS, summary["invariants"]
        assert summary["jobs_completed"] >= 0.9 * 20 * 6, summary["jobs_completed"]
        header = (run_dir / "intervals.csv").read_text().splitlines()[0].split(",")
        assert "notify_lock_waiters" in header
        summaries[wakeup] = summary
    poll, notify = summaries["poll"], summaries["notify"]
    poll_p50, notify_p50 = poll["pickup_latency_ms"]["p50"], notify["pickup_latency_ms"]["p50"]
    assert 0.25 * poll_ms <= poll_p50 <= 0.75 * poll_ms, poll["pickup_latency_ms"]
    assert notify_p50 < 0.5 * poll_p50, (notify["pickup_latency_ms"], poll["pickup_latency_ms"])
    assert notify["notify_wakeups"] > 0 and poll["notify_wakeups"] == 0
    assert poll["notify_lock_waiters"]["max"] == 0  # nobody notifies in a polling run
