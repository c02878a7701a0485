"""pgqueuer's own worker (``LIBRARY_MODE=worker``): its ``QueueManager`` over its ``AsyncpgDriver``, measured
through a subclass of that driver (what is measured, and the parameters' mapping: docs/queues.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid

import asyncpg
from pgqueuer.adapters.cli.cli import asyncio_run as run_event_loop  # noqa: F401 - read by __main__
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.adapters.persistence.qb import QueryQueueBuilder
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.core.qm import QueueManager
from psycopg.conninfo import conninfo_to_dict

from bench.engines.postgres.libraries.pgqueuer import ENTRYPOINT
from bench.engines.postgres.library_workers.meter import Meter

#: The errors of a statement that are counted (pgqueuer handles them).
ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

logging.getLogger("pgqueuer").setLevel(logging.CRITICAL)


class TimedDriver(AsyncpgDriver):
    """pgqueuer's asyncpg ``Driver``, timing the dequeue and the status-log flush into ``meter``."""

    def __init__(self, conn: asyncpg.Connection, meter: Meter, dequeue_sql: str, log_sql: str):
        super().__init__(conn)
        self.meter, self.dequeue_sql, self.log_sql = meter, dequeue_sql, log_sql

    async def fetch(self, query: str, *args):
        rows, started, returned = await self.meter.timed(super().fetch(query, *args), ERRORS)
        if query == self.dequeue_sql:
            self.meter.claimed(started, returned, [
                (int(r["id"]), r["updated"].timestamp(), r["execute_after"].timestamp()) for r in rows])
        return rows

    async def execute(self, query: str, *args):
        result, started, returned = await self.meter.timed(super().execute(query, *args), ERRORS)
        if query == self.log_sql:
            self.meter.completed(started, returned, [int(i) for i, status in zip(args[0], args[1])
                                                     if status == "successful"])
        return result


async def connect(dsn: str, schema: str, name: str) -> asyncpg.Connection:
    """An asyncpg connection to ``dsn`` (URI or key=value) with ``search_path`` the tool's schema."""
    params = conninfo_to_dict(dsn)
    return await asyncpg.connect(host=params.get("host"), port=int(params.get("port") or 5432), user=params.get("user"),
                                 password=params.get("password"), database=params.get("dbname"),
                                 server_settings={"search_path": schema, "application_name": name})


class LibraryWorker:
    """pgqueuer's QueueManager (or its producers) in process ``process``: ``workers`` ``max_concurrent_tasks``."""

    def __init__(self, cfg, meter: Meter, process: int, workers: int):
        self.cfg, self.meter, self.process, self.workers = cfg, meter, process, workers
        self.conn = self.qm = self.queries = None

    async def open(self) -> None:
        """Connect, read the database's clock once, and set up the QueueManager. Raises what asyncpg raises."""
        self.conn = await connect(self.cfg.dsn, self.cfg.schema, f"queue-bench p{self.process}-worker-1")
        await self.meter.read_clock(self.conn.fetchrow)
        builder = QueryQueueBuilder()
        dequeue = builder.build_dequeue_query(
            batch_size=self.cfg.batch, entrypoints=[ENTRYPOINT], concurrency_limits=[0],
            queue_manager_id=uuid.uuid4(), global_concurrency_limit=self.workers, heartbeat_timeout=self._lease())
        self.queries = Queries(TimedDriver(self.conn, self.meter, dequeue.sql, builder.build_log_job_query()))
        self.qm = QueueManager(self.queries)
        self.qm.entrypoint(ENTRYPOINT)(self._job)

    def _lease(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.cfg.lease_s)

    async def _job(self, job) -> None:
        self.meter.dispatched(int(job.id))
        await self.meter.work()

    async def work(self, stop: asyncio.Event) -> None:
        """Run the QueueManager until ``stop``, then shut it down as pgqueuer does (in-flight jobs finish)."""
        run = asyncio.create_task(self.qm.run(
            batch_size=self.cfg.batch, max_concurrent_tasks=self.workers, heartbeat_timeout=self._lease(),
            dequeue_timeout=dt.timedelta(milliseconds=self.cfg.poll_ms)))
        await asyncio.wait([run, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        self.qm.shutdown.set()
        await run

    async def enqueue(self, run_at_s: list[float]) -> list[int]:
        """Enqueue one job per ``run_at_s`` (database epoch seconds) in one statement; their ids."""
        now = self.meter.db_now()
        n = len(run_at_s)
        return [int(i) for i in await self.queries.enqueue(
            [ENTRYPOINT] * n, [None] * n, [0] * n, [dt.timedelta(seconds=t - now) for t in run_at_s])]

    async def close(self) -> None:
        """Close the connection."""
        if self.conn is not None:
            await self.conn.close()
