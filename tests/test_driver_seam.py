"""Issue 37's driver seam, against the real servers: each adapter's error translator fed errors the server
really sent (or a connection it really refused), the session state it promises read back from the server,
a distributed run that stops at once when a worker's first session is refused, and the suspect rules on
workers connected and failed claims."""

from __future__ import annotations

import json
import re
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter

import psycopg
import pymysql
import pytest
from psycopg import sql

from bench.config.run_config import build_config, from_public
from bench.engines.base import ConnectFailed, EngineError, LockNotAvailable
from bench.engines.driver import CONNECT_FAILED
from bench.engines.mariadb.dsn import connect_args
from bench.engines.postgres import adapter as pg
from bench.engines.postgres.adapter import errors as pg_errors
from bench.engines.postgres.adapter.wire import rows
from bench.errors import EXIT_BAD_INPUT, ConfigError, SessionRefused
from bench.load.driver import wait_for_workers
from bench.measure import metrics
from bench.run_summary import suspect
from bench.run_summary.facts import Figures, RunFacts
from bench.runner.run import Run
from conftest import MARIADB_DSN, REPO, fresh_database, run_and_load


def _eventually(check, within_s: float = 5.0) -> bool:
    """True once ``check()`` is, polled every 50 ms for at most ``within_s`` (a server ends a closed connection's
    session asynchronously)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _free_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _with(dsn: str, **params) -> str:
    """``dsn`` with some of its parameters replaced."""
    return psycopg.conninfo.make_conninfo(dsn, **params)


@pytest.fixture
def pg_schema(dsn):
    """(dsn, a fresh schema holding table ``lk`` with row 1); the schema is dropped after the test."""
    name = f"qb_seam_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {s}; CREATE TABLE {s}.lk (id int PRIMARY KEY); "
                             "INSERT INTO {s}.lk VALUES (1)").format(s=sql.Identifier(name)))
    yield dsn, name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def empty_dsn():
    """DSN of a second fresh database that holds no schema of the tool's (dropped after the module)."""
    with fresh_database() as fresh:
        yield fresh


# --------------------------------------------------------------------------------------------------------------
# 1. PostgreSQL: the translator, fed what the server sent


@pytest.mark.parametrize("statement,sqlstate,message", [
    ("SELECT 1/0", "22012", "division by zero"),
    ("SELECT * FROM qb_no_such_table", "42P01", 'relation "qb_no_such_table" does not exist'),
    ("SET work_mem = 'lots'", "22023", 'invalid value for parameter "work_mem": "lots"'),
    ("SET qb_no_such_setting = 1", "42704", 'unrecognized configuration parameter "qb_no_such_setting"'),
])
def test_pg_a_statement_error_is_keyed_by_its_sqlstate_and_leaves_the_connection_up(dsn, statement, sqlstate, message):
    conn = pg.connect(dsn)
    try:
        with pytest.raises(EngineError) as caught:
            with pg.translated(lambda: conn.broken):
                conn.execute(statement)
        err = caught.value
        assert type(err) is EngineError, type(err)  # neither ConnectFailed nor LockNotAvailable
        assert (err.kind, str(err), err.lost) == (sqlstate, message, False)
        assert conn.execute("SELECT 41 + 1").fetchone()[0] == 42  # still usable
    finally:
        conn.close()


def test_pg_a_missing_table_refuses_a_session_for_good(pg_schema):
    dsn, schema = pg_schema
    with pytest.raises(ConnectFailed) as caught:
        pg.open_session(dsn, "qb-seam", pg.SessionState(settings={"search_path": schema},
                                                         statements={"claim": "SELECT id FROM jobs WHERE id = $1"}))
    err = caught.value
    assert (err.kind, err.permanent, err.lost) == ("42P01", True, True)
    assert str(err) == 'relation "jobs" does not exist'
    assert err.cause.startswith("the queue table is not there"), err.cause
    # the same table in the schema: the session opens (the refusal was the table, not the statement)
    session = pg.open_session(dsn, "qb-seam", pg.SessionState(settings={"search_path": schema},
                                                               statements={"claim": "SELECT id FROM lk WHERE id = $1"}))
    try:
        assert rows(session.execute(b"claim", [b"1"])) == [(b"1",)]
    finally:
        session.close()


