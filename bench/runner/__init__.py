"""One run: check the server, prepare the table, drive the swarm through warm-up and
the measured window, sample the database, audit, and write the result files.

The run is an object (:class:`bench.runner.run.Run`) that holds its state; :func:`run` is the
entry point the commands, sweeps, plans and experiments call. Its parts: ``backlog`` (the rows
seeded), ``tally`` (what each second counted), ``interrupts`` (Ctrl-C during and after the load),
``audit`` (the end-of-run reads, or what is left when the database went away) and ``info``
(``run.json``).

The process must be monkey-patched for gevent before psycopg is imported (:mod:`bench.gevent_patch`,
at the command's entry point); :func:`run` re-checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bench.config.run_config import RunConfig
from bench.runner.backlog import compute_backlog
from bench.runner.run import Run

__all__ = ["Run", "compute_backlog", "run"]


def run(cfg: RunConfig, dsn: str, *, log: Callable[[str], None] = print, embedded: bool = False,
        state_schema: str | None = None, external_workers: tuple[str, int, float] | None = None,
        web_ui: tuple[str, int, int] | None = None) -> Path:
    """Run one benchmark against ``dsn`` and return the run directory.

    Raises :class:`bench.config.run_config.ConfigError` before creating anything when the
    database is unreachable, the schema is not the tool's, or the server lacks
    connections; the engine's ``NotCooperativeError`` (a RunFailed) if its driver would block.
    A Ctrl-C during the load stops it, and the files are still written with
    ``complete: false``; one after the load waits until they are written. With ``state_schema`` the seeded history is restored from
    a saved state there (see :func:`bench.engines.postgres.db.ensure_history_state`). With
    ``external_workers`` (bind host, port, seconds to wait for them) this process is the master of ``cfg.processes`` worker
    processes started elsewhere (``qbench worker``) instead of starting them itself. With ``web_ui``
    (host, port, max workers) Locust's web UI runs over the load (:class:`bench.load.web_ui.WebUI`):
    its Stop ends the measured window as a complete run, and the database is checked for the
    connections of max workers.
    """
    return Run(cfg, dsn, log=log, embedded=embedded, state_schema=state_schema,
               external_workers=external_workers, web_ui=web_ui).execute()
