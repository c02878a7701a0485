"""``FAULTS``: fault windows in seconds since the measured start, ``[[faults]]`` tables in a file or
``kind@start-end[:key=value,...];...`` on the command line. The kinds: docs/reference/parameters.md."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from bench.errors import ConfigError

#: crash_before_complete drops the connection after the work (and its effects), before the completion;
#: migration runs a DDL on the queue table under load (docs/migrations.md); partition makes the delay relay a black
#: hole for the application side (docs/network.md, "Partitions and keepalives").
KINDS = ("crash_after_claim", "crash_before_complete", "late_worker", "long_transaction", "migration", "backend_kill",
         "process_kill", "partition", "failover")
#: The options each kind uses; giving another is refused (it would do nothing).
OPTIONS = {"crash_after_claim": {"share"}, "crash_before_complete": {"share"}, "late_worker": {"share", "extra_s"},
           "long_transaction": set(), "migration": {"ddl", "sql", "lock_timeout_ms", "retry_ms"},
           "backend_kill": {"every_s"}, "process_kill": set(), "partition": set(), "failover": {"wal_stop_s"}}
#: ``migration``'s named statements on the queue table (each engine's text: its ``fault_actions.MIGRATION_DDL``).
MIGRATION_DDL = ("add_column", "add_column_volatile", "create_index", "create_index_concurrently")
#: Kinds that drop a worker's connection once per window on each chosen worker.
CRASH_KINDS = ("crash_after_claim", "crash_before_complete")
#: Kinds whose window marks chosen workers of the tool's own swarm (:func:`choose_workers`).
WORKER_KINDS = (*CRASH_KINDS, "late_worker")


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault window: ``kind`` from :data:`KINDS`, ``start_s``/``end_s`` since measured start."""

    kind: str
    start_s: float
    end_s: float
    share: float = 0.1
    every_s: float = 1.0
    extra_s: float = 1.0
    ddl: str = ""  # migration: one of MIGRATION_DDL, or "sql" when ``sql`` gives the statement
    sql: str = ""  # migration: a statement of the user's own (a workload file's [[faults]] table only)
    lock_timeout_ms: float = 0.0  # migration: the lock_timeout of each attempt, 0 = none (wait as long as it takes)
    retry_ms: float = 1000.0  # migration: the pause after an attempt that timed out, before the next
    wal_stop_s: float = 0.0  # failover: the standby's WAL receiver stopped (SIGSTOP) this long before the kill


#: What ``migration``'s timing options mean, in their refusals.
_MIGRATION_MS = {"lock_timeout_ms": "ms; 0 = no lock timeout",
                 "retry_ms": "ms: the pause after an attempt that timed out, before the next"}
_ALLOWED = ("a list of kind@start-end[:share=0.1,every_s=1,extra_s=1] separated by ';', kind one of "
            + ", ".join(KINDS))


def _label(item: dict) -> str:
    """A fault as the user wrote it: ``kind@start-end[:k=v,...]``."""
    opts = ",".join(f"{k}={'…' if k == 'sql' else v}" for k, v in item.items() if k not in ("kind", "start_s", "end_s"))
    return f"{item.get('kind', '')}@{item.get('start_s', '')}-{item.get('end_s', '')}" + (f":{opts}" if opts else "")


def _why_not(item: dict) -> str:
    """What is wrong with a fault that did not parse: the first field missing or not a number."""
    for key in ("start_s", "end_s", "share", "every_s", "extra_s", "wal_stop_s"):
        if key in ("start_s", "end_s") and str(item.get(key, "")).strip() == "":
            return f"the {key.removesuffix('_s')} of its window start-end is missing"
        try:
            float(item.get(key, 0))
        except (TypeError, ValueError):
            return f"{key.removesuffix('_s') if key in ('start_s', 'end_s') else key} {item[key]!r} is not a number"
    return "its kind is missing"


def _migration(item: dict, label: str, from_file: bool) -> dict:
    """The ``migration`` fields of ``item``, checked: ``ddl`` named, or ``sql`` given in a file; timeouts >= 0."""
    allowed = (f"migration@start-end:ddl={'|'.join(MIGRATION_DDL)}[,lock_timeout_ms=0,retry_ms=1000], "
               "or sql = \"\"\"...\"\"\" in a workload file's [[faults]] table")
    text = str(item.get("sql", "")).strip()
    if "sql" in item and not from_file:
        raise ConfigError("FAULTS", f"{label!r}: a migration's sql is given only in a workload file's [[faults]] "
                                    f"table; allowed: {allowed}")
    if "sql" in item and (not text or "ddl" in item):
        raise ConfigError("FAULTS", f"{label!r}: a migration takes either ddl or a non-empty sql; allowed: {allowed}")
    ddl = "sql" if text else str(item.get("ddl", "")).strip()
    if not ddl:
        raise ConfigError("FAULTS", f"{label!r}: a migration's ddl is missing; allowed: {allowed}")
    if ddl != "sql" and ddl not in MIGRATION_DDL:
        raise ConfigError("FAULTS", f"{label!r}: ddl {ddl!r} is not a migration; allowed: {allowed}")
    fields = {"ddl": ddl, "sql": text}
    for key, default in (("lock_timeout_ms", 0.0), ("retry_ms", 1000.0)):
        try:
            fields[key] = float(item.get(key, default))
        except (TypeError, ValueError):
            raise ConfigError("FAULTS", f"{label!r}: {key} {item[key]!r} is not a number; allowed: {key} >= 0 "
                                        f"({_MIGRATION_MS[key]})") from None
        if not 0 <= fields[key] < float("inf"):
            raise ConfigError("FAULTS", f"{label!r}: {key} {item[key]!r} is not allowed; allowed: {key} >= 0 "
                                        f"({_MIGRATION_MS[key]})")
    return fields