@pytest.mark.parametrize("settings,sqlstate,cause", [
    ({"work_mem": "lots"}, "22023", "a setting's value the server refuses"),
    ({"qb_no_such_setting": "1"}, "42704", "a setting or object the server does not know"),
])
def test_pg_a_bad_setting_refuses_a_connection_for_good(dsn, settings, sqlstate, cause):
    with pytest.raises(ConnectFailed) as caught:
        pg.connect(dsn, settings=settings)
    err = caught.value
    assert (err.kind, err.permanent, err.cause) == (sqlstate, True, cause)
    assert next(iter(settings)) in str(err)


def test_pg_connect_failures(dsn):
    missing_db, missing_role = f"qb_no_db_{secrets.token_hex(3)}", f"qb_no_role_{secrets.token_hex(3)}"
    cases = [  # (dsn, kind, permanent, words of the message, the cause's start)
        (_with(dsn, dbname=missing_db), CONNECT_FAILED, True, f'database "{missing_db}" does not exist',
         "the database does not exist"),
        (_with(dsn, user=missing_role), CONNECT_FAILED, True, f'role "{missing_role}" does not exist',
         "the server refused the user"),
        (_with(dsn, port=str(_free_port())), CONNECT_FAILED, False, "Connection refused", ""),
        ("postgresql://postgres@127.0.0.1:5432/test?qb_bogus=1", pg.INVALID_DSN, True,
         'invalid URI query parameter: "qb_bogus"', ""),
        ("host=127.0.0.1 port", pg.INVALID_DSN, True, "not a valid connection string", ""),
    ]
    for target, kind, permanent, words, cause in cases:
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as caught:
            pg.connect(target, connect_timeout_s=3)
        err = caught.value
        assert (err.kind, err.permanent) == (kind, permanent), (target, err.kind, err.permanent, str(err))
        assert words in str(err), (target, str(err))
        assert err.cause.startswith(cause) and bool(err.cause) == bool(cause), (target, err.cause)
        assert time.monotonic() - started < 3, target  # refused, not timed out
    # the tool's own connections: the same failures as bad input naming the parameter
    with pytest.raises(ConfigError, match=r"^--dsn: not a valid connection string"):
        pg.connect_dsn("host=127.0.0.1 port")
    with pytest.raises(ConfigError, match=rf'^--dsn-replica: cannot connect \(.*database "{missing_db}" does not exist'):
        pg.connect_dsn(_with(dsn, dbname=missing_db), param="DSN_REPLICA")


def test_pg_a_dsn_is_parsed_through_the_adapter_and_refused_as_bad_input():
    """Parsing alone (nothing connects): the adapter's kind for a bad string, and ``DSN`` named as bad input."""
    from bench.engines.postgres.dsn import non_loopback_host
    assert pg.conninfo_params("host=db.example port=5433")["port"] == "5433"
    with pytest.raises(ConnectFailed) as caught:
        pg.conninfo_params("host=127.0.0.1 port")
    assert (caught.value.kind, caught.value.permanent) == (pg.INVALID_DSN, True)
    assert non_loopback_host("postgresql://u@db.example:5432/x") == "db.example"
    with pytest.raises(ConfigError, match=r'^--dsn: not a valid connection string \(missing "=" after "port"'):
        non_loopback_host("host=127.0.0.1 port")


def test_pg_nowait_on_a_locked_row_is_lock_not_available_on_the_hot_path(pg_schema):
    dsn, schema = pg_schema
    holder = pg.connect(dsn)
    session = pg.open_session(dsn, "qb-seam nowait", pg.SessionState(
        settings={"search_path": schema}, statements={"lock": "SELECT id FROM lk WHERE id = $1 FOR UPDATE NOWAIT"}))
    try:
        # free row: the claim takes it
        with pg.translated(lambda: session.broken):
            assert rows(session.execute(b"lock", [b"1"])) == [(b"1",)]
        holder.execute("BEGIN")
        holder.execute(sql.SQL("SELECT id FROM {}.lk WHERE id = 1 FOR UPDATE").format(sql.Identifier(schema)))
        with pytest.raises(LockNotAvailable) as caught:
            with pg.translated(lambda: session.broken):
                session.execute(b"lock", [b"1"])
        err = caught.value
        assert (err.kind, err.lost) == (pg.LOCK_NOT_AVAILABLE, False) == ("55P03", False)
        assert str(err) == 'could not obtain lock on row in relation "lk"'
        assert not session.broken
        holder.execute("ROLLBACK")
        with pg.translated(lambda: session.broken):
            assert rows(session.execute(b"lock", [b"1"])) == [(b"1",)]  # retried once the lock is gone
    finally:
        session.close()
        holder.close()


