"""The worker and producer sessions of a queue definition (:mod:`bench.config.queue_definition`).

The same libpq path as the built-in queue's sessions (:mod:`bench.engines.postgres.sessions`): one
autocommit connection per worker, ``search_path`` set to the tool's schema, the claim, completion and
failure prepared once (``$n`` parameters, text format) and waited for through gevent. The claim runs
inside the wrapper of :func:`bench.engines.postgres.defined_sql.wrapped_claim`. A queue without an
attempt token gets a random negative token per claimed job in the claim log (the audit pairs each
claim with its completion by it); completions of such a queue are keyed by id alone.
"""

from __future__ import annotations

import random

import psycopg

from bench.config.queue_definition import QueueDefinition
from bench.config.run_config import RunConfig
from bench.engines.base import ClaimedRow, ConnectFailed, EngineError, Sessions
from bench.engines.postgres import defined_sql
from bench.engines.postgres.error_kinds import error_kind, first_line
from bench.engines.postgres.session import rows
from bench.engines.postgres.sessions import ISOLATION_LEVELS, PgWorkerSession, _open, _translate, cooperative_wait


def claim_columns(dsn: str, schema: str, body: str) -> list[str]:
    """The names of the columns the claim ``body`` (``$n`` parameters) returns, from the server's
    description of it as an unnamed prepared statement (nothing is executed). Raises psycopg.Error."""
    with psycopg.connect(dsn, autocommit=True, application_name="queue-bench describe") as conn:
        conn.execute(defined_sql.set_search_path(schema))
        return defined_sql.describe_columns(conn, body)


def _statement(defn: QueueDefinition, name: str) -> tuple[str, list[str]] | None:
    return defined_sql.positional(defn.statements[name]) if name in defn.statements else None


class DefinedWorkerSession(PgWorkerSession):
    """A worker's session on a defined queue: the definition's claim (wrapped), complete (or
    complete_many for a batch), fail. ``returned``: the columns the claim itself returns."""

    def __init__(self, dsn: str, cfg: RunConfig, defn: QueueDefinition, returned: list[str], name: str):
        self.cfg, self.name, self.defn = cfg, name, defn
        self.notify = False
        self.fenced = "token" in defn.columns
        body, names = defined_sql.positional(defined_sql.claim_body(defn, cfg.policy))
        values = defined_sql.claim_values(cfg.batch, name, cfg.lease_s)
        self.claim_names, self.claim_values = names, values
        self.claim_params = [defined_sql.text_param(values[n]) for n in names]
        statements = {"claim": defined_sql.wrapped_claim(defn, body, returned)}
        self.params: dict[str, list[str]] = {}
        for key in ("complete", "complete_many", "fail"):
            found = _statement(defn, key)
            if found is not None:
                statements[key], self.params[key] = found
        self.claim_text = None
        if not cfg.prepared:  # PREPARED=0: the claim goes unprepared, its values inlined
            self.claim_text = defined_sql.wrapped_claim(
                defn, defined_sql.literal(defined_sql.claim_body(defn, cfg.policy), values), returned).encode()
            del statements["claim"]
        settings = {**defn.settings, "search_path": defined_sql.schema_path(cfg.schema)}
        if cfg.plan_cache not in ("auto", "n/a"):
            settings["plan_cache_mode"] = cfg.plan_cache
        if cfg.isolation != "read_committed":
            settings["default_transaction_isolation"] = ISOLATION_LEVELS[cfg.isolation]
        self.session = _open(dsn, f"queue-bench {name}", settings, statements)
        self.worker_id = self._register() if "register" in defn.statements else None
        if self.worker_id is not None:
            values["worker_id"] = self.worker_id
            self.claim_params = [defined_sql.text_param(values[n]) for n in names]
            if self.claim_text is not None:
                self.claim_text = defined_sql.wrapped_claim(
                    defn, defined_sql.literal(defined_sql.claim_body(defn, cfg.policy), values), returned).encode()

    def _register(self) -> int:
        """Run the definition's register statement once on this connection (a library's worker
        registration); its first value is ``:worker_id``. Raises ConnectFailed."""
        try:
            found = rows(self.session.query(defined_sql.literal(self.defn.statements["register"], {}).encode()))
        except psycopg.Error as err:
            self.session.close()
            raise ConnectFailed(error_kind(err, connecting=True), first_line(err), lost=True) from None
        return int(found[0][0])

    def _run(self, key: str, values: dict):
        """Execute prepared ``key`` with ``values`` (the caller's own dict: ``worker_id`` is set in it)."""
        values["worker_id"] = self.worker_id
        try:
            return self.session.execute(key.encode(), [defined_sql.text_param(values[n]) for n in self.params[key]])
        except psycopg.Error as err:
            raise _translate(err, self.session) from None

    def claim(self) -> list[ClaimedRow]:
        """See :meth:`bench.engines.base.WorkerSession.claim`; the pickup element is None when the
        claim does not return the definition's ``eligible_at`` column."""
        out = []
        for r in self._claim_rows():
            token = int(r[1]) if r[1] is not None else -random.getrandbits(62) - 1
            out.append((int(r[0]), token, int(r[2]) if r[2] is not None else None, int(r[3]), float(r[4]),
                        float(r[5])))
        return out

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """See :meth:`bench.engines.base.WorkerSession.complete`: one ``complete_many`` for a batch
        when the definition has it (the ids it returns were applied), else ``complete`` per job
        (applied when it changed a row)."""
        if len(jobs) > 1 and "complete_many" in self.params:
            result = self._run("complete_many", {"ids": [j[0] for j in jobs], "tokens": [j[1] for j in jobs]})
            return {int(r[0]) for r in rows(result)}
        applied = set()
        for job_id, token in jobs:
            result = self._run("complete", {"id": job_id, "token": token})
            if result.command_tuples or result.ntuples:
                applied.add(job_id)
        return applied

    def fail(self, job_id: int, token: int, retry_delay_s: float, error: str) -> str | None:
        """See :meth:`bench.engines.base.WorkerSession.fail`: None when no row changed (fenced);
        ``dead`` when the statement's first returned value is true (or ``dead``), else ``pending``."""
        if "fail" not in self.params:
            raise EngineError("no_fail_statement", "the queue definition has no fail statement")
        result = self._run("fail", {"id": job_id, "token": token, "delay_s": float(retry_delay_s), "error": error})
        if not (result.command_tuples or result.ntuples):
            return None
        values = rows(result)
        first = values[0][0] if values and values[0] else None
        return "dead" if first in (b"t", b"dead") else "pending"

    def _explained_claim(self) -> bytes:
        """The claim as :meth:`explain_claim` runs it: ``EXECUTE`` with this session's values, or the
        literal claim."""
        if self.claim_text is not None:
            return self.claim_text
        args = ", ".join(psycopg.sql.Literal(self.claim_values[n]).as_string(None) for n in self.claim_names)
        return f"EXECUTE claim({args})".encode() if args else b"EXECUTE claim"


