"""MariaDB's side of the fault windows: a long transaction holding a read view, killing worker connections, a
migration run on the queue table."""

from __future__ import annotations

import random

from bench.engines.base import EngineError
from bench.engines.mariadb import db
from bench.engines.mariadb.adapter import LOCK_WAIT_TIMEOUT, connect_dsn, lock_timeout, translated
from bench.engines.mariadb.policies import ident
from bench.engines.mariadb.sessions import WORKER_CONNECTION_IDS


def hold_snapshot(dsn: str, schema: str):
    """A ``REPEATABLE READ`` transaction with a consistent snapshot that has read the queue table, holding back
    InnoDB's purge (https://mariadb.com/kb/en/start-transaction/) until :func:`release`."""
    conn = connect_dsn(dsn, isolation="repeatable_read", application_name="queue-bench long transaction")
    with conn.cursor() as cur:
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
            with translated():
                db.execute(conn, f"KILL CONNECTION {int(connection_id)}")
            return True
        except EngineError:  # that connection is already gone (1094 unknown thread id)
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
        with translated():
            db.execute(conn, f"CREATE TABLE {copy} LIKE {ident(schema, 'jobs')}")
            db.execute(conn, text.replace(ident(schema, "jobs"), copy))
    except EngineError as err:
        return str(err)
    finally:
        db.execute(conn, f"DROP TABLE IF EXISTS {copy}")
    return None


class Migration:
    """The migration's own connection, its ``lock_wait_timeout`` (the metadata lock's, whole seconds) from
    ``lock_timeout_ms`` rounded up (0: the longest the server allows)."""

    def __init__(self, dsn: str, schema: str, text: str, lock_timeout_ms: float):
        self.dsn, self.text = dsn, text
        self.conn = db.connect(dsn, application_name="queue-bench migration")
        #: the timeout as the server has it (``lock_wait_timeout 2 s``, read back), for the run's line and summary
        server = lock_timeout(self.conn, lock_timeout_ms)
        self.timeout_set = (f"{server}: {lock_timeout_ms:g} ms rounded up to whole seconds"
                            if lock_timeout_ms > 0 else f"no lock timeout ({server})")
        self.connection_id = db.query(self.conn, "SELECT CONNECTION_ID()")[0][0]
        self._running = False

    def attempt(self) -> tuple[str, str | None]:
        """One attempt: ``("done", None)``, ``("lock_timeout", message)`` (1205) or ``("error", message)``."""
        self._running = True  # stays True when the run's end interrupts it: close() kills it then
        try:
            with translated():
                db.execute(self.conn, self.text)
        except EngineError as err:
            self._running = False
            return ("lock_timeout" if err.kind == LOCK_WAIT_TIMEOUT else "error"), str(err)
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
