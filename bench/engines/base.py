"""What a run asks of a database engine: the :class:`Engine` interface, its :class:`Capabilities`, and the
worker and producer sessions the load layer uses (the layering: docs/architecture.md)."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable, Protocol

from bench.config.network_parameters import tcp_liveness
from bench.engines.capability import Capabilities
from bench.engines.common import INVARIANTS, with_connection
from bench.engines.driver import Driver
from bench.engines.lock_queue import spawn_lock_sampler
from bench.engines.sampler import spawn_each_second, spawn_samplers
from bench.engines.session_factory import NotCooperativeError, SessionFactory  # noqa: F401  (re-exported)
from bench.engines.topology import Topology
from bench.errors import ConfigError, RunFailed

__all__ = ["Capabilities", "ClaimedRow", "ConnectFailed", "Engine", "EngineError", "LockNotAvailable", "NotCooperativeError",
           "ProducerSession", "SessionFactory", "WorkerSession"]

#: One claimed job: (id, attempt token, pickup µs or None when the claim cannot tell it, attempts,
#: lease_until, claimed_at), the last two database epoch seconds.
ClaimedRow = tuple[int, int, int | None, int, float, float]


class EngineError(RunFailed):
    """A database error seen by a session: ``kind`` the error counter key (a SQLSTATE such as ``57P01``, or a
    named kind such as ``connection_lost``), ``lost`` the connection is broken; the message is the database's
    first line."""

    def __init__(self, kind: str, message: str, *, lost: bool = False):
        super().__init__(message)
        self.kind = kind
        self.lost = lost


class LockNotAvailable(EngineError):
    """A ``NOWAIT`` claim met a locked row (PostgreSQL SQLSTATE 55P03): back off and retry."""


class ConnectFailed(EngineError):
    """A new session could not be opened (connect, settings, prepared statements). ``permanent``: waiting will
    not mend it (wrong database, schema or table missing, authentication, bad settings, a name already taken:
    each adapter's ``is_permanent``), so a run stops at once rather than retrying; ``cause``: what a permanent
    refusal most likely means, in words (each adapter's ``refusal_cause``)."""

    def __init__(self, kind: str, message: str, *, permanent: bool = False, cause: str = ""):
        super().__init__(kind, message, lost=True)
        self.permanent, self.cause = permanent, cause


class WorkerSession(Protocol):
    """One worker's own connection: claim, completion, failure; with ``TXN=hold`` bracketed by :meth:`begin`
    and :meth:`commit`, otherwise each statement its own transaction; ``round_trips_sent`` since it opened."""

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed) on the connection."""

    def claim(self) -> list[ClaimedRow]:
        """Up to a batch of eligible jobs, [] when none. Raises :class:`LockNotAvailable` or :class:`EngineError`."""

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """Complete ``[(id, token)]``; the ids applied (not those whose token moved on)."""

    def fail(self, job_id: int, token: int, retry_delay_s: float, error: str) -> str | None:
        """A failed attempt: the new status (``pending``, retried after ``retry_delay_s``; ``dead`` past its
        attempts), or None when the token moved on."""

    def effect(self, job_id: int, token: int) -> bool:
        """``EFFECTS`` outside/idempotent: write job ``job_id``'s effect row with attempt ``token``, committed
        on its own; whether it wrote a row (False: ``idempotent``'s key already held one). Raises
        :class:`EngineError`."""

    def begin(self) -> None:
        """Open a transaction (``TXN=hold``)."""

    def commit(self) -> None:
        """Commit the open transaction."""

    def rollback(self) -> None:
        """Roll back the open transaction, if any; never raises."""

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for work, yielding to other greenlets: True when a notification
        came (``WAKEUP=notify``), False after sleeping it all. Raises :class:`EngineError` (connection lost)."""

    def plan_counts(self) -> dict[str, int] | None:
        """``{"generic_plans", "custom_plans"}`` of this session's claim; None when not prepared."""

    def explain_claim(self, timeout_ms: int) -> str:
        """The plan of the claim as this session runs it, executed and rolled back (text)."""

    def close(self) -> None:
        """Close the connection."""


class ProducerSession(Protocol):
    """One producer's own connection; ``round_trips_sent`` as a :class:`WorkerSession`'s."""

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """Insert one job per (priority, run_at epoch seconds); return their ids. Raises :class:`EngineError`."""

    def close(self) -> None:
        """Close the connection."""


class Engine(Topology):
    """Everything a run asks of a database, the shared flows written once; an engine subclasses it with its
    modules, sessions and :class:`Capabilities` (docs/architecture.md). ``conn``: an admin connection
    (:meth:`connect`); ``cfg``: a RunConfig. Raises ConfigError and :attr:`database_errors`."""

    name: str
    capabilities: Capabilities
    #: the audit's invariant names, each 0 on a correct run
    invariants: tuple[str, ...] = INVARIANTS
    #: the adapter over its driver (connect, execute, is-alive, error kind, first line)
    driver: Driver
    #: the engine's ``db`` module: ``server_info``, ``prepare``, ``table_sizes``, ``state_schema_for`` and its
    #: schemas' ``OWNERSHIP`` (:class:`bench.engines.ownership.SchemaOwnership`)
    db: ModuleType
    #: ``plans_text``, ``plan_warnings``; ``offset_lock_probe``, ``subselect_overclaim_probe``;
    #: ``hold_snapshot``, ``killer``, ``kill_one_worker``, ``release``
    plans: ModuleType
    probes: ModuleType
    faults: ModuleType
    dsns: ModuleType  # the engine's ``dsn`` module: ``with_liveness`` (:meth:`application_dsn`)
    #: ``(dsn, cfg, name)`` -> a session; the driver's wait check (a staticmethod)
    worker_session: type
    producer_session: type
    cooperative_wait: Callable[[], str]
    #: ``(conn, schema, interval_s, recorder)`` -> the reaper's periodic task
    reaper_task: type
    #: why a figure another engine reports is empty here, by name (``autovacuum``, ``pg_stat_statements``, ...)
    not_measured: dict[str, str] = {}

    @property
    def database_errors(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean "the database failed or went away" (caught around the audit)."""
        return self.driver.errors

    # -- connect and check
    def connect(self, dsn: str, application_name: str) -> Any:
        """An admin connection (autocommit); ConfigError (``DSN``) when it cannot connect."""
        return self.driver.connect(dsn, application_name=application_name)

    def is_alive(self, conn: Any) -> bool:
        """The connection still answers."""
        return self.driver.is_alive(conn)

    def server_info(self, conn: Any) -> dict:
        """``server_version``, run.json's settings, ``engine_capabilities`` (:meth:`Capabilities.recorded`)."""
        return {**self.db.server_info(conn), "engine_capabilities": self.capabilities.recorded()}

    def claim_schema(self, conn: Any, schema: str, connections: Any) -> dict:
        """:meth:`bench.engines.ownership.SchemaOwnership.claim`: checked, locked on ``conn``, ``connections`` (a
        count, or the run's ``ConnectionBudget``: its ``server`` count and its refusal) free; returns
        ``{"available", "max_connections", ...}``."""
        return self.db.OWNERSHIP.claim(conn, schema, connections)

    def check_schema(self, conn: Any, schema: str, connections: Any) -> dict:
        """:meth:`claim_schema`'s checks without taking the schema's lock (a sweep's check before its first run)."""
        return self.db.OWNERSHIP.check(conn, schema, connections)

    def application_dsn(self, dsn: str, cfg: Any) -> str:
        """``dsn`` as the workers', producers' and reaper's connections open it: with ``cfg``'s TCP liveness."""
        return self.dsns.with_liveness(dsn, tcp_liveness(cfg.tcp_user_timeout_ms))

    def sessions(self, dsn: str, cfg: Any) -> SessionFactory:
        """The worker and producer sessions of the run (:meth:`application_dsn`)."""
        app = self.application_dsn(dsn, cfg)
        return SessionFactory(app, cfg, self.worker_session, self.producer_session, self.cooperative_wait)

    def error_message(self, err: BaseException) -> str:
        """The first line of a database error's message."""
        return self.driver.first_line(err)

    # -- prepare the schema, layouts and index variants; seed
    def prepare(self, conn: Any, cfg: Any, backlog: int, *, log: Callable[[str], None],
                state_schema: str | None) -> Any:
        """Recreate the run's schema, seed history and backlog; returns :class:`bench.engines.common.SeedResult`."""
        return self.db.prepare(conn, cfg, backlog, log=log, state_schema=state_schema)

    def table_sizes(self, conn: Any, schema: str) -> dict:
        """``{"table_bytes", "indexes_bytes", "archive_bytes"}`` of the queue's tables."""
        return self.db.table_sizes(conn, schema)

    def vacuum_counts(self, conn: Any, schema: str) -> dict:
        """Vacuum and analyze counts of the queue table, or ``{"not_applicable": why}``."""
        return {"not_applicable": self.not_measured["autovacuum"]}

    def state_schema_for(self, schema: str) -> str:
        """The schema that holds saved seeded states for runs in ``schema``."""
        return self.db.state_schema_for(schema)

    def drop_schema_at(self, dsn: str, schema: str) -> None:
        """Drop the tool's ``schema`` (only when it carries the tool's mark), on a connection of its own."""
        with_connection(lambda: self.connect(dsn, "queue-bench cleanup"),
                        lambda conn: self.db.OWNERSHIP.drop(conn, schema))

    def clean(self, dsn: str, *, dry_run: bool) -> list:
        """``qbench clean`` on ``dsn`` (:meth:`SchemaOwnership.clean`). Raises :attr:`database_errors`."""
        return with_connection(lambda: self.connect(dsn, "queue-bench clean"),
                               lambda conn: self.db.OWNERSHIP.clean(conn, dry_run=dry_run))

    # -- during the load: monitor samples, reaper, archive mover, periodic VACUUM
    def monitor(self, dsn: str, cfg: Any) -> Any:
        """The per-second sampler of queue depth, oldest eligible age, locks and table statistics."""
        raise NotImplementedError

    def spawn_samplers(self, monitor: Any, now_s: Callable[[], float], n_seconds: int,
                       note: Callable[[int, dict], None], *, table: bool = True) -> list:
        """Greenlets that call ``note(second, values)`` once per second for ``n_seconds`` (the table queries only
        with ``table``); with a migration's window (the monitor's ``lock_queue``), the lock queue's sampler too."""
        greenlets = spawn_samplers(monitor, now_s, n_seconds, note, table=table)
        if getattr(monitor, "lock_queue", None) is not None:
            greenlets.append(spawn_lock_sampler(monitor, now_s, n_seconds, note))
        return greenlets

    def reaper(self, dsn: str, cfg: Any, recorder: Any) -> Any:
        """A periodic task (``run``, ``stop``, ``conn``) that re-queues or dead-letters expired leases."""
        task = self.reaper_task(self.connect(self.application_dsn(dsn, cfg), "queue-bench reaper"), cfg.schema,
                                cfg.reaper_interval_s, recorder)
        task.reopen = lambda: self.connect(self.application_dsn(dsn, cfg), "queue-bench reaper")  # after a partition
        return task

    def mover(self, dsn: str, cfg: Any, recorder: Any) -> Any:
        """A periodic task moving finished rows to the archive (``LAYOUT=archive``)."""
        raise NotImplementedError(f"LAYOUT=archive is not built for {self.name}")

    def vacuumer(self, dsn: str, cfg: Any, recorder: Any, now_s: Callable[[], float]) -> Any:
        """A task VACUUMing the queue table every ``cfg.vacuum_every_s`` s; ``passes``: ``(start_s, duration_s)``."""
        raise NotImplementedError(f"VACUUM_EVERY_S is not built for {self.name}")

    # -- plans and statement statistics
    def capture_plans(self, conn: Any, cfg: Any, when: str) -> tuple[dict | None, str]:
        """The claim's plans explained now, and ``when`` as said."""
        return self.plans.capture_plans(conn, cfg, when)

    def workers_plan(self, sessions: list, explain: dict | None, cfg: Any) -> dict:
        """The plan the workers' own sessions ran, from their plan counts and one worker's EXPLAIN."""
        raise NotImplementedError

    def plans_text(self, captured: dict | None, when: str, workers: dict) -> str:
        """``claim_plan.txt``."""
        return self.plans.plans_text(captured, when, workers)

    def plans_summary(self, captured: dict | None) -> dict | None:
        """The captured plans without their text, for run.json."""
        raise NotImplementedError

    def plan_warnings(self, workers: dict | None, growth: dict) -> list[str]:
        """Red lines for the report: the workers' claim scans the table, claim latency grew."""
        return self.plans.plan_warnings(workers, growth)

    def statement_stats_unavailable(self, conn: Any) -> str | None:
        """Why the claim's statement statistics cannot be read, or None."""
        return self.not_measured["pg_stat_statements"]

    def statement_stats_reset(self, conn: Any, cfg: Any, missing: str | None) -> str | None:
        """Reset the claim's statement statistics at the measured window's start; why not, or None."""
        return missing

    def statement_stats_read(self, conn: Any, cfg: Any, missing: str | None, reset: str | None) -> dict:
        """The claim's statement statistics over the measured window, or ``{"unavailable": why}``."""
        return {"unavailable": missing or reset}

    # -- audit facts
    def audit(self, conn: Any, cfg: Any, claim_log: Any, *, seeded_rows: int, over_claims: int) -> dict:
        """The invariants checked against the database's rows and the claim log: ``invariants``, ``status_counts``,
        ``details``, ``redeliveries``, ``retry_gaps``; ``running_by_claimant`` where the table names claimants."""
        raise NotImplementedError

    def completed_per_queue(self, conn: Any, cfg: Any, start_unix: float, end_unix: float) -> dict:
        """``{queue name: jobs done}`` by ``finished_at`` in [``start_unix``, ``end_unix``) (client epoch
        seconds, moved to the server's clock), 0 for a queue with none."""
        raise NotImplementedError

    # -- probes (the experiments catalogue): each on a throwaway table of its own in the tool's schema
    def offset_lock_probe(self, dsn: str, schema: str) -> dict:
        """Experiment 4 (does ``OFFSET`` lock skipped rows?): ``{"offset_returned", "skip_locked_got", "locked_rows"
        (sorted ids), "method", "plan"}``. Raises ConfigError (``SCHEMA``, ``DSN``) and :attr:`database_errors`."""
        return self.probes.offset_lock_probe(dsn, schema)

    def subselect_overclaim_probe(self, dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
        """Experiment 13 (FR-03), the sub-select claim against the tool's: ``{"limit", "subselect_rows",
        "tool_claim_rows", "plan"}`` as measured, with ``"not_applicable"`` where the engine refuses it. Raises
        ConfigError (``SCHEMA``, ``DSN``), ValueError (``rows`` or ``limit`` < 1), :attr:`database_errors`."""
        return self.probes.subselect_overclaim_probe(dsn, schema, rows, limit)

    def library_worker_command(self, dsn: str, cfg: Any) -> tuple[list[str], dict[str, str]] | None:
        """A library's own worker process (``LIBRARY_MODE=worker``): argv, added environment (the DSN); or None."""
        return None

    # -- fault actions
    def hold_snapshot(self, dsn: str, schema: str) -> Any:
        """Open a connection holding a snapshot (an old xmin; an old read view) until :meth:`release`."""
        return self.faults.hold_snapshot(dsn, schema)

    def killer(self, dsn: str) -> Any:
        """A connection that can terminate worker backends (:meth:`kill_one_worker`)."""
        return self.connect(dsn, "queue-bench backend killer")

    def kill_one_worker(self, handle: Any) -> bool:
        """Terminate one random worker's backend; False when there was none."""
        return self.faults.kill_one_worker(handle)

    def release(self, handle: Any) -> None:
        """Roll back and close what :meth:`hold_snapshot` or :meth:`killer` opened."""
        self.faults.release(handle)

    # -- the migration fault (FAULTS=migration)
    def migration_statement(self, cfg: Any, fault: Any) -> str:
        """The SQL a ``migration`` window runs on the run's queue table."""
        raise NotImplementedError(f"the migration fault is not built for {self.name}")

    def check_migrations(self, conn: Any, cfg: Any, log: Callable[[str], None]) -> None:
        """Run each ``migration`` window's statement on the prepared table in a transaction rolled back; one that
        fails drops the run's schema (nothing left behind) and is refused (ConfigError ``FAULTS``)."""
        for fault in cfg.faults:
            if fault.kind != "migration":
                continue
            started = time.perf_counter()
            why = self.faults.migration_fails(conn, cfg.schema, self.migration_statement(cfg, fault))
            if why is None:
                log(f"migration {fault.ddl} checked on the prepared table, rolled back, in "
                    f"{time.perf_counter() - started:.1f} s")
            if why is not None:
                self.db.OWNERSHIP.drop(conn, cfg.schema)
                what = "its sql" if fault.ddl == "sql" else f"ddl={fault.ddl}"
                raise ConfigError("FAULTS", f"migration@{fault.start_s:g}-{fault.end_s:g}: {what} failed on the "
                                            f"prepared table (checked in a transaction rolled back): {why}; allowed: "
                                            "a statement this server runs on the queue table")

    def migration(self, dsn: str, cfg: Any, fault: Any) -> Any:
        """The migration's own connection: ``attempt()`` -> (``done``|``lock_timeout``|``error``, message or
        None), ``close()`` (cancels a statement still waiting)."""
        return self.faults.Migration(dsn, cfg.schema, self.migration_statement(cfg, fault), fault.lock_timeout_ms)
