"""The psycopg adapter: every connection the tool opens to PostgreSQL, every psycopg error translated, every
piece of session state, and the workers' hot path (:mod:`.wire`). Only this package names psycopg's errors
or calls ``psycopg.connect`` (tests/test_layers.py keeps it so; the library workers' own drivers excepted)."""

from __future__ import annotations

import psycopg
import psycopg.waiting
from gevent import monkey

from bench.engines.base import ConnectFailed
from bench.engines.driver import Driver
from bench.engines.postgres.adapter.connect import (INVALID_DSN, SessionState, apply_settings, connect, conninfo_params,
                                                    deallocate, empty_round_trip, listen, local_transaction, lock_timeout, make_conninfo,
                                                    open_session, prepare_named, reset_settings, statement_timeout,
                                                    try_advisory_lock, try_lock_schema, unlock_schema)
from bench.engines.postgres.adapter.errors import (INSUFFICIENT_PRIVILEGE, LOCK_NOT_AVAILABLE, QUERY_CANCELED,
                                                   UNDEFINED_COLUMN, error_kind, first_line, is_permanent, translate,
                                                   translated)
from bench.errors import ConfigError, ConnectRefused


def connect_dsn(dsn: str, *, param: str = "DSN", autocommit: bool = True, application_name: str = "queue-bench",
                auto_prepare: bool = True) -> psycopg.Connection:
    """:func:`connect` for the tool's own connections (admin, monitor, audit, reaper, faults, the replica's
    sampler), direct to the server, with psycopg's automatic preparation of what they repeat (``auto_prepare``;
    without it the monitor's per-second queries took about 40 % longer: docs/measurements/calibration.md): a
    failure is bad input, :class:`ConfigError` naming ``param`` (``DSN``, ``DSN_REPLICA``)."""
    try:
        return connect(dsn, autocommit=autocommit, application_name=application_name, auto_prepare=auto_prepare)
    except ConnectFailed as err:
        if err.kind == INVALID_DSN:
            raise ConfigError(param, f"{err}; e.g. postgresql://user@127.0.0.1:5432/db") from None
        raise ConnectRefused(param, f"cannot connect ({err}); allowed: a reachable PostgreSQL DSN"
                             + (", or none for the embedded database" if param == "DSN" else ""),
                             kind=err.kind, detail=str(err), permanent=err.permanent, cause=err.cause) from None


def is_alive(conn: psycopg.Connection) -> bool:
    """True when ``conn`` still answers (a terminated backend is only noticed on use)."""
    if conn.closed or conn.broken:
        return False
    try:
        conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def _fetch(conn: psycopg.Connection, query, params, all_rows: bool):
    """The first row (or all rows) of one statement."""
    cur = conn.execute(query, params)
    return cur.fetchall() if all_rows else cur.fetchone()


#: psycopg as the shared flows use it (a psycopg connection's ``execute``; a broken one counts as lost).
DRIVER = Driver(errors=(psycopg.Error,), connect=connect_dsn,
                execute=lambda conn, text, args=None: conn.execute(text, args),
                is_alive=is_alive, error_kind=lambda err, conn: error_kind(err, lost=conn.broken), first_line=first_line,
                fetch=_fetch, is_broken=lambda conn: conn.broken or conn.closed,
                statement_timeout=statement_timeout, lock_timeout=lock_timeout,
                lock_timeout_kinds=(LOCK_NOT_AVAILABLE,))


def cooperative_wait() -> str:
    """psycopg's wait function's name; RuntimeError if it is the blocking ``wait_c`` or ``select`` is not
    patched (psycopg's ``psycopg/waiting.py``)."""
    name = getattr(psycopg.waiting.wait, "__name__", str(psycopg.waiting.wait))
    patched = monkey.is_module_patched("select")
    if not patched or name == "wait_c":
        raise RuntimeError(
            f"psycopg uses {name} with select {'patched' if patched else 'not patched'}: "
            "a greenlet waiting on a row lock would block every worker; call bench.gevent_patch.patch() "
            "before importing psycopg")
    return name

__all__ = ["DRIVER", "INSUFFICIENT_PRIVILEGE", "INVALID_DSN", "LOCK_NOT_AVAILABLE", "QUERY_CANCELED",
           "UNDEFINED_COLUMN", "SessionState", "apply_settings", "connect", "connect_dsn", "conninfo_params",
           "cooperative_wait", "deallocate", "empty_round_trip", "error_kind", "listen", "prepare_named", "first_line", "is_alive",
           "is_permanent", "local_transaction", "lock_timeout", "make_conninfo", "open_session", "reset_settings",
           "statement_timeout",
           "translate", "translated", "try_advisory_lock", "try_lock_schema", "unlock_schema"]
