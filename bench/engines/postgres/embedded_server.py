"""The embedded server itself: one throwaway cluster, created and started by ``start``, stopped and
deleted by ``stop``.

Used by :func:`bench.engines.postgres.embedded.embedded_postgres`, which also sees that ``stop``
runs on every way out. Binaries from :mod:`bench.engines.postgres.embedded_binaries`, the user
from :mod:`bench.engines.postgres.embedded_user`, the settings from
:mod:`bench.engines.postgres.embedded_config`.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import time
from typing import Callable

from bench.engines.embedded_base import ThrowawayServer
from bench.engines.postgres.embedded_binaries import EmbeddedError, ServerBinaries, find_server_binaries
from bench.engines.postgres.embedded_config import has_pg_stat_statements, initdb_argv, server_options
from bench.engines.postgres.embedded_processes import (
    LOG_TAIL_LINES, free_port, kill_leftovers, log_tail, postmaster_pid, wait_gone,
)
from bench.engines.postgres.embedded_user import RunAs, pick_run_as

__all__ = ["START_TIMEOUT_S", "STOP_TIMEOUT_S", "Server"]

START_TIMEOUT_S = 60
"""Seconds allowed from ``pg_ctl start`` until a client connection succeeds."""

STOP_TIMEOUT_S = 60
"""Seconds ``pg_ctl stop -m fast`` may take (it writes a shutdown checkpoint)."""

_PORT_ATTEMPTS = 3  # a port picked by bind(0) can be taken before the server binds it


class Server(ThrowawayServer):
    """One throwaway cluster: created by ``start``, removed by ``stop`` (idempotent; the directory and
    the stop are :class:`bench.engines.embedded_base.ThrowawayServer`'s).

    ``max_connections`` is the server's setting; the cluster's temporary directory is made in
    ``base_dir`` (None: the system's); ``log`` receives short progress lines. ``dsn``, ``data_dir``
    and ``logfile`` are valid once ``start`` has made the directory (and, for ``dsn``, picked a port).
    """

    label = "PostgreSQL"
    prefix = "qbench-pg-"
    error = EmbeddedError

    def __init__(self, max_connections: int, base_dir: pathlib.Path | None, log: Callable[[str], None]):
        super().__init__(max_connections, base_dir, log)
        self.run_as = RunAs()
        self.bins: ServerBinaries | None = None

    @property
    def logfile(self) -> pathlib.Path:
        assert self.root is not None
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        argv, extra = self.run_as.wrap(argv)
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout,
            cwd=self.root, stdin=subprocess.DEVNULL, **extra,
        )

    # -- start -------------------------------------------------------------

    def start(self) -> str:
        """Find the binaries, create the cluster, start the server and wait until it accepts a
        connection; returns its DSN (``postgresql://postgres@127.0.0.1:PORT/postgres``).

        Raises:
            EmbeddedError: no binaries, a user that cannot run them or reach the directory, initdb
                failed, or the server did not start or accept a connection within
                :data:`START_TIMEOUT_S` (with the last lines of its log). Whatever was started is
                left for ``stop``.
        """
        self.bins = find_server_binaries()
        self.run_as = pick_run_as(self.log)
        self._make_root()
        t_begin = time.monotonic()
        self._check_binaries()
        self._initdb()
        t0 = time.monotonic()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = free_port()
            self.log(
                f"embedded PostgreSQL {self.version} starting in {self.root} on port {self.port} "
                f"(binaries: {self.bins.bindir}, {self.bins.source}"
                + (f"; running as {self.run_as.name}" if self.run_as.name else "") + ")"
            )
            ok, why = self._pg_ctl_start()
            if ok:
                break
            if attempt < _PORT_ATTEMPTS and "already in use" in log_tail(self.logfile):
                self.log(f"port {self.port} was taken meanwhile; retrying on another port")
                self.logfile.unlink(missing_ok=True)
                continue
            raise EmbeddedError(
                f"embedded PostgreSQL failed to start ({why}); last {LOG_TAIL_LINES} lines of "
                f"the server log:\n{log_tail(self.logfile)}"
            )
        self._wait_connectable(deadline=t0 + START_TIMEOUT_S)
        self.log(
            f"embedded PostgreSQL ready at {self.dsn} "
            f"(initdb + start {time.monotonic() - t_begin:.1f} s)"
        )
        return self.dsn

    def _make_root(self) -> None:
        run_as = self.run_as
        owner = (run_as.name, run_as.uid, run_as.gid) if run_as.name is not None else None
        super()._make_root(owner, run_as.can_traverse, "PostgreSQL runs as it, initdb refuses root")

    def _check_binaries(self) -> None:
        assert self.bins is not None
        try:
            proc = self._run([self.bins.postgres, "--version"], timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"cannot run {self.bins.postgres}: {exc}") from exc
        if proc.returncode != 0:
            who = f" as user {self.run_as.name!r}" if self.run_as.name else ""
            raise EmbeddedError(
                f"cannot run {self.bins.postgres}{who}: {(proc.stderr or proc.stdout).strip()}"
            )
        m = re.search(r"(\d+(?:\.\d+)*)", proc.stdout)
        self.version = m.group(1) if m else proc.stdout.strip()

    def _initdb(self) -> None:
        assert self.bins is not None
        argv = initdb_argv(self.bins, self.data_dir)
        try:
            proc = self._run(argv, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"initdb failed: {exc}") from exc
        if proc.returncode != 0:
            out = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise EmbeddedError(f"initdb failed (exit {proc.returncode}):\n{out}")

    def _pg_ctl_start(self) -> tuple[bool, str]:
        assert self.bins is not None
        argv = [
            self.bins.pg_ctl, "start", "-D", str(self.data_dir), "-l", str(self.logfile),
            "-w", "-t", str(START_TIMEOUT_S), "-o",
            server_options(self.bins, self.data_dir, self.port, self.max_connections),
        ]
        self.started = True  # from here on stop() must try pg_ctl stop
        try:
            proc = self._run(argv, timeout=START_TIMEOUT_S + 15)
        except subprocess.TimeoutExpired:
            return False, f"pg_ctl start did not return within {START_TIMEOUT_S + 15} s"
        except OSError as exc:
            return False, f"cannot run pg_ctl: {exc}"
        if proc.returncode != 0:
            msg = "; ".join((proc.stderr or proc.stdout).strip().splitlines()) or "no output"
            return False, f"pg_ctl exit {proc.returncode}: {msg}"
        return True, ""

    def _wait_connectable(self, deadline: float) -> None:
        import psycopg

        last: Exception | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmbeddedError(
                    f"embedded PostgreSQL accepted no connection within {START_TIMEOUT_S} s "
                    f"({last}); last {LOG_TAIL_LINES} lines of the server log:\n{log_tail(self.logfile)}"
                )
            try:
                with psycopg.connect(self.dsn, connect_timeout=max(1, min(5, int(remaining))),
                                     autocommit=True) as conn:
                    conn.execute("SELECT 1")
                    if has_pg_stat_statements(self.bins):
                        try:
                            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                        except psycopg.Error as exc:  # e.g. the extension's SQL files are not installed
                            self.log(f"pg_stat_statements not available on the embedded server: {exc}")
                return
            except psycopg.Error as exc:
                last = exc
                time.sleep(0.1)

    # -- stop --------------------------------------------------------------

    def _shutdown(self, problems: list[str]) -> None:
        """``pg_ctl stop -m fast``, then ``immediate``, then SIGKILL; wait until the postmaster is gone."""
        if self.started and self.bins is not None and (self.data_dir / "postmaster.pid").exists():
            pid = postmaster_pid(self.data_dir)
            if not self._pg_ctl_stop("fast", STOP_TIMEOUT_S):
                problems.append("fast shutdown failed")
                if not self._pg_ctl_stop("immediate", 30):
                    problems.append("immediate shutdown failed; killed")
                    kill_leftovers(self.data_dir)
            # pg_ctl -w returns once postmaster.pid is gone, a moment before the
            # process itself exits; wait so that "stopped" really means no process.
            if pid and not wait_gone(pid, timeout=10):
                problems.append(f"postmaster {pid} lingered; killed")
                kill_leftovers(self.data_dir, pid)
        elif self.started:
            # Interrupted between pg_ctl's fork and the postmaster writing its pid
            # file: find it by its command line (-D <our unique data dir>).
            kill_leftovers(self.data_dir)

    def _pg_ctl_stop(self, mode: str, timeout: int) -> bool:
        assert self.bins is not None
        argv = [self.bins.pg_ctl, "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", str(timeout)]
        try:
            proc = self._run(argv, timeout=timeout + 15)
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0 or not (self.data_dir / "postmaster.pid").exists()
