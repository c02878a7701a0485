"""The built-in PostgreSQL queue (``QUEUE=builtin``) as a queue definition generated from the run's
parameters, and its SQL, once: table, index variants, claim, completion, failure, reaper (docs/queues.md;
the claim's shape: docs/design.md, FR-03; its row times, ``clock_timestamp()``:
https://www.postgresql.org/docs/current/functions-datetime.html#FUNCTIONS-DATETIME-CURRENT)."""

from __future__ import annotations

from psycopg import sql

from bench.config.choices import EFFECTS_WRITTEN
from bench.config.parameters import BY_KEY
from bench.config.queue_definition import BUILTIN, QueueDefinition
from bench.config.sql_text import LOCKING_PLACEHOLDER
from bench.data import SCHEMAS_DIR
from bench.workload.queues import queue_count

SCHEMA_DIR = SCHEMAS_DIR / "postgres"

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

# TENANT_ORDER=round_robin: the picked CTE's body (docs/design.md, "Claim protocol").
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

# The reaper: expired leases back to pending (or dead), run_at kept; the outer UPDATE re-checks (FR-06).
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

# EFFECTS: the effect row written during the work (outside, idempotent), and same_txn's completion, which
# writes it in the same statement for the rows whose token still matches (docs/effects.md).
_EFFECT = "INSERT INTO {effects} (logical_id, attempt_token) VALUES ({id}, {token})"
_EFFECT_ONCE = _EFFECT + " ON CONFLICT (logical_id) DO NOTHING"
_WITH_EFFECT = """\
WITH completed AS (
{complete}
RETURNING {id_column}, attempt_token
)
INSERT INTO {effects} (logical_id, attempt_token) SELECT id, attempt_token FROM completed
RETURNING logical_id"""
#: EFFECTS -> the statement written during the work (None: none, or written with the completion).
EFFECT_DURING_WORK = {"none": None, "outside": _EFFECT, "same_txn": None, "idempotent": _EFFECT_ONCE}

#: Each statement's template and its parameters with their types, in ``$n`` order (the claim over several queue
#: names takes a fourth: :func:`statement`); keys are the definition's statement names.
STATEMENTS = {
    "claim": (_CLAIM, (("batch", "int"), ("worker", "text"), ("lease_s", "float8"))),
    "complete": (_COMPLETE_ONE, (("id", "bigint"), ("token", "bigint"))),
    "complete_many": (_COMPLETE_MANY, (("ids", "bigint[]"), ("tokens", "bigint[]"))),
    "fail": (_FAIL, (("id", "bigint"), ("token", "bigint"), ("delay_s", "float8"), ("error", "text"))),
    "reaper": (_REAP, ()),
}
#: The reaper's LIMIT: rows re-queued per pass.
REAP_LIMIT = 1000

#: ``[columns]`` and ``[predicates]`` of the built-in queue (what the monitor and the audit read).
COLUMNS = {"id": "id", "token": "attempt_token", "attempts": "attempts", "lease": "lease_expires_at",
           "eligible_at": "run_at"}
PREDICATES = {"eligible": "status = 'pending' AND run_at <= now()", "running": "status = 'running'",
              "done": "status = 'done'"}


def _names(schema: str, table: str = "jobs", token_seq: str = "attempt_token_seq") -> dict[str, str]:
    """The queue's object names in ``schema``, quoted: the table, and the token and turn sequences as
    the text literals ``nextval`` takes."""
    ident = lambda *parts: sql.Identifier(*parts).as_string(None)  # noqa: E731
    seq = lambda name: sql.Literal(f"{ident(schema)}.{name}").as_string(None)  # noqa: E731
    return {"jobs": ident(schema, table), "token_seq": seq(ident(token_seq)), "turn_seq": seq("queue_turn_seq"),
            "effects": ident(schema, "effects")}


