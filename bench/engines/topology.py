"""The server topology a run may ask of an engine beside its queue: a standby and its readers (``REPLICA=1``), the
commit mode (``SYNC_COMMIT``), a failover (``FAULTS=failover``), a pooler in front of the server (``POOL_MODE``).
:class:`bench.engines.base.Engine` inherits it; an engine without one of them keeps its refusal here."""

from __future__ import annotations

from typing import Any, Callable

from bench.engines.sampler import spawn_each_second


class Topology:
    """The topology methods of :class:`bench.engines.base.Engine` (``name``: the engine's)."""

    name: str

    # -- REPLICA=1: a standby, its sampler and the readers on it (docs/replicas.md)
    def standby(self, dsn: str, cfg: Any, log: Callable[[str], None]) -> Any:
        """A context manager yielding the standby's DSN: ``DSN_REPLICA``, else the embedded primary's own standby
        (``cfg.dsn`` None), started and removed with it."""
        raise NotImplementedError(f"REPLICA is not built for {self.name}")

    def check_given_standby(self, conn: Any, cfg: Any) -> None:
        """Refuse (ConfigError ``DSN_REPLICA``) ``cfg.dsn_replica`` unreachable, not a standby, or not one of the server
        behind ``conn``, and (``SYNC_COMMIT``) a commit mode it cannot give; called before anything is created."""
        raise NotImplementedError(f"REPLICA is not built for {self.name}")

    def commit_mode(self, dsn: str, conn: Any, cfg: Any) -> dict | None:
        """``run.json`` ``commit_mode``: ``SYNC_COMMIT`` read back on the workers' path (docs/failover.md), or None."""

    def replica_watch(self, dsn: str, standby_dsn: str, cfg: Any, *, now_s: Callable[[], float],
                      note: Callable[[int, dict], None], position: Callable[[], int], reads: Any) -> Any:
        """The standby's per-second sampler and ``REPLICA_READERS`` readers (``start``, ``stop``, ``info``)."""
        raise NotImplementedError(f"REPLICA is not built for {self.name}")

    # -- POOL_MODE: a pooler in front of the DSN (docs/poolers.md)
    def check_direct(self, conn: Any, dsn: str) -> None:
        """Refuse (ConfigError ``DSN_DIRECT``) the direct connection ``conn`` unless ``dsn`` (the pooler) reaches
        the same server and database; called before anything is created."""
        raise NotImplementedError(f"POOL_MODE is not built for {self.name}")

    def pooler_facts(self, pooled_dsn: str, admin_dsn: str | None, *, detect: bool) -> dict:
        """Before the load: the pool ``pooled_dsn``'s clients use (``pool``), with ``detect`` whether it pools per
        transaction (``detection``), with ``admin_dsn`` its console's settings (``console``); never raises."""
        raise NotImplementedError(f"POOL_MODE is not built for {self.name}")

    def pooler_watch(self, admin_dsn: str, pool: tuple[str, str], pid: int | None) -> Any:
        """The pooler's per-second sampler on its console (``sample``, ``errors``, ``close``) of ``pool`` (db, user)."""
        raise NotImplementedError(f"POOL_MODE is not built for {self.name}")

    def spawn_pooler_sampler(self, watch: Any, now_s: Callable[[], float], n_seconds: int,
                             note: Callable[[int, dict], None]) -> Any:
        """A greenlet noting ``watch.sample()`` mid-second, as the monitor's statistics (no server ``cost_s``)."""
        return spawn_each_second(lambda: {**watch.sample(), "cost_s": 0.0}, now_s, n_seconds, note)

    # -- FAULTS=failover: the embedded primary killed, its standby promoted (docs/failover.md)
    def failover(self, primary_dsn: str, standby_dsn: str, cfg: Any) -> Any:
        """The failover of ``primary_dsn`` to ``standby_dsn`` (the embedded servers): ``dsn`` (both, for every
        connection of the run), ``start(position, clock, n_warm, log)`` (the claim log's length, read as the promotion
        begins; greenlets to kill at the stop), ``run(fault, clock, n_warm, log)`` (the window), ``record`` (run.json)."""
        raise NotImplementedError(f"the failover fault is not built for {self.name}")

    def observe_failover(self, dsn: str) -> Any:
        """Behind a user's multi-host ``dsn`` kept to the primary: a watch of the primary's identity (``start``,
        ``record``, as :meth:`failover`'s), else None (docs/failover.md, "Observe-only")."""
        return None

    def failover_losses(self, conn: Any, cfg: Any, claim_log: Any, position: int, audit: dict) -> dict:
        """``audit`` (the audit's result on the new primary behind ``conn``) with ``failover_losses``
        (:func:`bench.engines.failover_losses.failover_losses` of ``claim_log``'s events, ``position`` its length
        as the promotion began) and its ``invariants`` less what they explain."""
        raise NotImplementedError(f"the failover fault is not built for {self.name}")