def test_pg_a_statement_timeout_is_57014_and_not_permanent(dsn):
    conn = pg.connect(dsn)
    try:
        assert pg.statement_timeout(conn, 50) == "50ms"
        started = time.monotonic()
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT pg_sleep(3)")
        assert time.monotonic() - started < 2  # the server cancelled it
        raw = caught.value
        assert pg_errors.is_permanent(raw) is False
        err = pg.translate(raw, lost=conn.broken)
        assert (type(err), err.kind, err.lost, str(err)) == (
            EngineError, pg.QUERY_CANCELED, False, "canceling statement due to statement timeout")
        opening = pg.translate(raw, connecting=True)  # while a session opens: retried, not a refusal
        assert isinstance(opening, ConnectFailed) and (opening.kind, opening.permanent, opening.cause) == (
            "57014", False, "")
        assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        conn.close()


def test_pg_a_terminated_backend_is_lost_on_a_prepared_session(dsn):
    session = pg.open_session(dsn, "qb-seam victim", pg.SessionState(statements={"one": "SELECT $1::int"}))
    admin = pg.connect(dsn)
    try:
        pid = int(rows(session.query(b"SELECT pg_backend_pid()"))[0][0])
        assert not session.broken
        # the second argument waits (up to 5 s) until the backend is gone
        assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0] is True
        with pytest.raises(EngineError) as caught:
            with pg.translated(lambda: session.broken):
                session.execute(b"one", [b"7"])
        err = caught.value
        assert type(err) is EngineError and err.lost is True, (type(err), err.lost)
        assert err.kind == "57P01", err.kind  # the FATAL the server sent, not a bare "connection_lost"
        assert session.broken
    finally:
        session.close()
        admin.close()


# --------------------------------------------------------------------------------------------------------------
# 2. PostgreSQL: the session state, read back from the server


def test_pg_open_session_keeps_its_settings_statements_and_listen(pg_schema):
    dsn, schema = pg_schema
    session = pg.open_session(dsn, "qb-seam state", pg.SessionState(
        settings={"search_path": schema, "work_mem": "8MB"}, statements={"one": "SELECT $1::int"}, listen="chan"))
    admin = pg.connect(dsn)
    try:
        assert rows(session.query(b"SHOW search_path")) == [(schema.encode(),)]
        assert rows(session.query(b"SHOW work_mem")) == [(b"8MB",)]
        assert rows(session.query(b"SELECT name, statement FROM pg_prepared_statements")) == [
            (b"one", b"SELECT $1::int")]
        assert rows(session.query(b"SELECT pg_listening_channels()")) == [(b"chan",)]
        assert rows(session.execute(b"one", [b"41"])) == [(b"41",)]
        assert rows(session.query(b"SELECT count(*) FROM lk")) == [(b"1",)]  # the search_path reaches the schema
        pid = int(rows(session.query(b"SELECT pg_backend_pid()"))[0][0])
        assert admin.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s",
                             (pid,)).fetchone() == ("qb-seam state",)
        # the LISTEN is live: a NOTIFY from another connection wakes the session
        admin.execute("NOTIFY chan")
        assert session.wait_notification(5) is True
    finally:
        session.close()
        admin.close()


def test_pg_timeouts_return_what_the_server_set(dsn):
    conn = pg.connect(dsn)
    try:
        assert pg.statement_timeout(conn, 1500) == "1500ms"
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        assert pg.lock_timeout(conn, 1.5) == "2ms"  # rounded up, as the server rounds
        assert conn.execute("SHOW lock_timeout").fetchone() == ("2ms",)
        assert pg.lock_timeout(conn, 2000) == "2s"  # the server's own unit, as SHOW gives it
        assert (pg.statement_timeout(conn, 0), pg.lock_timeout(conn, 0)) == ("0", "0")
        pg.apply_settings(conn, {"work_mem": "5MB"})
        assert conn.execute("SHOW work_mem").fetchone() == ("5MB",)
        with psycopg.connect(dsn) as fresh:
            default = fresh.execute("SHOW work_mem").fetchone()
        pg.reset_settings(conn, ["work_mem"])
        assert conn.execute("SHOW work_mem").fetchone() == default
    finally:
        conn.close()


