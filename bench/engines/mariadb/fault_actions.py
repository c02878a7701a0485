"""MariaDB's side of the fault windows: a long transaction holding a read view, and killing worker connections."""

from __future__ import annotations

import random

import pymysql

from bench.engines.mariadb import db
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
