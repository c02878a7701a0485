"""The targets of the audit mutation suite (``tests/test_audit.py``): where a run's table lives and how a
safeguard is taken out of its statements, per engine and queue; everything else goes through the
engine's own interface (:class:`bench.engines.base.Engine`: ``prepare``, ``sessions``, ``reaper``,
``audit``), as a run does.

A :class:`Run` prepares a small table (no load), opens workers (:class:`Worker`: the engine's worker
sessions, logged into a :class:`bench.measure.claimlog.ClaimLog` and a :class:`bench.measure.metrics.Recorder`
as :class:`bench.load.swarm.QueueWorker` logs them) and audits. A worker opened with a :class:`Mutation`
sends its target's statements with one safeguard taken out (the lease check of the claim, its limit,
the token or the status check of the completion): the per-target part is data (:data:`TARGETS`) and
one small function per kind of session (:func:`_mutated_session`).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from typing import Callable, NamedTuple

import psycopg
import pymysql
from psycopg import sql

from bench.config.queue_definition import applicability, load_queue
from bench.config.run_config import build_config
from bench.engines import engine_for
from bench.engines.mariadb import audit as maria_audit
from bench.engines.mariadb.policies import ident as maria_ident
from bench.engines.mariadb.sessions import MariaDBWorkerSession
from bench.engines.postgres import policies as pg_policies
from bench.engines.postgres.defined_sessions import DefinedSessions
from bench.engines.postgres.probes import FR03_SETTINGS
from bench.measure.claimlog import ClaimLog
from bench.measure.metrics import Recorder
from conftest import CLEAN_INVARIANTS, MARIADB_DSN

#: Violations injected per test; the table's backlog, the batch and the lease of the runs.
K = 3
BACKLOG = 12
BATCH = 3
LEASE_S = 60.0
#: The control run's poison share: ids 2, 5 and 10 of 1..12.
POISON_SHARE = 0.25


@dataclasses.dataclass
class Mutation:
    """A safeguard taken out of a session's statements: each ``(old, new)`` of ``replace`` applied to every
    statement the session prepares or sends (``{n}`` in ``old`` stands for a number inlined by the
    statement), ``claim`` a rewrite of the claim, ``settings`` the session's server settings. ``hits``
    counts the replacements made (a mutation that changed nothing would test nothing)."""

    replace: tuple[tuple[str, str], ...] = ()
    claim: Callable[[str], str] | None = None
    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    hits: int = 0

    def apply(self, text: str, *, is_claim: bool = False) -> str:
        if is_claim and self.claim is not None:
            text, self.hits = self.claim(text), self.hits + 1
        for old, new in self.replace:
            text, n = re.subn(re.escape(old).replace(re.escape("{n}"), r"\d+"), lambda _m, new=new: new, text)
            self.hits += n
        return text


def _fr03() -> Mutation:
    """FR-03's naive sub-select form of the built-in claim under a forced nested loop: it claims every
    pending row instead of the batch."""
    return Mutation(claim=pg_policies.naive_subselect_claim, settings=dict.fromkeys(FR03_SETTINGS, "off"))


class Duplicate(NamedTuple):
    """Rows ``6, 7, 8`` stored twice: ``copy`` (SQL of ``{jobs}``, ``{archive}``) on a table prepared with
    ``config``, after ``unlock`` (SQL that lets an id be stored twice; None: nothing stops the copy),
    which the database refuses with ``refused`` (an error code) before it."""

    copy: str
    unlock: str | None = None
    refused: object = None
    config: dict = {}


@dataclasses.dataclass(frozen=True)
class Target:
    """A queue on an engine, its table with the index variant ``index``. ``fenced``: an attempt token
    fences stale completions; ``retries``: a failed attempt goes back to pending; ``attempts``: the table
    keeps an attempt count;
    ``builtin``: the built-in audit (retry gaps, poison, FIFO). ``mutations``: name -> a new
    :class:`Mutation` (``steal``: the claim takes rows under a live lease; ``greedy``: it claims more
    than the batch, ``greedy_rows`` each; ``untokened``, ``again``: the completion without its token
    or status check). ``duplicate``: how a job's row comes to be stored twice (:class:`Duplicate`).
    ``exclusions``: invariant -> why no mutation can break it on this target (the audit names it
    uncheckable, for the reason its text starts with)."""

    name: str
    engine: str
    index: str
    queue: str = "builtin"
    table: str = "jobs"
    fenced: bool = True
    retries: bool = True
    attempts: bool = True
    builtin: bool = True
    mutations: dict[str, Callable[[], Mutation]] = dataclasses.field(default_factory=dict)
    greedy_rows: int = BACKLOG
    duplicate: Duplicate | None = None
    exclusions: dict[str, str] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


#: What differs between the engines' servers, as SQL templates.
ENGINE_SQL = {
    "postgres": {"lock_timeout": "SET lock_timeout = '10s'",
                 "kill": "SELECT pg_terminate_backend({pid})",
                 "alive": "SELECT count(*) FROM pg_stat_activity WHERE pid IN ({pids})"},
    "mariadb": {"lock_timeout": "SET SESSION innodb_lock_wait_timeout = 10",
                "kill": "KILL {pid}",
                "alive": "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN ({pids})"},
}

_PG_STEAL = ("WHERE status = 'pending' AND run_at <= now()", "WHERE status = 'running' AND lease_expires_at > now()")
_COPY = "INSERT INTO {jobs} OVERRIDING SYSTEM VALUE SELECT * FROM {jobs} WHERE id IN (6, 7, 8)"

TARGETS = {t.name: t for t in (
    Target("postgres", "postgres", "partial", mutations={
        "steal": lambda: Mutation((_PG_STEAL,)),
        "greedy": _fr03,
        "untokened": lambda: Mutation(((" AND j.attempt_token = c.token", ""),)),
        "again": lambda: Mutation(((" AND j.status = 'running'", ""),)),
    }, duplicate=Duplicate("INSERT INTO {archive} SELECT * FROM {jobs} WHERE id IN (6, 7, 8)",
                                  config={"layout": "archive"})),
    Target("mariadb", "mariadb", "composite", mutations={
        "steal": lambda: Mutation((("WHERE status = 'pending' AND run_at <= NOW(6)",
                                    "WHERE status = 'running' AND lease_expires_at > NOW(6)"),)),
        "greedy": lambda: Mutation(((f" LIMIT {BATCH} ", f" LIMIT {BATCH + 1} "),)),
        "untokened": lambda: Mutation(((" AND attempt_token = {n}", ""),)),
        "again": lambda: Mutation(((" AND status = 'running'", ""),)),
    }, greedy_rows=BATCH + 1,
        duplicate=Duplicate("INSERT INTO {jobs} SELECT * FROM {jobs} WHERE id IN (6, 7, 8)",
                            "ALTER TABLE {jobs} DROP PRIMARY KEY, ADD KEY (id)", 1062)),
    Target("model", "postgres", "partial", queue="model", builtin=False, mutations={
        "steal": lambda: Mutation((_PG_STEAL,)),
        "greedy": _fr03,
        "untokened": lambda: Mutation(((" AND attempt_token = :token", ""),
                                       (" AND j.attempt_token = c.token", ""))),
        "again": lambda: Mutation(((" AND status = 'running'\n", "\n"), (" AND j.status = 'running'", ""))),
    }, duplicate=Duplicate(_COPY, "ALTER TABLE {jobs} DROP CONSTRAINT jobs_pkey", "23505")),
    Target("tasks", "postgres", "queued_created", queue="tasks", table="tasks", fenced=False, retries=False,
           attempts=False, builtin=False, greedy_rows=2, mutations={
               "steal": lambda: Mutation((("WHERE status = 'queued'",
                                           "WHERE status = 'processing' AND worker <> :worker"),)),
               "greedy": lambda: Mutation((("WHERE id = (SELECT", "WHERE id IN (SELECT"),
                                           ("LIMIT 1 {locking}", "LIMIT 2 {locking}"))),
               # its shipped completion has no status check: sent twice, it applies twice
               "again": lambda: Mutation(),
           }, duplicate=Duplicate(_COPY, "ALTER TABLE {jobs} DROP CONSTRAINT tasks_pkey", "23505"),
           exclusions={"stale_completions_applied": ("the queue has no attempt token: a stale worker's "
                                                  "completion is the current one's as far as the table can tell")}),
)}


def _mutated_session(engine, dsn: str, cfg, name: str, mutation: Mutation | None):
    """The engine's worker session ``name``, its statements changed by ``mutation`` when given: on PostgreSQL
    (the built-in queue is a generated definition too) a session over a changed copy of the run's definition,
    on MariaDB a session whose every sent text is changed."""
    sessions = engine.sessions(dsn, cfg)
    if mutation is None:
        return sessions.worker_session(name)
    if isinstance(sessions, DefinedSessions):
        defn = engine.queue(cfg)
        statements = {k: mutation.apply(v, is_claim=k == "claim") for k, v in defn.statements.items()}
        variant = dataclasses.replace(defn, statements=statements, settings={**defn.settings, **mutation.settings})
        return DefinedSessions(dsn, cfg, lambda: variant).worker_session(name)
    session = sessions.worker_session(name)  # PostgreSQL's are all the definition's (above)
    assert isinstance(session, MariaDBWorkerSession)
    session.__class__ = _MutatedMariaDBSession
    session.mutation = mutation
    return session


class _MutatedMariaDBSession(MariaDBWorkerSession):
    """A MariaDB worker session whose every statement text goes through its ``mutation`` when sent (the
    session writes its statements, with their values inlined, as it sends them)."""

    mutation: Mutation

    def run(self, text: str, policy: str | None = None) -> list[tuple[int, tuple]]:
        return super().run(self.mutation.apply(text), policy)


class Worker:
    """One worker's session, logged as :class:`bench.load.swarm.QueueWorker` logs it: each committed
    claim's rows into the log (in a transaction, a tentative buffer committed with it) and the claim into
    the recorder, every completion attempt and failure into the log."""

    def __init__(self, run: Run, name: str, mutation: Mutation | None = None, **cfg_changes):
        self.cfg = dataclasses.replace(run.cfg, **cfg_changes)
        self.session = _mutated_session(run.engine, run.dsn, self.cfg, name, mutation)
        self.log, self.recorder, self.name = run.log, run.recorder, name
        self.events = run.log

    def claim(self) -> list[tuple[int, int]]:
        """One claim; return ``[(id, token)]``."""
        started = time.perf_counter()
        claimed = self.session.claim()
        self.recorder.claim(int((time.perf_counter() - started) * 1e6), len(claimed),
                            [j[2] for j in claimed if j[2] is not None])
        for job in claimed:
            self.events.claimed(job[0], job[1], job[4], job[5])
        return [(job[0], job[1]) for job in claimed]

    def claim_n(self, n: int = K) -> list[tuple[int, int]]:
        """Claim until ``n`` jobs are held (one claim takes a batch, a queue without one takes a job)."""
        jobs = []
        while len(jobs) < n and (got := self.claim()):
            jobs += got
        return jobs

    def begin(self) -> None:
        """Open a transaction: claims are logged once :meth:`commit` returns (``TXN=hold``)."""
        self.session.begin()
        self.events = self.log.tentative()

    def commit(self) -> None:
        self.session.commit()
        self.events.commit()
        self.events = self.log

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """Complete ``[(id, token)]``; return the ids the database applied."""
        applied = self.session.complete(jobs)
        if self.events is not self.log:
            self.commit()
        self.recorder.complete(1, len(applied), len(jobs) - len(applied))
        for job_id, token in jobs:
            self.log.finished(job_id, token, job_id in applied)
        return applied

    def fail(self, job: tuple[int, int], delay_s: float = 0.0) -> str | None:
        """Report a failed attempt; the job is pending again after ``delay_s`` (or dead)."""
        status = self.session.fail(job[0], job[1], delay_s, "injected failure")
        self.events.failed(job[0], job[1])
        return status

    def close(self) -> None:
        self.session.close()


class Run:
    """One simulated run of ``target`` on a throwaway schema: prepare, workers, the audit."""

    def __init__(self, target: Target, pg_dsn: str):
        self.target = target
        self.dsn = MARIADB_DSN if target.engine == "mariadb" else pg_dsn
        self.schema = f"qbench_audit_{secrets.token_hex(3)}"
        self.log = ClaimLog()
        self.workers: list[Worker] = []
        self.mutations: list[Mutation] = []
        self.cfg = self.engine = self.recorder = self.conn = None

    def prepare(self, *, history: int = 0, backlog: int = BACKLOG, **overrides) -> None:
        """Build the run's config (``overrides`` that do not apply to a definition are left out), create
        and seed the table."""
        values = {"schema": self.schema, "queue": self.target.queue, "index": self.target.index, "batch": BATCH,
                  "history": history, "max_attempts": 5, "lease_s": LEASE_S, "policy": "skip_locked", **overrides}
        if self.target.queue != "builtin":
            values = {k: v for k, v in values.items() if k not in applicability(load_queue(self.target.queue))}
        self.cfg = build_config("default", values, dsn=self.dsn)
        self.engine = engine_for(self.cfg)
        self.recorder = Recorder(self.cfg.batch)
        self.conn = self.engine.connect(self.dsn, "queue-bench test admin")
        self.execute(ENGINE_SQL[self.target.engine]["lock_timeout"])  # a lock left behind fails, never hangs
        self.engine.prepare(self.conn, self.cfg, backlog, log=lambda _msg: None, state_schema=None)
        self.seeded = history + backlog

    def worker(self, name: str, mutation: str | None = None, **cfg_changes) -> Worker:
        """A worker; with ``mutation`` (a name of the target's mutations) its statements lose a safeguard."""
        changed = None
        if mutation is not None:
            changed = self.target.mutations[mutation]()
            self.mutations.append(changed)
        w = Worker(self, name, changed, **cfg_changes)
        self.workers.append(w)
        return w

    def sql(self, text: str) -> str:
        """``text`` with ``{jobs}`` (and ``{archive}``) bound to the run's tables."""
        if self.target.engine == "mariadb":
            return text.format(jobs=maria_ident(self.schema, "jobs"))
        return text.format(jobs=sql.Identifier(self.schema, self.target.table).as_string(None),
                           archive=sql.Identifier(self.schema, "jobs_archive").as_string(None))

    def execute(self, text: str) -> int:
        """Run ``text`` (see :meth:`sql`) on the admin connection; return its affected rows."""
        if self.target.engine == "mariadb":
            with self.conn.cursor() as cur:
                return cur.execute(self.sql(text))
        return self.conn.execute(self.sql(text)).rowcount

    def rows(self, text: str) -> list[tuple]:
        if self.target.engine == "mariadb":
            with self.conn.cursor() as cur:
                cur.execute(self.sql(text))
                return list(cur.fetchall())
        return self.conn.execute(self.sql(text)).fetchall()

    def error_code(self, text: str) -> object:
        """The error code (SQLSTATE, or MariaDB's number) the database answers ``text`` with; fails when it
        runs."""
        try:
            self.execute(text)
        except psycopg.Error as err:
            return err.sqlstate
        except pymysql.err.MySQLError as err:
            return err.args[0]
        raise AssertionError(f"{text!r} ran")

    def backend(self, worker: Worker) -> int:
        """The server's id of ``worker``'s connection."""
        session = worker.session
        return session.connection_id if self.target.engine == "mariadb" else session.session.conn.info.backend_pid

    def kill(self, backend: int) -> None:
        """End the server's connection ``backend`` (its transaction is rolled back)."""
        self.execute(ENGINE_SQL[self.target.engine]["kill"].format(pid=backend))

    def wait_gone(self, backends: list[int]) -> None:
        """Wait (at most 10 s) until the connections ``backends`` have ended, their transactions rolled back."""
        deadline = time.monotonic() + 10
        alive = ENGINE_SQL[self.target.engine]["alive"].format(pids=", ".join(map(str, backends)))
        while self.rows(alive)[0][0]:
            assert time.monotonic() < deadline, f"connections {backends} still there"
            time.sleep(0.01)

    def drain(self, worker: Worker) -> int:
        """Claim and complete until no row is eligible; return the jobs completed."""
        done = 0
        while jobs := worker.claim():
            done += len(worker.complete(jobs))
        return done

    def reap(self) -> tuple[int, int]:
        """One pass of the engine's reaper: (jobs re-queued, jobs dead-lettered)."""
        reaper = self.engine.reaper(self.dsn, self.cfg, self.recorder)
        try:
            return reaper.once()
        finally:
            reaper.conn.close()

    def audit(self) -> dict:
        """The engine's audit of the run; every mutation used must have changed a statement."""
        assert all(m.hits for m in self.mutations if m.replace or m.claim), "a mutation changed no statement"
        return self.engine.audit(self.conn, self.cfg, self.log, seeded_rows=self.seeded,
                                 over_claims=self.recorder.counters["over_claims"])

    def only(self, **counts: int) -> dict:
        """The invariants this target's audit reports, 0 but ``counts``."""
        checked = {k: v for k, v in CLEAN_INVARIANTS.items() if k not in self.target.exclusions}
        return {**checked, **counts}

    def close(self) -> None:
        for w in self.workers:
            w.close()
        try:
            if self.conn is not None:
                self.engine.drop_schema_at(self.dsn, self.schema)
        finally:
            if self.conn is not None:
                self.conn.close()
            self.log.close()


def assert_audit_left_nothing(run: Run) -> None:
    """No temporary table of the audit is left on its connection, no transaction is open (MariaDB: and the
    session's isolation is as before)."""
    if run.target.engine == "mariadb":
        for table in maria_audit._TABLES.values():
            assert run.error_code(f"SELECT 1 FROM {maria_ident(run.schema, table)}") == 1146
        assert run.rows("SELECT @@in_transaction, @@tx_isolation")[0] == (0, "REPEATABLE-READ")
        return
    assert run.conn.info.transaction_status.name == "IDLE"
    assert run.rows("SELECT count(*) FROM pg_class "
                    "WHERE relname LIKE 'qbench_audit%' AND relpersistence = 't'") == [(0,)]
