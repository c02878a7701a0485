"""A throwaway MariaDB server for one run: MariaDB's :class:`~bench.engines.embedded_base.Recipe`
(``mysql://root@127.0.0.1:PORT/``); its choices are in docs/architecture.md (The embedded servers).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

from bench.engines.base import EngineError
from bench.engines.embedded_base import STOP_TIMEOUT_S, EmbeddedError, EmbeddedServer, Recipe
from bench.engines.embedded_host import MAX_SOCKET_PATH, stop_child
from bench.engines.mariadb.adapter import open_connection, query, translated
from bench.engines.mariadb.embedded_binaries import ServerBinaries, find_server_binaries

__all__ = ["BUFFER_POOL_SIZE", "ERROR_LOG", "EmbeddedError", "MariaDBRecipe", "PID_FILE", "embedded_mariadb"]

BUFFER_POOL_SIZE = "256M"
PID_FILE = "mariadbd.pid"
"""The server's pid file, in its datadir; mariadbd writes it once its port is bound."""
ERROR_LOG = "error.log"
"""The server's error log, in its datadir."""


class MariaDBRecipe(Recipe):
    """MariaDB's throwaway server (``mysql://root@127.0.0.1:PORT/``, empty password). Raises ConfigError (``ENGINE``,
    exit 2) without ``mariadbd``/``mysqld`` or install tool; EmbeddedError when the binary is not MariaDB, a step
    fails, it is not up within 60 s, or ``mysql`` cannot reach ``base_dir``; ValueError (``max_connections``)."""

    label = "MariaDB"
    prefix = "qbench-maria-"
    users = ("mysql",)
    create_user = None  # no mysql user: root runs it (--user=root)
    user_reason = "MariaDB runs as it under root"
    wrap_commands = False  # --user= makes mariadbd drop to the user itself
    init_word = "install"
    extra_dirs = ("files",)  # the only directory SQL may read or write files in (secure_file_priv)
    max_connections_range = (10, 100000)

    def __init__(self):
        self.bins: ServerBinaries | None = None
        self.proc: subprocess.Popen | None = None

    def find_binaries(self) -> None:
        self.bins = find_server_binaries()

    def version_argv(self) -> list[str]:
        return [str(self.bins.server), "--version"]

    def version(self, out: str) -> str:
        if "mariadb" not in out.lower():
            raise EmbeddedError(f"{self.bins.server} is not MariaDB ({out}); the embedded server needs "
                                "MariaDB: install mariadb-server, or pass DSN= of a running server")
        m = re.search(r"Ver\s+(\S+?)(?:-MariaDB|\s)", out)
        return m.group(1) if m else out

    def where(self) -> str:
        return f"server: {self.bins.server}"

    def init_argv(self, srv: EmbeddedServer) -> list[str]:
        """The install tool: no test database, ``root`` with an empty password (``normal``
        authentication, so it logs in over TCP), accounts by IP (``root@127.0.0.1``) rather than
        host name, ``--user`` under root."""
        return [
            str(self.bins.install_db), "--no-defaults",  # must come first
            f"--datadir={srv.data_dir}", *_user_options(srv),
            "--skip-test-db", "--auth-root-authentication-method=normal", "--skip-name-resolve",
        ]

    def logs(self, srv: EmbeddedServer) -> tuple[pathlib.Path, ...]:
        """The error log, then mariadbd's stdout and stderr (what it says before it opens the error log)."""
        return (srv.data_dir / ERROR_LOG, srv.root / "mariadbd.out")

    def dsn(self, port: int) -> str:
        return f"mysql://root@127.0.0.1:{port}/"

    def env(self) -> dict[str, str]:
        """This process's environment without ``MYSQL_*``/``MARIADB_*`` variables (``MYSQL_UNIX_PORT``,
        ``MYSQL_TCP_PORT``, ``MYSQL_HOME`` … would otherwise give the server defaults of their own)."""
        return {k: v for k, v in os.environ.items() if not k.startswith(("MYSQL_", "MARIADB_"))}

    def launch(self, srv: EmbeddedServer) -> str | None:
        """mariadbd in its own session (a Ctrl-C at the terminal reaches us, and we stop it in order)."""
        with open(self.logs(srv)[1], "ab") as out:
            try:
                self.proc = subprocess.Popen(server_argv(self.bins, srv), stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=out, cwd=srv.root, env=self.env(), start_new_session=True)
            except OSError as exc:
                return f"cannot run {self.bins.server}: {exc}"
        return None

    def exited(self, srv: EmbeddedServer) -> str | None:
        code = self.proc.poll()
        if code is None:
            return None
        self.proc = None
        return f"mariadbd exited with status {code}"

    def probe(self, srv: EmbeddedServer, timeout: int) -> str | None:
        """Once mariadbd wrote its pid file (after binding its port: no answer is ours before),
        ``SELECT @@pid_file`` must name that file (else another server took the port)."""
        try:
            if int((srv.data_dir / PID_FILE).read_text().strip()) != self.proc.pid:
                return "it wrote no pid file"
        except (OSError, ValueError):
            return "it wrote no pid file"
        try:
            conn = open_connection(self.dsn(srv.port), program="queue-bench embedded", timeout_s=timeout)
            try:
                with translated():
                    (pid_file,) = query(conn, "SELECT @@pid_file")[0]
            finally:
                conn.close()
        except EngineError as exc:
            return str(exc)
        if pid_file != str(srv.data_dir / PID_FILE):
            return f"port {srv.port} is answered by another server (pid file {pid_file})"
        return None

    def shutdown(self, srv: EmbeddedServer, problems: list[str]) -> None:
        """SIGTERM mariadbd (its normal shutdown) and wait; SIGKILL after :data:`STOP_TIMEOUT_S`."""
        proc, self.proc = self.proc, None
        stop_child(proc, STOP_TIMEOUT_S, problems)


#: Start a throwaway MariaDB server, yield its DSN, stop and delete it on exit (see :class:`MariaDBRecipe`);
#: ``embedded_server`` is the name :func:`bench.engines.embedded_server` calls on every engine.
embedded_mariadb = embedded_server = MariaDBRecipe.server


def server_options_of(cfg) -> dict:  # noqa: ARG001 - one MariaDB server: nothing to choose
    """The recipe's options a run's config picks: none."""
    return {}


def _user_options(srv: EmbeddedServer) -> list[str]:
    """``["--user=NAME"]`` for mariadbd and the install tool under root, else ``[]``."""
    return [f"--user={srv.run_as.name}"] if srv.run_as.name else []


def server_argv(bins: ServerBinaries, srv: EmbeddedServer) -> list[str]:
    """The mariadbd command line (datadir, :data:`PID_FILE`, :data:`ERROR_LOG`, 127.0.0.1, ``max_connections``,
    :data:`BUFFER_POOL_SIZE`, ``secure_file_priv`` = ``files``)."""
    data_dir = srv.data_dir
    socket = data_dir / "mysqld.sock"  # only its name when the path is too long (mariadbd works in its datadir)
    return [
        str(bins.server), "--no-defaults",  # must come first
        *_user_options(srv),
        f"--datadir={data_dir}", f"--socket={socket if len(str(socket)) <= MAX_SOCKET_PATH else socket.name}",
        f"--pid-file={data_dir / PID_FILE}", f"--log-error={data_dir / ERROR_LOG}",
        f"--port={srv.port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
        f"--max-connections={srv.max_connections}",
        f"--innodb-buffer-pool-size={BUFFER_POOL_SIZE}",
        f"--secure-file-priv={srv.root / 'files'}",
    ]
