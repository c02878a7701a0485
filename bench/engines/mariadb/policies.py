"""Claim (a transaction of three statements), completion, failure, reaper and producer SQL per claim policy
and index variant on MariaDB (why each is written so: docs/mariadb.md). Locking clauses, ``SKIP LOCKED``
10.6+ and ``NOWAIT`` 10.3+: https://mariadb.com/kb/en/select/#skip-locked, https://mariadb.com/kb/en/wait-and-nowait/;
the forced primary key: https://mariadb.com/kb/en/index-hints-how-to-force-query-plans/"""

from __future__ import annotations

import re

from bench.engines.common import LOCKING_CLAUSE


def ident(*names: str) -> str:
    """``names`` as a dotted, back-quoted MariaDB identifier (`` ` `` doubled inside)."""
    return ".".join("`" + n.replace("`", "``") + "`" for n in names)


def literal(value: str) -> str:
    """``value`` as a MariaDB string literal (NO_BACKSLASH_ESCAPES-independent: backslash doubled too)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


#: The comment every worker statement on the queue table starts with: the processlist (which has no
#: application name) tells the workers' lock waits from the producers' and the reaper's by it.
WORKER_MARK = "/* queue-bench worker */ "


def _by_id(schema: str) -> str:
    """The queue table with the primary key forced (for statements keyed by id)."""
    return f"{ident(schema, 'jobs')} FORCE INDEX (PRIMARY)"


class Var(str):
    """A user variable (``@name``) in place of an id or token (mariadb-slap's script); ValueError for anything else."""

    def __new__(cls, name: str):
        if not re.fullmatch(r"@[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"not a user variable name: {name!r}")
        return super().__new__(cls, name)


def _value(value: int | Var) -> str:
    """An id or token as SQL: a :class:`Var` as written, anything else as an integer."""
    return value if isinstance(value, Var) else str(int(value))


def _ids(ids: list[int | Var]) -> str:
    return ",".join(_value(i) for i in ids)


def claim_select(schema: str, policy: str, index: str, batch: int, queues: list[str] = (), *,
                 table: str = "jobs") -> str:
    """Step 1: the ids of at most ``batch`` eligible jobs in claim order, locked by ``policy``'s clause, of
    ``queues`` when more than one (not with ``ready_table``); ``table``: a probe's. KeyError for a bad policy."""
    locking = LOCKING_CLAUSE[policy]
    if index == "ready_table":
        return (f"{WORKER_MARK}SELECT id FROM {ident(schema, 'jobs_ready')} WHERE run_at <= NOW(6) "
                f"ORDER BY priority, run_at, id LIMIT {int(batch)} {locking}")
    eligible = "claim_pending = 1" if index == "generated" else "status = 'pending'"
    in_queues = f" AND queue IN ({','.join(map(literal, queues))})" if len(queues) > 1 else ""
    return (f"{WORKER_MARK}SELECT id FROM {ident(schema, table)} WHERE {eligible} AND run_at <= NOW(6){in_queues} "
            f"ORDER BY priority, run_at, id LIMIT {int(batch)} {locking}")


def claim_update(schema: str, ids: list[int | Var], worker: str, lease_s: float) -> str:
    """Step 2: the locked ``ids`` running, a lease of ``lease_s`` s, a fresh attempt token each, ``locked_by``."""
    lease_us = int(round(float(lease_s) * 1_000_000))
    return (f"{WORKER_MARK}UPDATE {_by_id(schema)} SET status = 'running', attempts = attempts + 1, "
            f"attempt_token = NEXTVAL({ident(schema, 'attempt_token_seq')}), locked_by = {literal(worker)}, "
            f"started_at = NOW(6), lease_expires_at = NOW(6) + INTERVAL {lease_us} MICROSECOND "
            f"WHERE id IN ({_ids(ids)})")


def claim_rows(schema: str, ids: list[int | Var]) -> str:
    """Step 3: ``(id, attempt_token, pickup_us, attempts, lease_until, claimed_at)``, the last two epoch seconds."""
    return (f"{WORKER_MARK}SELECT id, attempt_token, TIMESTAMPDIFF(MICROSECOND, run_at, started_at), attempts, "
            f"UNIX_TIMESTAMP(lease_expires_at), UNIX_TIMESTAMP(started_at) "
            f"FROM {ident(schema, 'jobs')} WHERE id IN ({_ids(ids)}) ORDER BY priority, run_at, id")


def complete_one(schema: str, job_id: int | Var, token: int | Var) -> str:
    """Completion of one job, fenced by its attempt token: 0 rows when the token moved on."""
    return (f"{WORKER_MARK}UPDATE {_by_id(schema)} SET status = 'done', finished_at = NOW(6), lease_expires_at = NULL "
            f"WHERE id = {_value(job_id)} AND attempt_token = {_value(token)} AND status = 'running'")


def effect(schema: str, job_id: int, token: int, *, ignore: bool) -> str:
    """``EFFECTS`` outside (``ignore`` False) or idempotent (``INSERT IGNORE``: the unique logical id keeps the
    first): job ``job_id``'s effect row by attempt ``token``."""
    return (f"{WORKER_MARK}INSERT {'IGNORE ' if ignore else ''}INTO {ident(schema, 'effects')} (logical_id, attempt_token) "
            f"VALUES ({int(job_id)}, {int(token)})")


def effect_if_completed(schema: str, job_id: int, token: int) -> str:
    """``EFFECTS=same_txn``, after :func:`complete_one` in the same transaction: the effect row, written only if
    the row is done under ``token`` (this completion applied; a stale token matches no row)."""
    return (f"{WORKER_MARK}INSERT INTO {ident(schema, 'effects')} (logical_id, attempt_token) SELECT id, attempt_token "
            f"FROM {_by_id(schema)} WHERE id = {int(job_id)} AND attempt_token = {int(token)} AND status = 'done'")


def fail(schema: str, job_id: int, token: int, delay_s: float, error: str) -> str:
    """A failed attempt: ``pending`` in ``delay_s`` s, or ``dead`` past ``max_attempts``; 0 rows: token moved on."""
    delay_us = int(round(float(delay_s) * 1_000_000))
    return (f"{WORKER_MARK}UPDATE {_by_id(schema)} SET "
            f"status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, "
            f"run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE NOW(6) + INTERVAL {delay_us} MICROSECOND END, "
            f"finished_at = CASE WHEN attempts >= max_attempts THEN NOW(6) END, "
            f"lease_expires_at = NULL, locked_by = NULL, last_error = {literal(error)} "
            f"WHERE id = {int(job_id)} AND attempt_token = {int(token)} AND status = 'running'")


def status_of(schema: str, job_id: int, token: int) -> str:
    """The status of job ``job_id`` while it still carries ``token``."""
    return f"{WORKER_MARK}SELECT status FROM {ident(schema, 'jobs')} WHERE id = {int(job_id)} AND attempt_token = {int(token)}"


def reap_select(schema: str, limit: int = 1000) -> str:
    """The reaper's locking read (``SKIP LOCKED``): running jobs whose lease expired."""
    return (f"SELECT id FROM {ident(schema, 'jobs')} WHERE status = 'running' AND lease_expires_at < NOW(6) "
            f"ORDER BY lease_expires_at LIMIT {int(limit)} FOR UPDATE SKIP LOCKED")


def reap_update(schema: str, ids: list[int]) -> str:
    """Re-queue (or dead-letter) the locked ``ids`` whose status and lease still say expired (FR-06)."""
    return (f"UPDATE {_by_id(schema)} SET "
            f"status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, "
            f"finished_at = CASE WHEN attempts >= max_attempts THEN NOW(6) END, "
            f"lease_expires_at = NULL, locked_by = NULL, last_error = 'lease expired' "
            f"WHERE id IN ({_ids(ids)}) AND status = 'running' AND lease_expires_at < NOW(6)")


def reaped(schema: str, ids: list[int]) -> str:
    """``(id, status)`` of the ``ids`` the reaper just changed (read in its transaction)."""
    return (f"SELECT id, status FROM {ident(schema, 'jobs')} WHERE id IN ({_ids(ids)}) "
            f"AND last_error = 'lease expired' AND status IN ('pending', 'dead') AND lease_expires_at IS NULL")


def insert(schema: str, priorities: list[int], run_at_s: list[float], max_attempts: int,
           queues: list[str] | None = None) -> str:
    """The producers' multi-row insert (``run_at`` epoch seconds, ``queues`` each job's), returning the ids
    (MariaDB 10.5+)."""
    names = [f", {literal(q)}" for q in queues] if queues else [""] * len(priorities)
    values = ",".join(f"({int(p)}, FROM_UNIXTIME({float(t)!r}), {int(max_attempts)}{q})"
                      for p, t, q in zip(priorities, run_at_s, names))
    return (f"INSERT INTO {ident(schema, 'jobs')} (priority, run_at, max_attempts{', queue' if queues else ''}) "
            f"VALUES {values} RETURNING id")
