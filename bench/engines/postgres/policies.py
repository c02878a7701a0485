"""The built-in queue's statements (:mod:`bench.engines.postgres.builtin_queue`) with psycopg's named
placeholders, for the probes and tests; each policy's locking clause
(https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE); the producers' insert."""

from __future__ import annotations

from psycopg import sql

from bench.config.sql_text import render, replace_locking
from bench.engines.common import LOCKING_CLAUSE
from bench.engines.postgres import builtin_queue


def named_sql(name: str, schema: str, policy: str = "skip_locked", queues: int = 1, order: str = "plain",
              **names: str) -> sql.SQL:
    """Statement ``name`` (:func:`builtin_queue.statement`: its parameters; ``complete`` updates 0 rows and
    ``complete_many`` returns no id when stale) with ``policy``'s locking clause and psycopg's named
    placeholders. Raises KeyError for an unknown statement or policy."""
    text, params = builtin_queue.statement(name, schema, queues, order, **names)
    return sql.SQL(render(replace_locking(text, LOCKING_CLAUSE[policy]),
                          lambda _i, param: sql.Placeholder(param).as_string(None), params)[0])


def claim_sql(schema: str, policy: str, queues: int = 1, *, order: str = "plain", table: str = "jobs",
              token_seq: str = "attempt_token_seq") -> sql.SQL:
    """The claim for ``policy``: parameters ``batch`` (int), ``worker`` (str), ``lease_s`` (float s), with
    ``queues`` > 1 ``queues`` (list[str], served in ``order``); returns ``(id, attempt_token, pickup_us,
    attempts, lease_until, claimed_at)`` (the last two epoch s). ``table``, ``token_seq``: a probe's scratch
    table and sequence in ``schema``. Raises KeyError for an unknown policy."""
    return named_sql("claim", schema, policy, queues, order, table=table, token_seq=token_seq)


def naive_subselect_claim(claim: str) -> str:
    """FR-03's naive form of the tool's claim text ``claim`` (docs/field-cases.md): the picked CTE as an
    ``IN`` sub-select of the ``UPDATE``, the moment as ``clock_timestamp()``; same SET, RETURNING and
    parameters. For probes and tests. Raises ValueError when ``claim`` is not the claim."""
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


_INSERT = """\
INSERT INTO {jobs} (priority, run_at, max_attempts{queue_column})
SELECT p, to_timestamp(t), {max_attempts}{queue_column}
FROM unnest($1::smallint[], $2::float8[]{queue_array}) AS a(p, t{queue_column})
RETURNING id"""


#: ``WAKEUP=notify``: the insert and one ``pg_notify`` in one statement (https://www.postgresql.org/docs/current/sql-notify.html);
#: ``wake`` calls a volatile function, so it is not inlined: it runs once.
_INSERT_NOTIFY = """\
WITH new AS (
{insert}),
wake AS (SELECT pg_notify({channel}, ''))
SELECT new.id FROM new, wake"""


def notify_channel(schema: str) -> str:
    """``WAKEUP=notify``'s channel, ``<schema>_jobs`` (at most 62 characters: the schema has at most
    57, within PostgreSQL's 63-byte names)."""
    return f"{schema}_jobs"


def insert_sql(schema: str, max_attempts: int, notify: bool = False, queues: int = 1) -> str:
    """The producers' insert: $1 priorities (smallint[]), $2 run_at (epoch s, float8[]), with ``queues`` > 1
    $3 queue names (text[]); returns the new ids. ``notify``: it also notifies :func:`notify_channel`."""
    many = queues > 1
    insert = sql.SQL(_INSERT).format(jobs=sql.Identifier(schema, "jobs"), max_attempts=sql.Literal(max_attempts),
                                     queue_column=sql.SQL(", queue" if many else ""),
                                     queue_array=sql.SQL(", $3::text[]" if many else ""))
    if notify:
        insert = sql.SQL(_INSERT_NOTIFY).format(insert=insert, channel=sql.Literal(notify_channel(schema)))
    return insert.as_string(None)


def text_array(names: list[str]) -> str:
    """A PostgreSQL text-format array literal of plain names (``{q0,q1}``; the names need no quoting)."""
    return "{" + ",".join(names) + "}"
