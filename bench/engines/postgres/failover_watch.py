"""Observe-only failover (docs/failover.md, "Observe-only: a failover your provider does"): behind a user's
multi-host DSN with ``target_session_attrs=read-write`` (or ``primary``), the primary's identity read each second on
a connection of its own, through that DSN, re-made when it breaks; the first change is recorded as ``run.json``
``failover`` (``caused: false``), in the caused failover's shape. Nothing is stopped or promoted. Source:
https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNECT-TARGET-SESSION-ATTRS"""

from __future__ import annotations

import time
from typing import Any, Callable

import gevent

from bench.engines.postgres.adapter import DRIVER, conninfo_params, connect_dsn
from bench.engines.postgres.failover import failover_record, identity, since_start
from bench.errors import QBenchError

__all__ = ["WATCH_EVERY_S", "FailoverWatch", "watch_for"]

#: How often the primary's identity is read (s): the gap's two ends are each within this of the truth.
WATCH_EVERY_S = 1.0
#: The ``target_session_attrs`` that keep a connection on the primary only (libpq's).
PRIMARY_ONLY = ("read-write", "primary")


def watch_for(dsn: str) -> FailoverWatch | None:
    """A :class:`FailoverWatch` of ``dsn`` when it names several hosts and keeps to the primary
    (``target_session_attrs`` ``read-write`` or ``primary``); None otherwise (nothing changes for one host)."""
    params = conninfo_params(dsn)
    hosts = (params.get("host") or params.get("hostaddr") or "").split(",")
    if len(hosts) < 2 or params.get("target_session_attrs") not in PRIMARY_ONLY:
        return None
    return FailoverWatch(dsn)


class FailoverWatch:
    """The primary behind ``dsn`` watched from :meth:`start` until the load stops: ``before`` its identity at
    construction; ``record`` None until the identity changes, then what was seen (s since the measured start):
    ``noticed_at_s``, ``old_primary_last_answered_s``, ``new_primary_first_answered_s``, ``gap_s`` (between the two),
    ``before``/``after``, ``log_position``; ``failures``: reads or connections that failed."""

    def __init__(self, dsn: str):
        self.dsn, self.record, self.failures = dsn, None, 0
        self.position: Callable[[], int | None] = lambda: None
        self._conn: Any = None
        with connect_dsn(dsn, application_name="queue-bench failover watch") as conn:
            self.before = identity(conn)
        self._last_old_s: float | None = None
        self._between: int | None = None  # the claim log's length after the last failed read since the old answered

    def start(self, position: Callable[[], int | None], clock, n_warm: int, log: Callable[[str], None]) -> list:
        """Watch from now on (a greenlet, in the returned list: killed with the samplers); ``position()`` the claim
        log's length (None when it is not written as claims commit)."""
        self.position = position
        return [gevent.spawn(self._watch, clock, n_warm, log)]

    def _watch(self, clock, n_warm: int, log: Callable[[str], None]) -> None:
        try:
            while self.record is None:
                started = time.monotonic()
                self.sample(since_start(clock, n_warm), log)
                gevent.sleep(max(0.0, WATCH_EVERY_S - (time.monotonic() - started)))
        finally:
            self.close()

    def sample(self, now_s: float, log: Callable[[str], None]) -> None:
        """One read of the primary's identity (the connection re-made when it broke); a change recorded once."""
        try:
            if self._conn is None:
                self._conn = connect_dsn(self.dsn, application_name="queue-bench failover watch")
            now = identity(self._conn)
        except (QBenchError, *DRIVER.errors):  # the primary gone, or none writable yet
            self.failures += 1
            self.close()
            # The old primary is gone by now: every event it acknowledged is logged before here. A connection no host
            # took read-write means the new one is not promoted yet and nothing commits until it is: the length here
            # splits exactly. A connection found broken after the promotion puts the split later: safe, as below
            # (docs/failover.md, "Observe-only").
            self._between = self.position()
            return
        if now == self.before:
            self._last_old_s, self._between = now_s, None
            return
        # No read failed since the old primary last answered: the claim log's length now, later than the promotion.
        # An event logged between the promotion and now committed on the new primary, which holds it: counted as
        # before the promotion it cannot be counted missing (its claim counts in the attempts there, its completion
        # left the job done with its token, its job has its row); every event the old primary acknowledged is before.
        self.record = failover_record(
            caused=False, before=self.before, after=now, noticed_at_s=now_s,
            old_primary_last_answered_s=self._last_old_s, new_primary_first_answered_s=now_s,
            gap_s=round(now_s - self._last_old_s, 3) if self._last_old_s is not None else None,
            log_position=self._between if self._between is not None else self.position())
        log(f"failover: the primary changed (timeline {self.before['timeline']} -> {now['timeline']}), "
            f"noticed at {now_s:g} s; the run goes on against the new one")

    def close(self) -> None:
        """Close the watch's connection (the next read re-makes it)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
