"""procrastinate's own worker (``LIBRARY_MODE=worker``): ``App.run_worker_async`` as its docs run it, measured
at its public seams (its connector, a worker middleware), stalled jobs retried by its documented recipe (what
is measured, and the parameters' mapping: docs/queues.md)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging

import procrastinate
from procrastinate import sql as procrastinate_sql

from bench.engines.postgres.library_workers.meter import Meter

#: The task every job of the run belongs to (the definition's seed and enqueue write it).
TASK_NAME = "qbench.job"
#: procrastinate's own heartbeat interval (``update_heartbeat_interval``'s default, s).
HEARTBEAT_DEFAULT_S = 10.0
#: The errors of a statement that are counted (procrastinate handles them).
ERRORS = (procrastinate.exceptions.ConnectorException,)

logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # its per-job INFO lines would cost the loop


class TimedConnector(procrastinate.PsycopgConnector):
    """procrastinate's psycopg connector, timing ``fetch_job`` and ``finish_job`` into ``meter``."""

    def __init__(self, meter: Meter, **kwargs):
        super().__init__(**kwargs)
        self.meter = meter

    async def execute_query_one_async(self, query, **arguments):
        row, started, returned = await self.meter.timed(super().execute_query_one_async(query, **arguments), ERRORS)
        if query is procrastinate_sql.queries["fetch_job"]:
            at = self.meter.db_now() - (returned - started) / 2  # the fetch's midpoint: when the server ran it
            self.meter.claimed(started, returned, [] if row["id"] is None else [
                (int(row["id"]), at, row["scheduled_at"] and row["scheduled_at"].timestamp())])
        return row

    async def execute_query_async(self, query, **arguments):
        _, started, returned = await self.meter.timed(super().execute_query_async(query, **arguments), ERRORS)
        if query is procrastinate_sql.queries["finish_job"]:
            self.meter.completed(started, returned, [int(arguments["job_id"])]
                                 if arguments.get("status") == "succeeded" else [])


class LibraryWorker:
    """procrastinate's worker (or its producers) in process ``process``: ``workers`` of concurrency."""

    def __init__(self, cfg, meter: Meter, process: int, workers: int):
        self.cfg, self.meter, self.process, self.workers = cfg, meter, process, workers
        self.app = procrastinate.App(connector=TimedConnector(meter, conninfo=cfg.dsn, kwargs={
            "options": f"-c search_path={cfg.schema}", "application_name": f"queue-bench p{process}-worker-1"}))
        self.task = self.app.task(name=TASK_NAME)(meter.work)

    async def _started(self, call_next, context, worker):
        self.meter.dispatched(context.job.id)
        return await call_next()

    async def open(self) -> None:
        """Open the app's pool and read the database's clock once. Raises what procrastinate raises."""
        await self.app.open_async()
        await self.meter.read_clock(self.app.connector.execute_query_one_async)

    async def work(self, stop: asyncio.Event) -> None:
        """Run procrastinate's worker until ``stop``; then stop it as a signal would (jobs in progress finish)."""
        cfg = self.cfg
        worker = asyncio.create_task(self.app.run_worker_async(
            concurrency=self.workers, name=f"qbench-p{self.process}", install_signal_handlers=False,
            listen_notify=cfg.wakeup == "notify", fetch_job_polling_interval=cfg.poll_ms / 1000.0,
            stalled_worker_timeout=cfg.lease_s, update_heartbeat_interval=min(HEARTBEAT_DEFAULT_S, cfg.lease_s / 3),
            worker_middleware=[self._started]))
        retrier = asyncio.create_task(self._retry_stalled(stop))
        await stop.wait()
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
        await retrier

    async def _retry_stalled(self, stop: asyncio.Event) -> None:
        """Every ``LEASE_S``, procrastinate's stalled jobs retried with its own calls (one another process
        retried first is left to it)."""
        manager = self.app.job_manager
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.cfg.lease_s)
            if stop.is_set():
                return
            for job in await manager.get_stalled_jobs(seconds_since_heartbeat=self.cfg.lease_s):
                with contextlib.suppress(*ERRORS):
                    await manager.retry_job(job)
                    self.meter.recorder.count("stalled_retried")

    async def enqueue(self, run_at_s: list[float]) -> list[int]:
        """Defer one job per ``run_at_s`` (database epoch seconds) in one statement; their ids."""
        jobs = [self.task.configure(schedule_at=dt.datetime.fromtimestamp(t, dt.timezone.utc)).job for t in run_at_s]
        return [int(job.id) for job in await self.app.job_manager.batch_defer_jobs_async(jobs)]

    async def close(self) -> None:
        """Close the app's pool."""
        await self.app.close_async()
