"""What a PostgreSQL error counter is keyed by: the SQLSTATE when the server sent one
(https://www.postgresql.org/docs/current/errcodes-appendix.html), else a named kind."""

from __future__ import annotations

import psycopg

CONNECTION_LOST = "connection_lost"
CONNECT_FAILED = "connect_failed"
CLIENT_ERROR = "client_error"

#: The kinds counted when there is no SQLSTATE, with what each means.
NAMED_KINDS = {
    CONNECTION_LOST: "the connection broke without an error message from the server "
                     "(socket closed, server crashed, network gone)",
    CONNECT_FAILED: "a new connection could not be opened and the server sent no SQLSTATE "
                    "(refused, unknown database, authentication; libpq reports these as text)",
    CLIENT_ERROR: "a client-side error with no SQLSTATE on a connection that is still up",
}


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
