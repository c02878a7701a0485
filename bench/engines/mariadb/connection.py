"""A PyMySQL connection, alike for every role (autocommit, UTC, the run's ``ISOLATION``, ``CLIENT_MULTI_STATEMENTS``:
https://mariadb.com/kb/en/mariadb-client-server-protocol/), multi-statement round trips (docs/mariadb.md)."""

from __future__ import annotations

import socket as std_socket

import pymysql
import pymysql.connections
from pymysql.constants import CLIENT

from bench.engines.mariadb.dsn import connect_args

#: ``ISOLATION`` values and MariaDB's names for them.
ISOLATION_LEVELS = {"read_committed": "READ COMMITTED", "repeatable_read": "REPEATABLE READ",
                    "serializable": "SERIALIZABLE"}


def session_setup(isolation: str | None) -> list[str]:
    """The statements every connection of the tool (and mariadb-slap's ``--init-command``) runs once opened:
    UTC, then ``isolation`` (an :data:`ISOLATION_LEVELS` key; None: the server's default)."""
    out = ["SET time_zone = '+00:00'"]
    if isolation:
        out.append(f"SET SESSION TRANSACTION ISOLATION LEVEL {ISOLATION_LEVELS[isolation]}")
    return out


def open_connection(dsn: str, *, isolation: str | None = None,
                    program: str = "queue-bench") -> pymysql.connections.Connection:
    """Open and set up one connection (``isolation``: as :func:`session_setup`; 10 s to connect unless the DSN
    says). Raises PyMySQL's errors and ConfigError (``DSN``)."""
    args = connect_args(dsn)
    args.setdefault("connect_timeout", 10)
    conn = pymysql.connect(**args, autocommit=True, charset="utf8mb4",
                           client_flag=CLIENT.MULTI_STATEMENTS, program_name=program[:32])
    try:
        with conn.cursor() as cur:
            for statement in session_setup(isolation):
                cur.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def results(cur, text: str) -> list[tuple[int, tuple]]:
    """Send ``text`` (statements separated by ``;``) in one round trip; per statement ``(affected rows, result
    rows)``. Raises the first failing statement's error (the server runs none after it)."""
    cur.execute(text)
    out = [(cur.rowcount, cur.fetchall())]
    while cur.nextset():
        out.append((cur.rowcount, cur.fetchall()))
    return out


def cooperative_wait() -> str:
    """The socket PyMySQL waits on when it is gevent's; RuntimeError naming it otherwise (a blocking wait)."""
    module = getattr(pymysql.connections.socket, "socket", None)
    owner = getattr(module, "__module__", "")
    if not owner.startswith("gevent"):
        raise RuntimeError(f"PyMySQL's socket is {owner or std_socket.__name__}.socket, not gevent's: a greenlet "
                           "waiting on a row lock would block every worker; call bench.gevent_patch.patch() "
                           "before importing PyMySQL")
    return f"{owner}.socket"
