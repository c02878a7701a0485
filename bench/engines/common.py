"""What the engines share without a driver: the seed's figures, the schemas ``qbench clean`` finds, the
audit's claim counts and result, the loop of a periodic task (reaper, mover, VACUUM), loopback hosts."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import gevent

from bench.errors import ConnectRefused

T = TypeVar("T")

#: The audit's invariant keys of ``summary.json``, all 0 on a correct run, on every engine.
INVARIANTS = ("double_claims", "lost_jobs", "duplicated_jobs", "over_claims", "stale_completions_applied",
              "double_completions")

#: The audit's claim counts, one row over its claims table (``{claims}``: per claimed job its ``claims`` and
#: its ``overlapping`` ones) and the jobs table (``{jobs}``), in SQL both engines run: jobs claimed, claimed
#: more than once, redeliveries, claims under a live lease, claims beyond ``attempts``, and double claims
#: (per job the larger of those two lower bounds, summed).
CLAIM_CHECKS = """\
SELECT COUNT(*), COALESCE(SUM(CASE WHEN claims > 1 THEN 1 ELSE 0 END), 0), COALESCE(SUM(claims - 1), 0),
       COALESCE(SUM(overlapping), 0), COALESCE(SUM(GREATEST(0, claims - attempts)), 0),
       COALESCE(SUM(GREATEST(overlapping, claims - attempts)), 0)
