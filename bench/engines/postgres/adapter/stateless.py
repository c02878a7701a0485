"""The stateless variant of a worker's or producer's session, for a transaction pooler (docs/poolers.md): nothing
kept on the server between transactions, since the next one may run on another server connection. Every
statement is sent unnamed with bound parameters (libpq's ``PQsendQueryParams``: Parse, Bind, Execute of the
unnamed statement, https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-EXT-QUERY); the
session's settings are set at each ``BEGIN`` with ``SET LOCAL``, and a statement sent outside a transaction gets
one of its own (``BEGIN`` and the settings in one round trip before it, ``COMMIT`` in one after it)."""

from __future__ import annotations

import psycopg
from psycopg import pq

from bench.engines.postgres.adapter.wire import PreparedSession

#: What the session's commands to end a transaction are (sent as they are).
_ENDS = (b"COMMIT", b"ROLLBACK")


class StatelessSession(PreparedSession):
    """:class:`PreparedSession`'s interface with nothing prepared: :meth:`execute` sends ``statements[name]``
    (``{name: SQL with $1..$n}``) unnamed; ``begin`` (``BEGIN; SET LOCAL …``, or None without settings) opens
    each transaction. ``extra_round_trips`` counts the round trips the settings cost (2 per statement sent outside
    a transaction; none inside one, where they ride on its ``BEGIN``)."""

    def __init__(self, conn: psycopg.Connection, statements: dict[str, str], begin: bytes | None):
        super().__init__(conn, {})
        self.texts = {name.encode(): text.encode() for name, text in statements.items()}
        self.begin = begin
        self.extra_round_trips = 0

    def check(self) -> None:
        """Parse each statement (unnamed) under the settings, in a transaction rolled back: a bad setting or
        statement refuses the session as a prepared one's would. Raises psycopg.Error."""
        self._round_trip(self.pgconn.send_query, self.begin or b"BEGIN")
        try:
            for text in self.texts.values():
                self._round_trip(self.pgconn.send_prepare, b"", text)
        finally:
            self.rollback()

    def execute(self, name: bytes, params: list[bytes | None]) -> pq.abc.PGresult:
        """Run statement ``name`` unnamed with text ``params`` (in a transaction of its own with the settings when
        none is open); its result."""
        text = self.texts[name]
        if self.begin is None or self.in_transaction:
            return self._round_trip(self.pgconn.send_query_params, text, params)
        return self._own_transaction(self.pgconn.send_query_params, text, params)

    def query(self, sql: bytes) -> pq.abc.PGresult:
        """Send ``sql`` unprepared: a ``BEGIN`` gets the settings after it; another statement outside a
        transaction gets a transaction of its own."""
        if self.begin is None or sql in _ENDS:
            return super().query(sql)
        if sql == b"BEGIN" or sql.startswith(b"BEGIN;"):
            return super().query(self.begin + sql[len(b"BEGIN"):])
        if self.in_transaction:
            return super().query(sql)
        return self._own_transaction(self.pgconn.send_query, sql)

    def _own_transaction(self, send, *args) -> pq.abc.PGresult:
        """``send(*args)`` between ``BEGIN; SET LOCAL …`` and ``COMMIT``; its result. Rolled back on an error."""
        self._round_trip(self.pgconn.send_query, self.begin)
        try:
            result = self._round_trip(send, *args)
            self._round_trip(self.pgconn.send_query, b"COMMIT")
        except BaseException:
            self.rollback()
            raise
        self.extra_round_trips += 2
        return result

    def wait_notification(self, timeout_s: float) -> bool:
        """Never called: a stateless session does not ``LISTEN`` (:func:`open_session` refuses it)."""
        raise RuntimeError("a stateless session has no LISTEN channel")
