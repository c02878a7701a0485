"""MariaDB's end-of-run audit (:mod:`bench.engines.mariadb.audit`) against the real MariaDB, beyond the
mutation matrix every engine runs (``tests/test_audit.py``): the audit on a table without seeded rows,
past rows a session holds, after a failure; the claim log's loader; the poison predicate; and 20 greenlets
claiming concurrently.

The tests prepare a throwaway database through :class:`audit_targets.Run` (the ``mariadb`` target),
dropped at the end. The 20-worker test runs in a subprocess: gevent must patch the standard library
before PyMySQL opens a socket, and this pytest process must stay unpatched (``tests/test_policies.py``).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pymysql
import pytest

from audit_targets import BACKLOG, BATCH, LEASE_S, TARGETS, Run, assert_audit_left_nothing
from bench.config.run_config import build_config
from bench.engines.mariadb import audit, db, policies
from bench.engines.mariadb.policies import ident
from bench.engines.mariadb.sessions import MariaDBProducerSession, MariaDBWorkerSession
from bench.errors import ConfigError
from bench.measure.claimlog import ClaimLog
from bench.measure.metrics import Recorder
from bench.workload.jobs import is_poison, poison_sql, poison_threshold
from conftest import CLEAN_INVARIANTS, MARIADB_DSN as DSN

#: The poison predicate both audits used before: the share as a decimal literal.
DECIMAL_POISON_SQL = "((id * 2654435761) % 4294967296) < {share} * 4294967296"
#: The 20-worker test's database.
SCHEMA = "qbench_audit_m"
TESTS = Path(__file__).resolve().parent


def _error_number(err: BaseException) -> int | None:
    return err.args[0] if err.args and isinstance(err.args[0], int) else None


@pytest.fixture
def run():
    """A run of the ``mariadb`` target (prepared by the test): a log, a recorder and workers; its database
    dropped at the end."""
    state = Run(TARGETS["mariadb"], "")
    yield state
    state.close()


def test_invariants_are_postgres_invariants():
    from bench.engines import get_engine

    assert get_engine("mariadb").invariants == get_engine("postgres").invariants == tuple(CLEAN_INVARIANTS)


def test_a_run_without_failures_has_no_retry_gaps_nor_poison_details(run):
    run.prepare(history=4)
    assert run.drain(run.worker("a")) == BACKLOG
    result = run.audit()
    assert result["invariants"] == CLEAN_INVARIANTS
    assert result["retry_gaps"] is None and "poison_jobs" not in result["details"]
    assert result["details"]["rows_expected"] == result["details"]["rows_present"] == 4 + BACKLOG
    assert result["status_counts"] == {"done": 4 + BACKLOG}


def test_no_seeded_rows_reads_no_sequence_table(run):
    """A producers-only run (no history, no backlog): the expected rows are the produced ones.
    ``seq_1_to_0`` would have added ids 1 and 0 (it counts down), two rows never seeded."""
    run.prepare(backlog=0)
    assert db.query(run.conn, f"SELECT seq FROM {ident(run.schema, 'seq_1_to_0')}") == [(1,), (0,)]
    producer = MariaDBProducerSession(DSN, run.cfg, "producer")
    try:
        ids = producer.insert([0] * 5, [time.time() - 1] * 5)
    finally:
        producer.close()
    run.log.produced(ids)
    assert run.drain(run.worker("a")) == 5
    result = run.audit()
    assert result["invariants"] == CLEAN_INVARIANTS
    assert result["details"]["rows_expected"] == result["details"]["rows_present"] == 5


def test_fr03_subselect_claim_is_refused_by_mariadb(run):
    """FR-03's naive claim, the locking LIMIT as an ``IN`` sub-select of the UPDATE, built from the
    tool's own statements: MariaDB refuses it (error 1235) before touching a row, so over-claims
    have to be injected another way (``tests/test_audit.py``, ``test_over_claims_are_counted``)."""
    run.prepare()
    a = run.worker("a")
    update = policies.claim_update(run.schema, [0], "a", LEASE_S)
    assert "WHERE id IN (0)" in update
    naive = update.replace("WHERE id IN (0)", f"WHERE id IN ({a.session.select})")
    with pytest.raises(pymysql.err.MySQLError) as err:
        db.execute(run.conn, naive)
    assert _error_number(err.value) == 1235, err.value
    assert "LIMIT & IN/ALL/ANY/SOME subquery" in str(err.value)
    assert run.rows("SELECT status, COUNT(*) FROM {jobs} GROUP BY status") == [("pending", BACKLOG)]


def test_the_archive_layout_is_refused_on_mariadb():
    """Why ``tests/test_audit.py`` stores a MariaDB job twice by dropping its key rather than, as on
    PostgreSQL, by a copy into the archive: MariaDB has only the ``same`` layout."""
    with pytest.raises(ConfigError) as err:
        build_config(overrides={"schema": SCHEMA, "layout": "archive"}, dsn=DSN)
    assert str(err.value).startswith("--layout: ")


def test_the_audit_reads_past_rows_a_session_holds(run):
    """A hold-mode worker keeps its claimed rows locked and uncommitted while another drains the
    others: the audit (READ COMMITTED, consistent reads) neither waits on the locks nor sees the
    uncommitted claim (not in the log either). At the session's REPEATABLE READ the same
    CREATE TABLE … SELECT waits on the row locks (1205 after innodb_lock_wait_timeout)."""
    run.prepare()
    a = run.worker("a")
    for _ in range(BACKLOG // BATCH - 1):
        assert len(a.complete(a.claim())) == BATCH
    # Held last: at REPEATABLE READ the holder's locking read takes next-key locks on the index,
    # and a completion whose new ('done', …) entry falls into the gap before the first pending
    # row would wait on it.
    holder = run.worker("holder")
    holder.session.begin()
    assert [j[0] for j in holder.session.claim()] == [10, 11, 12]
    db.execute(run.conn, "SET SESSION innodb_lock_wait_timeout = 1")
    with pytest.raises(pymysql.err.OperationalError) as err:
        db.execute(run.conn, f"CREATE TEMPORARY TABLE {ident(run.schema, 'probe')} AS SELECT id FROM {ident(run.schema, 'jobs')}")
    assert _error_number(err.value) == 1205
    started = time.monotonic()
    result = run.audit()
    assert time.monotonic() - started < 1
    assert result["status_counts"] == {"done": BACKLOG - BATCH, "pending": BATCH}
    assert result["invariants"] == CLEAN_INVARIANTS
    holder.session.rollback()


def test_a_failed_audit_drops_its_tables_and_rolls_back(run):
    run.prepare()
    run.drain(run.worker("a"))
    run.execute("DROP TABLE {jobs}")
    with pytest.raises(pymysql.err.ProgrammingError) as err:
        run.audit()
    assert _error_number(err.value) == 1146
    assert_audit_left_nothing(run)


def test_seeded_ids_stay_one_to_n_across_seed_chunks(run, monkeypatch):
    """The audit expects the seeded ids to be ``1..seeded_rows``, as PostgreSQL's prepare makes them.
    With a backlog of more than ``SEED_CHUNK`` rows (200,000; 5 here) seeded through AUTO_INCREMENT,
    MariaDB left gaps after every chunk (ids 9, 10, 16, 17 were skipped) and the audit of a clean run
    counted them as lost jobs; the backlog's ids are now given explicitly."""
    monkeypatch.setattr(db, "SEED_CHUNK", 5)
    run.prepare(history=3)
    run.drain(run.worker("a"))
    result = run.audit()
    assert result["invariants"] == CLEAN_INVARIANTS, [r[0] for r in run.rows("SELECT id FROM {jobs} ORDER BY id")]


