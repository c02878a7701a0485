"""The default database: a throwaway PostgreSQL server for one run, ``with embedded_postgres(max_connections=n)
as dsn:`` (``postgresql://postgres@127.0.0.1:PORT/postgres``; docs/running.md), its lifecycle
:mod:`bench.engines.embedded_base`'s (docs/architecture.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import re
import shlex
import subprocess


from bench.engines.embedded_base import START_TIMEOUT_S, STOP_TIMEOUT_S, EmbeddedError, EmbeddedServer, Recipe
from bench.engines.embedded_host import MAX_SOCKET_PATH, wait_gone
from bench.engines.postgres.db import not_shipped
from bench.engines.postgres.embedded_binaries import WHEELS, ServerBinaries, find_server_binaries, wheel_files
from bench.engines.reachable_tree import reachable_tree, unreachable
from bench.errors import ConfigError
from bench.engines.base import EngineError
from bench.engines.postgres.adapter import connect, translated
from bench.usage import setting

__all__ = ["AUTOVACUUM_NAPTIME", "SHARED_BUFFERS", "EmbeddedError", "PostgresRecipe", "embedded_postgres",
           "has_pg_stat_statements", "server_options_of"]

SHARED_BUFFERS = "256MB"
#: https://www.postgresql.org/docs/current/runtime-config-autovacuum.html#GUC-AUTOVACUUM-NAPTIME
AUTOVACUUM_NAPTIME = "1s"


class PostgresRecipe(Recipe):
    """PostgreSQL's throwaway cluster: ``initdb``, ``pg_ctl start``/``stop`` (fast, then immediate, then
    SIGKILL), probed with psycopg. ``max_connections``: the run's workers plus headroom (monitor, reaper,
    producers, PostgreSQL's 3 ``superuser_reserved_connections``). Raises EmbeddedError (no binaries,
    initdb failed, no start or connection within 60 s, no unprivileged user under root)."""

    label = "PostgreSQL"
    prefix = "qbench-pg-"
    users = ("postgres",)
    create_user = "qbench"
    user_reason = "PostgreSQL runs as it, initdb refuses root"
    create_reason = "initdb refuses root"
    init_word = "initdb"

    def __init__(self, pg_version: str = "auto"):
        self.pg_version = pg_version
        self.bins: ServerBinaries | None = None

    def find_binaries(self) -> None:
        self.bins = find_server_binaries(self.pg_version)

    def reach(self, srv: EmbeddedServer) -> None:
        """Under root, a wheel's install tree (``pginstall``) the server's user cannot enter (a checkout in a
        private folder) is used from its reachable copy (:func:`bench.engines.reachable_tree.reachable_tree`);
        the machine's own binaries it cannot run (their build finds its files by fixed paths, so no copy) are
        refused: ConfigError (``PG_VERSION``)."""
        if not srv.run_as.other_user:
            return
        if self.bins.major is None:
            why = unreachable(self.bins.bindir, srv.run_as, names=("initdb", "pg_ctl", "postgres"))
            if why is not None:
                raise ConfigError("PG_VERSION", f"{self.pg_version}: the machine's server binaries ({self.bins.source}) "
                                                f"cannot be run by the server's user: {why}; allowed: "
                                                f"{', '.join(sorted(WHEELS, key=int))} (a server wheel), or "
                                                f"{setting('dsn', 'postgresql://...', quote=False)}")
            return
        root, parts = wheel_files(self.bins)
        placed = reachable_tree(root, parts, srv.run_as, srv.servers_dir(), srv.log)
        if placed != root:
            self.bins = dataclasses.replace(self.bins, bindir=placed / self.bins.bindir.relative_to(root))

    def version_argv(self) -> list[str]:
        return [self.bins.postgres, "--version"]

    def version(self, out: str) -> str:
        """The version ``postgres --version`` printed; EmbeddedError when a wheel's is not the major it ships."""
        m = re.search(r"(\d+(?:\.\d+)*)", out)
        if m is None:
            return out
        if self.bins.major is not None and int(m.group(1).split(".")[0]) != self.bins.major:
            raise EmbeddedError(f"PG_VERSION={self.pg_version}: the {self.bins.source}'s postgres is {m.group(1)}, not "
                                f"{self.bins.major}; reinstall the wheel its extra pins")
        return m.group(1)

    def where(self) -> str:
        return f"binaries: {self.bins.bindir}, {self.bins.source}"

    def init_argv(self, srv: EmbeddedServer) -> list[str]:
        """``initdb``: trust authentication, superuser ``postgres``, UTF8 with the C locale, no sync."""
        return [
            self.bins.initdb, "-D", str(srv.data_dir),
            "--auth=trust", "-U", "postgres", "--encoding=UTF8",
            "--locale=C",  # independent of whatever LANG the caller has (possibly not installed)
            "--no-sync",   # speeds up initdb only; the running server keeps fsync on
        ]

    def logs(self, srv: EmbeddedServer) -> tuple[pathlib.Path, ...]:
        return (srv.root / "server.log",)

    def dsn(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def launch(self, srv: EmbeddedServer) -> str | None:
        """``pg_ctl start -w`` with :func:`server_options`."""
        argv = [
            self.bins.pg_ctl, "start", "-D", str(srv.data_dir), "-l", str(self.logs(srv)[0]),
            "-w", "-t", str(START_TIMEOUT_S), "-o", server_options(self.bins, srv.data_dir, srv.port, srv.max_connections,
                                                                   self.extra_settings()),
        ]
        try:
            proc = srv.run(argv, timeout=START_TIMEOUT_S + 15)
        except subprocess.TimeoutExpired:
            return f"pg_ctl start did not return within {START_TIMEOUT_S + 15} s"
        except OSError as exc:
            return f"cannot run pg_ctl: {exc}"
        if proc.returncode != 0:
            msg = "; ".join((proc.stderr or proc.stdout).strip().splitlines()) or "no output"
            return f"pg_ctl exit {proc.returncode}: {msg}"
        return None

    def extra_settings(self) -> dict[str, str]:
        """Settings beyond :func:`server_options`' (a standby's: :mod:`bench.engines.postgres.standby`)."""
        return {}

    def probe(self, srv: EmbeddedServer, timeout: int) -> str | None:
        """``SELECT 1``; then ``CREATE EXTENSION`` pg_stat_statements and pg_walinspect where the build ships them
        (the run says which it lacks: :func:`bench.engines.postgres.db.not_shipped`)."""
        try:
            with connect(srv.dsn, connect_timeout_s=timeout, application_name="queue-bench embedded") as conn, \
                    translated():
                conn.execute("SELECT 1")
                for name in ("pg_stat_statements", "pg_walinspect"):  # the window's statements; its WAL's images
                    preloaded = name != "pg_stat_statements" or has_pg_stat_statements(self.bins)
                    if not_shipped(conn, name) or not preloaded:
                        continue
                    try:
                        with translated():
                            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
                    except EngineError as exc:  # e.g. too few privileges
                        srv.log(f"{name} not available on the embedded server: {exc}")
        except EngineError as exc:
            return str(exc)
        return None

    def shutdown(self, srv: EmbeddedServer, problems: list[str]) -> None:
        """``pg_ctl stop -m fast``, then ``immediate``; wait until the postmaster is gone. Without
        its pid file (interrupted before the postmaster wrote it) the lifecycle's sweep finds it by
        its command line (-D <our unique data dir>)."""
        pid_file = srv.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return
        pid = None
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().split("\n", 1)[0])
        if pid and wait_gone(pid, timeout=0):  # killed during the run (FAULTS=failover): nothing left to stop
            problems.append("its processes were already gone, killed during the run")
            return
        if not self._pg_ctl_stop(srv, "fast", STOP_TIMEOUT_S):
            problems.append("fast shutdown failed")
            if not self._pg_ctl_stop(srv, "immediate", 30):
                problems.append("immediate shutdown failed; killed")
                return
        # pg_ctl -w returns once postmaster.pid is gone, a moment before the process itself
        # exits; wait so that "stopped" really means no process (the sweep kills a lingering one).
        if pid and not wait_gone(pid, timeout=10):
            problems.append(f"postmaster {pid} lingered; killed")

    def _pg_ctl_stop(self, srv: EmbeddedServer, mode: str, timeout: int) -> bool:
        argv = [self.bins.pg_ctl, "stop", "-D", str(srv.data_dir), "-m", mode, "-w", "-t", str(timeout)]
        try:
            proc = srv.run(argv, timeout=timeout + 15)
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0 or not (srv.data_dir / "postmaster.pid").exists()


