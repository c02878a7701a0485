"""A queue definition's statements as PostgreSQL runs them (:mod:`bench.config.queue_definition`):
``:name`` parameters as ``$n`` or SQL literals, and the claim inside the wrapper that reads the six
columns of :data:`bench.engines.base.ClaimedRow` from the rows it returns (docs/queues.md,
https://www.postgresql.org/docs/current/queries-with.html#QUERIES-WITH-MODIFYING)."""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition
from bench.config.sql_text import render, replace_locking, skip_quoted
from bench.engines.common import LOCKING_CLAUSE

#: The wrapper's CTE name (pg_stat_statements finds the claim by it).
CLAIMED_CTE = "qbench_claimed"

_WRAPPER = """\
WITH {ctes}{cte} AS (
{claim}
)
SELECT ({id})::bigint, {token}, {pickup}, {attempts}, {lease}, extract(epoch FROM clock_timestamp())::float8
FROM {cte}
WHERE ({id}) IS NOT NULL"""


def _strip(text: str) -> str:
    """A statement without the blank lines and ``;`` around it (it is wrapped or prepared alone)."""
    return text.strip().rstrip(";").strip()


def positional(text: str, order: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """``text`` with ``$n`` for each ``:name`` and the names in ``$n`` order (``order``'s first, then by
    first use: :attr:`QueueDefinition.parameter_order`)."""
    return render(_strip(text), lambda i, _name: f"${i}", order)


def literal(text: str, values: dict) -> str:
    """``text`` with each ``:name`` replaced by ``values[name]`` as an SQL literal. Raises KeyError
    for a name ``values`` lacks."""
    return render(text, lambda _i, name: sql.Literal(values[name]).as_string(None))[0]


def claim_body(defn: QueueDefinition, policy: str) -> str:
    """The user's claim with ``{locking}`` replaced by ``policy``'s locking clause (when it has one)."""
    text = _strip(defn.statements["claim"])
    if defn.locking:  # the placeholder in the SQL itself (one in a comment or a string is left alone)
        text = replace_locking(text, LOCKING_CLAUSE[policy])
    return text


def wrapped_claim(defn: QueueDefinition, body: str, returned: list[str]) -> str:
    """``body`` (the claim, with parameters already rendered) inside the wrapper; ``returned``: the
    column names the claim itself returns (whether it returns ``eligible_at`` decides pickup)."""
    cols = defn.columns
    ident = lambda name: sql.Identifier(name).as_string(None)  # noqa: E731
    ctes, body = split_with(body)
    return _WRAPPER.format(
        ctes=ctes, cte=CLAIMED_CTE, claim=body, id=ident(cols["id"]),
        token=f"({ident(cols['token'])})::bigint" if "token" in cols else "NULL::bigint",
        pickup=(f"(extract(epoch FROM clock_timestamp() - {ident(cols['eligible_at'])}) * 1000000)::bigint"
                if cols["eligible_at"] in returned else "NULL::bigint"),
        attempts=f"({ident(cols['attempts'])})::int" if "attempts" in cols else "1",
        lease=(f"extract(epoch FROM {ident(cols['lease'])})::float8" if "lease" in cols
               else "'Infinity'::float8"))


def split_with(text: str) -> tuple[str, str]:
    """``(ctes, main)`` of a statement that starts with ``WITH``: its CTE list without the ``WITH``
    (``RECURSIVE`` kept, a comma after the last CTE) and its main statement; ``("", text)`` otherwise."""
    m = re.match(r"\s*WITH\s+(RECURSIVE\s+)?", text, re.IGNORECASE)
    if m is None:
        return "", text
    i, n = m.end(), len(text)
    body_opener = re.compile(r"\b(AS|MATERIALIZED)\s*$", re.IGNORECASE)
    while True:
        depth, start, body_done = 0, i, False
        while i < n and not body_done:  # to the end of this CTE's body: the group after AS [MATERIALIZED]
            after = skip_quoted(text, i)
            if after is not None:
                i = after
                continue
            if text[i] == "(":
                if depth == 0:
                    opened = i
                depth += 1
            elif text[i] == ")":
                depth -= 1
                if depth == 0:  # a column list closes here too: the body is the group after AS
                    body_done = bool(body_opener.search(text[start:opened]))
            i += 1
        if not body_done:
            return "", text  # not a CTE list this scan understands: wrap it whole
        rest = text[i:].lstrip()
        if rest.startswith(","):
            i = n - len(rest) + 1
            continue
        return (m.group(1) or "") + text[m.end():n - len(rest)].strip() + ",\n", rest


def claim_values(batch: int, worker: str, lease_s: float) -> dict:
    """The claim's parameter values by name (``worker_id`` is added by the session that registered)."""
    return {"batch": int(batch), "worker": str(worker), "lease_s": float(lease_s), "worker_id": 0}


def register(conn: psycopg.Connection, defn: QueueDefinition) -> int:
    """The definition's register statement run on ``conn`` (its worker id), or 0 without one. Raises
    psycopg.Error."""
    if "register" not in defn.statements:
        return 0
    return int(conn.execute(literal(defn.statements["register"], {})).fetchone()[0])


def eligible_at(defn: QueueDefinition) -> sql.Composable:
    """The definition's ``eligible_at``: a quoted column when it is a plain name, else its SQL expression."""
    text = defn.columns["eligible_at"]
    return sql.Identifier(text) if text.isidentifier() else sql.SQL(text)


def text_param(value) -> bytes:
    """One parameter in PostgreSQL's text format: lists as array literals of integers."""
    if isinstance(value, (list, tuple)):
        return ("{" + ",".join(str(int(v)) for v in value) + "}").encode()
    return (repr(value) if isinstance(value, float) else str(value)).encode()


#: Integer types an id column may have (``pg_type.typname``).
INTEGER_TYPES = ("int2", "int4", "int8")


def describe_claim(conn: psycopg.Connection, body: str) -> dict[str, str]:
    """``{column name: type name}`` of what ``body`` returns, in order (:func:`describe_columns`). Raises
    psycopg.Error."""
    names = describe_columns(conn, body)
    described = conn.pgconn.describe_prepared(b"")
    oids = [described.ftype(i) for i in range(described.nfields)]
    types = dict(conn.execute("SELECT oid::int, typname::text FROM pg_type WHERE oid = ANY(%s)", (oids,)).fetchall())
    return {name: types.get(oid, str(oid)) for name, oid in zip(names, oids)}


def describe_columns(conn: psycopg.Connection, body: str) -> list[str]:
    """The column names ``body`` (``$n`` parameters) returns, described as the unnamed prepared statement
    (nothing executed) under ``conn``'s ``search_path``. Raises psycopg.Error (the database's message)."""
    result = conn.pgconn.prepare(b"", body.encode())
    if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    described = conn.pgconn.describe_prepared(b"")
    return [described.fname(i).decode() for i in range(described.nfields)]
