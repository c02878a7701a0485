"""Every PyMySQL connection the tool opens, alike for every role (autocommit, UTC, the run's ``ISOLATION``,
``CLIENT_MULTI_STATEMENTS``: https://mariadb.com/kb/en/mariadb-client-server-protocol/), multi-statement round
trips (docs/mariadb.md), and the state a session keeps on the server: time zone and isolation
(:func:`session_setup`), statement and lock timeouts, the schema's named lock. Nothing else in the tool sets
session state (docs/architecture.md, "The driver adapters")."""

from __future__ import annotations

import math
import socket

import pymysql
import pymysql.connections
from pymysql.constants import CLIENT

from bench.engines.driver import CONNECT_TIMEOUT_S
from bench.engines.mariadb.adapter.errors import translated
from bench.engines.mariadb.dsn import connect_args

#: ``ISOLATION`` values and MariaDB's names for them.
ISOLATION_LEVELS = {"read_committed": "READ COMMITTED", "repeatable_read": "REPEATABLE READ",
                    "serializable": "SERIALIZABLE"}
#: ``lock_wait_timeout`` (and ``innodb_lock_wait_timeout``) for "no lock timeout": a year, the longest
#: ``lock_wait_timeout`` takes (https://mariadb.com/kb/en/server-system-variables/#lock_wait_timeout).
NO_LOCK_TIMEOUT_S = 31_536_000


def session_setup(isolation: str | None) -> list[str]:
    """The statements every connection of the tool (and mariadb-slap's ``--init-command``) runs once opened:
    UTC, then ``isolation`` (an :data:`ISOLATION_LEVELS` key; None: the server's default)."""
    out = ["SET time_zone = '+00:00'"]
    if isolation:
        out.append(f"SET SESSION TRANSACTION ISOLATION LEVEL {ISOLATION_LEVELS[isolation]}")
    return out


def open_connection(dsn: str, *, isolation: str | None = None, program: str = "queue-bench",
                    timeout_s: float | None = None) -> pymysql.connections.Connection:
    """Open and set up one connection (``isolation``: as :func:`session_setup`). ``timeout_s``: to connect and
    for every read and write; None: :data:`bench.engines.driver.CONNECT_TIMEOUT_S` to connect unless the DSN
    says, reads and writes unbounded. Raises :class:`bench.engines.base.ConnectFailed` (``permanent`` per
    :func:`~bench.engines.mariadb.adapter.errors.is_permanent`) and ConfigError (``DSN``, unparsable)."""
    args = connect_args(dsn)
    liveness = args.pop("liveness", None)
    bounded = timeout_s is not None or "read_timeout" in args
    if timeout_s is None:
        args.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        # PyMySQL's connect_timeout bounds the TCP connect only: the handshake's reads get it too (a port that
        # accepts and never answers would otherwise hang), and are unbounded again once connected
        args.setdefault("read_timeout", args["connect_timeout"])
    else:
        args.update(connect_timeout=timeout_s, read_timeout=timeout_s, write_timeout=timeout_s)
    with translated(connecting=True):
        conn = pymysql.connect(**args, autocommit=True, charset="utf8mb4",
                               client_flag=CLIENT.MULTI_STATEMENTS, program_name=program[:32])
    if not bounded:
        conn._read_timeout = None  # pylint: disable=protected-access  (PyMySQL applies it at the next read)
    try:
        if liveness:  # TCP_USER_TIMEOUT_MS's settings (bench.engines.mariadb.dsn.with_liveness)
            keep_alive(conn._sock, liveness)  # pylint: disable=protected-access
        with translated(connecting=True), conn.cursor() as cur:
            for statement in session_setup(isolation):
                cur.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


#: Linux's TCP_USER_TIMEOUT (``linux/tcp.h``; Python names it from 3.12 only).
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)


