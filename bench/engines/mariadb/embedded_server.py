"""The embedded server itself: one throwaway data directory, created and started by ``start``,
stopped and deleted by ``stop``.

Used by :func:`bench.engines.mariadb.embedded.embedded_mariadb`, which also sees that ``stop``
runs on every way out. Binaries from :mod:`bench.engines.mariadb.embedded_binaries`, the user
from :mod:`bench.engines.mariadb.embedded_user`, the options from
:mod:`bench.engines.mariadb.embedded_config`.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import time
from typing import Callable

from bench.engines.embedded_base import ThrowawayServer
from bench.engines.mariadb.embedded_binaries import EmbeddedError, ServerBinaries, find_server_binaries
from bench.engines.mariadb.embedded_config import ERROR_LOG, PID_FILE, install_db_argv, server_argv
from bench.engines.mariadb.embedded_processes import LOG_TAIL_LINES, free_port, kill_leftovers, log_tail
from bench.engines.mariadb.embedded_user import RunAs, pick_run_as

__all__ = ["START_TIMEOUT_S", "STOP_TIMEOUT_S", "Server"]

START_TIMEOUT_S = 60
"""Seconds allowed from starting mariadbd until a client connection succeeds."""

STOP_TIMEOUT_S = 60
"""Seconds mariadbd may take to shut down after SIGTERM before it gets SIGKILL."""

INSTALL_TIMEOUT_S = 120
"""Seconds the install tool may take to create the system tables."""

_PORT_ATTEMPTS = 3  # a port picked by bind(0) can be taken before the server binds it


class Server(ThrowawayServer):
    """One throwaway server: created by ``start``, removed by ``stop`` (idempotent; the directory and
    the stop are :class:`bench.engines.embedded_base.ThrowawayServer`'s).

    ``max_connections`` is the server's setting; the temporary directory is made in ``base_dir``
    (None: the system's); ``log`` receives short progress lines. ``dsn``, ``data_dir`` and
    ``error_log`` are valid once ``start`` has made the directory (and, for ``dsn``, picked a port).
    """

    label = "MariaDB"
    prefix = "qbench-maria-"
    error = EmbeddedError

    def __init__(self, max_connections: int, base_dir: pathlib.Path | None, log: Callable[[str], None]):
        super().__init__(max_connections, base_dir, log)
        self.run_as = RunAs()
        self.bins: ServerBinaries | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def files_dir(self) -> pathlib.Path:
        """The only directory SQL may read or write files in (``secure_file_priv``)."""
        assert self.root is not None
        return self.root / "files"

    @property
    def error_log(self) -> pathlib.Path:
        return self.data_dir / ERROR_LOG

    @property
    def output(self) -> pathlib.Path:
        """mariadbd's stdout and stderr: what it says before it opens the error log."""
        assert self.root is not None
        return self.root / "mariadbd.out"

    @property
    def dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.root,
                              stdin=subprocess.DEVNULL, env=_clean_env())

    # -- start -------------------------------------------------------------

    def start(self) -> str:
        """Find the binaries, create the data directory, start mariadbd and wait until it accepts
        a connection; returns its DSN (``mysql://root@127.0.0.1:PORT/``).

        Raises:
            ConfigError: (``ENGINE``) no server binary or install tool on this machine.
            EmbeddedError: the binary is not MariaDB or does not run, the ``mysql`` user cannot
                reach the directory, the install tool failed, or the server did not start or
                accept a connection within :data:`START_TIMEOUT_S` (with the last lines of its
                log). Whatever was started is left for ``stop``.
        """
        self.bins = find_server_binaries()
        self.run_as = pick_run_as()
        self._check_binaries()
        self._make_root()
        t_begin = time.monotonic()
        self._install_db()
        t0 = time.monotonic()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = free_port()
            self.log(
                f"embedded MariaDB {self.version} starting in {self.root} on port {self.port} "
                f"(server: {self.bins.server}" + (f"; running as {self.run_as.name}" if self.run_as.name else "") + ")"
            )
            why = self._launch_and_wait(deadline=t0 + START_TIMEOUT_S)
            if why is None:
                break
            if attempt < _PORT_ATTEMPTS and "already in use" in log_tail(self.error_log):
                self.log(f"port {self.port} was taken meanwhile; retrying on another port")
                self.error_log.unlink(missing_ok=True)
                continue
            raise EmbeddedError(
                f"embedded MariaDB failed to start ({why}); last {LOG_TAIL_LINES} lines of "
                f"the server log:\n{log_tail(self.error_log, self.output)}"
            )
        self.log(f"embedded MariaDB ready at {self.dsn} (install + start {time.monotonic() - t_begin:.1f} s)")
        return self.dsn

    def _check_binaries(self) -> None:
        assert self.bins is not None
        try:
            proc = self._run([str(self.bins.server), "--version"], timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"cannot run {self.bins.server}: {exc}") from exc
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            raise EmbeddedError(f"cannot run {self.bins.server}: {out}")
        if "mariadb" not in out.lower():
            raise EmbeddedError(f"{self.bins.server} is not MariaDB ({out}); the embedded server needs "
                                "MariaDB: install mariadb-server, or pass DSN= of a running server")
        m = re.search(r"Ver\s+(\S+?)(?:-MariaDB|\s)", out)
        self.version = m.group(1) if m else out

    def _make_root(self) -> None:
        run_as = self.run_as
        owner = (run_as.name, run_as.uid, run_as.gid) if run_as.other_user else None
        super()._make_root(owner, run_as.can_traverse, "MariaDB runs as it under root")
        self.files_dir.mkdir(mode=0o700)
        if owner is not None:
            os.chown(self.files_dir, run_as.uid, run_as.gid)

    def _install_db(self) -> None:
        assert self.bins is not None
        argv = install_db_argv(self.bins, self.run_as, self.data_dir)
        try:
            proc = self._run(argv, timeout=INSTALL_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"{self.bins.install_db.name} failed: {exc}") from exc
        if proc.returncode != 0:
            out = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise EmbeddedError(f"{self.bins.install_db.name} failed (exit {proc.returncode}):\n{out}")

    def _launch_and_wait(self, deadline: float) -> str | None:
        """Start mariadbd and wait until a client connects; None when it did, else why not
        (the process is then gone)."""
        assert self.bins is not None and self.root is not None
        argv = server_argv(self.bins, self.run_as, self.data_dir, self.files_dir, self.port, self.max_connections)
        self.started = True  # from here on stop() must look for a server
        with open(self.output, "ab") as out:
            try:
                # Its own session: a Ctrl-C at the terminal reaches us, and we stop it in order.
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                             cwd=self.root, env=_clean_env(), start_new_session=True)
            except OSError as exc:
                return f"cannot run {self.bins.server}: {exc}"
        return self._wait_connectable(deadline)

    def _wait_connectable(self, deadline: float) -> str | None:
        import pymysql

        assert self.proc is not None
        last: Exception | str = "it wrote no pid file"
        while True:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                return f"mariadbd exited with status {code}"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._terminate()
                return f"no connection accepted within {START_TIMEOUT_S} s: {last}"
            if not self._pid_file_written():  # written after the port is bound: not ours before
                time.sleep(0.02)
                continue
            timeout = max(1, min(5, int(remaining)))
            try:
                conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                                       connect_timeout=timeout, read_timeout=timeout, write_timeout=timeout)
                try:
                    with conn.cursor() as cur:
                        cur.execute("SELECT @@pid_file")
                        (pid_file,) = cur.fetchone()
                finally:
                    conn.close()
            except pymysql.Error as exc:
                last = exc
                time.sleep(0.05)
                continue
            if pid_file == str(self.data_dir / PID_FILE):
                return None
            # Another server took the port between free_port() and our bind; ours will exit.
            last = RuntimeError(f"port {self.port} is answered by another server (pid file {pid_file})")
            time.sleep(0.05)

    def _pid_file_written(self) -> bool:
        assert self.proc is not None
        try:
            return int((self.data_dir / PID_FILE).read_text().strip()) == self.proc.pid
        except (OSError, ValueError):
            return False

    # -- stop --------------------------------------------------------------

    def _shutdown(self, problems: list[str]) -> None:
        """SIGTERM mariadbd (its normal shutdown; SIGKILL after :data:`STOP_TIMEOUT_S`), then kill
        anything else naming the data directory."""
        if self.started:
            if not self._terminate():
                problems.append(f"no shutdown within {STOP_TIMEOUT_S} s; killed")
            # Anything else naming our data dir: a server whose Popen was interrupted, the
            # install tool's bootstrap server after an interrupt.
            kill_leftovers(self.data_dir)
        elif self.data_dir.exists():
            kill_leftovers(self.data_dir)  # interrupted during the install tool

    def _terminate(self) -> bool:
        """SIGTERM the server and wait for it to exit, SIGKILL after :data:`STOP_TIMEOUT_S`;
        False when it had to be killed."""
        proc = self.proc
        if proc is None:
            return True
        clean = True
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                clean = False
                proc.kill()
                proc.wait(timeout=30)
        self.proc = None
        return clean


def _clean_env() -> dict[str, str]:
    """This process's environment without ``MYSQL_*``/``MARIADB_*`` variables (``MYSQL_UNIX_PORT``,
    ``MYSQL_TCP_PORT``, ``MYSQL_HOME`` … would otherwise give the server defaults of their own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MYSQL_", "MARIADB_"))}
