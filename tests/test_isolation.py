"""ISOLATION is applied on the workers' own sessions on both engines (what run.json records is what
the sessions ran), against the real servers."""

from __future__ import annotations

import pymysql
import pytest

from bench.config.run_config import build_config
from bench.engines.mariadb.sessions import MariaDBWorkerSession
from bench.engines.postgres import db
from bench.engines.mariadb.dsn import connect_args
from bench.engines.postgres.adapter.wire import rows
from bench.engines.postgres.sessions import PgWorkerSession
from conftest import MARIADB_DSN


@pytest.mark.parametrize("level,shown", [("read_committed", "read committed"), ("repeatable_read", "repeatable read"),
                                         ("serializable", "serializable")])
def test_postgres_worker_sessions_run_at_the_isolation_asked(dsn, level, shown):
    cfg = build_config("default", {"isolation": level, "schema": "qbench_iso"}, dsn=dsn)
    conn = db.connect(dsn)
    db.prepare(conn, cfg, 10, log=lambda _m: None)  # the session prepares its claim on the table
    conn.close()
    session = PgWorkerSession(dsn, cfg, "worker-1")
    try:
        assert rows(session.session.query(b"SHOW transaction_isolation"))[0][0].decode() == shown
    finally:
        session.close()


@pytest.mark.parametrize("level,shown", [("read_committed", "READ-COMMITTED"), ("repeatable_read", "REPEATABLE-READ"),
                                         ("serializable", "SERIALIZABLE")])
def test_mariadb_worker_sessions_run_at_the_isolation_asked(maria_schema, level, shown):
    _, schema = maria_schema
    cfg = build_config("default", {"isolation": level, "schema": schema}, dsn=MARIADB_DSN)
    with pymysql.connect(**connect_args(MARIADB_DSN), autocommit=True) as conn, conn.cursor() as cur:
        # a worker session reads nothing from its table as it opens: the table must be there
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(f"CREATE TABLE `{schema}`.jobs (id bigint PRIMARY KEY)")
    session = MariaDBWorkerSession(MARIADB_DSN, cfg, "worker-1")
    try:
        assert session.run("SELECT @@tx_isolation")[0][1][0][0] == shown
    finally:
        session.close()
