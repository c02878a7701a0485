"""What a MariaDB error counter is keyed by: a named kind, by the error number and, for 1205 (NOWAIT and a
lock wait timeout alike: https://mariadb.com/kb/en/wait-and-nowait/; docs/mariadb.md), by the failed
statement's policy. Error numbers: https://mariadb.com/kb/en/mariadb-error-code-reference/"""

from __future__ import annotations

import pymysql

LOCK_NOT_AVAILABLE = "lock_not_available"
LOCK_WAIT_TIMEOUT = "lock_wait_timeout"
DEADLOCK = "deadlock_detected"
CONNECTION_LOST = "connection_lost"
CONNECT_FAILED = "connect_failed"
CLIENT_ERROR = "client_error"

#: The named kinds this engine counts, with what each means (other server errors are ``mysql_<number>``).
NAMED_KINDS = {
    LOCK_NOT_AVAILABLE: "a NOWAIT claim met a locked row (MariaDB 1205 under NOWAIT, MySQL 8 3572)",
    LOCK_WAIT_TIMEOUT: "a lock wait ran out of innodb_lock_wait_timeout (1205)",
    DEADLOCK: "InnoDB found a deadlock and rolled this transaction back (1213)",
    CONNECTION_LOST: "the connection broke (2006 server gone away, 2013 lost during query, a closed socket)",
    CONNECT_FAILED: "a new connection could not be opened",
    CLIENT_ERROR: "a client-side error with no server error number",
}

_LOST = {2006, 2013, 2014, 2055, 1927}  # 1927: the connection was killed (KILL CONNECTION)


def error_number(err: BaseException) -> int | None:
    """The server's (or client library's) error number of a PyMySQL error, or None."""
    args = getattr(err, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_lost(err: BaseException) -> bool:
    """True when ``err`` means the connection is gone."""
    return isinstance(err, (pymysql.err.InterfaceError, ConnectionError, OSError)) or error_number(err) in _LOST


def error_kind(err: BaseException, *, policy: str | None = None, connecting: bool = False) -> str:
    """The counter key of ``err``; ``policy``: the claim's policy (None for other statements). Never raises."""
    number = error_number(err)
    if connecting:
        return CONNECT_FAILED
    if number == 3572 or (number == 1205 and policy == "nowait"):
        return LOCK_NOT_AVAILABLE
    if number == 1205:
        return LOCK_WAIT_TIMEOUT
    if number == 1213:
        return DEADLOCK
    if is_lost(err):
        return CONNECTION_LOST
    if number:
        return f"mysql_{number}"
    return CLIENT_ERROR


def first_line(err: BaseException) -> str:
    """The first line of the server's message of ``err`` (PyMySQL keeps it in ``args[1]``)."""
    args = getattr(err, "args", ())
    text = str(args[1]) if len(args) > 1 else str(err)
    return (text.strip().splitlines() or [type(err).__name__])[0]
