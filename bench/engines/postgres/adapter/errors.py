"""psycopg's errors as the tool's: the counter key of an error (the SQLSTATE when the server sent one,
https://www.postgresql.org/docs/current/errcodes-appendix.html, else a named kind), whether it will go away by
waiting, and the one translation into :class:`bench.engines.base.EngineError`."""

from __future__ import annotations

from typing import Callable

import psycopg

from bench.engines.base import ConnectFailed, EngineError, LockNotAvailable
from bench.engines.driver import CLIENT_ERROR, CONNECT_FAILED, CONNECTION_LOST, NAMED_KINDS

__all__ = ["CLIENT_ERROR", "CONNECT_FAILED", "CONNECTION_LOST", "NAMED_KINDS", "LOCK_NOT_AVAILABLE",
           "QUERY_CANCELED", "UNDEFINED_COLUMN", "INSUFFICIENT_PRIVILEGE", "error_kind", "first_line",
           "is_permanent", "refusal_cause", "translate", "translated"]

#: SQLSTATEs the tool's code acts on by name.
LOCK_NOT_AVAILABLE = "55P03"
QUERY_CANCELED = "57014"
UNDEFINED_COLUMN = "42703"
INSUFFICIENT_PRIVILEGE = "42501"

#: SQLSTATE classes of a session's opening that waiting will not mend: 22 a bad value (a setting's),
#: 26 a prepared statement name unknown, 28 authentication, 3D the database, 3F the schema, 42 a name missing
#: or taken (42P01 table, 42P05 prepared statement, 42704 setting) or a privilege, 0A not supported.
PERMANENT_CLASSES = ("22", "26", "28", "3D", "3F", "42", "0A")
#: Refusals the server (or a pooler in front of it) sends as text while connecting that do go away by
#: waiting: no free slot, a server starting, stopping or recovering; any other ``FATAL`` is permanent.
TRANSIENT_FATAL = ("too many clients", "remaining connection slots", "starting up", "shutting down",
                   "in recovery mode", "not yet accepting connections", "no more connections allowed",
                   "pgbouncer cannot connect to server", "server login has been failing")


def error_kind(err: BaseException, *, lost: bool = False, connecting: bool = False) -> str:
    """The counter key of ``err``: its SQLSTATE, else a :data:`NAMED_KINDS` key (``lost``: its connection is
    broken; ``connecting``: from opening one; an ``OperationalError`` without SQLSTATE is lost). Never raises."""
    sqlstate = getattr(err, "sqlstate", None)
    if sqlstate:
        return sqlstate
    if connecting:
        return CONNECT_FAILED
    if lost or isinstance(err, psycopg.OperationalError):
        return CONNECTION_LOST
    return CLIENT_ERROR


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (the server's primary message), or its class name when empty."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def is_permanent(err: BaseException) -> bool:
    """True when a session's opening failed with ``err`` for a reason waiting will not mend: a SQLSTATE of
    :data:`PERMANENT_CLASSES`, or a connection the server answered with a ``FATAL`` that is not in
    :data:`TRANSIENT_FATAL` (libpq gives no SQLSTATE while connecting; its text is English unless the server's
    ``lc_messages`` says otherwise, and then an unknown text counts as permanent). Refused, timed out or
    lost: False."""
    sqlstate = getattr(err, "sqlstate", None)
    if sqlstate:
        return sqlstate[:2] in PERMANENT_CLASSES
    text = str(err)
    if "FATAL:" not in text:
        return False
    return not any(phrase in text for phrase in TRANSIENT_FATAL)


#: What a permanent refusal most likely means, by SQLSTATE (or its class), for the one line a run stops with.
REFUSAL_CAUSES = {
    "42P05": "a statement of that name is already prepared on this server connection: a transaction pooler hands "
             "one server connection to several clients, which named prepared statements cannot survive",
    "26000": "a prepared statement is missing: a transaction pooler moved the session to another server connection",
    "42P01": "the queue table is not there: this connection reaches another database or schema than the one the "
             "run prepared",
    "3F000": "the tool's schema is not there: this connection reaches another database than the one the run prepared",
    "28": "the server refused the user or its password",
    "3D": "the database does not exist on that server",
    "42501": "the user lacks a privilege the session needs",
    "22": "a setting's value the server refuses",
    "42704": "a setting or object the server does not know",
}
#: The same for a connection refused while opening (no SQLSTATE: libpq's text).
_FATAL_CAUSES = (("database", "does not exist", "3D"), ("role", "does not exist", "28"),
                 ("authentication failed", "", "28"), ("no pg_hba.conf entry", "", "28"),
                 ("configuration parameter", "", "42704"), ("invalid value for parameter", "", "22"))


def refusal_cause(err: BaseException) -> str:
    """What a session's refusal ``err`` most likely means (:data:`REFUSAL_CAUSES`), or a general sentence."""
    key = getattr(err, "sqlstate", None) or ""
    text = str(err)
    for first, second, code in _FATAL_CAUSES:
        if not key and first in text and second in text:
            key = code
    return (REFUSAL_CAUSES.get(key) or REFUSAL_CAUSES.get(key[:2])
            or "the server refuses this session, and waiting will not change that")


def translate(err: BaseException, *, lost: bool = False, connecting: bool = False) -> EngineError:
    """``err`` (a psycopg error) as the tool's: :class:`ConnectFailed` when ``connecting`` (with
    :func:`is_permanent`), :class:`LockNotAvailable` for 55P03, else :class:`EngineError` keyed by
    :func:`error_kind`; ``lost``: the connection is broken."""
    if connecting:
        permanent = is_permanent(err)
        return ConnectFailed(error_kind(err, connecting=True), first_line(err), permanent=permanent,
                             cause=refusal_cause(err) if permanent else "")
    if getattr(err, "sqlstate", None) == LOCK_NOT_AVAILABLE:
        return LockNotAvailable(LOCK_NOT_AVAILABLE, first_line(err), lost=lost)
    return EngineError(error_kind(err, lost=lost), first_line(err), lost=lost)


def _never() -> bool:
    return False


class translated:  # pylint: disable=invalid-name
    """Within the block, a psycopg error leaves as :func:`translate` makes it (``broken()``: whether the
    connection it came from is now lost; ``connecting``: the session is being opened); every other exception
    passes as it is. A class, not a generator: the workers' hot path enters one per statement."""

    __slots__ = ("broken", "connecting")

    def __init__(self, broken: Callable[[], bool] = _never, *, connecting: bool = False):
        self.broken, self.connecting = broken, connecting

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if kind is not None and issubclass(kind, psycopg.Error):
            raise translate(err, lost=self.broken(), connecting=self.connecting) from None
        return False