FROM (SELECT c.id, c.claims, c.overlapping, COALESCE(MAX(j.attempts), c.claims) AS attempts
      FROM {claims} c LEFT JOIN {jobs} j ON j.id = c.id
      GROUP BY c.id, c.claims, c.overlapping) AS per_job"""


#: Each claim ``POLICY``'s locking clause, the same on every engine.
LOCKING_CLAUSE = {
    "wait": "FOR UPDATE",
    "nowait": "FOR UPDATE NOWAIT",
    "skip_locked": "FOR UPDATE SKIP LOCKED",
}

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback_host(host: str) -> bool:
    """True when a DSN's ``host`` is this machine: a :data:`LOOPBACK_NAMES` name, a loopback address, or
    (libpq's) empty for the default Unix socket, ``/dir`` or ``@abstract`` for another."""
    host = host.strip()
    if not host or host.startswith("/") or host.startswith("@") or host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def poll_wait(timeout_s: float) -> bool:
    """``wait_for_work`` of a session that polls: gevent-sleep ``timeout_s`` seconds; False."""
    gevent.sleep(timeout_s)
    return False


def with_connection(connect: Callable[[], Any], use: Callable[[Any], T]) -> T:
    """``use(conn)`` on a connection opened by ``connect()`` for it alone and closed after, however it ends."""
    conn = connect()
    try:
        return use(conn)
    finally:
        conn.close()


@dataclass
class ToolSchema:
    """A schema carrying the tool's mark, as ``qbench clean`` finds it: tables, estimated rows, size (bytes);
    ``in_use`` (a run holds it) or ``dependents`` (outside it) leave it alone."""

    name: str
    tables: int
    rows_estimate: int
    size_bytes: int
    in_use: bool = False
    dependents: tuple = ()


@dataclass
class SeedResult:
    """What ``prepare`` seeded: row counts and each step's seconds."""

    history: int
    backlog: int
    seconds: float
    index_seconds: float
    vacuum_seconds: float

    @property
    def rows_per_s(self) -> float:
        """Seeded rows per second of seeding (INSERT only)."""
        rows = self.history + self.backlog
        return rows / self.seconds if self.seconds > 0 else float("nan")


def audit_result(*, status_counts: dict[str, int], claimed_distinct: int, claimed_more_than_once: int,
                 redeliveries: int, overlapping: int, attempts_short: int, double_claims: int, applied: int,
                 stale_applied: int, double_completions: int, expected: int, missing: int, not_durable: int,
                 lost: int, duplicated: int, over_claims: int, events: int, retry_gaps: list | None,
                 poison: dict, fifo_compared: int, fifo_out_of_order: int) -> dict:
    """The audit's result, one shape on every engine: ``{"invariants", "status_counts", "details",
    "redeliveries", "retry_gaps", "fifo_out_of_order_share"}`` (the share 0..1 unrounded, None with no job
    compared)."""
    invariants = {
        "double_claims": double_claims,
        "lost_jobs": lost,
        "duplicated_jobs": duplicated,
        "over_claims": int(over_claims),
        "stale_completions_applied": stale_applied,
        "double_completions": double_completions,
    }
    details = {
        "rows_expected": expected,
        "rows_present": sum(status_counts.values()),
        "rows_missing": missing,
        "rows_duplicated": duplicated,
        "jobs_claimed_distinct": claimed_distinct,
        "jobs_claimed_more_than_once": claimed_more_than_once,
        "claims_under_live_lease": overlapping,
        "claims_beyond_attempts": attempts_short,
        "completions_applied": applied,
        "double_completions": double_completions,
        "completions_not_durable": not_durable,
        "claim_log_events": events,
        "fifo_jobs_compared": fifo_compared,
        "fifo_jobs_out_of_order": fifo_out_of_order,
        **poison,
    }
    return {"invariants": invariants, "status_counts": status_counts, "details": details,
            "redeliveries": redeliveries, "retry_gaps": retry_gaps,
            "fifo_out_of_order_share": fifo_out_of_order / fifo_compared if fifo_compared else None}


class Periodic:
    """:meth:`once` every ``interval_s`` s until :meth:`stop`; :attr:`driver` errors counted by kind. With
    :attr:`reopen` (a callable returning a new connection, set up), a lost connection is reopened before the
    next pass (the reaper's, which a partition cuts: docs/network.md)."""

    driver: Any = None

    def __init__(self, conn, interval_s: float, recorder):
        self.conn = conn
        self.interval_s = interval_s
        self.recorder = recorder
        self.stopping = False
        self.reopen: Callable[[], Any] | None = None

    def _reopen_if_lost(self) -> bool:
        """Reopen :attr:`conn` with :attr:`reopen` when it is lost; a failure counted by kind (tried again after
        the next failed pass). Whether it was reopened."""
        if self.reopen is None or not self.driver.is_broken(self.conn):
            return False
        try:
            self.conn = self.reopen()
        except (ConnectRefused, *self.driver.errors) as err:  # the adapters' connect_dsn: ConnectRefused
            self.recorder.error(getattr(err, "kind", None) or type(err).__name__)
            return False
        return True

    def once(self):  # pragma: no cover - abstract
        """One pass (implemented by subclasses)."""
        raise NotImplementedError

    def count_pass(self, rows: list | tuple) -> tuple[int, int]:
        """Count a reaper pass over ``(id, new status)`` rows (``reaper_runs``, ``lease_expiries``,
        ``reaper_dead_lettered``); returns (re-queued, dead-lettered)."""
        dead = sum(1 for _, status in rows if status == "dead")
        self.recorder.count("reaper_runs")
        self.recorder.count("lease_expiries", len(rows))
        self.recorder.count("reaper_dead_lettered", dead)
        return len(rows) - dead, dead

    def run(self) -> None:
        """Loop until :meth:`stop` (run it in a greenlet). A pass that failed on a lost connection it reopened is
        run again at once, not after the interval (a reconnection after a partition may itself have taken the
        connect timeout); once: a connection lost again waits the interval."""
        again = False
        while not self.stopping:
            try:
                self.once()
                again = False
            except self.driver.errors as err:
                self.recorder.error(self.driver.error_kind(err, self.conn))
                self.driver.after_error(self.conn)
                again = self._reopen_if_lost() and not again
                if again:
                    continue
            gevent.sleep(self.interval_s)

    def stop(self) -> None:
        """Ask the loop to end after its current pass."""
        self.stopping = True
