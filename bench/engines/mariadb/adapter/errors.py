"""PyMySQL's errors as the tool's: what a MariaDB error counter is keyed by (a named kind, by the error number
and, for 1205 (NOWAIT and a lock wait timeout alike: https://mariadb.com/kb/en/wait-and-nowait/; docs/mariadb.md),
by the failed statement's policy), whether a failed opening will go away by waiting, and the one translation
into :class:`bench.engines.base.EngineError`. Error numbers: https://mariadb.com/kb/en/mariadb-error-code-reference/"""

from __future__ import annotations

import pymysql

from bench.engines import driver
from bench.engines.base import ConnectFailed, EngineError, LockNotAvailable
from bench.engines.driver import CLIENT_ERROR, CONNECT_FAILED, CONNECTION_LOST

__all__ = ["CLIENT_ERROR", "CONNECT_FAILED", "CONNECTION_LOST", "DATABASE_ERRORS", "DEADLOCK", "LOCK_NOT_AVAILABLE",
           "LOCK_WAIT_TIMEOUT", "NAMED_KINDS", "NOT_SUPPORTED_YET", "PERMANENT_NUMBERS", "error_kind",
           "error_number", "first_line", "is_lost", "is_permanent", "translate", "translated"]

LOCK_NOT_AVAILABLE = "lock_not_available"
LOCK_WAIT_TIMEOUT = "lock_wait_timeout"
DEADLOCK = "deadlock_detected"
#: The kind of error 1235, ER_NOT_SUPPORTED_YET (``LIMIT`` in an ``IN`` sub-query, among others).
NOT_SUPPORTED_YET = "mysql_1235"

#: The kinds this engine counts, with what each means (other server errors are ``mysql_<number>``).
NAMED_KINDS = {
    **driver.NAMED_KINDS,
    LOCK_NOT_AVAILABLE: "a NOWAIT claim met a locked row (MariaDB 1205 under NOWAIT, MySQL 8 3572)",
    LOCK_WAIT_TIMEOUT: "a lock wait ran out of innodb_lock_wait_timeout or lock_wait_timeout (1205)",
    DEADLOCK: "InnoDB found a deadlock and rolled this transaction back (1213)",
}

#: What PyMySQL raises when the database failed or went away.
DATABASE_ERRORS = (pymysql.err.MySQLError, OSError)

_LOST = {2006, 2013, 2014, 2055, 1927}  # 1927: the connection was killed (KILL CONNECTION)

#: Error numbers a session's opening fails with that waiting will not mend (the account, the database, the
#: session's settings): 1044 access denied to the database, 1045 access denied (password), 1046 no database
#: selected, 1049 unknown database, 1054 unknown column, 1064 syntax, 1115 unknown character set, 1130 host not
#: allowed to connect, 1142 table access denied, 1146 unknown table, 1193 unknown system variable, 1227 a
#: privilege missing, 1231 wrong value for a variable, 1232 wrong type for a variable, 1251 authentication
#: method not supported by the client, 1273 unknown collation, 1698 access denied (no password), 1820 and
#: 1862 the password must be changed, 3118 (MySQL) and 4151 (MariaDB) the account is locked. Not among them,
#: as waiting may mend them: 1040 too many connections, 2002/2003 cannot connect, 2006/2013 lost, 1205 lock
#: wait timeout, 1213 deadlock. https://mariadb.com/kb/en/mariadb-error-code-reference/
PERMANENT_NUMBERS = frozenset({1044, 1045, 1046, 1049, 1054, 1064, 1115, 1130, 1142, 1146, 1193, 1227, 1231,
                               1232, 1251, 1273, 1698, 1820, 1862, 3118, 4151})


def error_number(err: BaseException) -> int | None:
    """The server's (or client library's) error number of a PyMySQL error, or None."""
    args = getattr(err, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_lost(err: BaseException) -> bool:
    """True when ``err`` means the connection is gone."""
    return isinstance(err, (pymysql.err.InterfaceError, ConnectionError, OSError)) or error_number(err) in _LOST


def is_permanent(err: BaseException) -> bool:
    """True when a session's opening failed with ``err`` for a reason waiting will not mend: an error number of
    :data:`PERMANENT_NUMBERS`. Refused, timed out, too many connections or lost: False."""
    return error_number(err) in PERMANENT_NUMBERS


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


#: What a permanent refusal most likely means, by error number, for the one line a run stops with.
REFUSAL_CAUSES = {1049: "the database does not exist on that server",
                  1044: "the server refused the user or its password", 1045: "the server refused the user or its password",
                  1698: "the server refused the user or its password",
                  1146: "the queue table is not there: this connection reaches another database than the one the run "
                        "prepared",
                  1193: "a setting the server does not know", 1231: "a setting's value the server refuses",
                  1232: "a setting's value the server refuses"}


def refusal_cause(err: BaseException) -> str:
    """What a session's refusal ``err`` most likely means (:data:`REFUSAL_CAUSES`), or a general sentence."""
    return REFUSAL_CAUSES.get(error_number(err), "the server refuses this session, and waiting will not change that")


def translate(err: BaseException, *, policy: str | None = None, lost: bool | None = None,
              connecting: bool = False) -> EngineError:
    """``err`` (a PyMySQL error or OSError) as the tool's: :class:`ConnectFailed` when ``connecting`` (with
    :func:`is_permanent`), :class:`LockNotAvailable` for the :data:`LOCK_NOT_AVAILABLE` kind, else
    :class:`EngineError` keyed by :func:`error_kind` (``policy``: the claim's); ``lost``: the connection is
    broken (None: :func:`is_lost`)."""
    if connecting:
        permanent = is_permanent(err)
        return ConnectFailed(error_kind(err, connecting=True), first_line(err), permanent=permanent,
                             cause=refusal_cause(err) if permanent else "")
    lost = is_lost(err) if lost is None else lost
    kind = error_kind(err, policy=policy)
    if kind == LOCK_NOT_AVAILABLE:
        return LockNotAvailable(kind, first_line(err), lost=lost)
    return EngineError(kind, first_line(err), lost=lost)


class translated:  # pylint: disable=invalid-name
    """Used as a function (``with translated(...):``). Within the block, a PyMySQL error (or OSError) leaves as
    :func:`translate` makes it, with these arguments; every other exception passes as it is. A class, not a generator: the workers' hot path enters
    one per statement."""

    __slots__ = ("policy", "lost", "connecting")

    def __init__(self, *, policy: str | None = None, lost: bool | None = None, connecting: bool = False):
        self.policy, self.lost, self.connecting = policy, lost, connecting

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if kind is not None and issubclass(kind, DATABASE_ERRORS):
            raise translate(err, policy=self.policy, lost=self.lost, connecting=self.connecting) from None
        return False
