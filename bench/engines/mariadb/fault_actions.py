"""MariaDB's side of the fault windows: a long transaction holding a read view, killing worker connections, a
migration run on the queue table."""

from __future__ import annotations

import math
import random

import pymysql

from bench.engines.mariadb import db
from bench.engines.mariadb.error_kinds import error_number, first_line
from bench.engines.mariadb.policies import ident
from bench.engines.mariadb.sessions import WORKER_CONNECTION_IDS


def hold_snapshot(dsn: str, schema: str):
    """A ``REPEATABLE READ`` transaction with a consistent snapshot that has read the queue table, holding back
    InnoDB's purge (https://mariadb.com/kb/en/start-transaction/) until :func:`release`."""
    conn = db.connect(dsn, application_name="queue-bench long transaction")
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute(f"SELECT COUNT(*) FROM {ident(schema, 'jobs')}")
        cur.fetchall()
    return conn


def release(conn) -> None:
    """Roll back and close what :func:`hold_snapshot` or the engine's ``killer`` opened."""
    try:
        if conn.open:
            conn.rollback()
    finally:
        conn.close()


def kill_one_worker(conn) -> bool:
    """``KILL CONNECTION`` (https://mariadb.com/kb/en/kill/) of a random worker connection of this process
    (:data:`bench.engines.mariadb.sessions.WORKER_CONNECTION_IDS`); True if one was killed."""
    ids = list(WORKER_CONNECTION_IDS)
    random.shuffle(ids)
    for connection_id in ids:
        try:
            db.execute(conn, f"KILL CONNECTION {int(connection_id)}")
            return True
        except pymysql.err.MySQLError:  # that connection is already gone (1094 unknown thread id)
            WORKER_CONNECTION_IDS.discard(connection_id)
    return False


# -- the migration fault (FAULTS=migration; docs/migrations.md, "MariaDB")
#: The comment every migration statement starts with: the monitor finds it in the processlist by it.
MIGRATION_MARK = "/* queue-bench migration */ "
#: Each named migration on the queue table ({table}: its name). ADD COLUMN is instant; the volatile default's
#: table copy is forced (ALGORITHM=COPY); create_index builds by copy too, blocking writes as PostgreSQL's plain
#: CREATE INDEX does; create_index_concurrently is InnoDB's online build (ALGORITHM=INPLACE, LOCK=NONE).
#: https://mariadb.com/kb/en/innodb-online-ddl-overview/
MIGRATION_DDL = {
    "add_column": "ALTER TABLE {table} ADD COLUMN qbench_migration INT",
    "add_column_volatile": "ALTER TABLE {table} ADD COLUMN qbench_migration_at DATETIME(6) "
                           "DEFAULT CURRENT_TIMESTAMP(6), ALGORITHM=COPY",
    "create_index": "ALTER TABLE {table} ADD INDEX qbench_migration_idx (run_at), ALGORITHM=COPY",
    "create_index_concurrently": "ALTER TABLE {table} ADD INDEX qbench_migration_idx (run_at), ALGORITHM=INPLACE, "
                                 "LOCK=NONE",
}
#: The copy of the queue table's definition a migration is checked on (DDL commits: no transaction to roll back).
_CHECK_TABLE = "qbench_migration_check"


def migration_statement(fault, schema: str) -> str:
    """The SQL ``fault`` runs on the queue table (a named ``ddl``: MariaDB runs no ``sql`` of the user's)."""
    return MIGRATION_MARK + MIGRATION_DDL[fault.ddl].format(table=ident(schema, "jobs"))


def migration_fails(conn, schema: str, text: str) -> str | None:
    """Run ``text`` on an empty copy of the queue table's definition (``CREATE TABLE ... LIKE``), dropped after:
    MariaDB commits DDL, so it cannot be rolled back. The server's first line when it fails, else None."""
    copy = ident(schema, _CHECK_TABLE)
    try:
        db.execute(conn, f"CREATE TABLE {copy} LIKE {ident(schema, 'jobs')}")
        db.execute(conn, text.replace(ident(schema, "jobs"), copy))
    except pymysql.err.MySQLError as err:
        return first_line(err)
    finally:
        db.execute(conn, f"DROP TABLE IF EXISTS {copy}")
    return None


class Migration:
    """The migration's own connection, its ``lock_wait_timeout`` (the metadata lock's, whole seconds) from
    ``lock_timeout_ms`` rounded up (0: the longest the server allows)."""

    def __init__(self, dsn: str, schema: str, text: str, lock_timeout_ms: float):
        self.dsn, self.text = dsn, text
        self.conn = db.connect(dsn, application_name="queue-bench migration")
        seconds = math.ceil(lock_timeout_ms / 1000) if lock_timeout_ms > 0 else 31_536_000
        db.execute(self.conn, f"SET SESSION lock_wait_timeout = {int(seconds)}")
        #: the timeout as the server has it (``@@lock_wait_timeout``, read back), for the run's line and summary
        server_s = db.query(self.conn, "SELECT @@SESSION.lock_wait_timeout")[0][0]
        self.timeout_set = (f"lock_wait_timeout {server_s} s: {lock_timeout_ms:g} ms rounded up to whole seconds"
                            if lock_timeout_ms > 0 else f"no lock timeout (lock_wait_timeout {server_s} s)")
        self.connection_id = db.query(self.conn, "SELECT CONNECTION_ID()")[0][0]
        self._running = False

    def attempt(self) -> tuple[str, str | None]:
        """One attempt: ``("done", None)``, ``("lock_timeout", message)`` (1205) or ``("error", message)``."""
        self._running = True  # stays True when the run's end interrupts it: close() kills it then
        try:
            db.execute(self.conn, self.text)
        except pymysql.err.MySQLError as err:
            self._running = False
            return ("lock_timeout" if error_number(err) == 1205 else "error"), first_line(err)
        self._running = False
        return "done", None

    def close(self) -> None:
        """``KILL QUERY`` the statement still waiting or running, if any, from a connection of its own; close."""
        try:
            if self._running:
                killer = db.connect(self.dsn, application_name="queue-bench migration cancel")
                try:
                    db.execute(killer, f"KILL QUERY {int(self.connection_id)}")
                finally:
                    killer.close()
        finally:
            self.conn.close()
