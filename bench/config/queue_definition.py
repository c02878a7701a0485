"""A queue definition, ``queues/<name>/queue.toml`` (``QUEUE=<name>``), read and checked for shape; its format is
docs/queues.md's. Standard library only."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from bench.config.definition_fields import fail as _fail, only as _only, text as _text
from bench.config.lookup import find
from bench.config.queue_library import WORKER_NOT_APPLICABLE, WORKER_PLANS, WORKER_APPLIES, library_file, library_of
from bench.config.sql_text import LOCKING_PLACEHOLDER, has_locking, scan_parameters
from bench.results.values import LIBRARY_SQL_PATH_CAVEAT

#: ``QUEUE``'s default: the tool's own reference queue, run by the engine's built-in SQL.
BUILTIN = "builtin"
#: The engines that run queue definitions (a definition's ``engine`` and the run's ``ENGINE`` must be
#: one of them); the first is a definition's ``engine`` unless it says.
DEFINITION_ENGINES = ("postgres",)

#: The named parameters each statement may use, with what the tool binds to them.
_WORKER_ID = {"worker_id": "the value the register statement returned for this worker's connection"}
STATEMENT_PARAMETERS: dict[str, dict[str, str]] = {
    "register": {},
    "claim": {"batch": "BATCH, rows per claim (integer)", "worker": "the worker's name (text)",
              "lease_s": "LEASE_S, seconds (float8)", **_WORKER_ID},
    "complete": {"id": "the job's id", "token": "its attempt token, as the claim returned it", **_WORKER_ID},
    "complete_many": {"ids": "the claimed ids (bigint[])", "tokens": "their attempt tokens (bigint[])", **_WORKER_ID},
    "fail": {"id": "the job's id", "token": "its attempt token", "delay_s": "the retry back-off, seconds (float8)",
             "error": "the error text", **_WORKER_ID},
    "reaper": {"lease_s": "LEASE_S, seconds (float8)"},
    "enqueue": {"priority": "the job's priority (smallint)", "run_at": "when it is due, epoch seconds (float8)",
                "max_attempts": "MAX_ATTEMPTS (integer)"},
    "seed": {"history": "HISTORY, finished rows", "backlog": "BACKLOG, pending rows",
             "max_attempts": "MAX_ATTEMPTS (integer)"},
    # For a queue whose completion deletes the row: the ids of the jobs that finished, from a record the
    # queue itself keeps (a library's log table), one column named id. The audit counts a missing row
    # it names finished, not lost, when the claim log has no completion for it (a worker process killed
    # after its completion committed and before it reported it).
    "finished_ids": {},
}
# EFFECTS (docs/effects.md): the job's effect row, written into the tool's effects table (logical_id,
# attempt_token) where EFFECTS says: after the work, or in the completion's transaction (same_txn).
STATEMENT_PARAMETERS["effect"] = {"id": "the job's id, its logical id",
                                  "token": "the attempt token its claim returned"}
#: Statements a definition must give; the others are optional.
REQUIRED_STATEMENTS = ("claim", "complete")
#: ``[columns]`` keys: what each names (columns of the claim's result, and of the table).
COLUMNS = {
    "id": "the job's id, returned by the claim (required)",
    "token": "the attempt (fencing) token the claim returns, matched by complete and fail",
    "attempts": "the attempt count the claim returns",
    "lease": "the lease's end (timestamptz) the claim returns",
    "eligible_at": "the time a job became eligible (a column of the table, or an SQL expression over its "
                   "columns): oldest eligible age, and pickup latency when the claim returns a column of that "
                   "name too (required)",
}
#: ``[predicates]`` keys: SQL conditions over the queue table's rows.
PREDICATES = {
    "eligible": "a job waiting and due (required)",
    "running": "a claimed job not finished",
    "done": "a finished job, or \"deleted\" when a completion deletes its row (required)",
}
#: Keys at the top of a definition.
_TOP_KEYS = {"description", "engine", "table", "indexes", "columns", "predicates", "statements", "defaults",
             "settings", "library"}
_SETTING_RE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")
_TABLE_KEYS = {"name", "ddl"}
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]*$")
#: Run parameters that never apply to a defined queue: they shape the tool's own table.
_NEVER = {
    "layout": "the archive and partitioned layouts are the tool's own table's",
    "named_queues": "queue names are the tool's own table's column",
    "tenants": "tenants are the tool's own table's queue names",
    "tenant_flood": "tenants are the tool's own table's queue names",
    "tenant_order": "tenants are the tool's own table's queue names",
    "wakeup": "the producers' NOTIFY is the tool's own insert's",
    "fillfactor": "the fillfactor is set on the tool's own table only",
    "autovacuum": "autovacuum settings are applied to the tool's own table only",
    "autovacuum_settings": "autovacuum settings are applied to the tool's own table only",
    "vacuum_every_s": "the periodic VACUUM runs on the tool's own table only",
}


@dataclasses.dataclass(frozen=True)
class QueueDefinition:
    """One queue definition, checked for shape. ``table`` is the queue table's name in the tool's schema;
    ``indexes`` variant name -> DDL; ``statements`` name -> SQL with ``:name`` parameters; ``defaults`` run
    parameter key -> value; ``settings`` server setting name -> text, set on each worker's session."""

    name: str
    path: Path
    description: str
    table: str
    ddl: str
    indexes: dict[str, str]
    default_index: str | None
    columns: dict[str, str]
    predicates: dict[str, str]
    statements: dict[str, str]
    defaults: dict[str, Any]
    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    #: ``[library]``: ``package``, ``version``, ``generated`` (statements the library's own code writes at
    #: run time), ``measurement`` and ``plans`` (what the report says of them); None for a team's own queue
    library: dict | None = None
    #: True when the claim returns the six columns of a claimed row itself, in order (id, token,
    #: pickup µs, attempts, lease end and claim time in epoch seconds): it is prepared as written, not
    #: inside the wrapper (the built-in queue's, :mod:`bench.engines.postgres.builtin_queue`)
    claim_row: bool = False
    #: Statement name -> its parameters in ``$n`` order, where that is not their order of first use
    parameter_order: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def uses(self, statement: str, parameter: str) -> bool:
        """True when ``statement`` exists and binds ``:parameter``."""
        if statement in self.generated:
            return parameter in self.library.get("parameters", {}).get(statement, [])
        text = self.statements.get(statement)
        return text is not None and parameter in {name for _, _, name in scan_parameters(text)}

    @property
    def generated(self) -> tuple[str, ...]:
        """The statements (and ``ddl``) a queue library's code writes at run time."""
        return tuple((self.library or {}).get("generated", ()))

    @property
    def deletes_done(self) -> bool:
        """True when a completion deletes the job's row (``done = "deleted"``)."""
        return self.predicates["done"].strip().lower() == "deleted"

    @property
    def locking(self) -> bool:
        """True when the claim holds ``{locking}`` (``POLICY`` applies)."""
        return has_locking(self.statements.get("claim", ""))


