"""The database side of the fault windows (``FAULTS``) on PostgreSQL: a snapshot held, a worker backend killed."""

from __future__ import annotations

import psycopg
from psycopg import sql

from bench.engines.postgres import db


def hold_snapshot(dsn: str, schema: str, table: str = "jobs") -> psycopg.Connection:
    """A ``REPEATABLE READ`` transaction that has read ``schema.table``, holding back the xmin horizon until
    :func:`release`."""
    conn = db.connect(dsn, autocommit=False, application_name="queue-bench long transaction")
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table)))
    return conn


def release(conn: psycopg.Connection) -> None:
    """Roll back and close what :func:`hold_snapshot` or the engine's ``killer`` opened."""
    try:
        if not conn.closed and not conn.autocommit:
            conn.rollback()
    finally:
        conn.close()


def kill_one_worker(conn: psycopg.Connection) -> bool:
    """Terminate a random worker backend (``queue-bench [p<i>-]worker-<n>``) of this database
    (https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-ADMIN-SIGNAL); True if one was."""
    row = conn.execute("""
        SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND application_name ~ '^queue-bench (p[0-9]+-)?worker-[0-9]+$'
        ORDER BY random() LIMIT 1""").fetchone()
    return bool(row and row[0])