def test_log_rows_read_back_as_written(run):
    """:meth:`ClaimLog.rows` yields the events in order with their types, puts the file position back
    at the end (an event written mid-iteration is appended, ``copy_to`` still sees every line), and
    the loader stores every float exactly."""
    log = run.log
    times = [1712345678.123456, 0.1 + 0.2, 1e-07, 1712345678.0, 2.5e15]
    for i, t in enumerate(times, start=1):
        log.claimed(i, 100 + i, t + 60, t)
    log.finished(1, 101, True)
    log.finished(2, 102, False)
    log.failed(3, 103)
    log.produced([9, 10])
    rows = log.rows()
    first = next(rows)
    assert first == ("c", 1, 101, times[0], times[0] + 60)
    log.failed(4, 104)  # written while the iteration is suspended
    rest = list(rows)
    assert len(rest) == len(times) - 1 + 5
    assert rest[len(times) - 1:] == [("a", 1, 101, None, None), ("s", 2, 102, None, None), ("f", 3, 103, None, None),
                                     ("p", 9, None, None, None), ("p", 10, None, None, None)]

    class Sink:
        data = b""

        def write(self, chunk):
            Sink.data += chunk

    assert log.copy_to(Sink()) == log.events == len(times) + 6
    assert Sink.data.decode().splitlines()[-1] == "f,4,104,,"
    assert list(log.rows())[-1] == ("f", 4, 104, None, None)

    run.prepare()
    table = ident(run.schema, "qbench_audit_events")
    db.execute(run.conn, audit._CREATE_EVENTS.format(events=table))
    assert audit.load_events(run.conn, table, log.rows()) == log.events
    stored = db.query(run.conn, f"SELECT kind, id, token, claimed_at, lease_until FROM {table} ORDER BY seq")
    assert [tuple(r) for r in stored] == list(log.rows())
    db.execute(run.conn, f"DROP TEMPORARY TABLE {table}")


