"""The built-in queue's statements (:mod:`bench.engines.postgres.builtin_queue`, where their SQL and
its reasons are) rendered for each client: ``$n`` placeholders for the workers' prepared statements,
SQL literals for ``PREPARED=0``, psycopg's named placeholders for the probes and tests; and the
producers' insert. ``make calibrate``'s pgbench script renders the same definition
(:func:`bench.engines.postgres.pgbench.claim_complete_script`).

Locking clauses: https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE
(``NOWAIT`` raises SQLSTATE 55P03 ``lock_not_available``; ``SKIP LOCKED`` skips
rows that cannot be locked immediately).
"""

from __future__ import annotations

from typing import Callable

from psycopg import sql

from bench.config.sql_text import render, replace_locking
from bench.engines.postgres import builtin_queue

LOCKING_CLAUSE = {
    "wait": "FOR UPDATE",
    "nowait": "FOR UPDATE NOWAIT",
    "skip_locked": "FOR UPDATE SKIP LOCKED",
}

#: The worker's prepared statements: their names and the built-in definition's statement each is.
_PREPARED = {"claim": "claim", "complete_one": "complete", "complete_many": "complete_many", "fail": "fail"}

def _render(name: str, schema: str, policy: str, placeholder: Callable[[int, str], str], queues: int = 1,
            order: str = "plain", **names: str) -> str:
    """The built-in definition's statement ``name`` (:func:`builtin_queue.statement`) with ``policy``'s
    locking clause and each parameter rendered by ``placeholder(position, param)``. Raises KeyError for
    an unknown policy."""
    clause = LOCKING_CLAUSE[policy]
    text, params = builtin_queue.statement(name, schema, queues, order, **names)
    return render(replace_locking(text, clause), placeholder, params)[0]


def _named(name: str, schema: str, policy: str = "skip_locked", queues: int = 1, order: str = "plain",
           **names: str) -> sql.SQL:
    return sql.SQL(_render(name, schema, policy, lambda _i, param: sql.Placeholder(param).as_string(None),
                           queues, order, **names))


def claim_sql(schema: str, policy: str, queues: int = 1, *, order: str = "plain", table: str = "jobs",
              token_seq: str = "attempt_token_seq") -> sql.SQL:
    """The claim statement for ``policy``, with named placeholders (for psycopg's ``execute``).

    Parameters: ``batch`` (int, the LIMIT), ``worker`` (str, ``locked_by``),
    ``lease_s`` (float seconds), and with ``queues`` > 1 ``queues`` (list[str], the names served,
    in ``order``: ``plain`` or ``round_robin``, see :func:`builtin_queue.statement`). Returns the rows described in
    :func:`prepared_statements`. ``table`` and ``token_seq`` name the queue table and the token
    sequence inside ``schema`` (a probe's scratch table: :mod:`bench.engines.postgres.probes`).
    Raises KeyError for an unknown policy.
    """
    return _named("claim", schema, policy, queues, order, table=table, token_seq=token_seq)


def naive_subselect_claim(claim: str) -> str:
    """FR-03's naive form of the tool's claim text ``claim`` (from :func:`claim_sql` or
    :func:`prepared_statements`, as a string): the locking ``SELECT … LIMIT n`` as an ``IN``
    sub-select of the ``UPDATE`` instead of a materialized CTE, the claim's moment as
    ``clock_timestamp()``; same SET, same RETURNING, same parameters. A planner that re-runs the
    sub-select per outer row (a nested loop) makes it claim more than ``n`` rows. For probes and
    tests only: the workers never send it. Raises ValueError when ``claim`` is not the claim."""
    def without(text: str, part: str, replacement: str = "") -> str:
        if part not in text:
            raise ValueError(f"not the tool's claim: {part!r} is missing")
        return text.replace(part, replacement)

    _, sep, rest = claim.partition("AS MATERIALIZED (\n")
    picked, sep2, rest = rest.partition("\n), moment AS MATERIALIZED (\n")
    _, sep3, update = rest.partition("\n)\n")
    if not (sep and sep2 and sep3):
        raise ValueError("not the tool's claim: its picked and moment CTEs are missing")
    update = without(update, "moment.at", "clock_timestamp()")
    return without(update, "FROM picked, moment\nWHERE j.id = picked.id", f"WHERE j.id IN ({picked.strip()})")


def complete_one_sql(schema: str) -> sql.SQL:
    """Completion of one job, fenced by its attempt token.

    Parameters: ``id``, ``token``. Updates 0 rows when the token moved on (stale).
    """
    return _named("complete", schema)


def complete_many_sql(schema: str) -> sql.SQL:
    """Completion of a batch, each row fenced by its own attempt token.

    Parameters: ``ids`` (list[int]), ``tokens`` (list[int], same length).
    Returns the ids applied; the rest were stale.
    """
    return _named("complete_many", schema)


