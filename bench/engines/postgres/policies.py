"""Claim and completion SQL per claim policy (PostgreSQL).

The claim is one statement, one round trip: a ``MATERIALIZED`` CTE selects at
most ``batch`` eligible ids in claim order (priority, run_at, id) with the
policy's locking clause, and the outer ``UPDATE`` marks exactly those rows
``running`` with a lease, a fresh attempt (fencing) token and ``locked_by``.
The CTE is evaluated once, so the claim cannot take more rows than its LIMIT;
the ``UPDATE … WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`` form can
be re-run by a nested loop and over-claim (docs/design.md, field case FR-03).

Locking clauses: https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE
(``NOWAIT`` raises SQLSTATE 55P03 ``lock_not_available``; ``SKIP LOCKED`` skips
rows that cannot be locked immediately).

Row times that record a moment (``started_at``, ``lease_expires_at`` at the claim;
``finished_at`` at completion, failure and reaping; a retry's ``run_at``) use
``clock_timestamp()``, the time the statement reaches that row, not ``now()``, the
start of the transaction: under ``TXN=hold`` that is the ``BEGIN`` before the lock
wait and the job's work, and ``now()`` would make ``finished_at − started_at`` 0
and start the lease before the claim. Eligibility (``run_at <= now()``) keeps
``now()``: stable within the statement, so the index condition can use it. The
claim takes its moment once, in the ``moment`` CTE that reads ``picked`` (so after
the rows are locked): ``started_at`` and the lease's start are the same instant.
https://www.postgresql.org/docs/current/functions-datetime.html#FUNCTIONS-DATETIME-CURRENT
"""

from __future__ import annotations

from psycopg import sql

LOCKING_CLAUSE = {
    "wait": "FOR UPDATE",
    "nowait": "FOR UPDATE NOWAIT",
    "skip_locked": "FOR UPDATE SKIP LOCKED",
}

_CLAIM = """\
WITH picked AS MATERIALIZED (
    SELECT id
    FROM {jobs}
    WHERE status = 'pending' AND run_at <= now(){queue_filter}
    ORDER BY priority, run_at, id
    LIMIT {batch}
    {locking}
), moment AS MATERIALIZED (
    SELECT clock_timestamp() AS at FROM picked LIMIT 1
)
UPDATE {jobs} AS j
SET status = 'running',
    attempts = j.attempts + 1,
    attempt_token = nextval({token_seq}),
    locked_by = {worker},
    lease_expires_at = moment.at + make_interval(secs => {lease_s}),
    started_at = moment.at
FROM picked, moment
WHERE j.id = picked.id
RETURNING j.id, j.attempt_token,
          (extract(epoch FROM clock_timestamp() - j.run_at) * 1000000)::bigint AS pickup_us,
          j.attempts, extract(epoch FROM j.lease_expires_at)::float8 AS lease_until,
          extract(epoch FROM j.started_at)::float8 AS claimed_at"""

# TENANT_ORDER=round_robin: the picked CTE's body. The turn is one nextval per claim (its subquery
# holds a volatile function, so it is not pulled up, and generate_series reads it, so it is the
# outermost side of the joins: evaluated once). Tenant (turn + i) mod N is read i-th, each a LATERAL
# locking read in claim order; the outer LIMIT stops the nested loop once it has the batch, and a row
# is locked only when it is pulled through, so no row is locked that the claim does not take.
_ROUND_ROBIN_PICK = """\
    SELECT h.id
    FROM (SELECT nextval({turn_seq}) AS k) AS turn,
         generate_series(turn.k, turn.k + cardinality({queues}) - 1) AS s(i),
         LATERAL (
             SELECT id
             FROM {jobs}
             WHERE status = 'pending' AND run_at <= now()
               AND queue = ({queues})[mod(s.i, cardinality({queues}))::int + 1]
             ORDER BY priority, run_at, id
             LIMIT {batch}
             {locking}
         ) AS h
    LIMIT {batch}"""

_COMPLETE_ONE = """\
UPDATE {jobs}
SET status = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL
WHERE id = {id} AND attempt_token = {token} AND status = 'running'"""

_COMPLETE_MANY = """\
UPDATE {jobs} AS j
SET status = 'done', finished_at = clock_timestamp(), lease_expires_at = NULL
FROM unnest({ids}, {tokens}) AS c(id, token)
WHERE j.id = c.id AND j.attempt_token = c.token AND j.status = 'running'
RETURNING j.id"""


_FAIL = """\
UPDATE {jobs}
SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE clock_timestamp() + make_interval(secs => {delay_s}) END,
    finished_at = CASE WHEN attempts >= max_attempts THEN clock_timestamp() END,
    lease_expires_at = NULL, locked_by = NULL, last_error = {error}
WHERE id = {id} AND attempt_token = {token} AND status = 'running'
RETURNING status"""

