"""The psycopg adapter's hot path: prepared statements over psycopg's libpq binding, waited for through gevent's event loop: the workers'
hot path (why, and what it saves: docs/measurements/calibration.md). libpq asynchronous command processing:
https://www.postgresql.org/docs/current/libpq-async.html"""

from __future__ import annotations

import contextlib
import time
from typing import NoReturn

import psycopg
from gevent import Timeout, getcurrent
from gevent.hub import get_hub
from gevent.socket import wait_write
from psycopg import errors, pq

_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)


class PreparedSession:
    """Named prepared statements (``{name: SQL with $1..$n}``) on one autocommit psycopg connection. A call
    returns the command's last ``PGresult``; errors raise psycopg's class for the SQLSTATE; a lost connection
    raises the error the server sent first (57P01 for a terminated backend), else ``OperationalError``.
    ``round_trips`` counts the network exchanges sent since the session opened (one per :meth:`execute` or
    :meth:`query`, however many statements a query's text holds; the preparing at open not counted)."""

    def __init__(self, conn: psycopg.Connection, statements: dict[str, str]):
        if not conn.autocommit:
            raise ValueError("PreparedSession needs an autocommit connection (it sends BEGIN/COMMIT itself)")
        self.conn = conn
        self.pgconn = conn.pgconn
        self.encoding = conn.info.encoding
        self.pgconn.nonblocking = 1
        self._hub = get_hub()
        self._readable = self._hub.loop.io(self.pgconn.socket, 1)  # 1 = EV_READ
        self._waiter = None  # the greenlet waiting for the socket to become readable
        self.round_trips = 0
        #: (SQLSTATE, message) of a FATAL the server sent while no statement ran
        self._fatal: tuple[str, str] | None = None
        conn.add_notice_handler(self._on_notice)
        for name, query in statements.items():
            # send_prepare + a cooperative wait: a blocking PQprepare would freeze every
            # greenlet of the process while a saturated server answers.
            self.pgconn.send_prepare(name.encode(), query.encode())
            self._wait_results()

    def _on_readable(self) -> None:
        """The read watcher's callback: wake the waiting greenlet, or stop the watcher when none waits (so a
        dead connection's readable socket cannot spin the loop)."""
        waiter = self._waiter
        if waiter is None:
            self._readable.stop()
        else:
            waiter.switch()

    def _wait_read(self) -> None:
        """Yield to the other greenlets until the socket is readable."""
        self._waiter = getcurrent()
        if not self._readable.active:
            self._readable.start(self._on_readable)
        try:
            self._hub.switch()
        finally:
            self._waiter = None

    def _wait_results(self) -> pq.abc.PGresult | None:
        pgconn = self.pgconn
        while pgconn.flush():
            wait_write(pgconn.socket)
        last = error = None
        while True:
            while pgconn.is_busy():
                self._wait_read()
                try:
                    pgconn.consume_input()
                except psycopg.OperationalError:
                    # The server closed the socket after an error it had sent (57P01 when the backend
                    # was terminated): that error, with its SQLSTATE, is the cause, not the closed socket.
                    if error is not None:
                        raise errors.error_from_result(error, encoding=self.encoding) from None
                    raise
            result = pgconn.get_result()
            if result is None:
                break
            if result.status not in _OK and error is None:
                error = result
            last = result
        if error is not None:
            raise errors.error_from_result(error, encoding=self.encoding)
        return last

    def _on_notice(self, diag: errors.Diagnostic) -> None:
        # An error that arrives while no statement runs goes to libpq's notice processor: a FATAL
        # one says why the server is closing the connection (57P01 when the backend was terminated).
        if diag.severity_nonlocalized in ("FATAL", "PANIC") and diag.sqlstate:
            self._fatal = (diag.sqlstate, diag.message_primary or "")

    def _read_idle_input(self) -> None:
        """Read what the server sent since the last statement (one non-blocking recv), so a FATAL sent before
        it closed the socket is seen before a write's reset discards it."""
        try:
            self.pgconn.consume_input()
        except psycopg.OperationalError:
            pass  # the connection is gone; the statement below reports it
        finally:
            self.pgconn.is_busy()  # parses the input: an idle-state error reaches _on_notice

    def _raise_lost(self, err: BaseException) -> NoReturn:
        """Raise the FATAL the server sent first, with its SQLSTATE, else ``err`` (OSError: ``OperationalError``)."""
        if self._fatal is not None and getattr(err, "sqlstate", None) is None:
            sqlstate, message = self._fatal
            with contextlib.suppress(KeyError):  # a SQLSTATE psycopg does not know
                raise errors.lookup(sqlstate)(message) from err
        if isinstance(err, psycopg.Error):
            raise err
        raise psycopg.OperationalError(str(err)) from err

    def _take_notifies(self) -> int:
        """Take the notifications libpq has parsed so far; how many there were."""
        taken = 0
        while self.pgconn.notifies() is not None:
            taken += 1
        return taken

    def wait_notification(self, timeout_s: float) -> bool:
        """Between statements, wait up to ``timeout_s`` s for a notification on a ``LISTEN`` channel
        (https://www.postgresql.org/docs/current/libpq-notify.html), yielding: True once one came (all taken),
        False when the time ran out. A lost connection raises as in :meth:`execute`."""
        try:
            self._read_idle_input()
            if self._take_notifies():
                return True
            deadline = time.monotonic() + timeout_s
            while (remaining := deadline - time.monotonic()) > 0:
                with Timeout(remaining, False):  # False: the block just ends when the time is up
                    self._wait_read()
                self.pgconn.consume_input()
                if self._take_notifies():
                    return True
            return False
        except (psycopg.Error, OSError) as err:
            self._raise_lost(err)

    def execute(self, name: bytes, params: list[bytes | None]) -> pq.abc.PGresult:
        """Run prepared statement ``name`` with text ``params``; return its result."""
        return self._round_trip(self.pgconn.send_query_prepared, name, params)

    def _round_trip(self, send, *args) -> pq.abc.PGresult:
        """Read what came while idle, ``send(*args)``, wait for the results (a lost connection: :meth:`_raise_lost`)."""
        self._read_idle_input()
        self.round_trips += 1
        try:
            send(*args)
            return self._wait_results()
        except (psycopg.Error, OSError) as err:  # OSError: the socket went away under gevent's wait
            self._raise_lost(err)

    def query(self, sql: bytes) -> pq.abc.PGresult:
        """Send ``sql`` (statements separated by ``;``) unprepared; its last result. Errors as in :meth:`execute`."""
        return self._round_trip(self.pgconn.send_query, sql)

    def rollback(self) -> None:
        """Roll back the open transaction, if any, while the connection is up; never raises."""
        if not self.broken and self.in_transaction:
            with contextlib.suppress(psycopg.Error):
                self.query(b"ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed) on the connection."""
        return self.pgconn.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)

    @property
    def broken(self) -> bool:
        """True when the connection is lost."""
        return self.pgconn.status == pq.ConnStatus.BAD or self.conn.closed

    def close(self) -> None:
        """Stop the read watcher and close the connection."""
        self._readable.stop()
        self._readable.close()
        self.conn.close()


def rows(result: pq.abc.PGresult) -> list[tuple[bytes, ...]]:
    """All rows of ``result`` as tuples of raw text values (bytes, or None for NULL)."""
    ncols = result.nfields
    return [tuple(result.get_value(r, c) for c in range(ncols)) for r in range(result.ntuples)]

