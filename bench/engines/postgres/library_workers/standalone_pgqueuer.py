"""pgqueuer's own worker as its command line runs it, unmeasured (the overhead benchmark's reference,
docs/measurements/overhead.md): ``python -m bench.engines.postgres.library_workers.standalone_pgqueuer N B`` with
:data:`DSN_ENV`, :data:`SCHEMA_ENV` and :data:`WORK_MS_ENV` set runs what ``pgq run …:create
--max-concurrent-tasks=N --batch-size=B --mode=drain`` runs: its ``supervisor.run`` on its ``asyncio_run`` loop
(uvloop where installed). ``pgq run`` itself fails at 1.6.0 before it starts (its ``--log-level`` default reaches
its logger as a string: "'str' object has no attribute 'name'"). The entrypoint is the tool's, an ``async def``
that sleeps the work time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from datetime import timedelta

from pgqueuer.adapters.cli import supervisor
from pgqueuer.adapters.cli.cli import asyncio_run
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.core.qm import QueueManager
from pgqueuer.adapters.persistence.queries import Queries

from bench.engines.postgres.libraries.pgqueuer import ENTRYPOINT
from bench.engines.postgres.library_workers import DSN_ENV, SCHEMA_ENV, WORK_MS_ENV
from bench.engines.postgres.library_workers.pgqueuer_worker import connect


@contextlib.asynccontextmanager
async def create():
    """A QueueManager over one asyncpg connection, as the tool's own pgqueuer worker builds it (the factory shape
    pgqueuer's ``run`` takes: an async context manager)."""
    conn = await connect(os.environ[DSN_ENV], os.environ.get(SCHEMA_ENV, "qbench"), "pgq run")
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    work_s = float(os.environ.get(WORK_MS_ENV, "0")) / 1000.0

    @qm.entrypoint(ENTRYPOINT)
    async def job(_job) -> None:
        await asyncio.sleep(work_s)
    try:
        yield qm
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    """``argv``: ``[max_concurrent_tasks, batch_size]``; ``pgq run``'s other defaults (30 s dequeue and heartbeat
    timeouts), in drain mode: returns once the queue is empty."""
    asyncio_run(supervisor.run(
        create, dequeue_timeout=timedelta(seconds=30.0), batch_size=int(argv[1]), restart_delay=timedelta(seconds=5.0),
        restart_on_failure=False, mode=QueueExecutionMode.drain, max_concurrent_tasks=int(argv[0]),
        shutdown_on_listener_failure=False, heartbeat_timeout=timedelta(seconds=30.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
