"""Every psycopg connection the tool opens, and the state a session keeps on the server: settings
(``search_path``, a definition's ``[settings]``, timeouts), statements prepared by name, the schema's lock,
``LISTEN``. Nothing else in the tool sets session state or prepares a statement (docs/architecture.md,
"The driver adapters")."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import psycopg
from psycopg import sql

from bench.engines.base import ConnectFailed
from bench.engines.driver import CONNECT_TIMEOUT_S
from bench.engines.postgres.adapter.errors import error_kind, first_line, is_permanent, translate, translated
from bench.engines.postgres.adapter.stateless import StatelessSession
from bench.engines.postgres.adapter.wire import PreparedSession

#: The kind of a connection string psycopg cannot parse (a :class:`ConnectFailed` that is permanent).
INVALID_DSN = "invalid_dsn"
#: With ``auto_prepare``, psycopg prepares a statement on its 5th execution on a connection (psycopg's default
#: ``prepare_threshold``: https://www.psycopg.org/psycopg3/docs/advanced/prepare.html).
AUTO_PREPARE_AFTER = 5


def conninfo_params(dsn: str) -> dict[str, str]:
    """The keywords of connection string ``dsn`` as libpq reads them (psycopg's parser; nothing connects).
    Raises :class:`ConnectFailed` (kind :data:`INVALID_DSN`, permanent) naming the parser's complaint."""
    try:
        return psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as err:
        raise ConnectFailed(INVALID_DSN, f"not a valid connection string ({first_line(err)})",
                            permanent=True) from None


def make_conninfo(**params: str) -> str:
    """A connection string of keywords ``params`` (psycopg's writer, quoting as libpq reads it back)."""
    return psycopg.conninfo.make_conninfo(**params)


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


def empty_round_trip(conn: psycopg.Connection) -> None:
    """Send the empty query on ``conn`` and wait for its answer (``EmptyQueryResponse``): one round trip with no
    statement to parse or run (https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-SIMPLE-QUERY).
    Raises psycopg.OperationalError when the connection is lost."""
    result = conn.pgconn.exec_(b"")
    if result.status != psycopg.pq.ExecStatus.EMPTY_QUERY:
        raise psycopg.OperationalError(conn.pgconn.error_message.decode(errors="replace").strip() or
                                       f"the empty query returned {result.status.name}")


def apply_settings(conn: psycopg.Connection, settings: dict[str, str], *, local: bool = False) -> None:
    """``SET`` (``local``: ``SET LOCAL``, for the open transaction only) each of ``settings`` on ``conn``, in
    one round trip. Raises psycopg.Error (22023 a bad value, 42704 an unknown name)."""
    if settings:
        conn.execute(settings_sql(settings, local=local))


def settings_sql(settings: dict[str, str], *, local: bool = False) -> sql.Composed:
    """``SET name = value`` (``local``: ``SET LOCAL``) for each of ``settings``, joined by ``;`` (one round trip)."""
    verb = sql.SQL("SET LOCAL {} = {}" if local else "SET {} = {}")
    return sql.SQL("; ").join(verb.format(sql.Identifier(name), sql.Literal(str(value)))
                              for name, value in settings.items())


@contextlib.contextmanager
def local_transaction(conn: psycopg.Connection, settings: dict[str, str]):
    """A transaction on ``conn`` whose statements see ``settings`` (``SET LOCAL``): how a connection behind a
    transaction pool (:class:`SessionState`, ``stateless``) has them, at the cost of three more round trips
    (``BEGIN``, the settings, ``COMMIT``). Raises psycopg.Error."""
    with conn.transaction():
        apply_settings(conn, settings, local=True)
        yield


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


def try_advisory_lock(conn: psycopg.Connection, key: int) -> tuple[int, bool]:
    """(the backend pid, taken?): ``pg_try_advisory_lock(key)``, a session-level lock, on ``conn`` (the pooler
    probes, bench/engines/postgres/pooler_probes.py: what it does through a pool). Raises psycopg.Error."""
    pid, got = conn.execute("SELECT pg_backend_pid(), pg_try_advisory_lock(%s)", (key,)).fetchone()
    return pid, got


def listen(conn: psycopg.Connection, channel: str) -> None:
    """``LISTEN channel`` on ``conn`` (the pooler probes: what it does through a pool). Raises psycopg.Error."""
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


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
    ``statements`` prepared by name (``{name: SQL with $1..$n}``), a ``listen`` channel (``LISTEN``) or None;
    or, ``stateless``, nothing at all.

    Named statements and settings live on one server connection: a transaction pooler hands a client's next
    transaction to another, where they are missing or, worse, belong to another client (two runs in different
    schemas behind one pooler could execute each other's ``claim``, on the other's table). A ``stateless``
    session (:class:`bench.engines.postgres.adapter.stateless.StatelessSession`) sends every statement unnamed
    with bound parameters and sets ``settings`` per transaction with ``SET LOCAL``; it cannot ``listen``.
    :func:`open_session` is the one place the variant is chosen."""

    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    statements: dict[str, str] = dataclasses.field(default_factory=dict)
    listen: str | None = None
    stateless: bool = False


def open_session(dsn: str, application_name: str, state: SessionState) -> PreparedSession:
    """A worker's or producer's session: :func:`connect`, ``state.settings`` applied, ``state.statements``
    prepared, ``state.listen`` listened on; ``state.stateless``: nothing set or prepared, each statement and the
    settings checked once in a rolled-back transaction. Raises :class:`ConnectFailed` (the connection closed);
    ValueError for a stateless session asked to listen."""
    if state.stateless and state.listen:
        raise ValueError("a stateless session cannot LISTEN: the pooler hands its server connection to others")
    conn = connect(dsn, application_name=application_name, settings={} if state.stateless else state.settings)
    try:
        with translated(connecting=True):
            if state.stateless:
                session = StatelessSession(conn, state.statements, begin_sql(conn, state.settings))
                session.check()
                return session
            session = PreparedSession(conn, state.statements)
            if state.listen:
                session.query(sql.SQL("LISTEN {}").format(sql.Identifier(state.listen)).as_string(None).encode())
    except ConnectFailed:
        conn.close()
        raise
    return session


#: The per-session setting of the transaction isolation, and the name ``SET LOCAL`` sets it by in a transaction
#: (a default changed after ``BEGIN`` no longer applies to it).
_LOCAL_NAMES = {"default_transaction_isolation": "transaction_isolation"}


def begin_sql(conn: psycopg.Connection, settings: dict[str, str]) -> bytes | None:
    """``BEGIN`` then ``SET LOCAL`` of each of ``settings`` (one round trip), as a stateless session opens a
    transaction; None without settings."""
    if not settings:
        return None
    local = {_LOCAL_NAMES.get(name, name): value for name, value in settings.items()}
    return b"BEGIN; " + settings_sql(local, local=True).as_string(conn).encode()


__all__ = ["INVALID_DSN", "SessionState", "conninfo_params", "apply_settings", "empty_round_trip", "begin_sql", "local_transaction", "settings_sql", "connect", "deallocate", "error_kind", "is_permanent",
           "lock_timeout", "open_session", "prepare_named", "reset_settings", "statement_timeout", "try_lock_schema", "unlock_schema"]
