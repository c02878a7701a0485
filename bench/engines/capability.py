"""An engine's :class:`Capabilities`: what it can honour and where it differs, read by the callers
instead of the engine's name. Re-exported by :mod:`bench.engines.base`."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from bench.config.parameters import BY_KEY, NOT_APPLICABLE, PARAMETERS
from bench.config.parameter import shown
from bench.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capabilities:
    """One per engine (``CAPABILITIES`` in ``bench/engines/<name>/__init__.py``). ``allowed``: per workload-file key
    the engine restricts, the values it supports; ``reasons``: why, per key. Flags: :meth:`recorded`."""

    engine: str
    #: the engine's name as written in prose (``PostgreSQL``)
    label: str
    allowed: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    reasons: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: the error a NOWAIT claim raises on a locked row (what the report names), e.g. ``55P03``
    nowait_error: str
    #: old row versions stay in the table as dead tuples until VACUUM (else: an undo log the server purges)
    vacuum: bool
    #: the claim's per-statement statistics are read (pg_stat_statements)
    statement_stats: bool
    #: the monitor's table row count is the server's estimate, not a count of live and dead tuples
    table_rows_estimated: bool
    #: ``backend_kill`` reaches worker connections opened by other load generator processes
    kill_reaches_other_processes: bool
    #: the tool ``qbench calibrate`` runs against the swarm (``pgbench``, ``mariadb-slap``)
    calibrator: str
    #: the server's write-ahead log as it calls it (``WAL``, ``InnoDB redo``), whose bytes are ``wal_bytes``
    log_name: str
    #: where the monitor reads what a job costs the server (``summary.json`` ``cost_per_job`` ``source``)
    cost_counters: str
    #: the intervals.csv cost columns this engine has no counter for (empty in every second)
    cost_absent: tuple[str, ...] = ()
    #: the cost columns whose counters the server publishes late (each session sends its statistics up to a
    #: second after the work): their per-job figures are taken over the whole load, not the measured window
    cost_delayed: tuple[str, ...] = ()
    #: why a ``migration`` window's own ``sql`` is refused on this engine ("" where it is run)
    migration_sql_refused: str = ""

    def recorded(self) -> dict:
        """The named flags as ``run.json``'s ``engine_capabilities``: a flat dict of booleans, strings and
        tuples of strings."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("allowed", "reasons")}

    @classmethod
    def from_table(cls, engine: str, **flags: Any) -> "Capabilities":
        """The capabilities the parameter table gives ``engine`` (``engine_values``; a parameter with no
        meaning there allows only :data:`~bench.config.parameters.NOT_APPLICABLE`)."""
        allowed = {p.key: (p.engine_values[engine] or (NOT_APPLICABLE,)) for p in PARAMETERS
                   if engine in p.engine_values}
        reasons = {p.key: p.engine_reasons[engine] for p in PARAMETERS if engine in p.engine_reasons}
        return cls(engine=engine, allowed=allowed, reasons=reasons, **flags)

    def check(self, config: Mapping[str, Any]) -> None:
        """ConfigError (the parameter) for the first value in ``config`` (``RunConfig.public()``) not honoured."""
        for key, allowed in self.allowed.items():
            value = config.get(BY_KEY[key].attribute)
            if value not in allowed:
                why = f" ({self.reasons[key]})" if key in self.reasons else ""
                raise ConfigError(key.upper(), f"{shown(value)} is not supported on {self.engine}{why}; allowed: "
                                               + ", ".join(shown(v, quote=False) for v in allowed))
