"""The embedded server's configuration: how its cluster is created and the settings it starts with.

The server keeps PostgreSQL's durability defaults (``fsync=on``, ``synchronous_commit=on``):
queue-bench measures a real queue, so commits pay for the WAL flush. Only ``initdb`` runs with
``--no-sync`` (it writes the empty cluster; nothing there needs to survive a crash).
"""

from __future__ import annotations

import pathlib
import shlex

from bench.engines.postgres.embedded_binaries import ServerBinaries

__all__ = ["AUTOVACUUM_NAPTIME", "SHARED_BUFFERS", "has_pg_stat_statements", "initdb_argv", "server_options"]

SHARED_BUFFERS = "256MB"
#: https://www.postgresql.org/docs/current/runtime-config-autovacuum.html#GUC-AUTOVACUUM-NAPTIME
AUTOVACUUM_NAPTIME = "1s"
_MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def initdb_argv(bins: ServerBinaries, data_dir: pathlib.Path) -> list[str]:
    """The ``initdb`` command line creating the cluster in ``data_dir``: trust authentication,
    superuser ``postgres``, UTF8 with the C locale, no sync."""
    return [
        bins.initdb, "-D", str(data_dir),
        "--auth=trust", "-U", "postgres", "--encoding=UTF8",
        "--locale=C",  # independent of whatever LANG the caller has (possibly not installed)
        "--no-sync",   # speeds up initdb only; the running server keeps fsync on
    ]


def server_options(bins: ServerBinaries, data_dir: pathlib.Path, port: int, max_connections: int) -> str:
    """The value of ``pg_ctl start -o``: one ``-c name=value`` per setting, each quoted for /bin/sh.

    The server listens on 127.0.0.1:``port`` only, with its Unix socket in ``data_dir`` (none when
    that path is too long for a socket), ``max_connections``, ``shared_buffers`` =
    :data:`SHARED_BUFFERS`, ``autovacuum_naptime`` = :data:`AUTOVACUUM_NAPTIME`, and pg_stat_statements preloaded when the build has it
    (:func:`has_pg_stat_statements`).
    """
    socket_dir = str(data_dir)
    if len(socket_dir) + len(f"/.s.PGSQL.{port}") > _MAX_SOCKET_PATH:
        socket_dir = ""  # path too long for a Unix socket; TCP only (all we use)
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        # PostgreSQL list syntax: double quotes keep spaces/commas in the path intact
        "unix_socket_directories": f'"{socket_dir}"' if socket_dir else "",
        "max_connections": str(max_connections),
        "shared_buffers": SHARED_BUFFERS,
        # How often the autovacuum launcher looks at each database (default 1 min): at 1 s, per-table
        # AUTOVACUUM_SETTINGS take effect within a quick run, as they would within a long one on a
        # server left at the default (FR-12; the cost: one launcher wake-up a second).
        "autovacuum_naptime": AUTOVACUUM_NAPTIME,
    }
    if has_pg_stat_statements(bins):
        # The tool owns this whole server: per-statement statistics for the claim.
        settings["shared_preload_libraries"] = "pg_stat_statements"
    # pg_ctl hands -o to /bin/sh, hence shlex.quote
    return " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in settings.items())


def has_pg_stat_statements(bins: ServerBinaries) -> bool:
    """True when the server's library directory holds pg_stat_statements (a contrib module)."""
    return any(bins.bindir.parent.glob("lib/**/pg_stat_statements.so"))
