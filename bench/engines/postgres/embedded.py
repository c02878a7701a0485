"""The default database: a throwaway PostgreSQL server started for one run.

When the user gives no ``DSN``/``DATABASE_URL``, queue-bench starts its own
PostgreSQL in a fresh temporary data directory, runs against it over TCP on
127.0.0.1, and stops it and deletes the data directory afterwards::

    with embedded_postgres(max_connections=workers + 10) as dsn:
        run_benchmark(dsn)     # dsn == "postgresql://postgres@127.0.0.1:PORT/postgres"

Server binaries (``initdb``, ``pg_ctl``, ``postgres``) are taken from the
machine first (``pg_config --bindir``, then the highest
``/usr/lib/postgresql/*/bin``, then ``PATH``) and otherwise from the
``pgserver`` wheel, which bundles a PostgreSQL build.

The server keeps PostgreSQL's durability defaults (``fsync=on``,
``synchronous_commit=on``): queue-bench measures a real queue, so commits pay
for the WAL flush.  Only ``initdb`` runs with ``--no-sync`` (it writes the
empty cluster; nothing there needs to survive a crash).

``initdb`` refuses to run as root, so under root the server runs as the
``postgres`` system user if it exists, otherwise as a ``qbench`` system user
created on first use.

The server is stopped on normal exit, on any exception (including
``KeyboardInterrupt``), on SIGTERM (while the context is open in the main
thread and no other SIGTERM handler was installed), by an ``atexit`` fallback,
and, when the Python process dies without any of those (SIGKILL), by a watchdog process
(:mod:`bench.engines.embedded_watchdog`) that stops the server and deletes its directory.

The parts: :mod:`~bench.engines.postgres.embedded_binaries` (finding the binaries, and
:class:`EmbeddedError`), :mod:`~bench.engines.postgres.embedded_user` (the user it runs as),
:mod:`~bench.engines.postgres.embedded_config` (initdb's options and the server's settings),
:mod:`~bench.engines.postgres.embedded_server` (start and stop),
:mod:`~bench.engines.postgres.embedded_processes` (port, log, leftover processes). This module
holds the context manager and the signal handling that make the stop happen.
"""

from __future__ import annotations

import contextlib
import pathlib
from typing import Callable, Iterator

from bench.engines.common import serve
from bench.engines.postgres.embedded_binaries import EmbeddedError
from bench.engines.postgres.embedded_server import Server

__all__ = ["EmbeddedError", "embedded_postgres"]


@contextlib.contextmanager
def embedded_postgres(
    max_connections: int,
    *,
    base_dir: pathlib.Path | None = None,
    log: Callable[[str], None] = print,
) -> Iterator[str]:
    """Start a throwaway PostgreSQL server; yield its DSN; stop it and delete it on exit.

    Args:
        max_connections: the server's ``max_connections`` (connections, int >= 1).
            Pass the run's workers plus headroom (monitor, reaper, producers, and
            PostgreSQL's own 3 ``superuser_reserved_connections``).
        base_dir: directory to create the temporary cluster directory in
            (created if missing); default: the system temp dir.  Under root its
            parents must be traversable by the ``postgres``/``qbench`` user.
        log: receives short progress lines (one ``str`` per call, no newline).

    Yields:
        ``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust auth, TCP on
        loopback only).  The server listens on 127.0.0.1:PORT, its Unix socket
        lives in the data directory, ``shared_buffers=256MB``, and fsync /
        synchronous_commit are at their defaults (on).

    Raises:
        EmbeddedError: no binaries (message says to pass DSN=), initdb failed,
            the server did not start or accept a connection within 60 s
            (message includes the last 20 lines of the server log), or running
            as root without a usable unprivileged user.
        ValueError: ``max_connections`` is not a positive int.

    On leaving the block, normally or by any exception (``KeyboardInterrupt``
    included), the server gets ``pg_ctl stop -m fast -w`` (escalating to
    immediate shutdown, then SIGKILL) and the temporary directory is removed.
    An ``atexit`` hook does the same if the block is never left cleanly.
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ValueError(f"max_connections must be a positive int, got {max_connections!r}")
    server = Server(max_connections, pathlib.Path(base_dir) if base_dir is not None else None, log)
    yield from serve(server)
