"""What a run asks of a database engine: the :class:`Engine` interface, its :class:`Capabilities`,
and the sessions of workers and producers.

``bench.load`` (the Locust users) talks to the database only through the session ``Protocol``s
and exceptions here; :mod:`bench.runner` and the sweep driver only through :class:`Engine`
(:func:`bench.engines.get_engine`). A driver is imported only under ``bench/engines/<name>/``
(``tests/test_layers.py``). PostgreSQL is the first implementation
(:mod:`bench.engines.postgres.engine`).

Errors: every database error a session raises is an :class:`EngineError` whose
``kind`` is what the error counters are keyed by (a SQLSTATE such as ``57P01``, or a
named kind such as ``connection_lost``) and whose ``lost`` says the connection is
gone (the user opens a new one).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Protocol

from bench.config.parameters import BY_KEY, NOT_APPLICABLE, PARAMETERS
from bench.errors import ConfigError, RunFailed

#: One claimed job as a worker holds it: (id, attempt token, pickup µs, attempts,
#: lease_until, claimed_at); the last two are database epoch seconds (for the claim log). Pickup is
#: None when the claim cannot tell it (a queue definition whose claim does not return its eligible time).
ClaimedRow = tuple[int, int, int | None, int, float, float]


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

    def wait_for_work(self, timeout_s: float) -> bool:
        """After a claim that found nothing: wait up to ``timeout_s`` seconds (``POLL_MS``) for new
        work, yielding to the other greenlets. With ``WAKEUP=notify`` the wait ends as soon as a
        notification from a producer's committed insert arrives (True; also when one came while the
        worker was busy); otherwise it sleeps the whole time (False). Raises :class:`EngineError`
        when the connection is lost while waiting."""

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



@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an engine can honour: for each run parameter it restricts (by workload-file key), the
    values it supports; a parameter not listed is supported with every value the parameter table
    allows. ``reasons`` says, per key, why (shown in the refusal)."""

    engine: str
    allowed: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    reasons: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The error a NOWAIT claim raises on a locked row (what the report names), e.g. ``55P03``.
    nowait_error: str = ""
    #: Features where engines (or versions of one) differ, by name: ``True`` when supported.
    features: Mapping[str, bool] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_table(cls, engine: str, **extra: Any) -> "Capabilities":
        """The capabilities the parameter table gives ``engine``
        (:attr:`bench.config.parameters.Parameter.engine_values`); a parameter with no meaning there
        allows only :data:`~bench.config.parameters.NOT_APPLICABLE`."""
        allowed = {p.key: (p.engine_values[engine] or (NOT_APPLICABLE,)) for p in PARAMETERS
                   if engine in p.engine_values}
        reasons = {p.key: p.engine_reasons[engine] for p in PARAMETERS if engine in p.engine_reasons}
        return cls(engine=engine, allowed=allowed, reasons=reasons, **extra)

    def check(self, config: Mapping[str, Any]) -> None:
        """Raise ConfigError (the parameter's upper-case name) for the first value in ``config`` (a
        ``RunConfig.public()`` dict) this engine cannot honour; return None when it can run it."""
        for key, allowed in self.allowed.items():
            value = config.get(BY_KEY[key].attribute)
            if value not in allowed:
                why = f" ({self.reasons[key]})" if key in self.reasons else ""
                raise ConfigError(key.upper(), f"{value!r} is not supported on {self.engine}{why}; allowed: "
                                               + ", ".join(str(v) for v in allowed))


