"""Claim-policy semantics of :mod:`bench.engines.postgres.policies` on the real PostgreSQL server.

Two (or three) plain psycopg connections play the workers: connection A claims a
job and keeps its transaction open; connection B claims under each policy and we
observe what PostgreSQL does (block, error 55P03, skip). Then batch claims,
fencing-token completion, and field case FR-03 (a naive ``UPDATE … WHERE id IN
(SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`` over-claims under a forced nested
loop; the tool's claim does not).

No unbounded waits: a blocked claim runs in a thread with ``lock_timeout`` and a
bounded ``join``; non-blocking claims run with ``statement_timeout`` (SQLSTATE
57014, distinguishable from NOWAIT's 55P03).
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import sql

from bench.engines.postgres import db
from bench.engines.postgres import policies
from bench.engines.postgres.probes import FR03_SETTINGS
from bench.config.run_config import build_config
from bench.engines import get_engine

SCHEMA = "qbench"
LEASE_S = 60.0
JOBS = sql.Identifier(SCHEMA, "jobs")
#: Upper bound on any wait in this module (seconds); never reached when the code is right.
BOUND_S = 10


def _params(worker: str, batch: int = 1) -> dict:
    return {"batch": batch, "worker": worker, "lease_s": LEASE_S}


def _prepare(dsn: str, backlog: int) -> None:
    """(Re)create the tool's schema with ``backlog`` pending rows (ids 1..backlog in claim order)."""
    cfg = build_config("default", {"schema": SCHEMA, "index": "partial"}, dsn=dsn)
    with db.connect(dsn) as conn:
        db.prepare(conn, cfg, backlog=backlog, log=lambda _msg: None)


def _connect(dsn: str, *, autocommit: bool, **settings: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=autocommit)
    for name, value in settings.items():
        conn.execute(sql.SQL("SELECT set_config({}, {}, false)").format(sql.Literal(name), sql.Literal(value)))
    if not autocommit:
        conn.commit()
    return conn


def _rows(conn: psycopg.Connection) -> dict[int, tuple]:
    """id -> (status, attempts, attempt_token, locked_by) for every row."""
    cur = conn.execute(sql.SQL("SELECT id, status, attempts, attempt_token, locked_by FROM {} ORDER BY id").format(JOBS))
    return {r[0]: r[1:] for r in cur.fetchall()}


@pytest.fixture
def observer(dsn):
    """A third, autocommit connection that only looks."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def test_wait_blocks_then_takes_the_next_row(dsn, observer):
    """wait: B blocks on A's row lock (seen as a Lock wait blocked by A); after A commits,
    B re-checks A's row (no longer pending), skips it and claims the next row in claim order."""
    # B runs in a thread, a greenlet in this process (conftest.py patches it for gevent): blocked on the row
    # lock, it yields to the observer only because psycopg waits cooperatively here, which the engine checks.
    assert get_engine("postgres").sessions(dsn, build_config("default", {})).check_cooperative()
    _prepare(dsn, backlog=10)
    claim = policies.claim_sql(SCHEMA, "wait")
    with _connect(dsn, autocommit=False) as a, _connect(dsn, autocommit=True, lock_timeout=f"{BOUND_S}s") as b:
        a_rows = a.execute(claim, _params("a")).fetchall()
        assert [r[0] for r in a_rows] == [1]

        result: dict = {}

        def claim_b() -> None:
            try:
                result["rows"] = b.execute(claim, _params("b")).fetchall()
            except BaseException as err:  # reported by the main thread
                result["error"] = err

        b_pid, a_pid = b.info.backend_pid, a.info.backend_pid
        thread = threading.Thread(target=claim_b, daemon=True)
        thread.start()
        seen = None
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline and thread.is_alive():
            seen = observer.execute(
                "SELECT wait_event_type, pg_blocking_pids(pid) FROM pg_stat_activity WHERE pid = %s",
                (b_pid,)).fetchone()
            if seen and seen[0] == "Lock":
                break
            time.sleep(0.01)
        assert seen is not None and seen[0] == "Lock", f"B never waited on a lock: {seen!r}, {result!r}"
        assert seen[1] == [a_pid]
        assert thread.is_alive() and "rows" not in result

        a.commit()
        thread.join(BOUND_S)
        assert not thread.is_alive(), "B still blocked after A committed"
        assert "error" not in result, result.get("error")
        assert [r[0] for r in result["rows"]] == [2]

    rows = _rows(observer)
    assert rows[1][0::3] == ("running", "a") and rows[1][1] == 1
    assert rows[2][0::3] == ("running", "b") and rows[2][1] == 1
    assert rows[1][2] != rows[2][2]
    assert all(rows[i][0] == "pending" and rows[i][1] == 0 for i in range(3, 11))


