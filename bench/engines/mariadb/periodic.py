"""A statement run every few seconds on its own connection, in a greenlet: the reaper's loop on
MariaDB (:class:`bench.engines.common.Periodic` with PyMySQL's errors, counted by
:func:`bench.engines.mariadb.error_kinds.error_kind`, and a rollback after a failed pass)."""

from __future__ import annotations

import pymysql

from bench.engines.common import Periodic as _Periodic
from bench.engines.mariadb.error_kinds import error_kind


class Periodic(_Periodic):
    """Calls :meth:`once` every ``interval_s`` seconds until :meth:`stop`; an error is counted by
    kind, the transaction rolled back, and the loop goes on."""

    driver_errors = (pymysql.err.MySQLError, OSError)

    def error_kind(self, err: BaseException) -> str:
        """The named kind of ``err``."""
        return error_kind(err)

    def after_error(self) -> None:
        """Roll back what the failed pass left open (ignoring a connection that is gone)."""
        try:
            self.conn.rollback()
        except (pymysql.err.MySQLError, OSError):
            pass