def prepared_statements(schema: str, policy: str, queues: int = 1, order: str = "plain") -> dict[str, str]:
    """The worker's statements with positional ``$n`` parameters, for ``PQprepare``.

    ``claim``: $1 batch (int), $2 worker (text), $3 lease_s (float8 seconds), with ``queues`` > 1
    $4 the queue names served (text[]), in ``order`` (``plain``, ``round_robin``);
    returns ``(id, attempt_token, pickup_us, attempts, lease_until, claimed_at)``,
    ``pickup_us`` being database time from ``run_at`` to the claim and the last
    two database epoch seconds.
    ``complete_one``: $1 id, $2 token; ``complete_many``: $1 ids[], $2 tokens[].
    ``fail``: $1 id, $2 token, $3 retry delay (s), $4 error text: back to
    ``pending`` at ``now() + delay``, or ``dead`` once ``attempts >= max_attempts``;
    returns the new status (no row when the token moved on).
    """
    return {name: _render(statement, schema, policy, lambda i, _param: f"${i}", queues, order)
            for name, statement in _PREPARED.items()}


_INSERT = """\
INSERT INTO {jobs} (priority, run_at, max_attempts{queue_column})
SELECT p, to_timestamp(t), {max_attempts}{queue_column}
FROM unnest($1::smallint[], $2::float8[]{queue_array}) AS a(p, t{queue_column})
RETURNING id"""


#: ``WAKEUP=notify``: the insert as a data-modifying CTE and one ``pg_notify`` in the same statement,
#: so in the same transaction: the notification is queued at its commit, which takes the notification
#: queue's lock (https://www.postgresql.org/docs/current/sql-notify.html). The ``wake`` CTE calls a
#: volatile function, so PostgreSQL does not inline it: it runs once, whatever the join does.
_INSERT_NOTIFY = """\
WITH new AS (
{insert}),
wake AS (SELECT pg_notify({channel}, ''))
SELECT new.id FROM new, wake"""


def notify_channel(schema: str) -> str:
    """The channel producers notify and workers ``LISTEN`` on with ``WAKEUP=notify``: ``<schema>_jobs``
    (at most 62 characters: the schema has at most 57, within PostgreSQL's 63-byte names)."""
    return f"{schema}_jobs"


def insert_sql(schema: str, max_attempts: int, notify: bool = False, queues: int = 1) -> str:
    """The producers' insert: $1 priorities (smallint[]), $2 run_at (epoch seconds, float8[]), with
    ``queues`` > 1 $3 each job's queue name (text[]); returns the new rows' ids (the claim log keeps
    them: the audit's expected ids). With ``notify`` the same statement also sends one notification
    on :func:`notify_channel` (empty payload)."""
    many = queues > 1
    insert = sql.SQL(_INSERT).format(jobs=sql.Identifier(schema, "jobs"), max_attempts=sql.Literal(max_attempts),
                                     queue_column=sql.SQL(", queue" if many else ""),
                                     queue_array=sql.SQL(", $3::text[]" if many else ""))
    if notify:
        insert = sql.SQL(_INSERT_NOTIFY).format(insert=insert, channel=sql.Literal(notify_channel(schema)))
    return insert.as_string(None)


def literal_claim(schema: str, policy: str, batch: int, worker: str, lease_s: float, *,
                  queues: list[str] = ("default",), order: str = "plain") -> str:
    """The claim with its values inlined as SQL literals, as psycopg 2 sends every statement
    (client-side interpolation): sent unprepared, it is planned with these values on every
    execution. Used with ``PREPARED=0``; same columns as the prepared ``claim``. ``queues``: the
    names served (tested only when there are more than one)."""
    values = {"batch": int(batch), "worker": str(worker), "lease_s": float(lease_s), "queues": text_array(queues)}
    return _render("claim", schema, policy, lambda _i, param: sql.Literal(values[param]).as_string(None),
                   len(queues), order)


def text_array(names: list[str]) -> str:
    """A PostgreSQL text-format array literal of plain names (``{q0,q1}``; the names need no quoting)."""
    return "{" + ",".join(names) + "}"


def claim_arguments(batch: int, worker: str, lease_s: float, queues: list[str]) -> list[str]:
    """The prepared claim's arguments as SQL literals, in ``$n`` order (for ``EXECUTE claim(…)``)."""
    args = [str(int(batch)), sql.Literal(str(worker)).as_string(None), repr(float(lease_s))]
    if len(queues) > 1:
        args.append(sql.Literal(text_array(queues)).as_string(None))
    return args


def reap_sql(schema: str, limit: int = builtin_queue.REAP_LIMIT) -> sql.SQL:
    """The reaper's statement: re-queue (or dead-letter past ``max_attempts``) up to
    ``limit`` running jobs whose lease expired. Returns rows ``(id, new status)``."""
    return sql.SQL(builtin_queue.statement("reaper", schema, limit=limit)[0])