class DefinedProducerSession:
    """A producer's session on a defined queue: its ``enqueue``, one job per execution."""

    def __init__(self, dsn: str, cfg: RunConfig, defn: QueueDefinition, name: str):
        text, self.names = defined_sql.positional(defn.statements["enqueue"])
        self.max_attempts = cfg.max_attempts
        self.session = _open(dsn, f"queue-bench {name}", {"search_path": defined_sql.schema_path(cfg.schema)},
                             {"enqueue": text})

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""
        return self.session.broken

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """See :meth:`bench.engines.base.ProducerSession.insert`: the ids the enqueue statement returns.
        The enqueue inserts one job; the jobs due together (a producer catching up) are inserted in one
        transaction, one commit for them all, as the built-in producers' one multi-row insert does."""
        ids = []
        many = len(priorities) > 1
        try:
            if many:
                self.session.command(b"BEGIN")
            for priority, run_at in zip(priorities, run_at_s):
                values = {"priority": int(priority), "run_at": float(run_at), "max_attempts": self.max_attempts}
                result = self.session.execute(b"enqueue", [defined_sql.text_param(values[n]) for n in self.names])
                names = [result.fname(i).decode() for i in range(result.nfields)]
                column = names.index("id") if "id" in names else 0  # a library's insert may return (ord, id)
                ids.extend(int(r[column]) for r in rows(result))
            if many:
                self.session.command(b"COMMIT")
        except psycopg.Error as err:
            translated = _translate(err, self.session)
            if many and not self.session.broken and self.session.in_transaction:
                try:
                    self.session.command(b"ROLLBACK")
                except psycopg.Error:
                    pass
            raise translated from None
        return ids

    def close(self) -> None:
        """Close the connection."""
        self.session.close()


class DefinedSessions(Sessions):
    """The :class:`bench.engines.base.SessionFactory` of a defined queue. The columns the claim
    returns are read from the server once, at the first worker session (the table exists by then)."""

    def __init__(self, dsn: str, cfg: RunConfig, defn: QueueDefinition):
        super().__init__(dsn, cfg, DefinedWorkerSession, DefinedProducerSession, cooperative_wait)
        self.defn = defn
        self.returned: list[str] | None = None

    def worker_session(self, name: str) -> DefinedWorkerSession:
        """A new worker session. Raises :class:`bench.engines.base.ConnectFailed`."""
        if self.returned is None:
            body, _ = defined_sql.positional(defined_sql.claim_body(self.defn, self.cfg.policy))
            try:
                self.returned = claim_columns(self.dsn, self.cfg.schema, body)
            except psycopg.Error as err:
                raise ConnectFailed(error_kind(err, connecting=True), first_line(err), lost=True) from None
        return DefinedWorkerSession(self.dsn, self.cfg, self.defn, self.returned, name)

    def producer_session(self, name: str) -> DefinedProducerSession:
        """A new producer session. Raises :class:`bench.engines.base.ConnectFailed`."""
        return DefinedProducerSession(self.dsn, self.cfg, self.defn, name)
