"""A run's parameters: the table's defaults, then a workload file, then options; validated, contradictions
refused (ConfigError) before any database is reached."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Mapping

from bench.config.file_values import check_file_value
from bench.config.choices import EFFECTS_DURING_WORK
from bench.config.connection_budget import EMBEDDED, NO_POOLER, YOURS, connection_budget
from bench.config.faults import CRASH_KINDS, Fault
from bench.config.lookup import find
from bench.config.parameters import BY_KEY, ENGINES, NOT_APPLICABLE, PARAMETERS
from bench.config.network_parameters import check_partitions, crossing, relay_parameter, relayed
from bench.config.failover_parameters import check_failover, check_sync_commit
from bench.config.pooler_parameters import check_pooler, check_session_pool, stateless_sessions
from bench.config.queue_definition import BUILTIN
from bench.config.queue_parameters import QueueParameters
from bench.engines import capabilities
from bench.errors import ConfigError
from bench.usage import named, option, setting, switch
from bench.results.slo import open_loop_keys



def _table_fields(cls: type) -> type:
    """``cls`` with one annotation per table row (:attr:`Parameter.attribute`: :attr:`Parameter.value_type`), first."""
    table = {p.attribute: p.value_type for p in PARAMETERS}
    cls.__annotations__ = {**table, **cls.__dict__.get("__annotations__", {})}
    return cls


@dataclasses.dataclass(frozen=True)
@_table_fields
class RunConfig:
    """One run's validated parameters (:func:`build_config`): a field per parameter, ``workload``, ``dsn`` (None:
    embedded), ``notes``. Durations s, ``work_ms`` ms; ``backlog`` 0: computed; n/a: :data:`NOT_APPLICABLE`.
    ``dsn_direct`` is ``DSN_DIRECT``, or the server behind the embedded pooler once it is up
    (:func:`bench.cli.database.pooled`)."""

    workload: str = "default"
    dsn: str | None = None
    notes: tuple = ()

    def vacuums(self) -> bool:
        """True when the run VACUUMs the queue table periodically (``VACUUM_EVERY_S`` > 0; n/a is not)."""
        return not isinstance(self.vacuum_every_s, str) and self.vacuum_every_s > 0

    def connections_needed(self, extra_workers: int = 0) -> int:
        """Connections the server must have free besides the admin one: :meth:`connection_budget`'s ``server``
        (one per :meth:`pooled_connections` without a pooler, the pool behind one, and :meth:`direct_connections`)."""
        return self.connection_budget(extra_workers).server

    def connection_budget(self, extra_workers: int = 0, *, pool_size: int | None = None,
                          max_client_conn: int | None = None):
        """The run's :class:`bench.config.connection_budget.ConnectionBudget` with ``extra_workers`` more workers (the
        web UI's): the embedded pooler's ``POOL_SIZE``; a user's pooler's ``pool_size`` and ``max_client_conn``
        when read from its console (None: not known, not checked)."""
        pooler = EMBEDDED if self.pooler not in ("none", NOT_APPLICABLE) else (
            YOURS if self.pool_mode not in ("none", NOT_APPLICABLE) else NO_POOLER)
        return connection_budget(self.workers + extra_workers, self.pooled_connections(extra_workers),
                                 self.direct_connections(), pooler,
                                 self.pool_size if pooler == EMBEDDED else pool_size, max_client_conn)

    def direct_connections(self) -> int:
        """The tool's own connections besides the admin one, direct to the server even behind a pooler: the
        monitor's two, VACUUM, mover, faults (a long transaction, a backend killer, a migration), the standby
        sampler's, the failover watch's (a DSN kept to the primary: docs/failover.md, "Observe-only")."""
        return (2 + (1 if self.vacuums() else 0) + (1 if self.layout == "archive" else 0)
                + (1 if "target_session_attrs" in (self.direct_dsn() or self.dsn or "") else 0)
                + sum(1 for f in self.faults if f.kind in ("long_transaction", "backend_kill", "migration"))
                # a migration's: the monitor's lock queue, and one that cancels a statement still waiting at the end
                + (2 if any(f.kind == "migration" for f in self.faults) else 0)
                + (1 if self.replica is True else 0))  # the standby sampler's connection to the primary

    def pooled_connections(self, extra_workers: int = 0) -> int:
        """The connections that go through a pooler (``POOLER``, ``POOL_MODE``), with ``extra_workers`` more
        workers: the workers, the reaper, the producers, the workers' effect connections (``EFFECTS`` during the
        work with ``TXN=hold``), the round-trip probe's (the workers' path: docs/network.md); the rest go direct."""
        workers = self.workers + extra_workers
        return (workers + 1 + (1 if self.reaper_interval_s > 0 else 0) + (self.producers if self.rate > 0 else 0)
                + (workers if self.txn == "hold" and self.effects in EFFECTS_DURING_WORK else 0))

    def stateless_sessions(self) -> bool:
        """True when the workers', producers' and reaper's sessions keep no state on the server (behind a
        transaction pool: :func:`bench.config.pooler_parameters.stateless_sessions`)."""
        return stateless_sessions(self.pool_mode)

    def direct_dsn(self) -> str | None:
        """``DSN_DIRECT``, where the tool's own connections go (admin, monitor, audit) when the run's DSN is a
        pooler (a user's, or the embedded one's once it is up); None without one (they go to the run's DSN)."""
        return self.dsn_direct if self.dsn_direct not in ("", NOT_APPLICABLE) else None

    def relayed(self) -> bool:
        """True when the run's application side reaches the server through a delay relay (``NET_DELAY_MS``,
        ``NET_JITTER_MS``, a ``partition`` window: :func:`bench.config.network_parameters.relayed`)."""
        return relayed(self.net_delay_ms, self.net_jitter_ms, self.faults)

    def relay_parameter(self) -> str:
        """The relay parameter a refusal names (:func:`bench.config.network_parameters.relay_parameter`)."""
        return relay_parameter(self.net_delay_ms, self.net_jitter_ms)

    def crossing_relay(self) -> list[str]:
        """The connections that cross the delay relay (:func:`bench.config.network_parameters.crossing`)."""
        return crossing({"rate": self.rate, "reaper_interval_s": self.reaper_interval_s})

    def public(self) -> dict[str, Any]:
        """The parameters as a JSON-ready dict, with the DSNs' passwords masked."""
        out = dataclasses.asdict(self)
        out["dsn"] = mask_dsn(self.dsn) if self.dsn else None
        for key in ("dsn_replica", "dsn_direct", "pooler_admin_dsn"):
            out[key] = mask_dsn(out[key]) if out[key] not in ("", NOT_APPLICABLE) else out[key]
        if not isinstance(self.autovacuum_settings, str):
            out["autovacuum_settings"] = dict(self.autovacuum_settings)
        return out


def from_public(data: Mapping[str, Any], dsn: str | None) -> RunConfig:
    """The RunConfig whose :meth:`RunConfig.public` gave ``data``, with ``dsn`` for the masked one (a distributed
    run's worker process). Raises TypeError or KeyError for another dict."""
    values = dict(data)
    values["dsn"] = dsn
    values["priority_mix"] = tuple(tuple(pair) for pair in values["priority_mix"])
    values["bursts"] = tuple(tuple(b) for b in values["bursts"])
    values["faults"] = tuple(Fault(**f) for f in values["faults"])
    values["notes"] = tuple(values.get("notes") or ())
    if isinstance(values["autovacuum_settings"], dict):
        values["autovacuum_settings"] = tuple(sorted(values["autovacuum_settings"].items()))
    return RunConfig(**values)


def mask_dsn(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***`` (URL and key=value forms)."""
    masked = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", masked, flags=re.I)


def read_toml(path: Path, param: str) -> dict[str, Any]:
    """The table of the TOML file ``path``. Raises ConfigError naming ``param`` when it is not UTF-8 TOML."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(param, f"{path.name} is not valid TOML (UTF-8 text): {err}") from None


def load_workload(name: str) -> dict[str, Any]:
    """A workload file's table, every value checked against its parameter's TOML type. Raises ConfigError:
    ``WORKLOAD`` (missing, not TOML), or the key's name."""
    path = find("WORKLOAD", name)
    data = read_toml(path, "WORKLOAD")
    for key, value in data.items():
        check_file_value(key, value, path.name)
        BY_KEY[key].parse(value)  # a bad value in the file is refused even when an option overrides it
    return data


def _clip_windows(values: dict[str, Any]) -> list[str]:
    """Refuse fault and burst windows starting at or after the measured window's end, clip those running past it
    (in ``values``); returns a note per clipped window."""
    duration = values["duration_s"]
    notes = []

    def clipped(param: str, what: str, label: str, start: float, end: float) -> float:
        if start >= duration:
            raise ConfigError(param, f"window {label} starts at or after the end of the measured window "
                                     f"({setting('duration', f'{duration:g}s')}), so it would never open; allowed: "
                                     f"start < {duration:g}")
        if end > duration:
            notes.append(f"{what} {label} was clipped to end at {duration:g} s, the end of the measured window")
        return min(end, duration)

    values["faults"] = tuple(dataclasses.replace(f, end_s=clipped("FAULTS", "fault window", f"{f.kind}@{f.start_s:g}-"
                                                                  f"{f.end_s:g}", f.start_s, f.end_s))
                             for f in values["faults"])
    values["bursts"] = tuple((start, clipped("BURSTS", "burst", f"{start:g}-{end:g}@{rate:g}", start, end), rate)
                             for start, end, rate in values["bursts"])
    return notes


#: Parameters that only mean something with another one: (key, what it needs as the user types it, condition on
#: the parsed values). Setting the key explicitly without its condition is refused: it would do nothing.
_NEEDS = (
    ("producers", lambda: named("{rate} > 0"), lambda v: v["rate"] > 0),
    ("tenant_flood", lambda: named("{tenants} > 1"), lambda v: v["tenants"] > 1),
    ("tenant_order", lambda: named("{tenants} > 1"), lambda v: v["tenants"] > 1),
    ("arrival", lambda: named("{rate} > 0"), lambda v: v["rate"] > 0),
    ("priority_mix", lambda: named("{rate} > 0"), lambda v: v["rate"] > 0),
    ("future_share", lambda: named("{rate} > 0"), lambda v: v["rate"] > 0),
    ("future_delay_ms", lambda: named("{future_share} > 0"), lambda v: v["future_share"] > 0),
    ("work_sigma", lambda: setting("work_dist", "lognormal"), lambda v: v["work_dist"] == "lognormal"),
    ("work_slow_ms", lambda: setting("work_dist", "bimodal"), lambda v: v["work_dist"] == "bimodal"),
    ("slow_share", lambda: setting("work_dist", "bimodal"), lambda v: v["work_dist"] == "bimodal"),
    ("replica_readers", lambda: switch("replica"), lambda v: v["replica"] is True),
    ("replica_reader_s", lambda: named("{replica_readers} > 0"),
     lambda v: v["replica_readers"] not in (0, NOT_APPLICABLE)),
    ("hot_standby_feedback", lambda: switch("replica"), lambda v: v["replica"] is True),
    ("replica_max_delay_s", lambda: switch("replica"), lambda v: v["replica"] is True),
    ("dsn_replica", lambda: switch("replica"), lambda v: v["replica"] is True),
    ("promote_after_s", lambda: "a failover fault window", lambda v: any(f.kind == "failover" for f in v["faults"])),
    ("repoint_after_s", lambda: f"{setting('pooler', 'pgbouncer')} and a failover fault window",
     lambda v: v["pooler"] not in ("none", NOT_APPLICABLE) and any(f.kind == "failover" for f in v["faults"])),
)


def check_combinations(values: dict[str, Any], given: set[str] = frozenset()) -> list[str]:
    """Refuse contradictory values (ConfigError naming the parameter to change) and clip windows; ``values``
    (RunConfig fields) is updated in place, ``given`` the keys the user set. Returns the notes."""
    for key, needs, holds in _NEEDS:
        if key in given and not holds(values):
            raise ConfigError(key.upper(), f"has no effect without {needs()}; allowed: {needs()}, or leave "
                                           f"{option(key)} out")
    crashes = sorted({f.kind for f in values["faults"]} & set(CRASH_KINDS))
    if crashes and values["txn"] == "short" and values["reaper_interval_s"] <= 0:
        raise ConfigError("FAULTS", f"{crashes[0]} with {setting('txn', 'short')} leaves its jobs running until a reaper "
                                    f"takes them back, and there is no reaper; allowed: {crashes[0]} with "
                                    + named("{reaper_interval_s} > 0 (or ") + setting("txn", "hold")
                                    + ", where the crash rolls the claim back)")
    check_partitions(values)
    if values["processes"] > values["workers"]:
        raise ConfigError("PROCESSES", f"{values['processes']} processes for {values['workers']} workers would leave "
                                       + named("a process without a worker; allowed: {processes} from 1 to {workers}"))
    caps = capabilities(values.get("engine") or "postgres")
    if (values["processes"] > 1 and not caps.kill_reaches_other_processes
            and any(f.kind == "backend_kill" for f in values["faults"])):
        raise ConfigError("FAULTS", f"backend_kill on {caps.label} kills the worker connections this process opened, "
                                    + named("and with {processes} > 1 the workers' are in other processes; allowed: "
                                            "backend_kill ") + f"with {setting('processes', 1)} on {caps.label}")
    if caps.migration_sql_refused and any(f.kind == "migration" and f.ddl == "sql" for f in values["faults"]):
        raise ConfigError("FAULTS", f"a migration's sql is not run on {caps.label}: {caps.migration_sql_refused}; "
                                    "allowed: migration with ddl=add_column|add_column_volatile|create_index|"
                                    "create_index_concurrently")
    if not values["prepared"] and values["plan_cache"] != "auto":
        raise ConfigError("PLAN_CACHE", f"{values['plan_cache']} has no effect with {switch('prepared', False)}: an "
                                        "unprepared claim is planned with its values on every execution; allowed: "
                                        f"auto with {switch('prepared', False)}")
    if 0 < values["reaper_interval_s"] and values["lease_s"] < values["reaper_interval_s"]:
        raise ConfigError("LEASE_S", f"{values['lease_s']:g} s is shorter than "
                                     f"{setting('reaper_interval_s', format(values['reaper_interval_s'], 'g'))} s: leases would "
                                     "expire between reaper passes unnoticed; allowed: "
                                     + named("{lease_s} >= {reaper_interval_s}"))
    if values["autovacuum_settings"] and values["autovacuum_settings"] != NOT_APPLICABLE and values["autovacuum"] is False:
        raise ConfigError("AUTOVACUUM_SETTINGS", f"has no effect with {switch('autovacuum', False)}: autovacuum never "
                                                 f"takes the queue table; allowed: {switch('autovacuum')} with "
                                                 + named("{autovacuum_settings}, or leave {autovacuum_settings} out"))
    if values["retry_cap_s"] < values["retry_base_s"]:
        raise ConfigError("RETRY_CAP_S", f"{values['retry_cap_s']:g} s is below "
                                         f"{setting('retry_base_s', format(values['retry_base_s'], 'g'))} s; allowed: "
                                         + named("{retry_cap_s} >= {retry_base_s}"))
    if values["named_queues"] > 1 and values["tenants"] > 1:
        raise ConfigError("TENANTS", f"a tenant is a queue name, and {setting('named_queues', values['named_queues'])} "
                                     "already spreads the jobs over that many names; allowed: "
                                     + named("{named_queues} or {tenants} above 1, not both"))
    if values["named_queues"] > 1 and values.get("index") == "ready_table":
        raise ConfigError("NAMED_QUEUES", "the ready_table variant's table of pending rows has no queue column, so "
                                          f"its claim cannot test the queue name; allowed: {setting('named_queues', 1)} "
                                          f"with {setting('index', 'ready_table')}, or another {option('index')}")
    open_loop = open_loop_keys(values["slo"])
    if open_loop and values["rate"] <= 0:
        raise ConfigError("SLO", f"{', '.join(open_loop)} needs arrivals: in a closed-loop drain pickup is only the "
                                 + named("seeded backlog's age and nothing is offered; allowed: {slo} with {rate} > 0, "
                                         "or claim_*, complete_*, error_rate keys"))
    if values["bursts"] and values["rate"] <= 0:
        raise ConfigError("BURSTS", named("bursts change the producers' rate, and there are no producers without "
                                          "{rate}; allowed: {bursts} with {rate} > 0"))
    return _clip_windows(values)


def check_replica(values: dict[str, Any], dsn: str | None, given: set[str]) -> None:
    """Refuse (ConfigError) ``REPLICA=1`` with a DSN and no ``DSN_REPLICA``, ``DSN_REPLICA`` with no DSN (the
    embedded server's standby is the tool's own), and the standby's settings given with ``DSN_REPLICA``."""
    if values["replica"] is not True:
        return
    if dsn is not None and not values["dsn_replica"]:
        raise ConfigError("DSN_REPLICA", "a standby with a DSN needs that server's hot standby, and none was "
                                         "given (the tool starts a standby only of its embedded server); allowed: "
                                         f"{setting('dsn_replica', 'postgresql://...')} of the standby, or no DSN")
    if dsn is None and values["dsn_replica"]:
        raise ConfigError("DSN_REPLICA", "given without a DSN: with no DSN the tool starts the embedded server's "
                                         + named("standby itself; allowed: {dsn_replica} with {dsn} (its primary), "
                                                 "or leave {dsn_replica} out"))
    if values["replica_readers"] and values["queue"] != BUILTIN:
        raise ConfigError("REPLICA_READERS", "the readers' queries read the built-in queue table's columns (status, "
                                             f"priority, run_at); allowed: {option('replica_readers')} with "
                                             f"{setting('queue', 'builtin')}, or {setting('replica_readers', 0)} (the "
                                             "standby's lag and conflicts are still measured)")
    for key in ("hot_standby_feedback", "replica_max_delay_s"):
        if values["dsn_replica"] and key in given:
            raise ConfigError(key.upper(), named("is a setting of the standby server given as {dsn_replica}, which the "
                                                 "run reads and records but does not change; allowed: leave it out "
                                                 "with {dsn_replica} (set it on that server)"))


#: DSN schemes and the engine each means (``key=value`` connection strings are PostgreSQL's libpq form).
DSN_SCHEMES = {"postgresql": "postgres", "postgres": "postgres", "mysql": "mariadb", "mariadb": "mariadb"}


def engine_of_dsn(dsn: str | None) -> str | None:
    """The DSN scheme's engine (``postgres`` for key=value, None for no DSN); ConfigError (``DSN``) if unknown."""
    if dsn is None or not dsn.strip():
        return None
    match = re.match(r"^\s*([A-Za-z][A-Za-z0-9+.-]*)://", dsn)
    if match is None:
        return DSN_SCHEMES["postgresql"]  # libpq's key=value form
    scheme = match.group(1).lower()
    if scheme not in DSN_SCHEMES:
        raise ConfigError("DSN", f"unknown scheme {scheme!r}; allowed: " + ", ".join(f"{s}://" for s in DSN_SCHEMES)
                          + " (or a libpq key=value string)")
    return DSN_SCHEMES[scheme]


def choose_engine(given: Any, dsn: str | None) -> str:
    """``ENGINE`` when given, else the DSN's, else ``postgres``. ConfigError (``ENGINE``): unknown or not the DSN's."""
    from_dsn = engine_of_dsn(dsn)
    if given is None or given == "":
        return from_dsn or ENGINES[0]
    engine = BY_KEY["engine"].parse(given)
    if from_dsn is not None and from_dsn != engine:
        raise ConfigError("ENGINE", f"{engine} but the DSN is a {from_dsn} connection string; allowed: "
                                    f"{setting('engine', from_dsn)} with this DSN, or a DSN of the {engine} server")
    return engine


def engine_dsn(engine: str) -> str | None:
    """``DSN_POSTGRES``/``DSN_MARIADB`` for ``engine`` from the environment, or None; ConfigError if empty."""
    name = f"DSN_{engine.upper()}"
    value = os.environ.get(name)
    if value is None:
        return None
    if not value.strip():
        raise ConfigError(name, "empty; allowed: a connection string of that engine's server, or unset for "
                                "its embedded throwaway server")
    return value


def build_config(workload: str = "default", overrides: Mapping[str, Any] | None = None,
                 dsn: str | None = None) -> RunConfig:
    """A :class:`RunConfig` from the table's defaults (per engine), a workload file and ``overrides`` (lower-case
    keys -> raw values; None and "" ignored); ``dsn`` None or blank: :func:`engine_dsn`, else embedded. Raises
    ConfigError naming the first bad parameter (table order), then the first contradiction."""
    raw = dict(load_workload(workload))
    given = set()  # keys set by the caller (options, Make variables, a sweep), not by the workload file
    for key, value in (overrides or {}).items():
        if key not in BY_KEY:
            raise ConfigError(key.upper(), f"not a run parameter; allowed: {', '.join(sorted(BY_KEY))}")
        if value is not None and value != "":
            raw[key] = value
            given.add(key)
    if dsn is not None and not dsn.strip():
        dsn = None
    engine = choose_engine(raw.get("engine"), dsn)
    if dsn is None:
        dsn = engine_dsn(engine)
    defined = QueueParameters.of(raw, given, engine, workload)
    values, engine_notes = {}, []
    for p in PARAMETERS:
        if p.key == "engine":
            values[p.attribute] = engine
        elif defined.takes(p):
            values[p.attribute] = defined.value(p, raw, engine_notes)
        elif p.key in raw and p.key not in given and p.applies_on(engine) is False:
            # A workload file written for another engine (PLAN_CACHE in long_transaction): the
            # parameter has no meaning here, so the engine's n/a stands, with a note.
            values[p.attribute] = NOT_APPLICABLE
            engine_notes.append(f"{p.name} = {raw[p.key]!r} from workload {workload!r} does not apply on {engine}: "
                                f"{NOT_APPLICABLE}")
            del raw[p.key]
        elif p.key in raw:
            values[p.attribute] = p.parse(raw[p.key])
        else:
            values[p.attribute] = p.default_on(engine)
    for p in PARAMETERS:
        if p.key in raw and not defined.takes(p):
            try:
                p.check_on(engine, values[p.attribute])
            except ConfigError as err:
                if p.key in given:
                    raise
                raise ConfigError(p.name, f"{err.problem} (the value is from workload {workload!r}: "
                                          f"set {option(p.key)} to override it)") from None
    if dsn is not None and values["pg_version"] not in ("auto", NOT_APPLICABLE):
        raise ConfigError("PG_VERSION", f"{values['pg_version']} picks the embedded server's binaries, and a DSN names "
                                        + named("a server already running (its server_version is recorded); allowed: "
                                                "leave {pg_version} out with a DSN, or no DSN"))
    check_replica(values, dsn, given)
    check_sync_commit(values)
    check_failover(values, dsn)
    notes = check_pooler(values, dsn, given)  # before the combinations: it sets PREPARED behind a transaction pool
    notes += check_combinations(values, set(raw))
    notes += defined.check(values)
    cfg = RunConfig(workload=workload, dsn=dsn, notes=tuple(engine_notes + notes), **values)
    check_session_pool(cfg)
    return cfg