def test_nowait_raises_lock_not_available(dsn, observer):
    """nowait: B fails at once with 55P03 lock_not_available (not a timeout) and claims nothing."""
    _prepare(dsn, backlog=10)
    with _connect(dsn, autocommit=False) as a, _connect(dsn, autocommit=True, statement_timeout=f"{BOUND_S}s") as b:
        a_rows = a.execute(policies.claim_sql(SCHEMA, "nowait"), _params("a")).fetchall()
        assert [r[0] for r in a_rows] == [1]
        with pytest.raises(psycopg.errors.LockNotAvailable) as info:
            b.execute(policies.claim_sql(SCHEMA, "nowait"), _params("b"))
        assert info.value.sqlstate == "55P03"
        assert "could not obtain lock on row" in info.value.diag.message_primary
        a.commit()
    rows = _rows(observer)
    assert [i for i, r in rows.items() if r[0] != "pending"] == [1]
    assert not any(r[3] == "b" for r in rows.values())


def test_skip_locked_returns_a_different_row_immediately(dsn, observer):
    """skip_locked: B skips A's locked row and claims the next one in claim order."""
    _prepare(dsn, backlog=10)
    claim = policies.claim_sql(SCHEMA, "skip_locked")
    with _connect(dsn, autocommit=False) as a, _connect(dsn, autocommit=True, statement_timeout=f"{BOUND_S}s") as b:
        a_rows = a.execute(claim, _params("a")).fetchall()
        b_rows = b.execute(claim, _params("b")).fetchall()
        assert [r[0] for r in a_rows] == [1]
        assert [r[0] for r in b_rows] == [2]
        # B committed (autocommit) while A is still open: B's row is visibly claimed by B.
        assert _rows(observer)[2][0::3] == ("running", "b")
        assert _rows(observer)[1][0] == "pending"  # A's claim is not committed yet
        a.commit()
    rows = _rows(observer)
    assert rows[1][3] == "a" and rows[2][3] == "b"


def test_batch_claim_takes_exactly_batch_rows_with_lease(dsn, observer):
    """batch 5: exactly the first 5 rows in claim order, each running, attempt 1, own
    token, locked_by set, lease = database now() + lease_s; the rest stay pending."""
    _prepare(dsn, backlog=20)
    with _connect(dsn, autocommit=True) as w:
        claimed = w.execute(policies.claim_sql(SCHEMA, "skip_locked"), _params("w5", batch=5)).fetchall()
    ids = sorted(r[0] for r in claimed)
    assert ids == [1, 2, 3, 4, 5]
    tokens = {r[0]: r[1] for r in claimed}
    assert len(set(tokens.values())) == 5 and None not in tokens.values()
    assert all(r[2] >= 0 for r in claimed)  # pickup_us: run_at is in the past

    cur = observer.execute(sql.SQL("""
        SELECT id, status, attempts, attempt_token, locked_by,
               extract(epoch FROM lease_expires_at - now())::float8,
               lease_expires_at = started_at + make_interval(secs => %s)
        FROM {} WHERE status <> 'pending' ORDER BY id""").format(JOBS), (LEASE_S,))
    got = cur.fetchall()
    assert [r[0] for r in got] == ids
    for job_id, status, attempts, token, locked_by, remaining_s, exact in got:
        assert (status, attempts, token, locked_by) == ("running", 1, tokens[job_id], "w5")
        assert LEASE_S - 1.0 < remaining_s <= LEASE_S
        assert exact is True
    pending = observer.execute(sql.SQL("SELECT count(*), max(attempts) FROM {} WHERE status = 'pending'")
                               .format(JOBS)).fetchone()
    assert pending == (15, 0)


