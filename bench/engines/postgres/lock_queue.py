"""The lock queue on the queue table on PostgreSQL: the relation locks not granted, by mode
(https://www.postgresql.org/docs/current/view-pg-locks.html), the migration's own wait, and whether it holds
or asks for a mode that blocks the claims; folded by :class:`bench.engines.lock_queue.LockQueueFold`."""

from __future__ import annotations

from psycopg import sql

from bench.engines.lock_queue import LockQueueFold

#: The modes that conflict with ROW EXCLUSIVE, the lock a claim's UPDATE takes on the table ("Conflicting
#: Lock Modes", https://www.postgresql.org/docs/current/explicit-locking.html#TABLE-LOCK-COMPATIBILITY).
BLOCKS_CLAIMS = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")

_QUERY = """\
WITH l AS (
  SELECT l.pid, l.mode, l.granted, l.waitstart, a.application_name AS app
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'relation' AND l.relation = {regclass}::regclass
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND NOT starts_with(a.application_name, 'queue-bench monitor'))
SELECT (SELECT json_object_agg(mode, n) FROM (SELECT mode, count(*) AS n FROM l WHERE NOT granted GROUP BY mode) m),
       (SELECT json_agg(json_build_array(pid, waitstart)) FROM l
        WHERE NOT granted AND app ~ '^queue-bench (p[0-9]+-)?worker-[0-9]+$'),
       (SELECT extract(epoch FROM now() - min(waitstart))::float8 FROM l
        WHERE NOT granted AND app = 'queue-bench migration'),
       EXISTS (SELECT 1 FROM l WHERE app = 'queue-bench migration' AND mode = ANY(%(blocking)s))"""


class LockQueue(LockQueueFold):
    """The query over ``table`` (a :class:`psycopg.sql.Identifier`) and its parameters; ``workers_known``: False
    behind a pooler, where a backend's application name does not say which client it serves."""

    def __init__(self, table: sql.Identifier, workers_known: bool = True):
        super().__init__()
        self.workers_known = workers_known  # False behind a pooler (LockQueueFold.workers_known)
        self.query = sql.SQL(_QUERY).format(regclass=sql.Literal(table.as_string(None)))
        self.params = {"blocking": list(BLOCKS_CLAIMS)}

    def fold(self, acc: dict, row, spacing_ms: float) -> None:
        """:meth:`LockQueueFold.fold`, no mode waiting counted as 0."""
        super().fold(acc, None if row is None else (row[0] or {}, *row[1:]), spacing_ms)
