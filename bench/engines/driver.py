"""The adapter each engine gives over its database driver: what the shared flows call on a connection."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Driver:
    """One engine's driver. Each callable takes the driver's own connection where it names one."""

    #: what the driver's calls raise when the database failed or went away
    errors: tuple[type[BaseException], ...]
    #: ``(dsn, *, application_name=) -> connection`` (autocommit); ConfigError (``DSN``) when it cannot connect
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
    #: ``(conn, ms)``: bound every later statement on ``conn`` to ``ms`` milliseconds
    statement_timeout: Callable[[Any, int], None]
    #: ``conn -> None``: what a failed statement left open, rolled back (a lost connection closed); never raises
    after_error: Callable[[Any], None] = lambda conn: None
    #: ``(conn, ms)``: bound every later wait for a table lock on ``conn`` to ``ms`` milliseconds (or the engine's
    #: nearest coarser unit); ``lock_timeout_kinds``: the error kinds (``error_kind``) such a wait ends with
    lock_timeout: Callable[[Any, int], None] = lambda conn, ms: None
    lock_timeout_kinds: tuple[str, ...] = ()
