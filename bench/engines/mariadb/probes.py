"""Probes of what InnoDB's locking reads do (experiments 4 and 13; why: docs/design.md, claim protocol),
each on a scratch table in the tool's database: https://mariadb.com/kb/en/innodb-lock-modes/,
https://mariadb.com/kb/en/subquery-limitations/ (error 1235)."""

from __future__ import annotations

import contextlib
import secrets
from typing import Iterator

from bench.engines.base import EngineError, LockNotAvailable
from bench.engines.mariadb import db
from bench.engines.mariadb.adapter import (ISOLATION_LEVELS, NOT_SUPPORTED_YET, connect_dsn, lock_timeout,
                                           statement_timeout, translated)
from bench.engines.mariadb.policies import claim_select, ident

#: Each probe session's lock timeouts (``innodb_lock_wait_timeout``, ``lock_wait_timeout``) and
#: ``max_statement_time`` (s): a safety net.
PROBE_TIMEOUT_S = 5
#: The isolation of the probe's sessions: the engine's default ``ISOLATION`` (next-key locks).
PROBE_ISOLATION = "repeatable_read"

_CREATE = """\
CREATE TABLE {table} (
    id BIGINT NOT NULL PRIMARY KEY, priority SMALLINT NOT NULL DEFAULT 0,
    run_at DATETIME(6) NOT NULL DEFAULT NOW(6), status VARCHAR(8) NOT NULL DEFAULT 'pending'
) ENGINE = InnoDB"""


def _session(dsn: str, name: str):
    conn = connect_dsn(dsn, isolation=PROBE_ISOLATION, application_name=f"queue-bench probe {name}")
    lock_timeout(conn, PROBE_TIMEOUT_S * 1000, row_locks=True)
    statement_timeout(conn, PROBE_TIMEOUT_S * 1000)
    return conn


@contextlib.contextmanager
def scratch_table(dsn: str, schema: str, kind: str, rows: int) -> Iterator[tuple[object, str, str]]:
    """A table ``<schema>.qbench_probe_<kind>_<hex>`` of ``rows`` pending rows (ids 1..rows in claim order),
    dropped after the block (the database too if created); yields (admin connection, quoted table, name).
    Raises ConfigError (``SCHEMA``, ``DSN``)."""
    admin = db.connect(dsn, application_name="queue-bench probe")
    name = f"qbench_probe_{kind}_{secrets.token_hex(4)}"
    table = ident(schema, name)
    try:
        with db.OWNERSHIP.borrowed(admin, schema):
            try:
                db.execute(admin, _CREATE.format(table=table))
                db.execute(admin, f"INSERT INTO {table} (id, run_at) VALUES " + ",".join(
                    f"({i}, NOW(6) - INTERVAL {(rows - i + 1) * 1000} MICROSECOND)" for i in range(1, rows + 1)))
                yield admin, table, name
            finally:
                db.execute(admin, f"DROP TABLE IF EXISTS {table}")
    finally:
        admin.close()


@contextlib.contextmanager
def _rolled_back(conn) -> Iterator[None]:
    """A transaction on ``conn`` for the block, rolled back after it."""
    db.execute(conn, "START TRANSACTION")
    try:
        yield
    finally:
        db.execute(conn, "ROLLBACK")


def _explain(conn, statement: str) -> str:
    """``EXPLAIN`` of ``statement`` on ``conn``: a row a line, tab-separated."""
    return "\n".join("\t".join(str(v) for v in r) for r in db.query(conn, "EXPLAIN " + statement))


def _locked_by_nowait(conn, table: str, ids: list[int]) -> list[int]:
    """The ``ids`` that ``FOR UPDATE NOWAIT`` on ``conn`` cannot lock (error 1205), each tried and rolled back."""
    locked = []
    for job_id in ids:
        with _rolled_back(conn):
            try:
                with translated(policy="nowait"):
                    db.query(conn, f"SELECT id FROM {table} WHERE id = {int(job_id)} FOR UPDATE NOWAIT")
            except LockNotAvailable:
                locked.append(job_id)
    return locked


def offset_lock_probe(dsn: str, schema: str) -> dict:
    """Experiment 4 on ids 1, 2, 3: A's ``LIMIT 1 OFFSET 1 FOR UPDATE`` held, B's ``SKIP LOCKED`` claim, C's
    ``NOWAIT`` on each row. Returns ``{"offset_returned", "skip_locked_got", "locked_rows", "method": "nowait
    probe", "plan", "isolation"}``. Raises ConfigError (``SCHEMA``, ``DSN``), EngineError and PyMySQL's errors."""
    with scratch_table(dsn, schema, "offset", rows=3) as (_admin, table, _name):
        a, b, c = (_session(dsn, n) for n in ("A", "B", "C"))
        try:
            offset_select = f"SELECT id FROM {table} ORDER BY id LIMIT 1 OFFSET 1 FOR UPDATE"
            plan = _explain(a, offset_select)
            with _rolled_back(a):
                row = db.query(a, offset_select)
                with _rolled_back(b):
                    got = db.query(b, f"SELECT id FROM {table} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
                locked = _locked_by_nowait(c, table, [1, 2, 3])
        finally:
            for conn in (a, b, c):
                conn.close()
    return {"offset_returned": int(row[0][0]) if row else None, "skip_locked_got": int(got[0][0]) if got else None,
            "locked_rows": locked, "method": "nowait probe", "plan": plan,
            "isolation": ISOLATION_LEVELS[PROBE_ISOLATION]}


def subselect_overclaim_probe(dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
    """Experiment 13 (FR-03) on ``rows`` pending rows, rolled back: the sub-select claim, then the tool's
    claim step. Returns ``{"limit", "subselect_rows", "tool_claim_rows", "plan"}``, with ``not_applicable``
    (the server's message) on error 1235. Raises ConfigError (``SCHEMA``, ``DSN``), ValueError (``rows`` or
    ``limit`` < 1), EngineError and PyMySQL's other errors."""
    if rows < 1 or limit < 1:
        raise ValueError(f"rows and limit must be >= 1, got rows={rows!r}, limit={limit!r}")
    with scratch_table(dsn, schema, "subselect", rows=rows) as (_admin, table, name):
        conn = _session(dsn, "subselect")
        try:
            picked = claim_select(schema, "skip_locked", "composite", limit, table=name)
            naive = f"UPDATE {table} SET status = 'running' WHERE id IN ({picked})"
            subselect_rows = plan = why = None
            with _rolled_back(conn):
                try:
                    with translated():
                        subselect_rows = db.execute(conn, naive)
                        plan = _explain(conn, naive)
                except EngineError as err:
                    if err.kind != NOT_SUPPORTED_YET:
                        raise
                    why = (f"MariaDB does not allow LIMIT in an IN sub-query, so the sub-select claim cannot run "
                           f"(error 1235: {err})")
            with _rolled_back(conn):
                tool_rows = len(db.query(conn, picked))
        finally:
            conn.close()
    result = {"limit": int(limit), "subselect_rows": subselect_rows, "tool_claim_rows": tool_rows, "plan": plan}
    return {**result, "not_applicable": why} if why else result