def statement(name: str, schema: str, queues: int = 1, order: str = "plain", *, table: str = "jobs",
              token_seq: str = "attempt_token_seq", limit: int = REAP_LIMIT,
              effects: str = "none") -> tuple[str, tuple[str, ...]]:
    """``(text, parameter names in $n order)`` of statement ``name`` (a key of :data:`STATEMENTS`) in
    ``schema``: parameters ``:name::type``, the claim's locking clause ``{locking}``; with ``queues`` > 1
    the claim takes ``queues`` (text[]) fourth, in ``order`` (``plain``, ``round_robin``). ``table``,
    ``token_seq``: a probe's scratch table; ``limit``: the reaper's; ``effects``: ``same_txn`` writes the effect
    row in the completions (``RETURNING logical_id``). Raises KeyError for an unknown name."""
    template, params = STATEMENTS[name]
    if name == "claim":
        filter_ = "\n      AND queue = ANY({queues})" if queues > 1 else ""
        template = template.replace("{queue_filter}", filter_)
        params = params + ((("queues", "text[]"),) if queues > 1 else ())
        if queues > 1 and order == "round_robin":
            head, rest = template.split("AS MATERIALIZED (\n", 1)
            _, tail = rest.split("\n), moment AS MATERIALIZED (", 1)
            template = head + "AS MATERIALIZED (\n" + _ROUND_ROBIN_PICK + "\n), moment AS MATERIALIZED (" + tail
    if effects == "same_txn" and name in ("complete", "complete_many"):
        body = template.removesuffix("\nRETURNING j.id")
        template = _WITH_EFFECT.replace("{complete}", body).replace("{id_column}", "j.id" if " AS j" in body else "id")
    slots = {param: f":{param}::{cast}" for param, cast in params}
    text = template.format(locking=LOCKING_PLACEHOLDER, limit=int(limit), **slots,
                           **_names(schema, table, token_seq))
    return text, tuple(param for param, _ in params)


def effect_statement(cfg) -> tuple[str, tuple[str, ...]] | None:
    """``(text, ("id", "token"))`` of the effect row written during the work under ``cfg.effects``, or None."""
    template = EFFECT_DURING_WORK.get(cfg.effects)
    if template is None:
        return None
    return template.format(effects=_names(cfg.schema)["effects"], id=":id::bigint", token=":token::bigint"), ("id", "token")


def schema_ddl(name: str, schema: str, **extra: str) -> str:
    """DDL file ``name`` of ``schemas/postgres/`` with ``{schema}`` bound to the quoted schema
    (``{{``/``}}`` escape braces) and each ``extra`` text put in place."""
    return sql.SQL((SCHEMA_DIR / name).read_text()).format(
        schema=sql.Identifier(schema), **{k: sql.SQL(v) for k, v in extra.items()}).as_string(None)


def table_ddl(cfg) -> str:
    """The queue table's DDL in ``cfg.schema`` and ``cfg.layout`` (``table.sql`` and ``layout_<layout>.sql``), the
    table claims update (``jobs``, or ``jobs_live`` when partitioned) ``WITH (fillfactor = cfg.fillfactor)`` when
    below 100, PostgreSQL's default for a table; with ``EFFECTS`` the ``effects`` table (``effects.sql``)."""
    partitioned = cfg.layout == "partitioned"
    storage = f" WITH (fillfactor = {int(cfg.fillfactor)})" if cfg.fillfactor != 100 else ""
    return (schema_ddl("table.sql", cfg.schema, partitioning="PARTITION BY LIST (status)" if partitioned else "",
                       storage="" if partitioned else storage)
            + schema_ddl(f"layout_{cfg.layout}.sql", cfg.schema, storage=storage) + effects_ddl(cfg))


def effects_ddl(cfg) -> str:
    """``effects.sql`` in ``cfg.schema`` under ``cfg.effects`` (with ``UNIQUE (logical_id)`` for idempotent);
    "" without effects."""
    if cfg.effects not in EFFECTS_WRITTEN:
        return ""
    return schema_ddl("effects.sql", cfg.schema, unique=",\n    UNIQUE (logical_id)" if cfg.effects == "idempotent"
                      else "")


def definition(cfg) -> QueueDefinition:
    """The built-in queue of RunConfig ``cfg`` as a :class:`QueueDefinition`: the table in ``cfg.layout``,
    every ``INDEX`` variant, :data:`STATEMENTS` for its queue names and tenant order (``{locking}`` left)."""
    schema, queues = cfg.schema, queue_count(cfg)
    order = cfg.tenant_order if cfg.tenants > 1 else "plain"
    indexes = {path.stem.removeprefix("index_"): schema_ddl(path.name, schema)
               for path in sorted(SCHEMA_DIR.glob("index_*.sql"))}
    generated = {name: statement(name, schema, queues, order, effects=cfg.effects) for name in STATEMENTS}
    return QueueDefinition(name=BUILTIN, path=SCHEMA_DIR / "table.sql",
                           description="queue-bench's own queue, generated from the run's parameters",
                           table="jobs", ddl=table_ddl(cfg), indexes=indexes, default_index=BY_KEY["index"].default,
                           columns=dict(COLUMNS), predicates=dict(PREDICATES),
                           statements={name: text for name, (text, _) in generated.items()}, defaults={},
                           claim_row=True, parameter_order={name: params for name, (_, params) in generated.items()})
