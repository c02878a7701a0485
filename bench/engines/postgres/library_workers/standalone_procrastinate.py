"""procrastinate's app for its own command line, unmeasured (the overhead benchmark's reference,
docs/measurements/overhead.md): ``procrastinate --app=bench.engines.postgres.library_workers.standalone_procrastinate.app
worker --concurrency=N --one-shot`` with :data:`DSN_ENV`, :data:`SCHEMA_ENV` and :data:`WORK_MS_ENV` set.
Its task is the tool's: ``qbench.job``, an ``async def`` that sleeps the work time."""

from __future__ import annotations

import asyncio
import os

import procrastinate

from bench.engines.postgres.library_workers import DSN_ENV, SCHEMA_ENV, WORK_MS_ENV
from bench.engines.postgres.library_workers.procrastinate_worker import TASK_NAME

app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=os.environ.get(DSN_ENV, ""),
    kwargs={"options": f"-c search_path={os.environ.get(SCHEMA_ENV, 'qbench')}"}))


@app.task(name=TASK_NAME)
async def job() -> None:
    """Sleep the work time, as the tool's own worker's task does."""
    await asyncio.sleep(float(os.environ.get(WORK_MS_ENV, "0")) / 1000.0)
