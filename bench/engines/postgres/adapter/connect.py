"""Every psycopg connection the tool opens, and the state a session keeps on the server: settings
(``search_path``, a definition's ``[settings]``, timeouts), statements prepared by name, the schema's lock,
``LISTEN``. Nothing else in the tool sets session state or prepares a statement (docs/architecture.md,
"The driver adapters")."""

from __future__ import annotations

import dataclasses
import math

import psycopg
from psycopg import sql

from bench.engines.base import ConnectFailed
from bench.engines.driver import CONNECT_TIMEOUT_S
from bench.engines.postgres.adapter.errors import error_kind, first_line, is_permanent, translate, translated
from bench.engines.postgres.adapter.wire import PreparedSession

#: The kind of a connection string psycopg cannot parse (a :class:`ConnectFailed` that is permanent).
INVALID_DSN = "invalid_dsn"
#: With ``auto_prepare``, psycopg prepares a statement on its 5th execution on a connection (psycopg's default
#: ``prepare_threshold``: https://www.psycopg.org/psycopg3/docs/advanced/prepare.html).
AUTO_PREPARE_AFTER = 5


def connect(dsn: str, *, application_name: str = "queue-bench", autocommit: bool = True,
            settings: dict[str, str] | None = None, connect_timeout_s: float = CONNECT_TIMEOUT_S,
            auto_prepare: bool = False) -> psycopg.Connection:
    """Open one connection: ``connect_timeout_s`` to connect, ``application_name``, ``settings`` applied
    (:func:`apply_settings`), psycopg's automatic preparation off (``prepare_threshold`` None: a statement is
    prepared only by :func:`open_session`), or with ``auto_prepare`` on after :data:`AUTO_PREPARE_AFTER`
    executions (the tool's own direct connections: :func:`bench.engines.postgres.adapter.connect_dsn`). Raises :class:`ConnectFailed` (``permanent`` per :func:`is_permanent`; an unparsable
    ``dsn``: kind :data:`INVALID_DSN`, permanent)."""
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, application_name=application_name,
                               connect_timeout=max(1, math.ceil(connect_timeout_s)),
                               prepare_threshold=AUTO_PREPARE_AFTER if auto_prepare else None)
    except psycopg.ProgrammingError as err:
        raise ConnectFailed(INVALID_DSN, f"not a valid connection string ({first_line(err)})",
                            permanent=True) from None
    except psycopg.Error as err:
        raise translate(err, connecting=True) from None
    try:
        with translated(connecting=True):
            apply_settings(conn, settings or {})
    except ConnectFailed:
        conn.close()
        raise
    return conn


def apply_settings(conn: psycopg.Connection, settings: dict[str, str], *, local: bool = False) -> None:
    """``SET`` (``local``: ``SET LOCAL``, for the open transaction only) each of ``settings`` on ``conn``, in
    one round trip. Raises psycopg.Error (22023 a bad value, 42704 an unknown name)."""
    if not settings:
        return
    verb = sql.SQL("SET LOCAL {} = {}" if local else "SET {} = {}")
    statements = sql.SQL("; ").join(verb.format(sql.Identifier(name), sql.Literal(str(value)))
                                    for name, value in settings.items())
    conn.execute(statements)


def reset_settings(conn: psycopg.Connection, names) -> None:
    """``RESET`` each setting of ``names`` on ``conn`` (what :func:`apply_settings` set), in one round trip."""
    names = list(names)
    if names:
        conn.execute(sql.SQL("; ").join(sql.SQL("RESET {}").format(sql.Identifier(n)) for n in names))


def _set_shown(conn: psycopg.Connection, name: str, value: str) -> str:
    """``SET name = value`` then its value as the server has it (``SHOW``: ``2ms`` for 1.5)."""
    conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
    return conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]


def statement_timeout(conn: psycopg.Connection, ms: float) -> str:
    """Bound every later statement on ``conn`` to ``ms`` ms (0: none); the value the server set (``SHOW``)."""
    return _set_shown(conn, "statement_timeout", f"{int(math.ceil(ms))}ms")


def lock_timeout(conn: psycopg.Connection, ms: float) -> str:
    """Bound every later wait for a lock on ``conn`` to ``ms`` ms, rounded up to whole ms as PostgreSQL rounds
    (0: none); the value the server set (``SHOW``). The wait ends with 55P03."""
    return _set_shown(conn, "lock_timeout", f"{int(math.ceil(ms))}ms")


def try_lock_schema(conn: psycopg.Connection, schema: str) -> bool:
    """Try to take ``schema``'s session-level advisory lock on ``conn`` (held until :func:`unlock_schema` or the
    connection ends; https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS); True when
    taken."""
    return conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (f"queue-bench:{schema}",)).fetchone()[0]


def unlock_schema(conn: psycopg.Connection, schema: str) -> None:
    """Release the lock :func:`try_lock_schema` took."""
    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"queue-bench:{schema}",))


def prepare_named(conn: psycopg.Connection, name: str, text: str) -> None:
    """SQL-level ``PREPARE name AS text`` on ``conn`` (the admin connection's checks and plan capture: never
    through a pooler); not transactional, so :func:`deallocate` it whatever happens. Raises psycopg.Error."""
    conn.execute(sql.SQL("PREPARE {} AS ").format(sql.Identifier(name)) + sql.SQL(text), prepare=False)


def deallocate(conn: psycopg.Connection, name: str) -> None:
    """``DEALLOCATE name`` (what :func:`prepare_named` prepared). Raises psycopg.Error."""
    conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))


@dataclasses.dataclass(frozen=True)
class SessionState:
    """What a worker's or producer's session keeps on the server for its life: ``settings`` (``SET``),
    ``statements`` prepared by name (``{name: SQL with $1..$n}``), a ``listen`` channel (``LISTEN``) or None.

    Named statements and settings live on one server connection: a transaction pooler hands a client's next
    transaction to another, where they are missing or, worse, belong to another client (two runs in different
    schemas behind one pooler could execute each other's ``claim``, on the other's table). A session without
    session state (settings per transaction, statements unnamed) is the variant to choose there, in
    :func:`open_session`, the one place sessions are opened."""

    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    statements: dict[str, str] = dataclasses.field(default_factory=dict)
    listen: str | None = None


def open_session(dsn: str, application_name: str, state: SessionState) -> PreparedSession:
    """A worker's or producer's session: :func:`connect`, ``state.settings`` applied, ``state.statements``
    prepared, ``state.listen`` listened on. Raises :class:`ConnectFailed` (the connection closed)."""
    conn = connect(dsn, application_name=application_name, settings=state.settings)
    try:
        with translated(connecting=True):
            session = PreparedSession(conn, state.statements)
            if state.listen:
                session.query(sql.SQL("LISTEN {}").format(sql.Identifier(state.listen)).as_string(None).encode())
    except ConnectFailed:
        conn.close()
        raise
    return session


__all__ = ["INVALID_DSN", "SessionState", "apply_settings", "connect", "deallocate", "error_kind", "is_permanent",
           "lock_timeout", "open_session", "prepare_named", "reset_settings", "statement_timeout", "try_lock_schema", "unlock_schema"]