#: Start a throwaway PostgreSQL server, yield its DSN, stop and delete it on exit (see :class:`PostgresRecipe`);
#: ``embedded_server`` is the name :func:`bench.engines.embedded_server` calls on every engine.
embedded_postgres = embedded_server = PostgresRecipe.server


def server_options_of(cfg) -> dict:
    """The recipe's options a run's config picks (None: the defaults): its ``PG_VERSION``."""
    return {} if cfg is None else {"pg_version": cfg.pg_version}


def server_options(bins: ServerBinaries, data_dir: pathlib.Path, port: int, max_connections: int,
                   extra: dict[str, str] | None = None) -> str:
    """``pg_ctl start -o``'s value, one ``-c name=value`` per setting quoted for /bin/sh: 127.0.0.1:``port``
    only, the Unix socket in ``data_dir`` (none when that path is too long), ``max_connections``,
    :data:`SHARED_BUFFERS`, :data:`AUTOVACUUM_NAPTIME`, WAL for a streaming standby (``wal_level=replica``,
    ``max_wal_senders``: PostgreSQL's defaults, said here), pg_stat_statements when the build has it; then
    ``extra`` (a standby's own)."""
    socket_dir = str(data_dir)
    if len(socket_dir) + len(f"/.s.PGSQL.{port}") > MAX_SOCKET_PATH:
        socket_dir = ""  # path too long for a Unix socket; TCP only (all we use)
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        # PostgreSQL list syntax: double quotes keep spaces/commas in the path intact
        "unix_socket_directories": f'"{socket_dir}"' if socket_dir else "",
        "max_connections": str(max_connections),
        "shared_buffers": SHARED_BUFFERS,
        # the launcher's wake-up (default 1 min): per-table AUTOVACUUM_SETTINGS act within a quick run (FR-12)
        "autovacuum_naptime": AUTOVACUUM_NAPTIME,
        # REPLICA=1: pg_basebackup and the standby's WAL receiver connect as replication clients (initdb's
        # pg_hba.conf trusts replication from 127.0.0.1 with --auth=trust)
        "wal_level": "replica",
        "max_wal_senders": "10",
    }
    if has_pg_stat_statements(bins):
        # The tool owns this whole server: per-statement statistics for the claim.
        settings["shared_preload_libraries"] = "pg_stat_statements"
    settings.update(extra or {})
    # pg_ctl hands -o to /bin/sh, hence shlex.quote
    return " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in settings.items())


def has_pg_stat_statements(bins: ServerBinaries) -> bool:
    """True when the server's library directory holds pg_stat_statements (a contrib module)."""
    return any(bins.bindir.parent.glob("lib/**/pg_stat_statements.so"))