def keep_alive(sock, liveness: dict) -> None:
    """``liveness``'s TCP settings (:data:`bench.engines.mariadb.dsn.LIVENESS_OPTIONS`) on a connected TCP socket
    ``sock``: ``SO_KEEPALIVE``, ``TCP_KEEPIDLE``, ``TCP_KEEPINTVL``, ``TCP_KEEPCNT``, ``TCP_USER_TIMEOUT``, as
    libpq sets them for PostgreSQL; nothing on a Unix socket."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for level, name, key in ((socket.IPPROTO_TCP, TCP_USER_TIMEOUT, "tcp_user_timeout_ms"),
                             (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, "keepalives_idle_s"),
                             (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, "keepalives_interval_s"),
                             (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, "keepalives_count")):
        if key in liveness:
            sock.setsockopt(level, name, liveness[key])
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


def empty_round_trip(conn) -> None:
    """``COM_PING`` on ``conn``: one round trip with no statement to parse or run
    (https://mariadb.com/kb/en/com_ping/). Raises PyMySQL's errors when the connection is lost."""
    conn.ping(reconnect=False)


def query(conn, text: str, args=None) -> list[tuple]:
    """The rows of one statement on ``conn``. Raises PyMySQL's errors."""
    with conn.cursor() as cur:
        cur.execute(text, args)
        return list(cur.fetchall())


def execute(conn, text: str, args=None) -> int:
    """Run one statement on ``conn``; return its affected rows. Raises PyMySQL's errors."""
    with conn.cursor() as cur:
        return cur.execute(text, args)


def results(cur, text: str) -> list[tuple[int, tuple]]:
    """Send ``text`` (statements separated by ``;``) in one round trip; per statement ``(affected rows, result
    rows)``. Raises the first failing statement's error (the server runs none after it)."""
    cur.execute(text)
    out = [(cur.rowcount, cur.fetchall())]
    while cur.nextset():
        out.append((cur.rowcount, cur.fetchall()))
    return out


def _seconds(ms: float) -> str:
    """``ms`` as ``max_statement_time`` takes it: seconds, to the ms."""
    return f"{ms / 1000:.3f}"


def statement_timeout(conn, ms: float) -> str:
    """Bound every later statement on ``conn`` to ``ms`` ms (0: none; ``max_statement_time``:
    https://mariadb.com/kb/en/server-system-variables/#max_statement_time); the value the server set, read back
    (``max_statement_time 5 s``). Raises PyMySQL's errors."""
    execute(conn, f"SET SESSION max_statement_time = {_seconds(ms)}")
    return f"max_statement_time {float(query(conn, 'SELECT @@SESSION.max_statement_time')[0][0]):g} s"


def statement_bounded(text: str, ms: float) -> str:
    """``text`` bounded to ``ms`` ms on its own (``SET STATEMENT max_statement_time = ... FOR``:
    https://mariadb.com/kb/en/set-statement/), the session's timeout left as it is."""
    return f"SET STATEMENT max_statement_time = {_seconds(ms)} FOR {text}"


def lock_timeout(conn, ms: float, *, row_locks: bool = False) -> str:
    """Bound every later wait for a table's metadata lock on ``conn`` (``lock_wait_timeout``) and, with
    ``row_locks``, for a row lock (``innodb_lock_wait_timeout``) to ``ms`` ms rounded up to whole seconds (0:
    :data:`NO_LOCK_TIMEOUT_S`); such a wait ends with 1205. The values the server set, read back
    (``lock_wait_timeout 2 s``). Raises PyMySQL's errors."""
    seconds = int(math.ceil(ms / 1000)) if ms > 0 else NO_LOCK_TIMEOUT_S
    names = ("lock_wait_timeout", "innodb_lock_wait_timeout") if row_locks else ("lock_wait_timeout",)
    execute(conn, "SET SESSION " + ", ".join(f"{name} = {seconds}" for name in names))
    values = query(conn, "SELECT " + ", ".join(f"@@SESSION.{name}" for name in names))[0]
    return ", ".join(f"{name} {value} s" for name, value in zip(names, values))


def try_lock_schema(conn, schema: str) -> bool:
    """Take the named lock ``qbench:<schema>`` on ``conn`` (held until :func:`unlock_schema` or the connection
    ends: https://mariadb.com/kb/en/get_lock/); True when taken."""
    return query(conn, "SELECT GET_LOCK(%s, 0)", (f"qbench:{schema}",))[0][0] == 1


def unlock_schema(conn, schema: str) -> None:
    """Release the lock :func:`try_lock_schema` took."""
    query(conn, "SELECT RELEASE_LOCK(%s)", (f"qbench:{schema}",))


__all__ = ["ISOLATION_LEVELS", "NO_LOCK_TIMEOUT_S", "empty_round_trip", "execute", "lock_timeout", "open_connection", "query",
           "results", "session_setup", "statement_bounded", "statement_timeout", "try_lock_schema",
           "unlock_schema"]