def test_pg_connect_names_itself_and_prepares_nothing_on_its_own(dsn):
    conn = pg.connect(dsn, application_name="qb-seam named")
    control = psycopg.connect(dsn, autocommit=True)  # psycopg's default: prepared from the 5th execution
    try:
        assert conn.execute("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                            ).fetchone() == ("qb-seam named",)
        for c in (conn, control):
            for i in range(10):
                assert c.execute("SELECT %s::int + 1", (i,)).fetchone() == (i + 1,)
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        assert control.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] >= 1
    finally:
        conn.close()
        control.close()


def test_pg_schema_lock_is_one_connection_at_a_time(dsn):
    schema = f"qb_seam_{secrets.token_hex(4)}"
    first, second = pg.connect(dsn), pg.connect(dsn)
    try:
        assert pg.try_lock_schema(first, schema) is True
        assert pg.try_lock_schema(second, schema) is False
        assert pg.try_lock_schema(second, schema + "_other") is True  # per schema
        pg.unlock_schema(first, schema)
        assert pg.try_lock_schema(second, schema) is True
        assert pg.try_lock_schema(first, schema) is False
        second.close()  # the lock ends with its connection, once the server has seen it go
        assert _eventually(lambda: pg.try_lock_schema(first, schema)), "the lock outlived its connection"
    finally:
        first.close()
        second.close()


# --------------------------------------------------------------------------------------------------------------
# 3. MariaDB: the same contract


@pytest.fixture
def maria():
    """The MariaDB adapter (imported here: a broken import fails these tests only)."""
    from bench.engines.mariadb import adapter
    return adapter


def _raw_connect_error(dsn: str) -> BaseException:
    """What PyMySQL itself raises connecting to ``dsn``."""
    with pytest.raises(pymysql.err.MySQLError) as caught:
        pymysql.connect(**connect_args(dsn), connect_timeout=3)
    return caught.value


def test_maria_connect_failures(maria):
    from bench.engines.mariadb.adapter import errors
    missing_db, missing_user = f"qb_no_db_{secrets.token_hex(3)}", f"qb_no_user_{secrets.token_hex(3)}"
    port = _free_port()
    # An unknown user is refused as 1045 or 1698 (the server answers it with a plugin of its choosing, so
    # that a client cannot tell a missing user from a wrong password).
    cases = [  # (dsn, error numbers, permanent, words of the message, words of the cause)
        (f"mysql://root@127.0.0.1:3306/{missing_db}", {1049}, True, f"Unknown database '{missing_db}'", "database"),
        (f"mysql://root:qb-wrong-{secrets.token_hex(3)}@127.0.0.1:3306/", {1045}, True,
         "Access denied for user 'root'@'127.0.0.1' (using password: YES)", "user"),
        (f"mysql://{missing_user}@127.0.0.1:3306/", {1045, 1698}, True, f"Access denied for user '{missing_user}'", "user"),
        (f"mysql://root@127.0.0.1:{port}/", {2003}, False, "Connection refused", None),
    ]
    for target, numbers, permanent, words, cause in cases:
        raw = _raw_connect_error(target)
        assert errors.error_number(raw) in numbers, (target, raw)
        assert errors.is_permanent(raw) is permanent, target
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as caught:
            maria.open_connection(target)
        err = caught.value
        assert (err.kind, err.permanent, err.lost) == (CONNECT_FAILED, permanent, True), (target, err.kind)
        assert words in str(err), (target, str(err))
        if cause is None:
            assert err.cause == "", (target, err.cause)
        else:
            assert cause in err.cause, (target, err.cause)
        assert time.monotonic() - started < 3, target
    with pytest.raises(ConfigError, match=rf"^--dsn: cannot connect \(Unknown database '{missing_db}'"):
        maria.connect_dsn(f"mysql://root@127.0.0.1:3306/{missing_db}")


