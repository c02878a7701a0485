"""A throwaway MariaDB server started for one run.

When the user asks for the MariaDB engine without a ``DSN``, queue-bench can start its own
MariaDB in a fresh temporary data directory, run against it over TCP on 127.0.0.1, and stop it
and delete the data directory afterwards::

    with embedded_mariadb(max_connections=workers + 10) as dsn:
        run_benchmark(dsn)     # dsn == "mysql://root@127.0.0.1:PORT/"

The binaries are the machine's: ``mariadbd`` (else ``mysqld``) and ``mariadb-install-db`` (else
``mysql_install_db``) on ``PATH``, in ``/usr/sbin`` or in ``/usr/bin``. Without them the context
manager raises :class:`~bench.errors.ConfigError` for ``ENGINE`` (exit status 2) before creating
anything.

Both commands run with ``--no-defaults``: no option file is read, so a system server's
configuration, datadir, socket, pid file and port (3306) are never named, and a running system
server is left alone. The server keeps InnoDB's durability defaults
(``innodb_flush_log_at_trx_commit=1``): queue-bench measures a real queue, so commits pay for the
redo log flush.

``mariadbd`` refuses to run as root unless told ``--user=root``; under root it runs as the
``mysql`` system user (``--user=mysql``) when that exists, so the server, whose ``root`` account
has no password, is no OS-root process; otherwise as root.

The server is stopped on normal exit, on any exception (including ``KeyboardInterrupt``), on
SIGTERM (while the context is open in the main thread and no other SIGTERM handler was
installed), by an ``atexit`` fallback,
and, when the Python process dies without any of those (SIGKILL), by a watchdog process
(:mod:`bench.engines.embedded_watchdog`) that stops the server and deletes its directory.

The parts: :mod:`~bench.engines.mariadb.embedded_binaries` (finding the binaries, and
:class:`EmbeddedError`), :mod:`~bench.engines.mariadb.embedded_user` (the user it runs as),
:mod:`~bench.engines.mariadb.embedded_config` (the install tool's and the server's options),
:mod:`~bench.engines.mariadb.embedded_server` (start and stop),
:mod:`~bench.engines.mariadb.embedded_processes` (port, logs, leftover processes). This module
holds the context manager and the signal handling that make the stop happen.
"""

from __future__ import annotations

import contextlib
import pathlib
from typing import Callable, Iterator

from bench.engines.common import serve
from bench.engines.mariadb.embedded_binaries import EmbeddedError
from bench.engines.mariadb.embedded_config import MAX_CONNECTIONS_RANGE
from bench.engines.mariadb.embedded_server import Server

__all__ = ["EmbeddedError", "embedded_mariadb"]


@contextlib.contextmanager
def embedded_mariadb(
    max_connections: int,
    *,
    base_dir: pathlib.Path | None = None,
    log: Callable[[str], None] = print,
) -> Iterator[str]:
    """Start a throwaway MariaDB server; yield its DSN; stop it and delete it on exit.

    Args:
        max_connections: the server's ``max_connections`` (connections, int >= 1). Pass the
            run's workers plus headroom (monitor, reaper, producers). MariaDB accepts 10 to
            100000; a value outside is raised or lowered to that range (with a line to ``log``).
            MariaDB admits one connection more for an account with the CONNECTION ADMIN
            privilege, such as ``root``.
        base_dir: directory to create the temporary directory in (created if missing); default:
            the system temp dir. Under root its parents must be traversable by the ``mysql`` user.
        log: receives short progress lines (one ``str`` per call, no newline).

    Yields:
        ``mysql://root@127.0.0.1:PORT/`` (``root`` with an empty password, TCP on loopback
        only). The server's datadir, Unix socket, pid file and error log (``error.log``) are in
        the temporary directory, ``innodb_buffer_pool_size=256M``,
        ``innodb_flush_log_at_trx_commit=1`` (the default), host names are not resolved, and SQL
        may read or write files only in a directory of its own (``secure_file_priv``).

    Raises:
        ConfigError: (``ENGINE``, exit status 2) no ``mariadbd``/``mysqld`` or no install tool on
            this machine; one line naming what is allowed instead. Nothing was created.
        EmbeddedError: the server binary is not MariaDB or does not run, the install tool
            failed, the server did not start or accept a connection within 60 s (message includes
            the last 20 lines of its error log), or under root the ``mysql`` user cannot reach
            ``base_dir``.
        ValueError: ``max_connections`` is not a positive int.

    On leaving the block, normally or by any exception (``KeyboardInterrupt`` included), the
    server gets SIGTERM (its normal shutdown; SIGKILL after 60 s) and the temporary directory is
    removed. An ``atexit`` hook does the same if the block is never left cleanly.
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ValueError(f"max_connections must be a positive int, got {max_connections!r}")
    low, high = MAX_CONNECTIONS_RANGE
    setting = min(max(max_connections, low), high)
    if setting != max_connections:
        log(f"max_connections {max_connections} is outside MariaDB's {low}..{high}; the server gets {setting}")
    server = Server(setting, pathlib.Path(base_dir) if base_dir is not None else None, log)
    yield from serve(server)
