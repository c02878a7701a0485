"""A throwaway MariaDB server started for one run.

When the user asks for the MariaDB engine without a ``DSN``, queue-bench can start its own
MariaDB in a fresh temporary data directory, run against it over TCP on 127.0.0.1, and stop it
and delete the data directory afterwards::

    with embedded_mariadb(max_connections=workers + 10) as dsn:
        run_benchmark(dsn)     # dsn == "mysql://root@127.0.0.1:PORT/"

The lifecycle (directory, user, watchdog, start, stop) is :mod:`bench.engines.embedded_base`'s;
this module is MariaDB's recipe for it. The binaries are the machine's, found by
:mod:`bench.engines.mariadb.embedded_binaries`; without them the context manager raises
:class:`~bench.errors.ConfigError` for ``ENGINE`` (exit status 2) before creating anything.

Both commands run with ``--no-defaults``: no option file is read (``/etc/mysql/my.cnf``,
``~/.my.cnf``), so a system server's configuration, datadir, socket, pid file and port (3306) are
never named, and a running system server is left alone. The server keeps InnoDB's durability
defaults (``innodb_flush_log_at_trx_commit=1``, the doublewrite buffer on): queue-bench measures a
real queue, so commits pay for the redo log flush.

``mariadbd`` refuses to run as root unless told ``--user=root``; under root it runs as the
``mysql`` system user (``--user=mysql``: it starts as root and drops to it) when that exists, so
the server, whose ``root`` account has no password, is no OS-root process; otherwise as root. Its
file access from SQL (``SELECT … INTO OUTFILE``, ``LOAD_FILE``) is confined to a directory of its
own either way (``secure_file_priv``).
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess

import pymysql

from bench.engines.embedded_base import STOP_TIMEOUT_S, EmbeddedError, EmbeddedServer, Recipe
from bench.engines.embedded_host import MAX_SOCKET_PATH
from bench.engines.mariadb.embedded_binaries import ServerBinaries, find_server_binaries

__all__ = ["BUFFER_POOL_SIZE", "ERROR_LOG", "EmbeddedError", "MariaDBRecipe", "PID_FILE", "embedded_mariadb"]

BUFFER_POOL_SIZE = "256M"
PID_FILE = "mariadbd.pid"
"""The server's pid file, in its datadir; mariadbd writes it once its port is bound."""
ERROR_LOG = "error.log"
"""The server's error log, in its datadir."""


class MariaDBRecipe(Recipe):
    """MariaDB's throwaway server: the install tool, ``mariadbd`` as a child process, probed with PyMySQL.

    Its :meth:`~bench.engines.embedded_base.Recipe.server` yields ``mysql://root@127.0.0.1:PORT/`` (``root``
    with an empty password, TCP on loopback only). The datadir, Unix socket, pid file and error log
    (``error.log``) are in the temporary directory; ``innodb_buffer_pool_size=256M``,
    ``innodb_flush_log_at_trx_commit=1`` (the default), host names not resolved, and SQL may read or write
    files only in a directory of its own (``secure_file_priv``). ``max_connections``: MariaDB accepts 10 to
    100000 (others are raised or lowered into it, with a line to ``log``), and admits one connection more
    for an account with the CONNECTION ADMIN privilege, such as ``root``. Under root, ``base_dir``'s parents
    must be traversable by the ``mysql`` user. On leaving the block the server gets SIGTERM (its normal
    shutdown; SIGKILL after 60 s) and the directory is removed.

    Raises ConfigError (``ENGINE``, exit status 2; nothing created) when this machine has no
    ``mariadbd``/``mysqld`` or no install tool; EmbeddedError when the binary is not MariaDB or does not
    run, the install tool failed, the server did not start or accept a connection within 60 s (with the
    last 20 lines of its error log), or under root the ``mysql`` user cannot reach ``base_dir``; ValueError
    for a ``max_connections`` that is not a positive int.
    """

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
            conn = pymysql.connect(host="127.0.0.1", port=srv.port, user="root", password="",
                                   connect_timeout=timeout, read_timeout=timeout, write_timeout=timeout)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT @@pid_file")
                    (pid_file,) = cur.fetchone()
            finally:
                conn.close()
        except pymysql.Error as exc:
            return str(exc)
        if pid_file != str(srv.data_dir / PID_FILE):
            return f"port {srv.port} is answered by another server (pid file {pid_file})"
        return None

    def shutdown(self, srv: EmbeddedServer, problems: list[str]) -> None:
        """SIGTERM mariadbd (its normal shutdown) and wait; SIGKILL after :data:`STOP_TIMEOUT_S`."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            problems.append(f"no shutdown within {STOP_TIMEOUT_S} s; killed")
            proc.kill()
            proc.wait(timeout=30)


#: Start a throwaway MariaDB server, yield its DSN, stop and delete it on exit (see :class:`MariaDBRecipe`);
#: ``embedded_server`` is the name :func:`bench.engines.embedded_server` calls on every engine.
embedded_mariadb = embedded_server = MariaDBRecipe.server


def _user_options(srv: EmbeddedServer) -> list[str]:
    """``["--user=NAME"]`` for mariadbd and the install tool under root, else ``[]``."""
    return [f"--user={srv.run_as.name}"] if srv.run_as.name else []


def server_argv(bins: ServerBinaries, srv: EmbeddedServer) -> list[str]:
    """The mariadbd command line: the datadir with the socket, pid file (:data:`PID_FILE`) and error
    log (:data:`ERROR_LOG`) in it, TCP on 127.0.0.1 only, ``max_connections``,
    :data:`BUFFER_POOL_SIZE` of buffer pool, no host name lookups, and file access from SQL confined
    to the directory ``files`` (``secure_file_priv``)."""
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