def test_maria_statement_errors(maria, maria_schema):
    from bench.engines.mariadb.adapter import errors
    _, schema = maria_schema
    holder = maria.open_connection(MARIADB_DSN)
    claimer = maria.open_connection(MARIADB_DSN)
    try:
        maria.execute(holder, f"CREATE DATABASE `{schema}`")
        maria.execute(holder, f"CREATE TABLE `{schema}`.lk (id int PRIMARY KEY) ENGINE=InnoDB")
        maria.execute(holder, f"INSERT INTO `{schema}`.lk VALUES (1)")
        # 1146: a statement's error, keyed by number; while a session opens, a refusal for good
        missing = f"SELECT * FROM `{schema}`.qb_no_such_table"
        with pytest.raises(pymysql.err.MySQLError) as caught:
            maria.query(claimer, missing)
        assert errors.error_number(caught.value) == 1146
        with pytest.raises(EngineError) as caught:
            with maria.translated():
                maria.query(claimer, missing)
        assert type(caught.value) is EngineError
        assert (caught.value.kind, caught.value.lost) == ("mysql_1146", False)
        assert str(caught.value) == f"Table '{schema}.qb_no_such_table' doesn't exist"
        with pytest.raises(ConnectFailed) as caught:
            with maria.translated(connecting=True):
                maria.query(claimer, missing)
        assert caught.value.permanent is True and "queue table" in caught.value.cause, caught.value.cause
        # 1205: under NOWAIT the policy's refusal, otherwise a lock wait that timed out
        maria.execute(holder, "BEGIN")
        maria.query(holder, f"SELECT id FROM `{schema}`.lk WHERE id = 1 FOR UPDATE")
        nowait = f"SELECT id FROM `{schema}`.lk WHERE id = 1 FOR UPDATE NOWAIT"
        with pytest.raises(pymysql.err.MySQLError) as caught:
            maria.query(claimer, nowait)
        assert errors.error_number(caught.value) == 1205
        with pytest.raises(LockNotAvailable) as caught:
            with maria.translated(policy="nowait"):
                maria.query(claimer, nowait)
        assert (caught.value.kind, caught.value.lost) == (maria.LOCK_NOT_AVAILABLE, False)
        with pytest.raises(EngineError) as caught:
            with maria.translated():
                maria.query(claimer, nowait)
        assert type(caught.value) is EngineError and caught.value.kind == maria.LOCK_WAIT_TIMEOUT
        maria.execute(holder, "ROLLBACK")
        with maria.translated(policy="nowait"):
            assert maria.query(claimer, nowait) == [(1,)]
        assert maria.is_alive(claimer)
    finally:
        holder.close()
        claimer.close()


def test_maria_a_worker_session_without_its_table_is_refused_as_it_opens(maria_schema):
    """MariaDB prepares nothing, so a worker session reads nothing from its table as it opens: a server without
    the run's table refuses the session for good (1146), not at its first claim."""
    from bench.engines.mariadb.sessions import MariaDBWorkerSession
    _, schema = maria_schema
    conn = pymysql.connect(**connect_args(MARIADB_DSN), autocommit=True)
    try:
        conn.cursor().execute(f"CREATE DATABASE `{schema}`")
        cfg = build_config("default", {"engine": "mariadb", "schema": schema, "workers": 1}, dsn=MARIADB_DSN)
        with pytest.raises(ConnectFailed) as caught:
            MariaDBWorkerSession(MARIADB_DSN, cfg, "worker-1")
        assert caught.value.permanent and "doesn't exist" in str(caught.value), caught.value
        assert caught.value.cause.startswith("the queue table is not there"), caught.value.cause
        conn.cursor().execute(f"CREATE TABLE `{schema}`.jobs (id bigint PRIMARY KEY)")
        MariaDBWorkerSession(MARIADB_DSN, cfg, "worker-1").close()  # with the table there, it opens
    finally:
        conn.close()


@pytest.mark.slow
def test_maria_a_server_that_never_answers_is_given_up_after_the_connect_timeout(maria):
    """PyMySQL's connect_timeout bounds the TCP connect only; the adapter bounds the handshake too (a port that
    accepts and stays silent), then leaves a connected session's reads unbounded."""
    from bench.engines.driver import CONNECT_TIMEOUT_S
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as caught:
            maria.open_connection(f"mysql://root@127.0.0.1:{silent.getsockname()[1]}/")
        waited = time.monotonic() - started
    assert CONNECT_TIMEOUT_S - 1 <= waited < CONNECT_TIMEOUT_S + 5, waited
    assert not caught.value.permanent
    conn = maria.open_connection(MARIADB_DSN)
    try:
        started = time.monotonic()
        maria.query(conn, f"SELECT SLEEP({CONNECT_TIMEOUT_S + 1})")  # longer than the handshake's bound
        assert time.monotonic() - started >= CONNECT_TIMEOUT_S + 1
    finally:
        conn.close()


