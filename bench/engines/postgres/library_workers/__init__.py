"""A queue library's own worker, run as its users run it (``LIBRARY_MODE=worker``), in processes of its own.

Each process is ``python -m bench.engines.postgres.library_workers <package>``, started fresh by the run
(no gevent, no Locust: the library's own asyncio event loop), with the DSN in the environment variable
:data:`DSN_ENV` (never on a command line, where ``ps`` would show a password). It talks to the run over
its standard streams, one JSON object per line:

run → process (stdin)
    first ``{"process", "role", "workers", "config", "claims_path"}`` (its number, ``worker`` or
    ``producer``, its share of ``WORKERS``, the run's configuration as
    :meth:`bench.config.run_config.RunConfig.public` gives it, the file its claim-log lines go to, each
    stamped with its time, :class:`bench.measure.claimlog.StampedLog`, as it writes them);
    then ``{"cmd": "go"}`` (start working), ``{"cmd": "rotate", "index", "start_s", "end_s"}`` (close that
    second and send it), ``{"cmd": "stop"}`` (stop as the library stops: jobs in progress finish).
process → run (stdout)
    ``{"type": "ready", "pid", "host"}`` (the library's app is open), ``{"type": "failed", "error"}``,
    ``{"type": "interval", "interval", "cpu", "workers"}`` (the second, encoded by
    :func:`bench.measure.interval_codec.encode`, its CPU in % of a core, and its workers), and once
    stopped ``{"type": "done", "tail"}``.

What is measured, and where (the library's public seams only), is each adapter's:
:mod:`.procrastinate_worker`, :mod:`.pgqueuer_worker`.
"""

from __future__ import annotations

import sys

#: The environment variable that carries the DSN to a library worker process.
DSN_ENV = "QBENCH_LIBRARY_DSN"
#: The libraries whose own worker is built here: package -> module of this package.
ADAPTERS = {"procrastinate": "procrastinate_worker", "pgqueuer": "pgqueuer_worker"}


def command(package: str) -> list[str]:
    """The argv of one library worker process for ``package`` (a key of :data:`ADAPTERS`)."""
    return [sys.executable, "-m", __name__, package]