def describe_queue(queue: str, mode: str = "sql") -> dict | None:
    """run.json/summary.json's ``queue_definition``: ``name``, ``path``, ``description``, ``table``, and a library's
    ``library`` {``package``, ``version``, ``measurement``, ``plans``, ``mode``, ``caveat``}; None: builtin."""
    if is_builtin(queue):
        return None
    defn = load_queue(queue)
    library = defn.library and {k: defn.library.get(k) for k in ("package", "version", "measurement", "plans")}
    if library and mode == "worker":
        library.update(mode="worker", caveat=None, measurement=defn.library["worker"]["measurement"],
                       plans=WORKER_PLANS)
    elif library:
        library.update(mode="sql", caveat=LIBRARY_SQL_PATH_CAVEAT)
    return {"name": defn.name, "path": str(defn.path), "description": defn.description, "table": defn.table,
            "library": library}


def is_builtin(queue: str) -> bool:
    """True for ``QUEUE=builtin`` (the tool's own queue and SQL)."""
    return queue == BUILTIN


def parse_queue(value: Any) -> str:
    """``QUEUE``'s value: ``builtin`` or a well-formed definition's name or path. Raises ConfigError."""
    name = str(value).strip()
    if name != BUILTIN:
        load_queue(name)
    return name


def load_queue(name: str) -> QueueDefinition:
    """Read and check the definition ``name`` for shape (keys, required parts, each statement's parameters,
    ``{locking}`` in the claim only, index variants, defaults). Raises ConfigError (``QUEUE``)."""
    path = find("QUEUE", name, also=(BUILTIN,))
    defn = f"queue {name!r} ({path})"
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise _fail(defn, f"not valid TOML: {err}", "UTF-8 TOML") from None
    _only(data, _TOP_KEYS, defn, "top level")
    library = library_of(data.get("library"), defn, STATEMENT_PARAMETERS)
    engine = data.get("engine", DEFINITION_ENGINES[0])
    if engine not in DEFINITION_ENGINES:
        raise _fail(defn, f"engine = {engine!r}",
                    f"{', '.join(DEFINITION_ENGINES)} (queue definitions run on PostgreSQL)")
    generated = set((library or {}).get("generated", ()))
    table_name, ddl = _table(data, defn, library, generated)
    texts = _statements(data, defn, generated)
    if library is None and scan_parameters(ddl):
        raise _fail(defn, f"table.ddl uses :{scan_parameters(ddl)[0][2]}", "no parameters in the DDL")
    columns, predicates = _columns_and_predicates(data, defn)
    if "token" in columns:
        for key in sorted({"complete", "fail"} - generated):
            if key in texts and not ({"token", "tokens"} & {p for _, _, p in scan_parameters(texts[key])}):
                raise _fail(defn, f"statements.{key} does not match :token although columns.token is set",
                            f"{key} fenced by :token (a stale worker must not finish a re-claimed job)")
    indexes, default_index = _indexes(data, defn)
    defaults = _only(data.get("defaults", {}), set(data.get("defaults", {})), defn, "defaults")
    description = data.get("description", "")
    return QueueDefinition(name=name, path=path, description=str(description), table=table_name, ddl=ddl,
                           indexes=indexes, default_index=default_index, columns=dict(columns),
                           predicates=dict(predicates), statements=texts, defaults=dict(defaults),
                           settings=_settings(data, defn), library=library)


