"""A statement run every few seconds on its own connection, in a greenlet: the loop of the
reaper and the archive mover on PostgreSQL (:class:`bench.engines.common.Periodic` with psycopg's
errors, counted by :func:`bench.engines.postgres.error_kinds.error_kind`)."""

from __future__ import annotations

import psycopg

from bench.engines.common import Periodic as _Periodic
from bench.engines.postgres.error_kinds import error_kind


class Periodic(_Periodic):
    """Calls :meth:`once` every ``interval_s`` seconds until :meth:`stop`; a psycopg error is
    counted by its SQLSTATE (or named kind) and the loop goes on."""

    driver_errors = (psycopg.Error,)

    def error_kind(self, err: BaseException) -> str:
        """The SQLSTATE or named kind of ``err``."""
        return error_kind(err, lost=self.conn.broken)
