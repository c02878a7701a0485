"""pgqueuer 1.6 (https://github.com/janbjorge/pgqueuer): its schema, dequeue, completion and enqueue SQL as
its query builders (``pgqueuer.adapters.persistence.qb``) write them, its ``$n`` arguments bound to the
definition's parameters (how: docs/queues.md)."""

from __future__ import annotations

import datetime
import re
import uuid

from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment, QueryQueueBuilder
from pgqueuer.domain.settings import DBSettings

from bench.config.queue_definition import QueueDefinition
from bench.errors import ConfigError

#: The entrypoint every job of the run belongs to.
ENTRYPOINT = "qbench"


def _settings(defn: QueueDefinition) -> DBSettings:
    """pgqueuer's settings; ConfigError (``QUEUE``) unless its queue table is the definition's, unqualified."""
    settings = DBSettings()
    if settings.db_schema or settings.queue_table != defn.table:
        raise ConfigError("QUEUE", f"pgqueuer's queue table is {settings.queue_table!r} in schema "
                                   f"{settings.db_schema!r} (PGQUEUER_* environment variables), the definition's "
                                   f"{defn.table!r} in the tool's schema; allowed: unset the PGQUEUER_* variables")
    return settings


def _bind(sql: str, args: tuple, values: list[tuple[object, str]]) -> str:
    """``sql`` with each ``$n`` replaced by the text paired with the sentinel equal (not identical: the builder
    may copy) to ``args[n-1]``. Raises ConfigError (``QUEUE``) for an argument no sentinel matches."""
    def text_of(n: int) -> str:
        for sentinel, text in values:
            if type(args[n - 1]) is type(sentinel) and args[n - 1] == sentinel:
                return text
        raise ConfigError("QUEUE", f"pgqueuer's dequeue takes an argument ${n} = {args[n - 1]!r} that this adapter "
                                   "does not know; allowed: pgqueuer 1.6.0")
    return re.sub(r"\$(\d+)\b", lambda m: text_of(int(m.group(1))), sql)


def generated(defn: QueueDefinition) -> dict[str, str]:
    """``ddl``, ``claim``, ``complete`` and ``enqueue`` as pgqueuer writes them."""
    settings = _settings(defn)
    env, builder = QueryBuilderEnvironment(settings), QueryQueueBuilder(settings)
    batch, entrypoints, manager, heartbeat = 7919, [ENTRYPOINT], uuid.uuid4(), datetime.timedelta(seconds=4321)
    dequeue = builder.build_dequeue_query(batch_size=batch, entrypoints=entrypoints, concurrency_limits=[0],
                                          queue_manager_id=manager, global_concurrency_limit=None,
                                          heartbeat_timeout=heartbeat)
    claim = _bind(dequeue.sql, dequeue.args, [
        (batch, ":batch"), (entrypoints, f"ARRAY['{ENTRYPOINT}']"), (manager, "md5(:worker::text)::uuid"),
        (heartbeat, "make_interval(secs => :lease_s::float8)")])
    complete = re.sub(r"\$(\d+)\b", lambda m: {"1": "ARRAY[:id::bigint]", "2": "ARRAY['successful']",
                                                "3": "ARRAY[NULL]"}[m.group(1)], builder.build_log_job_query())
    enqueue = re.sub(r"\$(\d+)\b", lambda m: {
        "1": "ARRAY[-(:priority::int)]", "2": f"ARRAY['{ENTRYPOINT}']", "3": "ARRAY[NULL]",
        "4": "ARRAY[greatest(to_timestamp(:run_at::float8) - now(), interval '0')]", "5": "ARRAY[NULL]",
        "6": "ARRAY[NULL]"}[m.group(1)], builder.build_enqueue_query())
    return {"ddl": env.build_install_query(create_schema=False), "claim": claim.strip().rstrip(";"),
            "complete": complete, "enqueue": enqueue}
