"""The embedded server's configuration: how its data directory is created and the options it starts with.

Both commands start with ``--no-defaults``, so no option file is read (``/etc/mysql/my.cnf``,
``~/.my.cnf``): the system server's datadir, socket, port and pid file are never named, and
every path the throwaway server uses is inside its own temporary directory.

The server keeps InnoDB's durability defaults (``innodb_flush_log_at_trx_commit=1``, the
doublewrite buffer on): queue-bench measures a real queue, so commits pay for the redo log flush.
"""

from __future__ import annotations

import pathlib

from bench.engines.mariadb.embedded_binaries import ServerBinaries
from bench.engines.mariadb.embedded_user import RunAs

__all__ = ["BUFFER_POOL_SIZE", "ERROR_LOG", "MAX_CONNECTIONS_RANGE", "PID_FILE", "install_db_argv",
           "server_argv", "socket_option"]

BUFFER_POOL_SIZE = "256M"
PID_FILE = "mariadbd.pid"
"""The server's pid file, in its datadir; mariadbd writes it once its port is bound."""
ERROR_LOG = "error.log"
"""The server's error log, in its datadir."""
MAX_CONNECTIONS_RANGE = (10, 100000)
"""The ``max_connections`` MariaDB accepts (connections); it raises or lowers others into it."""

_MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def install_db_argv(bins: ServerBinaries, run_as: RunAs, data_dir: pathlib.Path) -> list[str]:
    """The install tool's command line creating the system tables in ``data_dir``: no test
    database, ``root`` with an empty password (``normal`` authentication, so it logs in over TCP),
    accounts by IP (``root@127.0.0.1``) rather than host name, ``--user`` under root."""
    return [
        str(bins.install_db), "--no-defaults",  # must come first
        f"--datadir={data_dir}", *run_as.user_options,
        "--skip-test-db", "--auth-root-authentication-method=normal", "--skip-name-resolve",
    ]


def socket_option(data_dir: pathlib.Path) -> str:
    """``--socket=`` for a Unix socket in ``data_dir``: its absolute path, or only its name when
    that path is too long for a socket (mariadbd works in its datadir, so the socket lands there)."""
    path = data_dir / "mysqld.sock"
    return f"--socket={path if len(str(path)) <= _MAX_SOCKET_PATH else path.name}"


def server_argv(bins: ServerBinaries, run_as: RunAs, data_dir: pathlib.Path, files_dir: pathlib.Path,
                port: int, max_connections: int) -> list[str]:
    """The mariadbd command line: the datadir ``data_dir`` with the socket, pid file
    (:data:`PID_FILE`) and error log (:data:`ERROR_LOG`) in it, TCP on 127.0.0.1:``port`` only,
    ``max_connections`` (within :data:`MAX_CONNECTIONS_RANGE`), :data:`BUFFER_POOL_SIZE` of buffer
    pool, no host name lookups, and file access from SQL confined to ``files_dir``
    (``secure_file_priv``)."""
    return [
        str(bins.server), "--no-defaults",  # must come first
        *run_as.user_options,
        f"--datadir={data_dir}", socket_option(data_dir), f"--pid-file={data_dir / PID_FILE}",
        f"--log-error={data_dir / ERROR_LOG}",
        f"--port={port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
        f"--max-connections={max_connections}",
        f"--innodb-buffer-pool-size={BUFFER_POOL_SIZE}",
        f"--secure-file-priv={files_dir}",
    ]