def test_maria_session_state_read_back(maria):
    plain = pymysql.connect(**connect_args(MARIADB_DSN), autocommit=True)  # no setup: the server's defaults
    conn = maria.open_connection(MARIADB_DSN)
    serial = maria.open_connection(MARIADB_DSN, isolation="serializable")
    try:
        with plain.cursor() as cur:
            cur.execute("SELECT @@SESSION.tx_isolation")
            server_default = cur.fetchone()[0]
        assert maria.query(conn, "SELECT @@SESSION.time_zone, @@SESSION.tx_isolation, @@autocommit") == [
            ("+00:00", server_default, 1)]
        assert maria.query(serial, "SELECT @@SESSION.time_zone, @@SESSION.tx_isolation") == [
            ("+00:00", "SERIALIZABLE")]
        assert maria.statement_timeout(conn, 1500) == "max_statement_time 1.5 s"
        assert maria.query(conn, "SELECT @@SESSION.max_statement_time") == [(1.5,)]
        assert maria.lock_timeout(conn, 1500) == "lock_wait_timeout 2 s"  # whole seconds, rounded up
        assert maria.query(conn, "SELECT @@SESSION.lock_wait_timeout") == [(2,)]
        assert maria.lock_timeout(conn, 1, row_locks=True) == "lock_wait_timeout 1 s, innodb_lock_wait_timeout 1 s"
        assert maria.query(conn, "SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout") == [
            (1, 1)]
        assert maria.lock_timeout(conn, 0) == f"lock_wait_timeout {maria.NO_LOCK_TIMEOUT_S} s"
        # the statement timeout is the server's: a longer statement is cut short
        maria.statement_timeout(conn, 100)
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            with maria.translated():
                maria.query(conn, "SELECT SLEEP(3)")
        assert time.monotonic() - started < 2
        assert (caught.value.kind, caught.value.lost) == ("mysql_1969", False)  # ER_STATEMENT_TIMEOUT
        assert "max_statement_time exceeded" in str(caught.value)
        assert maria.is_alive(conn)
        assert maria.statement_timeout(conn, 0) == "max_statement_time 0 s"
    finally:
        for c in (plain, conn, serial):
            c.close()


def test_maria_schema_lock_is_one_connection_at_a_time(maria):
    schema = f"qb_seam_{secrets.token_hex(4)}"
    first, second = maria.open_connection(MARIADB_DSN), maria.open_connection(MARIADB_DSN)
    try:
        assert maria.try_lock_schema(first, schema) is True
        assert maria.try_lock_schema(second, schema) is False
        maria.unlock_schema(first, schema)
        assert maria.try_lock_schema(second, schema) is True
        assert maria.try_lock_schema(first, schema) is False
        second.close()  # the lock ends with its connection, once the server has seen it go
        assert _eventually(lambda: maria.try_lock_schema(first, schema)), "the lock outlived its connection"
    finally:
        first.close()
        if second.open:
            second.close()


# --------------------------------------------------------------------------------------------------------------
# 4. A run never starts short


def test_a_refusal_ends_the_wait_for_workers_at_once():
    refusal = {"worker": "worker-2", "kind": "42P01", "message": 'relation "s.jobs" does not exist',
               "cause": "the queue table is not there"}
    started = time.monotonic()
    with pytest.raises(SessionRefused) as caught:
        wait_for_workers(lambda: 1, 3, refused=lambda: refusal)
    assert time.monotonic() - started < 1
    err = caught.value
    assert err.exit_status == EXIT_BAD_INPUT == 2
    assert (err.worker, err.kind, err.cause) == ("worker-2", "42P01", "the queue table is not there")
    assert str(err) == ('worker-2: its session was refused (42P01: relation "s.jobs" does not exist); '
                        "the queue table is not there; nothing was measured")
    # every worker connected: no wait, no refusal read
    assert wait_for_workers(lambda: 3, 3, refused=lambda: refusal) < 0.5


def test_a_run_stops_at_once_when_a_local_workers_first_session_is_refused(dsn, empty_dsn, tmp_path):
    """In process: the run prepares ``dsn``, its workers' sessions reach a database without the run's schema
    (the session factory's DSN pointed elsewhere): SessionRefused within seconds, not after the 60 s wait for
    workers; no run directory, the run's schema dropped."""
    schema = f"qb_refused_{secrets.token_hex(3)}"
    results = tmp_path / "results"
    cfg = build_config("default", {"workers": 3, "duration": "3s", "warmup": "1s", "schema": schema,
                                   "results": str(results)})
    run = Run(cfg, dsn, log=lambda line: None)
    run.sessions.dsn = empty_dsn
    started = time.monotonic()
    with pytest.raises(SessionRefused) as caught:
        run.execute()
    assert time.monotonic() - started < 30
    assert caught.value.kind == "42P01" and re.fullmatch(r"worker-\d+", caught.value.worker), caught.value
    assert not results.exists() or not any(results.iterdir()), list(results.iterdir())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() == (0,)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["no schema", "no database"])
