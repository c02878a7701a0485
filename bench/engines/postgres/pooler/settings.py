"""What the embedded PgBouncer is told: its ``pgbouncer.ini``, its ``auth_file``, the file descriptors it needs
(docs/poolers.md, "The embedded pooler"). Text only: no process, no connection. The settings' meanings are
PgBouncer's (``man 5 pgbouncer``)."""

from __future__ import annotations

import dataclasses
import pathlib
import re

__all__ = ["CLIENT_MARGIN", "FD_MARGIN", "RESET_QUERY", "Upstream", "auth_file_text", "fds_needed", "ini_text"]

#: Client connections the pooler admits beyond the run's own (its readiness probe, the admin console, a
#: pooling check): ``max_client_conn`` is the run's clients plus this.
CLIENT_MARGIN = 10
#: File descriptors beyond clients and server connections: the listening socket, the log, DNS, PgBouncer's own.
FD_MARGIN = 64
#: ``server_reset_query`` per ``pool_mode``: in session mode PgBouncer's default, ``DISCARD ALL`` (a server
#: connection goes back to the pool as a new session: settings, prepared statements, advisory locks, LISTEN
#: dropped); in transaction mode PgBouncer does not run it (its ``server_reset_query_always`` is off), so none.
RESET_QUERY = {"session": "DISCARD ALL", "transaction": ""}
#: PgBouncer's own defaults, written out so the file says them: an idle server connection is closed after
#: 600 s, any server connection after 3600 s (a run longer than that sees its server connections renewed,
#: as an application behind a pooler does).
SERVER_IDLE_TIMEOUT_S = 600
SERVER_LIFETIME_S = 3600


@dataclasses.dataclass(frozen=True)
class Upstream:
    """The server behind the pooler as a direct connection reached it (libpq's defaults resolved): ``host`` a
    name, an address or a Unix socket directory."""

    host: str
    port: int
    dbname: str
    user: str
    password: str | None = None


def _quoted(value: str) -> str:
    """``value`` for a libpq-style ``key=value`` list: single-quoted when it holds a space or a quote."""
    if re.search(r"[\s'\\]", value) or not value:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return value


def database_line(up: Upstream) -> str:
    """The ``[databases]`` entry: clients ask for ``up.dbname``; every server connection logs in as ``up.user``
    (one pool), with its password when the DSN had one."""
    pairs = {"host": up.host, "port": str(up.port), "dbname": up.dbname, "user": up.user}
    if up.password:
        pairs["password"] = up.password
    return f"{_quoted(up.dbname)} = " + " ".join(f"{k}={_quoted(v)}" for k, v in pairs.items())


def ini_text(up: Upstream, *, data_dir: pathlib.Path, port: int, mode: str, pool_size: int, max_client_conn: int,
             os_user: str | None) -> str:
    """``pgbouncer.ini``: 127.0.0.1:``port`` only (no Unix socket), clients trusted (``auth_type = trust``: the
    user must be in the ``auth_file``, no password asked; the pooler is on loopback and lives for one run), the
    console for ``up.user`` (``admin_users``), ``pool_mode`` ``mode``, ``default_pool_size`` ``pool_size`` and no
    reserve pool (at most ``pool_size`` server connections), ``max_client_conn``, ``stats_period = 1``,
    :data:`RESET_QUERY` per mode, log and pid file in ``data_dir``; ``os_user``: the Unix user it changes to
    after starting as root (``user``), None when it runs as this process's user."""
    settings = {
        "listen_addr": "127.0.0.1", "listen_port": port, "unix_socket_dir": "",
        "auth_type": "trust", "auth_file": data_dir / "userlist.txt", "admin_users": up.user,
        "pool_mode": mode, "default_pool_size": pool_size, "min_pool_size": 0, "reserve_pool_size": 0,
        "max_client_conn": max_client_conn, "stats_period": 1,
        "server_reset_query": RESET_QUERY[mode],
        "server_idle_timeout": SERVER_IDLE_TIMEOUT_S, "server_lifetime": SERVER_LIFETIME_S,
        "logfile": data_dir / "pgbouncer.log", "pidfile": data_dir / "pgbouncer.pid",
    }
    if os_user is not None:
        settings["user"] = os_user
    lines = ["[databases]", database_line(up), "", "[pgbouncer]"]
    lines += [f"{name} = {value}" for name, value in settings.items()]
    return "\n".join(lines) + "\n"


def auth_file_text(user: str) -> str:
    """The ``auth_file``: ``user`` with an empty password (``auth_type = trust`` asks for none; the server's own
    password, if any, is on the ``[databases]`` line)."""
    return '"{}" ""\n'.format(user.replace('"', '""'))


def fds_needed(max_client_conn: int, pool_size: int) -> int:
    """File descriptors PgBouncer may use: every client and server connection (one database, one user:
    ``max_client_conn + pool_size``, ``man 5 pgbouncer``, ``max_client_conn``) plus :data:`FD_MARGIN`."""
    return max_client_conn + pool_size + FD_MARGIN
