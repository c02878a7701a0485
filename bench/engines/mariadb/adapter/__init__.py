"""The PyMySQL adapter: every connection the tool opens to MariaDB (the embedded server's readiness check
included), every PyMySQL error translated, every piece of session state, and the driver the shared flows use.
Only this package names PyMySQL's errors or calls ``pymysql.connect`` (tests/test_layers.py keeps PyMySQL
under ``bench/engines/mariadb/``)."""

from __future__ import annotations

import socket as std_socket

import pymysql.connections

from bench.engines.base import ConnectFailed
from bench.engines.driver import Driver
from bench.engines.mariadb.adapter.connection import (ISOLATION_LEVELS, NO_LOCK_TIMEOUT_S, empty_round_trip, execute, lock_timeout,
                                                      open_connection, query, results, session_setup,
                                                      statement_bounded, statement_timeout, try_lock_schema,
                                                      unlock_schema)
from bench.engines.mariadb.adapter.errors import (DATABASE_ERRORS, DEADLOCK, LOCK_NOT_AVAILABLE, LOCK_WAIT_TIMEOUT,
                                                  NAMED_KINDS, NOT_SUPPORTED_YET, error_kind, error_number,
                                                  first_line, is_lost, is_permanent, translate, translated)
from bench.errors import ConnectRefused


def connect_dsn(dsn: str, *, param: str = "DSN", isolation: str | None = None,
                application_name: str = "queue-bench") -> pymysql.connections.Connection:
    """:func:`open_connection` for the tool's own connections (admin, monitor, audit, faults): a failure is bad
    input, :class:`ConfigError` naming ``param``."""
    try:
        return open_connection(dsn, isolation=isolation, program=application_name)
    except ConnectFailed as err:
        raise ConnectRefused(param, f"cannot connect ({err}); allowed: a reachable MariaDB DSN "
                                    "(mysql://user@host:port/), or none for the embedded server",
                             kind=err.kind, detail=str(err), permanent=err.permanent, cause=err.cause) from None


def is_alive(conn) -> bool:
    """True when ``conn`` still answers."""
    try:
        conn.ping(reconnect=False)
        return True
    except DATABASE_ERRORS:
        return False


def _after_error(conn) -> None:
    """Roll back what a failed statement left open; close a dead one (PyMySQL may call it open) to reopen."""
    try:
        conn.rollback()
    except DATABASE_ERRORS as err:
        if is_lost(err):
            try:
                conn.close()
            except DATABASE_ERRORS:
                pass


def _fetch(conn, text: str, args, all_rows: bool):
    """The first row (or all rows) of one statement."""
    with conn.cursor() as cur:
        cur.execute(text, args)
        return cur.fetchall() if all_rows else cur.fetchone()


#: PyMySQL as the shared flows use it (a failed statement's transaction is rolled back; a lock wait, the
#: metadata lock's, times out in whole seconds).
DRIVER = Driver(errors=DATABASE_ERRORS, connect=connect_dsn, execute=execute, is_alive=is_alive,
                error_kind=lambda err, conn: error_kind(err), first_line=first_line, after_error=_after_error,
                fetch=_fetch, is_broken=lambda conn: not conn.open,
                statement_timeout=statement_timeout, lock_timeout=lock_timeout,
                lock_timeout_kinds=(LOCK_WAIT_TIMEOUT,))


def cooperative_wait() -> str:
    """The socket PyMySQL waits on when it is gevent's; RuntimeError naming it otherwise (a blocking wait)."""
    module = getattr(pymysql.connections.socket, "socket", None)
    owner = getattr(module, "__module__", "")
    if not owner.startswith("gevent"):
        raise RuntimeError(f"PyMySQL's socket is {owner or std_socket.__name__}.socket, not gevent's: a greenlet "
                           "waiting on a row lock would block every worker; call bench.gevent_patch.patch() "
                           "before importing PyMySQL")
    return f"{owner}.socket"


__all__ = ["DATABASE_ERRORS", "DEADLOCK", "DRIVER", "ISOLATION_LEVELS", "LOCK_NOT_AVAILABLE", "LOCK_WAIT_TIMEOUT",
           "NAMED_KINDS", "NOT_SUPPORTED_YET", "NO_LOCK_TIMEOUT_S", "connect_dsn", "cooperative_wait",
           "empty_round_trip", "error_kind", "error_number", "execute", "first_line", "is_alive", "is_lost", "is_permanent",
           "lock_timeout", "open_connection", "query", "results", "session_setup", "statement_bounded",
           "statement_timeout", "translate", "translated", "try_lock_schema", "unlock_schema"]