def _table(data: dict, defn: str, library: dict | None, generated: set[str]) -> tuple[str, str]:
    """The ``[table]`` name (a lower-case identifier) and DDL (the library's file's, or "" when generated)."""
    table = _only(data.get("table", {}), _TABLE_KEYS, defn, "table")
    table_name = _text(table, "name", defn, "table.", required=True)
    if not _IDENT_RE.match(table_name) or len(table_name) > 63:
        raise _fail(defn, f"table.name {table_name!r}", "a lower-case SQL identifier")
    ddl = _text(table, "ddl", defn, "table.", required=not (library and ("ddl_file" in library or "ddl" in generated)))
    if ddl is None and library and "ddl_file" in library:
        ddl = library_file(library, defn)
    return table_name, ddl or ""


def _statements(data: dict, defn: str, generated: set[str]) -> dict[str, str]:
    """The ``[statements]`` (key -> SQL), checked: required ones present, each with only its own parameters,
    ``:worker_id`` only beside a register statement, ``{locking}`` in the claim only."""
    statements = _only(data.get("statements", {}), STATEMENT_PARAMETERS, defn, "statements")
    for key in generated & set(statements):
        raise _fail(defn, f"statements.{key} is given and generated by the library", "one of the two")
    texts = {key: _text(statements, key, defn, "statements.",
                        required=key in REQUIRED_STATEMENTS and key not in generated)
             for key in STATEMENT_PARAMETERS}
    texts = {k: v for k, v in texts.items() if v is not None}
    for key, text in texts.items():
        allowed = STATEMENT_PARAMETERS[key]
        for _, _, param in scan_parameters(text):
            if param not in allowed:
                raise _fail(defn, f"statements.{key} uses :{param}",
                            f"in {key}: " + ", ".join(f":{p}" for p in allowed) if allowed else "no parameters")
        if "register" not in texts and "worker_id" in {p for _, _, p in scan_parameters(text)}:
            raise _fail(defn, f"statements.{key} uses :worker_id without a register statement",
                        "statements.register, run once per worker connection, returning the worker id")
        if key != "claim" and has_locking(text):
            raise _fail(defn, f"statements.{key} holds {LOCKING_PLACEHOLDER}", "{locking} in the claim only")
    return texts


def _columns_and_predicates(data: dict, defn: str) -> tuple[dict, dict]:
    """``[columns]`` (``id``, ``eligible_at`` required), ``[predicates]`` (``eligible``, ``done`` required, no
    parameters)."""
    tables = []
    for part, allowed, required in (("columns", COLUMNS, ("id", "eligible_at")),
                                    ("predicates", PREDICATES, ("eligible", "done"))):
        table = _only(data.get(part, {}), allowed, defn, part)
        for key in required:
            _text(table, key, defn, f"{part}.", required=True)
        for key in table:
            _text(table, key, defn, f"{part}.", required=False)
            if part == "predicates" and scan_parameters(table[key]):
                raise _fail(defn, f"predicates.{key} uses a :parameter", "a condition on the table's columns")
        tables.append(table)
    return tables[0], tables[1]