def test_a_distributed_run_stops_at_once_when_a_workers_first_session_is_refused(dsn, empty_dsn, tmp_path, target):
    """qbench master on ``dsn``; its one worker process given a database without the run's schema (its sessions
    are refused: 42P01), or a database that does not exist (its process's connection is): the master exits 2 in
    one line naming the worker and the cause, writes no run directory and drops the schema."""
    worker_dsn = empty_dsn if target == "no schema" else empty_dsn.replace("dbname=qbench_test_", "dbname=qb_none_")
    schema = f"qb_refused_{secrets.token_hex(3)}"
    port = _free_port()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "bench.cli.main"]
    master = subprocess.Popen([*cmd, "master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1",
                               "--master-port", str(port), "--dsn", dsn, "--workers", "3", "--duration", "3s",
                               "--warmup", "1s", "--schema", schema, "--results", str(results)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "worker.log"  # a file, not a pipe: a full pipe would block the worker
    worker = None
    try:
        # the worker is started once the master listens (its schema is prepared by then)
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert master.poll() is None, master.communicate()
            assert time.monotonic() < deadline, "the master never listened"
            time.sleep(0.1)
        started = time.monotonic()
        worker = subprocess.Popen([*cmd, "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                                   "--dsn", worker_dsn], cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
        out, err = master.communicate(timeout=60)
        stopped_s = time.monotonic() - started
        worker.wait(timeout=30)
    finally:
        for p in (master, worker):
            if p is not None:
                p.kill()
    assert master.returncode == 2, (out, err, log.read_text())
    assert stopped_s < 30, stopped_s  # at once, not after the 60 s wait for workers
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    expected = (rf'qbench: p1-worker-\d+: its session was refused \(42P01: relation "{schema}\.jobs" does '
                r"not exist\); the queue table is not there: .*; nothing was measured" if target == "no schema" else
                r"qbench: p1 \(qbench worker on .+\): its session was refused \(connect_failed: .*database "
                r'"qb_none_\w+" does not exist\); the database does not exist on that server; nothing was measured')
    assert re.fullmatch(expected, lines[0]), lines[0]
    assert "Traceback" not in out + err + log.read_text()
    assert not results.exists() or not any(results.iterdir()), list(results.iterdir())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() == (0,)


# --------------------------------------------------------------------------------------------------------------
# 5. The suspect rules on workers connected and failed claims


def _figures(cfg, run_info: dict, counters: dict, errors: dict) -> Figures:
    """The project's own Figures over a window holding ``counters`` and ``errors`` (no latencies, no monitor
    rows): what the workers' rules read."""
    window = metrics.Window()
    window.counters.update(counters)
    window.errors.update(errors)
    window.seconds = 2.0
    return Figures(RunFacts(run_id="r", cfg=cfg, measured=window, rows=[], complete=True, max_rows_per_claim=1,
                            audit={}, final_sample={"queue_depth": 5}, monitor_failures=0, run_info=run_info,
                            plan_warnings=lambda *_: []))


@pytest.fixture(scope="module")
def plain_cfg():
    return build_config("default", {"workers": 2})


def test_fewer_workers_at_start_or_end_is_suspect(plain_cfg):
    full = {"asked": 2, "at_start": 2, "at_end": 2, "connect_wait_s": 0.02}
    assert suspect._workers_reasons(_figures(plain_cfg, {"workers_connected": full}, {"claims": 100}, {})) == []
    short = {**full, "at_start": 1, "connect_wait_s": 60.0}
    reasons = suspect._workers_reasons(_figures(plain_cfg, {"workers_connected": short}, {"claims": 100}, {}))
    assert reasons == ["the run started with 1 of 2 workers connected (waited 60 s): its figures are those of "
                       "fewer workers"]
    ended = {**full, "at_end": 0}
    reasons = suspect._workers_reasons(_figures(plain_cfg, {"workers_connected": ended}, {"claims": 100}, {}))
    assert len(reasons) == 1 and reasons[0].startswith("the run ended with 0 of 2 workers connected"), reasons
    assert reasons[0].endswith("the others had lost their sessions and could not open new ones"), reasons
    # the missing workers were in a lost process (qbench master's worker killed): said so, not lost sessions
    lost = [{"process": 1, "workers": 2, "lost": True}, {"process": 2, "workers": 0, "lost": False}]
    reasons = suspect._workers_reasons(_figures(plain_cfg, {"workers_connected": ended, "processes": lost},
                                                {"claims": 100}, {}))
    assert reasons == ["the run ended with 0 of 2 workers connected: the missing ones were in load generator "
                       "processes that were lost"], reasons
    # the web UI changes the workers on purpose: its run's end is not suspect
    assert suspect._workers_reasons(_figures(plain_cfg, {"workers_connected": ended, "web_ui": {"changes": 1}},
                                             {"claims": 100}, {})) == []
    # a run.json from before the record: nothing said
    assert suspect._workers_reasons(_figures(plain_cfg, {}, {"claims": 100}, {})) == []


@pytest.mark.parametrize("claims,failed,nowait,is_suspect", [
    (980, 20, 0, True),         # 2.0 % of 1,000 attempts
    (995, 5, 0, False),         # 0.5 %
    (1000, 10, 0, False),       # 10 / 1,010 = 0.99 %: at the limit, not above
    (1000, 11, 0, True),        # 1.09 %
    (995, 405, 400, False),     # 5 errors once the 400 NOWAIT refusals are left out: 0.5 %
    (980, 420, 400, True),      # 20 errors beside 400 NOWAIT refusals: 2.0 %
])
def test_a_claim_error_share_above_one_percent_is_suspect(plain_cfg, claims, failed, nowait, is_suspect):
    errors = Counter({"55P03": nowait, "57014": failed - nowait} if nowait else {"57014": failed})
    f = _figures(plain_cfg, {}, {"claims": claims, "jobs_completed": claims, "nowait_retries": nowait}, dict(errors))
    reasons = suspect._workers_reasons(f)
    assert bool(reasons) is is_suspect, reasons
    if is_suspect:
        share = (failed - nowait) / (claims + failed - nowait)
        assert reasons == [f"{failed - nowait:,} errors of claims and completions against {claims:,} claims that "
                           f"succeeded ({', '.join(f'{k} {n:,}' for k, n in errors.most_common(3))}): {share:.1%} "
                           "of attempts failed (> 1%), and the latency figures describe only those that succeeded"]
    assert suspect.suspect_reasons(f) == reasons  # the other rules have nothing to say of this window


def test_a_run_with_faults_is_not_suspect_for_its_errors():
    cfg = build_config("default", {"workers": 2, "faults": "backend_kill@1-2"})
    assert cfg.faults
    f = _figures(cfg, {}, {"claims": 900, "jobs_completed": 900, "nowait_retries": 0}, {"57P01": 100})
    assert suspect._workers_reasons(f) == []


@pytest.mark.slow
def test_a_real_runs_record_of_workers_connected_feeds_the_rule(dsn, tmp_path):
    schema = f"qb_seam_{secrets.token_hex(3)}"
    run_dir, summary, _ = run_and_load(dsn, tmp_path, "--workers", "2", "--duration", "2s", "--warmup", "0s",
                                       "--schema", schema, timeout=120)
    run_info = json.loads((run_dir / "run.json").read_text())
    seen = run_info["workers_connected"]
    assert (seen["asked"], seen["at_start"], seen["at_end"]) == (2, 2, 2), seen
    assert 0 <= seen["connect_wait_s"] < 10, seen
    assert not any("workers connected" in r for r in summary["suspect_reasons"]), summary["suspect_reasons"]
    # the run's own files, with one worker missing as the clock started, through the project's rule
    cfg = from_public(summary["config"], dsn)
    counters = {"claims": summary["claims"], "nowait_retries": summary["nowait_retries"]}
    as_run = _figures(cfg, run_info, counters, summary["errors"])
    assert suspect._workers_reasons(as_run) == []
    run_info["workers_connected"] = {**seen, "at_start": 1}
    reasons = suspect._workers_reasons(_figures(cfg, run_info, counters, summary["errors"]))
    assert len(reasons) == 1 and "started with 1 of 2 workers connected" in reasons[0], reasons
    assert f"(waited {seen['connect_wait_s']:g} s)" in reasons[0], reasons
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