def test_the_loader_batches_and_refuses_what_the_log_cannot_hold(run, monkeypatch):
    run.prepare()
    table = ident(run.schema, "qbench_audit_events")
    db.execute(run.conn, audit._CREATE_EVENTS.format(events=table))
    statements = []
    real = audit.execute
    monkeypatch.setattr(audit, "execute", lambda conn, text, args=None: statements.append(text) or real(conn, text))
    events = [("c", i, i, 1.0, 2.0) for i in range(1, 2 * audit.INSERT_ROWS + 2)]
    assert audit.load_events(run.conn, table, iter(events)) == len(events)
    assert len(statements) == 3
    assert db.query(run.conn, f"SELECT COUNT(*), MIN(seq), MAX(seq) FROM {table}")[0] == (len(events), 1, len(events))
    with pytest.raises(ValueError):
        audit.load_events(run.conn, table, [("x", 1, None, None, None)])
    with pytest.raises(ValueError):
        audit.load_events(run.conn, table, [("c", 1, 1, math.inf, 1.0)])
    db.execute(run.conn, f"DROP TEMPORARY TABLE {table}")


def _poison_shares(ids: list[int]) -> list[float]:
    """Shares to check: round ones, ones whose repr has 17 digits or an exponent, and thresholds
    that fall exactly on an id's hash (that id is not poison: the test is strict) or next to it."""
    shares = [0.0, 1e-05, 0.001, 0.1, 0.25, 1 / 3, 0.1 + 0.2, 0.5, 2 / 3, 0.999, 1.0]
    for job_id in ids[:: len(ids) // 7]:
        h = (job_id * 2654435761) % 2 ** 32
        for share in (h / 2 ** 32, (h + 1) / 2 ** 32, math.nextafter(h / 2 ** 32, 0), math.nextafter(h / 2 ** 32, 1)):
            shares.append(share)
    return shares


def test_poison_sql_names_exactly_the_jobs_is_poison_names(run):
    """The audit's poison predicate (:func:`poison_sql`) selects exactly the ids of ``is_poison`` on
    MariaDB, for 20,000 seeded ids, the largest id its BIGINT product can take, and shares on and
    next to an id's hash. One id further the product is out of range: error 1690, never a wrong set."""
    run.prepare(backlog=20_000)
    top = 2 ** 63 // 2654435761
    assert top == 3_474_701_543
    run.execute(f"INSERT INTO {{jobs}} (id) VALUES ({top})")
    ids = [int(r[0]) for r in run.rows("SELECT id FROM {jobs} ORDER BY id")]
    assert len(ids) == 20_001
    for share in _poison_shares(ids):
        found = {int(r[0]) for r in run.rows("SELECT id FROM {jobs} WHERE " + poison_sql(share))}
        assert found == {i for i in ids if is_poison(i, share)}, (share, poison_sql(share))
    run.execute(f"INSERT INTO {{jobs}} (id) VALUES ({top + 1})")
    with pytest.raises(pymysql.err.OperationalError) as err:
        run.rows("SELECT COUNT(*) FROM {jobs} WHERE " + poison_sql(0.5))
    assert _error_number(err.value) == 1690


def test_poison_sql_decimal_form_names_one_job_too_many(run):
    """Why the audits no longer use :data:`DECIMAL_POISON_SQL`: its share is a decimal literal, multiplied
    exactly by MariaDB and PostgreSQL alike, and the shortest repr of a float is not the float. For a
    share on a multiple of 2^-32 the threshold lands just above the hash of one job, which is poison
    in SQL and not in ``is_poison``; the integer threshold of :func:`poison_sql` agrees."""
    job = 5715
    share = ((job * 2654435761) % 2 ** 32) / 2 ** 32
    assert repr(share) == "0.06423439900390804" and not is_poison(job, share)
    run.prepare(backlog=job)
    assert run.rows("SELECT id FROM {jobs} WHERE id = %d AND " % job + DECIMAL_POISON_SQL.format(share=share)) == [(job,)]
    assert run.rows("SELECT id FROM {jobs} WHERE id = %d AND " % job + poison_sql(share)) == []
    import psycopg

    from conftest import ADMIN_DSN

    with psycopg.connect(ADMIN_DSN) as pg:  # no parameters: the predicates' % is the modulo
        one_row = f" FROM (SELECT {job}::bigint AS id) AS j"
        assert pg.execute("SELECT " + DECIMAL_POISON_SQL.format(share=share) + one_row).fetchone() == (True,)
        assert pg.execute("SELECT " + poison_sql(share) + one_row).fetchone() == (False,)


def test_poison_threshold_agrees_with_is_poison():
    """``hash(id) < poison_threshold(share)`` is ``is_poison(id, share)``, for shares on, next to and
    between the hashes of the ids, and for shares out of 0..1 (negative, above 1, NaN, infinite)."""
    rng = random.Random(7)
    ids = list(range(1, 3000)) + [rng.randrange(1, 3_474_701_543) for _ in range(3000)]
    shares = _poison_shares(ids) + [rng.random() for _ in range(200)] + [-0.5, 1.5, math.nan, math.inf, 5e-324]
    for share in shares:
        t = poison_threshold(share)
        assert all(is_poison(i, share) == ((i * 2654435761) % 2 ** 32 < t) for i in ids), share


def _twenty_workers(workers: int = 20, batch: int = 5, backlog: int = 2000) -> dict:
    """Run in a subprocess that imported :mod:`bench.load.swarm` first (gevent's patches): ``workers``
    greenlets, each with its own :class:`MariaDBWorkerSession` (SKIP LOCKED, ``batch``), claim and
    complete ``backlog`` jobs, logging every event as the workers do; return the audit and what
    the greenlets saw."""
    import gevent

    from bench.engines.mariadb.adapter import cooperative_wait

    socket_module = cooperative_wait()  # raises unless PyMySQL waits on gevent's sockets
    cfg = build_config(overrides={"schema": SCHEMA, "batch": batch, "history": 0, "policy": "skip_locked",
                                  "workers": workers}, dsn=DSN)
    conn = db.connect(DSN, application_name="queue-bench test admin")
    db.prepare(conn, cfg, backlog, log=lambda _msg: None)
    log, recorder = ClaimLog(), Recorder(batch)
    state = {"completed": 0, "in_flight": 0, "max_in_flight": 0, "errors": {}, "claims_by_worker": {}}
    deadline = time.monotonic() + 60

    def work(name: str) -> None:
        session = MariaDBWorkerSession(DSN, cfg, name)
        try:
            while state["completed"] < backlog and time.monotonic() < deadline:
                started = time.perf_counter()
                state["in_flight"] += 1
                state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
                try:
                    claimed = session.claim()
                except Exception as err:  # EngineError: counted, the claim was rolled back
                    kind = getattr(err, "kind", type(err).__name__)
                    state["errors"][kind] = state["errors"].get(kind, 0) + 1
                    continue
                finally:
                    state["in_flight"] -= 1
                recorder.claim(int((time.perf_counter() - started) * 1e6), len(claimed), [j[2] for j in claimed])
                for job in claimed:
                    log.claimed(job[0], job[1], job[4], job[5])
                if not claimed:
                    gevent.sleep(0.001)
                    continue
                state["claims_by_worker"][name] = state["claims_by_worker"].get(name, 0) + 1
                gevent.sleep(0)  # let the others claim while this batch is "worked"
                applied = session.complete([(j[0], j[1]) for j in claimed])
                recorder.complete(0, len(applied), len(claimed) - len(applied))
                for job in claimed:
                    log.finished(job[0], job[1], job[0] in applied)
                state["completed"] += len(applied)
        finally:
            session.close()

    try:
        started = time.monotonic()
        gevent.joinall([gevent.spawn(work, f"w{i}") for i in range(workers)], raise_error=True)
        elapsed = time.monotonic() - started
        result = audit.run_audit(conn, SCHEMA, log, seeded_rows=backlog, over_claims=recorder.counters["over_claims"])
    finally:
        db.OWNERSHIP.drop(conn, SCHEMA)
        conn.close()
        log.close()
    return {"audit": result, "socket": socket_module, "completed": state["completed"], "seconds": elapsed,
            "max_in_flight": state["max_in_flight"], "errors": state["errors"],
            "claims_by_worker": state["claims_by_worker"], "max_rows_per_claim": recorder.max_rows_per_claim,
            "over_claims": recorder.counters["over_claims"]}


def test_twenty_workers_claim_every_job_exactly_once():
    """20 greenlets, SKIP LOCKED, batch 5, 2,000 jobs: each claimed exactly once, none lost, no claim
    over 5, every invariant 0; the claims really overlapped (several in flight at once)."""
    code = ("from bench.load import swarm  # noqa: F401  gevent's patches before PyMySQL opens a socket\n"
            "import json, test_mariadb_audit as t\n"
            "print(json.dumps(t._twenty_workers()))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=TESTS.parent,
                          env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    result = out["audit"]
    assert out["socket"].startswith("gevent")
    assert out["completed"] == 2000
    assert result["invariants"] == CLEAN_INVARIANTS
    assert result["status_counts"] == {"done": 2000}
    assert result["details"]["jobs_claimed_distinct"] == 2000
    assert result["details"]["jobs_claimed_more_than_once"] == 0 and result["redeliveries"] == 0
    assert result["details"]["completions_applied"] == 2000
    assert result["details"]["rows_missing"] == 0
    assert out["over_claims"] == 0 and 2 <= out["max_rows_per_claim"] <= 5
    assert out["max_in_flight"] >= 10, out  # the greenlets' claims overlapped: real concurrency
    assert len(out["claims_by_worker"]) >= 10, out