def _fault(item: dict, label: str | None = None, from_file: bool = False) -> Fault:
    label = label or _label(item)
    try:
        kind = str(item["kind"])
        fault = Fault(kind=kind, start_s=float(item["start_s"]), end_s=float(item["end_s"]),
                      share=float(item.get("share", 0.1)), every_s=float(item.get("every_s", 1.0)),
                      extra_s=float(item.get("extra_s", 1.0)), wal_stop_s=float(item.get("wal_stop_s", 0.0)))
    except (KeyError, TypeError, ValueError):
        raise ConfigError("FAULTS", f"{label!r} is not a fault ({_why_not(item)}); allowed: {_ALLOWED}") from None
    if kind not in KINDS:
        raise ConfigError("FAULTS", f"{label!r}: unknown kind {kind!r}; allowed: {_ALLOWED}")
    unknown = sorted(set(item) - {"kind", "start_s", "end_s"} - OPTIONS[kind])
    if unknown:
        on_line = OPTIONS[kind] - ({"sql"} if not from_file else set())  # sql: a workload file's only
        takes = (", ".join(sorted(on_line)) or "no options") + (
            " (sql only in a workload file)" if on_line != OPTIONS[kind] else "")
        raise ConfigError("FAULTS", f"{label!r}: {kind} does not use {', '.join(unknown)}; allowed for {kind}: {takes}")
    if kind == "migration":
        fault = dataclasses.replace(fault, **_migration(item, label, from_file))
    if (not 0 <= fault.start_s < fault.end_s or not 0 < fault.share <= 1
            or fault.every_s <= 0 or fault.extra_s < 0 or not 0 <= fault.wal_stop_s < float("inf")):
        raise ConfigError("FAULTS", f"{label!r} is not allowed; allowed: {_ALLOWED} (0 <= start < end, "
                                    "0 < share <= 1, every_s > 0, extra_s >= 0, wal_stop_s >= 0)")
    return fault


def parse_faults(value: Any) -> tuple[Fault, ...]:
    """Faults from a TOML list of tables or the ``kind@start-end[:k=v,...];...`` string. ConfigError (``FAULTS``)."""
    if value in (None, "", []):
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(_fault(dict(item), from_file=True) if isinstance(item, dict) else _bad(item) for item in value)
    faults = []
    for part in str(value).split(";"):
        part = part.strip()
        if not part:
            continue
        head, _, opts = part.partition(":")
        kind, _, window = head.partition("@")
        start, _, end = window.partition("-")
        item: dict[str, Any] = {"kind": kind.strip(), "start_s": start, "end_s": end}
        for opt in filter(None, (o.strip() for o in opts.split(","))):
            key, _, val = opt.partition("=")
            item[key.strip()] = val
        faults.append(_fault(item, part))
    return tuple(faults)


def _bad(item: Any):
    raise ConfigError("FAULTS", f"{item!r} is not a fault; allowed: {_ALLOWED}")


def fault_count(workers: int, share: float) -> int:
    """How many of ``workers`` a window with ``share`` hits: about ``share`` of them, at least one (none of none)."""
    return min(workers, max(1, round(share * workers))) if workers else 0


def choose_workers(names: list[str], share: float, rng: random.Random | None = None) -> set[str]:
    """:func:`fault_count` of the worker ``names``, chosen at random."""
    return set((rng or random).sample(names, fault_count(len(names), share)))


def split_choice(workers: dict[int, int], share: float, rng: random.Random | None = None) -> dict[int, int]:
    """{process: how many of its workers the window applies to}, for ``workers`` (process -> its workers):
    :func:`fault_count` of all of them, chosen uniformly over the whole swarm."""
    slots = [process for process, n in sorted(workers.items()) for _ in range(n)]
    picked = (rng or random).sample(slots, fault_count(len(slots), share))
    return {process: picked.count(process) for process in sorted(workers)}