def _indexes(data: dict, defn: str) -> tuple[dict[str, str], str | None]:
    """The ``[indexes]`` variants (name -> DDL, "" for none) and the default's name (None without variants)."""
    indexes = dict(_only(data.get("indexes", {}), set(data.get("indexes", {})), defn, "indexes"))
    default_index = indexes.pop("default", None)
    for key, value in indexes.items():
        if not _NAME_RE.match(key) or not isinstance(value, str):
            raise _fail(defn, f"indexes.{key}", "variant names of letters, digits, _ and -, each a string of DDL "
                                                "(\"\" for none)")
    if indexes and default_index not in indexes:
        raise _fail(defn, f"indexes.default is {default_index!r}", "one of " + ", ".join(indexes))
    if not indexes and default_index is not None:
        raise _fail(defn, "indexes.default without variants", "name = \"CREATE INDEX ...\" entries beside it")
    return indexes, default_index


def _settings(data: dict, defn: str) -> dict[str, str]:
    """The ``[settings]``: server setting name -> value as text (booleans as on / off)."""
    settings = _only(data.get("settings", {}), set(data.get("settings", {})), defn, "settings")
    for key, value in settings.items():
        if not _SETTING_RE.match(key) or not isinstance(value, (str, int, float, bool)):
            raise _fail(defn, f"settings.{key} = {value!r}", "server setting names (enable_hashjoin) with a string, "
                                                             "number or boolean value")
    return {k: ("on" if v is True else "off" if v is False else str(v)) for k, v in settings.items()}


def applicability(defn: QueueDefinition, mode: str = "sql") -> dict[str, str]:
    """Run parameter key -> why it does not apply to ``defn`` (a library's under ``LIBRARY_MODE`` ``mode``); a
    key not listed applies. ``BATCH`` is listed when the claim has no ``:batch``."""
    out = _sql_applicability(defn)
    if defn.library is None:
        out["library_mode"] = "it is not a queue library"
    elif mode == "worker":
        for key in WORKER_APPLIES:
            out.pop(key, None)
        out.update(WORKER_NOT_APPLICABLE)
        if "batch" in out:
            out["batch"] = "its own worker fetches one job per statement"
    return out


def _sql_applicability(defn: QueueDefinition) -> dict[str, str]:
    out = dict(_NEVER)
    if not defn.locking:
        out["policy"] = "its claim has no {locking} placeholder: the locking clause is written into it"
    if not defn.uses("claim", "batch"):
        out["batch"] = "its claim has no :batch parameter"
    if not (defn.uses("claim", "lease_s") or defn.uses("reaper", "lease_s")):
        out["lease_s"] = "neither its claim nor its reaper has a :lease_s parameter"
    present = set(defn.statements) | set(defn.generated)
    if "reaper" not in present:
        out["reaper_interval_s"] = "it has no reaper statement"
    if "effect" not in present:
        out["effects"] = "it has no effect statement (statements.effect)"
    if "enqueue" not in present:
        for key in ("rate", "producers", "arrival", "bursts", "future_share", "future_delay_ms", "priority_mix"):
            out[key] = "it has no enqueue statement"
    else:
        if not defn.uses("enqueue", "priority"):
            out["priority_mix"] = "its enqueue statement has no :priority parameter"
        if not defn.uses("enqueue", "run_at"):
            for key in ("future_share", "future_delay_ms"):
                out[key] = "its enqueue statement has no :run_at parameter (a job is due when it is inserted)"
    if "fail" not in present:
        for key in ("fail_prob", "poison_share", "retry_base_s", "retry_cap_s"):
            out[key] = "it has no fail statement"
    if not (defn.uses("seed", "max_attempts") or defn.uses("enqueue", "max_attempts")):
        out["max_attempts"] = "neither its seed nor its enqueue statement has a :max_attempts parameter"
    if not defn.indexes:
        out["index"] = "it has no [indexes] variants"
    if not defn.uses("seed", "history"):
        out["history"] = "its seed statement has no :history parameter"
    if not defn.uses("seed", "backlog"):
        out["backlog"] = "its seed statement has no :backlog parameter"
    return out