def test_completion_is_fenced_by_the_attempt_token(dsn, observer):
    """complete_one applies only with the current token (also after a re-claim moved the
    token on); complete_many returns exactly the ids whose tokens match."""
    _prepare(dsn, backlog=10)
    claim = policies.claim_sql(SCHEMA, "skip_locked")
    one = policies.named_sql("complete", SCHEMA)
    many = policies.named_sql("complete_many", SCHEMA)
    with _connect(dsn, autocommit=True) as w:
        (j1, t1, *_), = w.execute(claim, _params("w")).fetchall()

        assert w.execute(one, {"id": j1, "token": t1 + 1000}).rowcount == 0
        assert _rows(observer)[j1][0::2] == ("running", t1)
        assert w.execute(one, {"id": j1, "token": t1}).rowcount == 1
        status, finished, lease = observer.execute(
            sql.SQL("SELECT status, finished_at IS NOT NULL, lease_expires_at FROM {} WHERE id = %s").format(JOBS),
            (j1,)).fetchone()
        assert (status, finished, lease) == ("done", True, None)
        assert w.execute(one, {"id": j1, "token": t1}).rowcount == 0  # already done: not applied twice

        # A stale worker: its lease "expired", the job was re-queued and re-claimed.
        (j2, t2, *_), = w.execute(claim, _params("old")).fetchall()
        w.execute(sql.SQL("UPDATE {} SET status = 'pending', run_at = now() - interval '1 hour' WHERE id = %s")
                  .format(JOBS), (j2,))
        (j2b, t2b, *_), = w.execute(claim, _params("new")).fetchall()
        assert j2b == j2 and t2b != t2
        assert w.execute(one, {"id": j2, "token": t2}).rowcount == 0
        assert _rows(observer)[j2] == ("running", 2, t2b, "new")
        assert w.execute(one, {"id": j2, "token": t2b}).rowcount == 1

        batch = w.execute(claim, _params("w", batch=3)).fetchall()
        assert len(batch) == 3
        ids = [r[0] for r in batch]
        toks = [r[1] for r in batch]
        wrong = [toks[0], toks[1] + 1000, toks[2]]
        applied = [r[0] for r in w.execute(many, {"ids": ids, "tokens": wrong}).fetchall()]
        assert sorted(applied) == sorted([ids[0], ids[2]])
    rows = _rows(observer)
    assert [rows[i][0] for i in ids] == ["done", "running", "done"]


#: Planner settings that force the nested loop to rescan the locking sub-select (FR-03).
#: On PostgreSQL 15, with only hash and merge joins off the planner puts a Materialize
#: node over the sub-select (evaluated once: no over-claim); with material also off it
#: de-duplicates the sub-select (Sort+Unique or HashAggregate) and makes it the outer
#: side (evaluated once again); with sort and hashagg off as well it is the inner side
#: of a Nested Loop Semi Join, rescanned per outer row.
NAIVE_CLAIM = sql.SQL(
    "UPDATE {jobs} SET status = 'running' WHERE id IN "
    "(SELECT id FROM {jobs} WHERE status = 'pending' ORDER BY id LIMIT 2 FOR UPDATE SKIP LOCKED)"
).format(jobs=JOBS)


def test_fr03_naive_subselect_overclaims_but_tool_claim_takes_exactly_batch(dsn):
    """FR-03: with hash/merge joins (plus material, sort, hashagg) disabled the naive form
    is a Nested Loop Semi Join that re-runs the LIMIT 2 locking sub-select per outer row
    and updates all 11 rows; the tool's claim (materialized CTE) takes exactly 2."""
    _prepare(dsn, backlog=11)
    with _connect(dsn, autocommit=True) as conn:
        for name in FR03_SETTINGS:
            conn.execute(sql.SQL("SET {} = off").format(sql.Identifier(name)))

        plan = "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + NAIVE_CLAIM).fetchall())
        assert "Nested Loop Semi Join" in plan and "Materialize" not in plan, plan
        # The locking sub-select is the inner (rescanned) side: it comes after the outer scan.
        assert plan.index("Seq Scan on jobs") < plan.index("LockRows"), plan

        with conn.transaction(force_rollback=True):
            updated = conn.execute(NAIVE_CLAIM).rowcount
        # Each rescan skips rows this statement already updated and locks the next two,
        # so every outer row finds a match: the LIMIT 2 claim takes the whole table.
        assert updated == 11

        plan = "\n".join(r[0] for r in conn.execute(
            sql.SQL("EXPLAIN ") + policies.claim_sql(SCHEMA, "skip_locked"), _params("t", batch=2)).fetchall())
        assert "CTE picked" in plan and "CTE Scan on picked" in plan, plan
        rows = conn.execute(policies.claim_sql(SCHEMA, "skip_locked"), _params("t", batch=2)).fetchall()
        assert sorted(r[0] for r in rows) == [1, 2]
        running = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE status = 'running'").format(JOBS)).fetchone()[0]
        assert running == 2
