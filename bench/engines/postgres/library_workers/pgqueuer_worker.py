"""pgqueuer's own worker (``LIBRARY_MODE=worker``): its ``QueueManager`` over its ``AsyncpgDriver``, measured
through a wrapper of its ``Driver`` protocol (what is measured, and the parameters' mapping: docs/queues.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid

import asyncpg
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.adapters.persistence.qb import QueryQueueBuilder
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.core.qm import QueueManager
from psycopg.conninfo import conninfo_to_dict

from bench.engines.postgres.library_workers.meter import Meter
from bench.workload.jobs import duration_sampler

#: The entrypoint every job of the run belongs to (the definition's seed and enqueue write it).
ENTRYPOINT = "qbench"

logging.getLogger("pgqueuer").setLevel(logging.CRITICAL)


class TimedDriver:
    """pgqueuer's ``Driver`` protocol around ``inner``: the dequeue and the status-log flush timed into ``meter``."""

    def __init__(self, inner: AsyncpgDriver, meter: Meter, fetched: dict, dequeue_sql: str, log_sql: str):
        self.inner, self.meter, self.fetched = inner, meter, fetched
        self.dequeue_sql, self.log_sql = dequeue_sql, log_sql

    async def _counted(self, statement):
        """Await ``statement``; an error it raises is counted (then raised on, for pgqueuer to handle)."""
        try:
            return await statement
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as err:
            self.meter.error(err)
            raise

    async def fetch(self, query: str, *args):
        if query != self.dequeue_sql:
            return await self._counted(self.inner.fetch(query, *args))
        started = time.perf_counter()
        rows = await self._counted(self.inner.fetch(query, *args))
        returned = time.perf_counter()
        for row in rows:
            self.fetched[int(row["id"])] = returned
        self.meter.claimed(int((returned - started) * 1e6), [
            (int(r["id"]), r["updated"].timestamp(), r["execute_after"].timestamp()) for r in rows])
        return rows

    async def execute(self, query: str, *args):
        if query != self.log_sql:
            return await self._counted(self.inner.execute(query, *args))
        started = time.perf_counter()
        result = await self._counted(self.inner.execute(query, *args))
        done = [int(i) for i, status in zip(args[0], args[1]) if status == "successful"]
        self.meter.completed(int((time.perf_counter() - started) * 1e6), done)
        return result

    async def notify(self, channel: str, payload: str) -> None:
        await self.inner.notify(channel, payload)

    async def add_listener(self, channel: str, callback) -> None:
        await self.inner.add_listener(channel, callback)

    async def remove_listener(self, channel: str, callback) -> None:
        await self.inner.remove_listener(channel, callback)

    @property
    def shutdown(self) -> asyncio.Event:
        return self.inner.shutdown

    @property
    def tm(self):
        return self.inner.tm

    async def __aenter__(self):
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.inner.__aexit__(*exc)


async def connect(dsn: str, schema: str, name: str) -> asyncpg.Connection:
    """An asyncpg connection to ``dsn`` (URI or key=value) with ``search_path`` the tool's schema."""
    params = conninfo_to_dict(dsn)
    return await asyncpg.connect(host=params.get("host"), port=int(params.get("port") or 5432),
                                 user=params.get("user"), password=params.get("password"),
                                 database=params.get("dbname"),
                                 server_settings={"search_path": schema, "application_name": name})


class LibraryWorker:
    """pgqueuer's QueueManager (or its producers) in process ``process``: ``workers`` ``max_concurrent_tasks``."""

    def __init__(self, cfg, dsn: str, meter: Meter, process: int, workers: int):
        self.cfg, self.dsn, self.meter, self.process, self.workers = cfg, dsn, meter, process, workers
        self.fetched: dict[int, float] = {}
        self.work_s = duration_sampler(cfg)
        self.conn = self.qm = self.queries = None

    async def open(self) -> None:
        """Connect, read the database's clock once, and set up the QueueManager. Raises what asyncpg raises."""
        self.conn = await connect(self.dsn, self.cfg.schema, f"queue-bench p{self.process}-worker-1")
        before = time.time()
        server = await self.conn.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
        self.meter.set_offset(before, float(server), time.time())
        builder = QueryQueueBuilder()
        dequeue = builder.build_dequeue_query(
            batch_size=self.cfg.batch, entrypoints=[ENTRYPOINT], concurrency_limits=[0],
            queue_manager_id=uuid.uuid4(), global_concurrency_limit=self.workers, heartbeat_timeout=self._lease())
        driver = TimedDriver(AsyncpgDriver(self.conn), self.meter, self.fetched, dequeue.sql,
                             builder.build_log_job_query())
        self.queries = Queries(driver)
        self.qm = QueueManager(self.queries)
        self.qm.entrypoint(ENTRYPOINT)(self._job)

    def _lease(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.cfg.lease_s)

    async def _job(self, job) -> None:
        fetched = self.fetched.pop(int(job.id), None)
        if fetched is not None:
            self.meter.recorder.dispatch_delay(int((time.perf_counter() - fetched) * 1e6))
        started = time.perf_counter()
        await asyncio.sleep(self.work_s())
        self.meter.recorder.work_duration(int((time.perf_counter() - started) * 1e6))

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