class Engine(Protocol):
    """Everything a run asks of a database, for one engine. ``conn`` arguments are the engine's own
    admin connections (from :meth:`connect`); ``cfg`` is a :class:`bench.config.run_config.RunConfig`.
    Methods raise ConfigError for what the user must change (one line, exit 2) and one of
    :attr:`database_errors` when the database fails."""

    name: str
    capabilities: Capabilities
    #: exceptions that mean "the database failed or went away" (caught around the audit)
    database_errors: tuple[type[BaseException], ...]
    #: the audit's invariant names, each 0 on a correct run
    invariants: tuple[str, ...]

    # -- connect and check
    def connect(self, dsn: str, application_name: str) -> Any:
        """An admin connection (autocommit); ConfigError (``DSN``) when it cannot connect."""

    def is_alive(self, conn: Any) -> bool:
        """The connection still answers."""

    def server_info(self, conn: Any) -> dict:
        """``server_version`` and the server settings run.json records."""

    def claim_schema(self, conn: Any, schema: str, connections: int) -> dict:
        """Check the schema is the tool's (or absent) and free, lock it for this run on ``conn``, and
        check the server has ``connections`` free; returns ``{"available", "max_connections", ...}``."""

    def check_schema(self, conn: Any, schema: str, connections: int) -> dict:
        """:meth:`claim_schema`'s checks without taking the schema's lock."""

    def sessions(self, dsn: str, cfg: Any) -> SessionFactory:
        """The worker and producer sessions of the run."""

    def error_message(self, err: BaseException) -> str:
        """The first line of a database error's message."""

    # -- prepare the schema, layouts and index variants; seed
    def prepare(self, conn: Any, cfg: Any, backlog: int, *, log: Callable[[str], None],
                state_schema: str | None) -> Any:
        """Drop and create the run's schema (layout, index variant), seed history and backlog; returns
        the seed's figures (``history``, ``backlog``, ``seconds``, ``rows_per_s``, ``index_seconds``,
        ``vacuum_seconds``)."""

    def table_sizes(self, conn: Any, schema: str) -> dict:
        """``{"table_bytes", "indexes_bytes"}`` of the queue's tables."""

    def vacuum_counts(self, conn: Any, schema: str) -> dict:
        """Vacuum and analyze counts of the queue table (to diff across the run)."""

    def state_schema_for(self, schema: str) -> str:
        """The schema that holds saved seeded states for runs in ``schema``."""

    def drop_schema_at(self, dsn: str, schema: str) -> None:
        """Drop the tool's ``schema`` (only when it carries the tool's marker)."""

    def clean(self, dsn: str, *, dry_run: bool) -> list:
        """``qbench clean``: every schema on ``dsn`` carrying the tool's mark, as
        :class:`bench.engines.common.ToolSchema`; each dropped unless ``dry_run``, a run holds it
        (``in_use``) or objects outside it depend on it (``dependents``). Raises
        :attr:`database_errors` when the server cannot be reached."""

    # -- during the load: monitor samples, reaper, archive mover, periodic VACUUM
    def monitor(self, dsn: str, cfg: Any) -> Any:
        """The per-second sampler of queue depth, oldest eligible age, locks and table statistics."""

    def spawn_samplers(self, monitor: Any, now_s: Callable[[], float], n_seconds: int,
                       note: Callable[[int, dict], None]) -> list:
        """Greenlets that call ``note(second, values)`` once per second for ``n_seconds``."""

    def reaper(self, dsn: str, cfg: Any, recorder: Any) -> Any:
        """A periodic task (``run``, ``stop``, ``conn``) that re-queues or dead-letters expired leases."""

    def mover(self, dsn: str, cfg: Any, recorder: Any) -> Any:
        """A periodic task that moves finished rows to the archive."""

    def vacuumer(self, dsn: str, cfg: Any, recorder: Any, now_s: Callable[[], float]) -> Any:
        """A periodic task (``run``, ``stop``, ``conn``) that VACUUMs the queue table every
        ``cfg.vacuum_every_s`` seconds; ``passes`` holds ``(start_s by now_s(), duration_s)`` of each."""

    # -- plans and statement statistics
    def capture_plans(self, conn: Any, cfg: Any, when: str) -> tuple[dict | None, str]:
        """The claim's plans (auto, custom, generic) explained now, and ``when`` as said."""

    def workers_plan(self, sessions: list, explain: dict | None, cfg: Any) -> dict:
        """The plan the workers' own sessions ran, from their plan counts and one worker's EXPLAIN."""

    def plans_text(self, captured: dict | None, when: str, workers: dict) -> str:
        """``claim_plan.txt``."""

    def plans_summary(self, captured: dict | None) -> dict | None:
        """The captured plans without their text, for run.json."""

    def plan_warnings(self, workers: dict | None, growth: dict) -> list[str]:
        """Red lines for the report: the workers' claim scans the table, claim latency grew."""

    def statement_stats_unavailable(self, conn: Any) -> str | None:
        """Why the claim's statement statistics cannot be read, or None."""

    def statement_stats_reset(self, conn: Any, cfg: Any, missing: str | None) -> str | None:
        """Reset the claim's statement statistics at the measured window's start."""

    def statement_stats_read(self, conn: Any, cfg: Any, missing: str | None, reset: str | None) -> dict:
        """The claim's statement statistics over the measured window."""

    # -- audit facts
    def audit(self, conn: Any, cfg: Any, claim_log: Any, *, seeded_rows: int, over_claims: int) -> dict:
        """The invariants checked against the database's rows and the claim log: ``invariants``,
        ``status_counts``, ``details``, ``redeliveries``, ``retry_gaps``."""

    def completed_per_queue(self, conn: Any, cfg: Any, start_unix: float, end_unix: float) -> dict:
        """``{queue name: jobs done}`` by ``finished_at`` within [``start_unix``, ``end_unix``) (client
        epoch seconds, moved to the server's clock), for each of the run's queue names
        (``NAMED_QUEUES``/``TENANTS`` > 1), 0 for a queue with none; read after the load."""

    # -- probes (the experiments catalogue): each on a throwaway table of its own in the tool's schema
    def offset_lock_probe(self, dsn: str, schema: str) -> dict:
        """Experiment 4: on ids 1, 2, 3, session A's ``ORDER BY id OFFSET 1 LIMIT 1 FOR UPDATE`` in an open
        transaction; session B's ``LIMIT 1 FOR UPDATE SKIP LOCKED``; which rows A holds. Returns
        ``{"offset_returned", "skip_locked_got", "locked_rows" (sorted ids), "method" ("nowait probe" or
        "pgrowlocks"), "plan"}``, as measured, or ``{"not_applicable": why}``. Raises ConfigError
        (``SCHEMA``, ``DSN``) and :attr:`database_errors`."""

    def subselect_overclaim_probe(self, dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
        """Experiment 13 (FR-03): on ``rows`` pending rows, the sub-select claim ``UPDATE … WHERE id IN
        (SELECT … LIMIT limit FOR UPDATE SKIP LOCKED)`` under a forced nested loop, then the tool's own
        claim, all rolled back. Returns ``{"limit", "subselect_rows", "tool_claim_rows", "plan"}`` as
        measured; with ``"not_applicable": why`` where the engine refuses the sub-select form. Raises
        ConfigError (``SCHEMA``, ``DSN``), ValueError (``rows`` or ``limit`` below 1) and
        :attr:`database_errors`."""

    # -- a queue library's own worker
    def library_worker_command(self, dsn: str, cfg: Any) -> tuple[list[str], dict[str, str]] | None:
        """How to start one of a queue library's own worker processes (``LIBRARY_MODE=worker``): its argv and
        the environment it needs besides this one's (the DSN: never on a command line); None when the
        queue has no such worker. The protocol it speaks: :mod:`bench.engines.postgres.library_workers`."""

    # -- fault actions
    def hold_snapshot(self, dsn: str, schema: str) -> Any:
        """Open a connection holding a snapshot (an old xmin) until :meth:`release`."""

    def killer(self, dsn: str) -> Any:
        """A connection that can terminate worker backends (:meth:`kill_one_worker`)."""

    def kill_one_worker(self, handle: Any) -> bool:
        """Terminate one random worker's backend; False when there was none."""

    def release(self, handle: Any) -> None:
        """Close what :meth:`hold_snapshot` or :meth:`killer` opened."""
