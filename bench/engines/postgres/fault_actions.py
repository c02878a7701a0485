"""The database side of the fault windows (``FAULTS``) on PostgreSQL: a snapshot held, a worker backend killed,
a migration run on the queue table."""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from bench.engines.postgres import db
from bench.engines.base import EngineError, LockNotAvailable
from bench.engines.postgres.adapter import apply_settings, lock_timeout, statement_timeout, translated


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


# -- the migration fault (FAULTS=migration; docs/migrations.md)
#: Each named migration on the queue table: {table} its qualified name, {column} the column an index is built
#: on (its eligible time, else its id). add_column only writes the catalog; a volatile default rewrites the table.
MIGRATION_DDL = {
    "add_column": "ALTER TABLE {table} ADD COLUMN qbench_migration int",
    "add_column_volatile": "ALTER TABLE {table} ADD COLUMN qbench_migration_at timestamptz DEFAULT clock_timestamp()",
    "create_index": "CREATE INDEX qbench_migration_idx ON {table} ({column})",
    "create_index_concurrently": "CREATE INDEX CONCURRENTLY qbench_migration_idx ON {table} ({column})",
}
#: What a failed ``CREATE INDEX CONCURRENTLY`` leaves (an invalid index), removed before it is tried again.
_CONCURRENT_LEFTOVER = "DROP INDEX CONCURRENTLY IF EXISTS {schema}.qbench_migration_idx"
_CONCURRENTLY = re.compile(r"\bconcurrently\b", re.I)


def migration_statement(fault, schema: str, table: str, column: str) -> str:
    """The SQL ``fault`` runs: its ``sql`` as written (under ``search_path`` = ``schema``), or its ``ddl``'s."""
    if fault.ddl == "sql":
        return fault.sql
    name = sql.Identifier(schema, table).as_string(None)
    return MIGRATION_DDL[fault.ddl].format(table=name, column=sql.Identifier(column).as_string(None))


def migration_fails(conn: psycopg.Connection, schema: str, text: str) -> str | None:
    """Run ``text`` on the prepared table in a transaction rolled back (``CONCURRENTLY`` taken out: it cannot
    run in one); the database's first line when it fails, else None."""
    try:
        with translated(), conn.transaction(force_rollback=True):
            # no load yet: a lock held this long is someone else's
            apply_settings(conn, {"lock_timeout": "10s", "search_path": schema}, local=True)
            conn.execute(_CONCURRENTLY.sub("", text, count=1))
    except EngineError as err:
        return str(err)
    return None


class Migration:
    """The migration's own connection (``queue-bench migration``), ``lock_timeout`` set (0: none)."""

    def __init__(self, dsn: str, schema: str, text: str, lock_timeout_ms: float):
        self.text, self.schema = text, schema
        self.conn = db.connect(dsn, application_name="queue-bench migration")
        apply_settings(self.conn, {"search_path": schema})
        statement_timeout(self.conn, 0)
        #: the timeout as the server has it (read back: whole ms), for the run's line and summary
        shown = lock_timeout(self.conn, lock_timeout_ms)
        asked = "" if shown == f"{lock_timeout_ms:g}ms" else f", {lock_timeout_ms:g} ms asked"
        self.timeout_set = f"lock_timeout {shown}{asked}" if shown != "0" else "no lock timeout"
        self._tried = False

    def attempt(self) -> tuple[str, str | None]:
        """One attempt: ``("done", None)``, ``("lock_timeout", message)`` (55P03) or ``("error", message)``."""
        try:
            with translated():
                if self._tried and _CONCURRENTLY.search(self.text):
                    self.conn.execute(_CONCURRENT_LEFTOVER.format(schema=sql.Identifier(self.schema).as_string(None)))
                self._tried = True
                self.conn.execute(self.text)
        except LockNotAvailable as err:
            return "lock_timeout", str(err)
        except EngineError as err:
            return "error", str(err)
        return "done", None

    def close(self) -> None:
        """Cancel the statement in progress, if any (a lock request left waiting would stall the claims after the
        run), then close."""
        try:
            if not self.conn.closed:
                self.conn.cancel_safe(timeout=5.0)  # psycopg: a cancel request, cooperative
        finally:
            self.conn.close()
