"""What the load layer asks of a database engine: the sessions of workers and producers.

``bench.load`` (the Locust users) talks to the database only through these
``Protocol``s and exceptions; a driver is imported only under
``bench/engines/<name>/`` (``tests/test_layers.py``). PostgreSQL is the first
implementation (:mod:`bench.engines.postgres.sessions`). What the rest of a run
asks of the engine (schema, seeding, monitor, audit, plans, faults) still lives in
the PostgreSQL package's modules and moves behind this interface next
(docs/architecture.md).

Errors: every database error a session raises is an :class:`EngineError` whose
``kind`` is what the error counters are keyed by (a SQLSTATE such as ``57P01``, or a
named kind such as ``connection_lost``) and whose ``lost`` says the connection is
gone (the user opens a new one).
"""

from __future__ import annotations

from typing import Protocol
from bench.errors import RunFailed

#: One claimed job as a worker holds it: (id, attempt token, pickup µs, attempts,
#: lease_until, claimed_at); the last two are database epoch seconds (for the claim log).
ClaimedRow = tuple[int, int, int, int, float, float]


class EngineError(RunFailed):
    """A database error seen by a session.

    ``kind``: the error counter key (SQLSTATE or a named kind); ``lost``: the
    session's connection is broken; the message is the database's first line.
    """

    def __init__(self, kind: str, message: str, *, lost: bool = False):
        super().__init__(message)
        self.kind = kind
        self.lost = lost


class LockNotAvailable(EngineError):
    """A ``NOWAIT`` claim met a locked row (PostgreSQL SQLSTATE 55P03): back off and retry."""


class ConnectFailed(EngineError):
    """A new connection could not be opened."""


class WorkerSession(Protocol):
    """One worker's own connection, with its claim, completion and failure statements.

    In ``TXN=hold`` mode the worker brackets claim … complete with :meth:`begin` and
    :meth:`commit`; otherwise each statement is its own transaction.
    """

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed) on the connection."""

    def claim(self) -> list[ClaimedRow]:
        """Claim up to the run's batch of eligible jobs; [] when none is eligible.

        Raises :class:`LockNotAvailable` (NOWAIT met a locked row) or :class:`EngineError`."""

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """Complete ``[(id, token)]``; return the ids whose completion was applied
        (a job whose token moved on, its lease expired and re-claimed, is not)."""

    def fail(self, job_id: int, token: int, retry_delay_s: float, error: str) -> str | None:
        """Report a failed attempt: the job's new status (``pending`` for a retry after
        ``retry_delay_s``, ``dead`` past its attempts), or None when the token moved on."""

    def begin(self) -> None:
        """Open a transaction (``TXN=hold``)."""

    def commit(self) -> None:
        """Commit the open transaction."""

    def rollback(self) -> None:
        """Roll back the open transaction, if any; never raises."""

    def plan_counts(self) -> dict[str, int] | None:
        """How this session planned its claim so far: ``{"generic_plans", "custom_plans"}``,
        or None when the claim is not a prepared statement."""

    def explain_claim(self, timeout_ms: int) -> str:
        """The plan of the claim as this session runs it, executed and rolled back (text)."""

    def close(self) -> None:
        """Close the connection."""


class ProducerSession(Protocol):
    """One producer's own connection."""

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """Insert one job per (priority, run_at epoch seconds); return their ids. Raises :class:`EngineError`."""

    def close(self) -> None:
        """Close the connection."""


class SessionFactory(Protocol):
    """Opens the sessions of one run (the engine chosen and its DSN are bound in)."""

    def worker_session(self, name: str) -> WorkerSession:
        """A new session for worker ``name``. Raises :class:`ConnectFailed`."""

    def producer_session(self, name: str) -> ProducerSession:
        """A new session for producer ``name``. Raises :class:`ConnectFailed`."""

    def check_cooperative(self) -> str:
        """The name of the driver's wait function; raises RuntimeError if a wait would block
        every greenlet of the process (concurrency would be fake)."""

