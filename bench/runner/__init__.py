"""One run: check the server, prepare the table, drive the swarm through warm-up and the measured window, audit,
and write the result files (:class:`bench.runner.run.Run`; docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bench.config.run_config import RunConfig
from bench.runner.backlog import compute_backlog
from bench.runner.run import Run

__all__ = ["Run", "compute_backlog", "run"]


def run(cfg: RunConfig, dsn: str, *, log: Callable[[str], None] = print, embedded: bool = False,
        state_schema: str | None = None, external_workers: tuple[str, int, float] | None = None,
        web_ui: tuple[str, int, int] | None = None, pooler=None, relay=None) -> Path:
    """Run one benchmark of ``cfg`` against ``dsn``; returns the run directory. ``state_schema``: restore the
    seeded history from a saved state there; ``external_workers`` (bind host, port, seconds to wait): the
    master of ``qbench worker`` processes; ``web_ui`` (host, port, max workers): Locust's web UI over the
    load; ``pooler``: the embedded pooler (its ``pid``, counted as the run's own by the busy-machine meter, and its
    console ``admin_dsn``, read each second), None without one; ``relay``: the delay relay ``dsn`` goes through
    (its ``pid`` the run's own, its CPU measured each second, its ``upstream_dsn`` the tool's own connections'),
    None without one.
    Raises ConfigError before creating anything (database unreachable, schema not the tool's, too few
    connections), the engine's ``NotCooperativeError`` (a RunFailed) for a blocking driver. A Ctrl-C during
    the load still writes the files, ``complete: false``."""
    return Run(cfg, dsn, log=log, embedded=embedded, state_schema=state_schema,
               external_workers=external_workers, web_ui=web_ui, pooler=pooler,
               relay=relay).execute()