# The reaper: running rows whose lease expired go back to pending (or dead past
# max_attempts), keeping their run_at: the job was due then, so it keeps its place
# in claim order and its age keeps counting. SKIP LOCKED so it never waits on a worker; the outer UPDATE
# re-checks status and lease, so a job finished meanwhile is never touched (FR-06).
_REAP = """\
WITH expired AS MATERIALIZED (
    SELECT id FROM {jobs}
    WHERE status = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} AS j
SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN clock_timestamp() END,
    lease_expires_at = NULL, locked_by = NULL, last_error = 'lease expired'
FROM expired
WHERE j.id = expired.id AND j.status = 'running' AND j.lease_expires_at < now()
RETURNING j.id, j.status"""


def _names(schema: str, table: str = "jobs", token_seq: str = "attempt_token_seq") -> dict[str, sql.Composable]:
    return {
        "jobs": sql.Identifier(schema, table),
        "token_seq": sql.Literal(f"{sql.Identifier(schema).as_string(None)}.{sql.Identifier(token_seq).as_string(None)}"),
        "turn_seq": sql.Literal(f"{sql.Identifier(schema).as_string(None)}.queue_turn_seq"),
    }


#: Each statement's template and its parameters, in ``$n`` order, with their types. With more than one
#: queue name the claim takes a fourth, the names (:func:`_statement`).
_STATEMENTS = {
    "claim": (_CLAIM, (("batch", "int"), ("worker", "text"), ("lease_s", "float8"))),
    "complete_one": (_COMPLETE_ONE, (("id", "bigint"), ("token", "bigint"))),
    "complete_many": (_COMPLETE_MANY, (("ids", "bigint[]"), ("tokens", "bigint[]"))),
    "fail": (_FAIL, (("id", "bigint"), ("token", "bigint"), ("delay_s", "float8"), ("error", "text"))),
}

#: pgbench variable for each parameter of the calibration script (``client_id`` is pgbench's own).
_PGBENCH_VARIABLES = {"batch": "batch", "worker": "client_id", "lease_s": "lease_s", "id": "id",
                      "token": "attempt_token", "ids": "ids", "tokens": "tokens"}

#: pgbench's ``\\gset`` takes one row: with batch > 1 the claim's rows are gathered into one, its
#: ids and tokens as array literals (``{1,2}``) that the completion binds as its ``bigint[]``
#: parameters, and the claimed row count beside them. ``coalesce``: an empty claim completes nothing.
_PGBENCH_GATHER = ("WITH claimed AS ({claim}) SELECT coalesce(array_agg(id), '{{}}') AS ids, "
                   "coalesce(array_agg(attempt_token), '{{}}') AS tokens, count(*) AS claimed FROM claimed")


def _statement(name: str, queues: int, order: str = "plain") -> tuple[str, tuple]:
    """Template and parameters of statement ``name``; a claim over ``queues`` > 1 names takes them as
    ``$4`` (text[]) and tests ``queue = ANY($4)`` (``order`` ``plain``), or takes tenants in rotation
    (``round_robin``: :data:`_ROUND_ROBIN_PICK` in place of the picked CTE's body)."""
    template, params = _STATEMENTS[name]
    if name == "claim":
        filter_ = "\n      AND queue = ANY({queues})" if queues > 1 else ""
        template = template.replace("{queue_filter}", filter_)
        params = params + ((("queues", "text[]"),) if queues > 1 else ())
        if queues > 1 and order == "round_robin":
            head, rest = template.split("AS MATERIALIZED (\n", 1)
            _, tail = rest.split("\n), moment AS MATERIALIZED (", 1)
            template = head + "AS MATERIALIZED (\n" + _ROUND_ROBIN_PICK + "\n), moment AS MATERIALIZED (" + tail
    return template, params


def _render(name: str, schema: str, policy: str, placeholder, queues: int = 1, order: str = "plain",
            **names: str) -> sql.Composed:
    """Statement ``name`` with each parameter rendered by ``placeholder(position, param)`` and cast."""
    template, params = _statement(name, queues, order)
    slots = {param: placeholder(i, param) + sql.SQL(f"::{cast}") for i, (param, cast) in enumerate(params, 1)}
    return sql.SQL(template).format(locking=sql.SQL(LOCKING_CLAUSE[policy]), **slots, **_names(schema, **names))


def _named(name: str, schema: str, policy: str = "skip_locked", queues: int = 1, order: str = "plain",
           **names: str) -> sql.Composed:
    return _render(name, schema, policy, lambda _i, param: sql.Placeholder(param), queues, order, **names)


