"""The adapter each engine gives over its database driver (``bench/engines/<engine>/adapter/``): what the shared
flows call on a connection, and the error kinds both engines name alike (docs/architecture.md, "The driver
adapters")."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

CONNECTION_LOST = "connection_lost"
CONNECT_FAILED = "connect_failed"
CLIENT_ERROR = "client_error"

#: The kinds an error counter holds when the database gave no code for the error, with what each means
#: (each adapter adds its engine's own named kinds).
NAMED_KINDS = {
    CONNECTION_LOST: "the connection broke without an error code from the server "
                     "(socket closed, server crashed or killed the session, network gone)",
    CONNECT_FAILED: "a new connection could not be opened and the server sent no code "
                    "(refused, unknown database, authentication; libpq reports these as text)",
    CLIENT_ERROR: "a client-side error with no code on a connection that is still up",
}

#: Seconds any connection of the tool may take to open (libpq's and PyMySQL's ``connect_timeout``).
CONNECT_TIMEOUT_S = 10


@dataclasses.dataclass(frozen=True)
class Driver:
    """One engine's driver. Each callable takes the driver's own connection where it names one."""

    #: what the driver's calls raise when the database failed or went away
    errors: tuple[type[BaseException], ...]
    #: ``(dsn, *, application_name=) -> connection`` (autocommit, :data:`CONNECT_TIMEOUT_S`); ConfigError
    #: (``DSN``) when it cannot connect
    connect: Callable[..., Any]
    #: ``(conn, text, args=None)``: run one statement
    execute: Callable[..., Any]
    #: ``conn -> bool``: the connection still answers (one round trip)
    is_alive: Callable[[Any], bool]
    #: ``(err, conn) -> str``: the error counter key (a SQLSTATE or a named kind)
    error_kind: Callable[[BaseException, Any], str]
    #: ``err -> str``: the first line of the database's message
    first_line: Callable[[BaseException], str]
    #: ``(conn, query, params, all_rows) ->`` the first row (or all rows) of one statement
    fetch: Callable[[Any, Any, Any, bool], Any]
    #: ``conn -> bool``: the connection is known to be gone (no round trip)
    is_broken: Callable[[Any], bool]
    #: ``(conn, ms) -> str``: bound every later statement on ``conn`` to ``ms`` milliseconds; the value the
    #: server then has (``SHOW``), as it has it
    statement_timeout: Callable[[Any, int], str]
    #: ``conn -> None``: what a failed statement left open, rolled back (a lost connection closed); never raises
    after_error: Callable[[Any], None] = lambda conn: None
    #: ``(conn, ms) -> str``: bound every later wait for a table lock on ``conn`` to ``ms`` milliseconds (or the
    #: engine's nearest coarser unit); the value the server then has; ``lock_timeout_kinds``: the error kinds
    #: (``error_kind``) such a wait ends with
    lock_timeout: Callable[[Any, float], str] = lambda conn, ms: ""
    lock_timeout_kinds: tuple[str, ...] = ()
