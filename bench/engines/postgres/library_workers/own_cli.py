"""A queue library's own command line, unmeasured, and the finish times its own tables keep: the reference
side of the overhead benchmark (:mod:`bench.cli.overhead_bench`, docs/measurements/overhead.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from psycopg import sql

from bench.engines.postgres.adapter import connect_dsn
from bench.engines.postgres.library_workers import DSN_ENV, SCHEMA_ENV, WORK_MS_ENV

#: Each library's finished jobs, one row each: its finish time (epoch s) from the library's own record of it
#: (procrastinate's ``succeeded`` event, pgqueuer's ``successful`` log row).
FINISHED_SQL = {
    "procrastinate": "SELECT extract(epoch FROM at)::float8 FROM {}.procrastinate_events WHERE type = 'succeeded'",
    "pgqueuer": "SELECT extract(epoch FROM created)::float8 FROM {}.pgqueuer_log WHERE status = 'successful'",
}


def command(package: str, workers: int, batch: int) -> list[str]:
    """The argv of ``package``'s own worker, ``workers`` of concurrency (pgqueuer: ``batch`` per dequeue), exiting
    once the queue is empty: procrastinate's console script beside this Python, pgqueuer's ``pgq run`` as
    :mod:`.standalone_pgqueuer` runs it."""
    bin_dir = Path(sys.executable).parent
    if package == "procrastinate":
        return [str(bin_dir / "procrastinate"), f"--app={__package__}.standalone_procrastinate.app", "worker",
                f"--concurrency={workers}", "--one-shot"]
    return [sys.executable, "-m", f"{__package__}.standalone_pgqueuer", str(workers), str(batch)]


def environment(dsn: str, schema: str, work_ms: float) -> dict[str, str]:
    """The variables :func:`command`'s app reads."""
    return {DSN_ENV: dsn, SCHEMA_ENV: schema, WORK_MS_ENV: repr(float(work_ms))}


def finish_times(dsn: str, schema: str, package: str) -> list[float]:
    """Every finished job's finish time in ``schema`` (epoch s, sorted), as ``package`` recorded it. Raises
    ConfigError (``DSN``) when the server cannot be reached."""
    with connect_dsn(dsn) as conn:
        rows = conn.execute(sql.SQL(FINISHED_SQL[package]).format(sql.Identifier(schema))).fetchall()
    return sorted(r[0] for r in rows)