def claim_sql(schema: str, policy: str, queues: int = 1, *, order: str = "plain", table: str = "jobs",
              token_seq: str = "attempt_token_seq") -> sql.Composed:
    """The claim statement for ``policy``, with named placeholders (for psycopg's ``execute``).

    Parameters: ``batch`` (int, the LIMIT), ``worker`` (str, ``locked_by``),
    ``lease_s`` (float seconds), and with ``queues`` > 1 ``queues`` (list[str], the names served,
    in ``order``: ``plain`` or ``round_robin``, see :func:`_statement`). Returns the rows described in
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


def complete_one_sql(schema: str) -> sql.Composed:
    """Completion of one job, fenced by its attempt token.

    Parameters: ``id``, ``token``. Updates 0 rows when the token moved on (stale).
    """
    return _named("complete_one", schema)


def complete_many_sql(schema: str) -> sql.Composed:
    """Completion of a batch, each row fenced by its own attempt token.

    Parameters: ``ids`` (list[int]), ``tokens`` (list[int], same length).
    Returns the ids applied; the rest were stale.
    """
    return _named("complete_many", schema)


def pgbench_script(schema: str, policy: str, lease_s: float, batch: int = 1) -> str:
    """The claim + completion of ``batch`` jobs as a pgbench custom script: one pgbench
    transaction claims up to ``batch`` jobs in one statement and completes them in a second.

    The same statements the swarm prepares (:func:`prepared_statements`), with
    pgbench variables where the swarm binds parameters: under
    ``pgbench -M prepared`` each ``:variable`` is sent as a bound parameter
    (``$n``), so the server plans and executes exactly what it does for the
    swarm, custom-versus-generic plan choice included. ``\\gset`` stores the
    claimed id and token for the completion. With ``batch`` 1 that is ``complete_one``;
    with more, the claim runs inside a CTE that gathers its rows into one (``\\gset`` takes
    one row: ``ids``, ``tokens`` as array literals and ``claimed``, the row count) and the
    completion is the swarm's ``complete_many`` on those arrays. Used by ``make calibrate``.
    Raises KeyError for an unknown policy.
    """
    def variable(_i: int, param: str) -> sql.SQL:
        return sql.SQL(f":{_PGBENCH_VARIABLES[param]}")

    one_line = lambda text: " ".join(text.split())  # noqa: E731 - pgbench wants one statement per line
    claim = one_line(_render("claim", schema, policy, variable).as_string(None))
    if batch == 1:
        complete = _render("complete_one", schema, policy, variable).as_string(None)
        return (f"\\set batch 1\n\\set lease_s {float(lease_s)!r}\n"
                f"{claim} \\gset\n{one_line(complete)};\n")
    complete = _render("complete_many", schema, policy, variable).as_string(None)
    return (f"\\set batch {int(batch)}\n\\set lease_s {float(lease_s)!r}\n"
            f"{_PGBENCH_GATHER.format(claim=claim)} \\gset\n{one_line(complete)};\n")


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
    return {name: _render(name, schema, policy, lambda i, _param: sql.SQL(f"${i}"), queues, order).as_string(None)
            for name in _STATEMENTS}


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


def literal_claim(schema: str, policy: str, batch: int, worker: str, lease_s: float,
                  queues: list[str] = ("default",), order: str = "plain") -> str:
    """The claim with its values inlined as SQL literals, as psycopg 2 sends every statement
    (client-side interpolation): sent unprepared, it is planned with these values on every
    execution. Used with ``PREPARED=0``; same columns as the prepared ``claim``. ``queues``: the
    names served (tested only when there are more than one)."""
    values = {"batch": int(batch), "worker": str(worker), "lease_s": float(lease_s), "queues": text_array(queues)}
    return _render("claim", schema, policy, lambda _i, param: sql.Literal(values[param]),
                   len(queues), order).as_string(None)


def text_array(names: list[str]) -> str:
    """A PostgreSQL text-format array literal of plain names (``{q0,q1}``; the names need no quoting)."""
    return "{" + ",".join(names) + "}"


def claim_arguments(batch: int, worker: str, lease_s: float, queues: list[str]) -> list[str]:
    """The prepared claim's arguments as SQL literals, in ``$n`` order (for ``EXECUTE claim(…)``)."""
    args = [str(int(batch)), sql.Literal(str(worker)).as_string(None), repr(float(lease_s))]
    if len(queues) > 1:
        args.append(sql.Literal(text_array(queues)).as_string(None))
    return args


def reap_sql(schema: str, limit: int = 1000) -> sql.Composed:
    """The reaper's statement: re-queue (or dead-letter past ``max_attempts``) up to
    ``limit`` running jobs whose lease expired. Returns rows ``(id, new status)``."""
    return sql.SQL(_REAP).format(limit=sql.Literal(limit), **_names(schema))
