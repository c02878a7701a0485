"""A written queue definition on PostgreSQL (``QUEUE=<name>``): :class:`PostgresEngine` over it, with the
check before any load (docs/queues.md, "How the tool runs it"): a failing statement is refused with the
database's message (``ConfigError`` naming ``QUEUE`` or ``INDEX``) and the tool's schema dropped."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable

import psycopg
from psycopg import sql

from bench.engines.common import SeedResult
from bench.engines.postgres import CAPABILITIES
from bench.engines.postgres import audit, builtin_queue, db, defined_sql
from bench.engines.postgres.engine import PostgresEngine
from bench.engines.base import EngineError
from bench.engines.postgres.adapter import apply_settings, deallocate, prepare_named, reset_settings, translated
from bench.errors import ConfigError

#: The statements checked with PREPARE before the load, in this order.
_CHECKED = ("register", "claim", "complete", "complete_many", "fail", "reaper", "enqueue", "finished_ids", "effect")


class DefinitionRefused(ConfigError):
    """A statement of the definition failed on the database (one line: which, and the database's message)."""


class DefinedQueueEngine(PostgresEngine):
    """The PostgreSQL engine over a written definition (``DefinedQueueEngine(defn)``), which :meth:`prepare`
    creates, checks and seeds (contracts: :class:`bench.engines.base.Engine`)."""

    #: PostgreSQL's flags without the built-in queue's per-engine values (:mod:`bench.config.queue_parameters`)
    capabilities = dataclasses.replace(CAPABILITIES, allowed={}, reasons={})

    # -- prepare and check
    def _reject(self, conn: psycopg.Connection, schema: str, param: str, message: str) -> None:
        """Drop the schema (nothing left behind) and raise DefinitionRefused naming ``param``."""
        db.OWNERSHIP.drop(conn, schema)
        raise DefinitionRefused(param, f"queue {self.defn.name!r}: {message}")

    @contextlib.contextmanager
    def _refusing(self, conn: psycopg.Connection, cfg: Any, what: str, param: str = "QUEUE"):
        """Within the block, a psycopg error refuses ``what`` with the database's message (:meth:`_reject`)."""
        try:
            with translated():
                yield
        except EngineError as err:
            self._reject(conn, cfg.schema, param, f"{what} failed on the database: {err}; allowed: a "
                                                  f"statement this server runs (the definition is {self.defn.path})")

    def _prepares(self, conn: psycopg.Connection, cfg: Any, what: str, text: str) -> None:
        """PREPARE and DEALLOCATE ``text`` (no parameters: psycopg sends it as it is). Raises DefinitionRefused."""
        with self._refusing(conn, cfg, what):
            prepare_named(conn, "qbench_check", text)
            deallocate(conn, "qbench_check")

    def _check_reads(self, conn: psycopg.Connection, cfg: Any) -> None:
        """PREPARE and DEALLOCATE what the monitor and the audit read of the table: each predicate and
        ``eligible_at``; and each ``[settings]`` value, set in a transaction rolled back. Raises
        DefinitionRefused naming the key."""
        defn = self.defn
        table = sql.Identifier(defn.table).as_string(None)
        reads = [(f"predicates.{k}", f"SELECT count(*) FROM {table} WHERE {v}")
                 for k, v in defn.predicates.items() if not (k == "done" and defn.deletes_done)]
        reads.append(("columns.eligible_at", f"SELECT min({defined_sql.eligible_at(defn).as_string(None)}) "
                                             f"- now() FROM {table}"))
        for what, text in reads:
            self._prepares(conn, cfg, what, text)
        for name, value in defn.settings.items():
            with self._refusing(conn, cfg, f"settings.{name}"), conn.transaction(force_rollback=True):
                apply_settings(conn, {name: value}, local=True)

    def _check_claim_columns(self, conn: psycopg.Connection, cfg: Any, body: str) -> list[str]:
        """The columns the claim returns: every ``[columns]`` column but ``eligible_at``, an integer id.
        Raises DefinitionRefused."""
        defn = self.defn
        with self._refusing(conn, cfg, "statements.claim"):
            described = defined_sql.describe_claim(conn, body)
        returned = list(described)
        missing = [f"{defn.columns[c]} (columns.{c})" for c in ("id", "token", "attempts", "lease")
                   if c in defn.columns and defn.columns[c] not in returned]
        if missing:
            self._reject(conn, cfg.schema, "QUEUE", f"the claim returns {', '.join(returned) or 'no column'}"
                                                    f" but not {', '.join(missing)}; allowed: a claim whose RETURNING gives "
                                                    "every column [columns] names but eligible_at")
        id_type = described[defn.columns["id"]]
        if id_type not in defined_sql.INTEGER_TYPES:
            self._reject(conn, cfg.schema, "QUEUE", f"the claim's id column {defn.columns['id']!r} is "
                                                    f"{id_type}; allowed: an integer id (smallint, integer, bigint)")
        return returned

    def _check_statements(self, conn: psycopg.Connection, cfg: Any) -> None:
        """PREPARE and DEALLOCATE each statement under the schema's search_path (names resolved, types
        inferred, nothing executed). Raises DefinitionRefused."""
        defn = self.defn
        self._check_reads(conn, cfg)
        for key in _CHECKED:
            if key not in defn.statements:
                continue
            if key == "claim":
                body, _ = defined_sql.positional(defined_sql.claim_body(defn, cfg.policy))
                returned = self._check_claim_columns(conn, cfg, body)
                text = defined_sql.wrapped_claim(defn, body, returned)
            else:
                text, _ = defined_sql.positional(defn.statements[key])
            if key == "complete_many":  # its returned ids are the completions applied: it must return them
                with self._refusing(conn, cfg, f"statements.{key}"):
                    returned = defined_sql.describe_columns(conn, text)
                if not returned:
                    self._reject(conn, cfg.schema, "QUEUE", "statements.complete_many returns no "
                                                            "column; allowed: RETURNING the ids it completed "
                                                            "(the others were stale)")
            self._prepares(conn, cfg, f"statements.{key}", text)

    def prepare(self, conn: Any, cfg: Any, backlog: int, *, log: Callable[[str], None],
                state_schema: str | None) -> SeedResult:
        """Create, check and seed the definition's table (``:history``, ``:backlog``, ``:max_attempts``), build
        the index variant, VACUUM ANALYZE, run one claim rolled back; the seed's figures (rows by the
        predicates). Raises ConfigError (``SCHEMA``, ``QUEUE``, ``INDEX``), leaving no schema behind."""
        schema = cfg.schema
        db.OWNERSHIP.recreate(conn, schema)
        apply_settings(conn, {"search_path": schema})
        try:
            self._prepare(conn, cfg, backlog, log)
            return self._seeded(conn, cfg, backlog, log)
        finally:
            if not conn.broken:
                reset_settings(conn, ("search_path",))

    def _prepare(self, conn: psycopg.Connection, cfg: Any, backlog: int, log: Callable[[str], None]) -> None:
        defn, schema = self.defn, cfg.schema
        with self._refusing(conn, cfg, "table.ddl"), conn.transaction():
            conn.execute(defn.ddl)
            if builtin_queue.effects_ddl(cfg):  # EFFECTS: the tool's effects table, which statements.effect writes
                conn.execute(builtin_queue.effects_ddl(cfg))
        if conn.execute("SELECT to_regclass(%s)", (sql.Identifier(schema, defn.table).as_string(None),)).fetchone()[0] is None:
            self._reject(conn, schema, "QUEUE", f"table.ddl does not create table {defn.table!r} in "
                                                f"the tool's schema; allowed: DDL that creates table.name")
        self._check_statements(conn, cfg)
        self._started = time.perf_counter()
        if "seed" in defn.statements:
            values = {"history": int(cfg.history), "backlog": int(backlog), "max_attempts": int(cfg.max_attempts)}
            with self._refusing(conn, cfg, "statements.seed"), conn.transaction():
                conn.execute(defined_sql.literal(defn.statements["seed"], values))
        self._seed_s = time.perf_counter() - self._started
        audit.record_seeded(conn, schema, defn)
        started = time.perf_counter()
        index = defn.indexes.get(cfg.index, "") if isinstance(cfg.index, str) else ""
        if index.strip():
            with self._refusing(conn, cfg, f"index variant {cfg.index!r}", "INDEX"), conn.transaction():
                conn.execute(index)
        self._index_s = time.perf_counter() - started
        started = time.perf_counter()
        table = sql.Identifier(schema, defn.table)
        # A table seeded with no row is left unanalyzed, as a new queue's (docs/measurements/queues.md).
        self._analyzed = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(table)).fetchone()[0]
        if self._analyzed:
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
        self._vacuum_s = time.perf_counter() - started
        self._claim_once(conn, cfg)

    def _claim_once(self, conn: psycopg.Connection, cfg: Any) -> None:
        """One claim, as the workers send it, in a transaction rolled back. Raises DefinitionRefused."""
        body = defined_sql.claim_body(self.defn, cfg.policy)
        values = defined_sql.claim_values(cfg.batch, "queue-bench check", cfg.lease_s)
        with self._refusing(conn, cfg, "one claim (rolled back)"), conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL statement_timeout = '60s'")
            for name, value in self.defn.settings.items():  # as the workers' sessions have them
                conn.execute(sql.SQL("SET LOCAL {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            values["worker_id"] = defined_sql.register(conn, self.defn)
            text = defined_sql.literal(body, values)
            conn.execute(defined_sql.wrapped_claim(self.defn, text, [])).fetchall()

    def _seeded(self, conn: psycopg.Connection, cfg: Any, backlog: int, log: Callable[[str], None]) -> SeedResult:
        counts = audit.status_counts(conn, cfg.schema, self.defn)
        rows = sum(counts.values())
        log(f"queue {self.defn.name!r}: seeded {rows:,} rows ({counts['pending']:,} eligible, {counts['done']:,} done) "
            f"in {self._seed_s:.1f} s; "
            + (f"index variant {cfg.index!r} built in {self._index_s:.1f} s, " if self.defn.indexes else "")
            + (f"VACUUM ANALYZE in {self._vacuum_s:.1f} s" if self._analyzed else "not analyzed (empty, as a new table)")
            + "; every statement checked with PREPARE and one claim rolled back")
        return SeedResult(rows - counts["pending"], counts["pending"], self._seed_s, self._index_s, self._vacuum_s)
