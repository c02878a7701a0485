"""``POOLER=pgbouncer``: a throwaway PgBouncer for one run in front of the embedded server or a ``DSN``, ``with
embedded_pgbouncer(direct_dsn, "transaction", 20, clients) as pooler:``; its lifecycle is the embedded servers'
(:mod:`bench.engines.embedded_base`: its own temporary directory, the servers' unprivileged user, a free port of
127.0.0.1, stopped and deleted however the run ends, the watchdog after ``kill -9``). docs/poolers.md."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pathlib
import re
import resource
import subprocess
import urllib.parse
from typing import Callable, Iterator

from bench.engines.base import EngineError
from bench.engines.embedded_base import EmbeddedError, EmbeddedServer, Recipe, embedded
from bench.engines.embedded_host import stop_child
from bench.engines.postgres.adapter import connect, connect_dsn, translated
from bench.engines.postgres.db import connection_headroom
from bench.engines.postgres.embedded import PostgresRecipe
from bench.engines.postgres.pooler.binary import find_pgbouncer
from bench.engines.postgres.pooler.console import console_rows
from bench.engines.postgres.pooler.settings import CLIENT_MARGIN, Upstream, auth_file_text, fds_needed, ini_text
from bench.errors import ConfigError
from bench.usage import option

__all__ = ["PgBouncerRecipe", "Pooler", "can_raise_hard_limit", "embedded_pgbouncer", "fd_limits", "read_upstream"]

#: Seconds PgBouncer's immediate shutdown (SIGTERM in 1.18: ``man 1 pgbouncer``) may take before SIGKILL.
STOP_TIMEOUT_S = 10


@dataclasses.dataclass(frozen=True)
class Pooler:
    """A started embedded pooler: ``dsn`` (what the workers, producers and reaper use), ``dsn_direct`` (the server
    behind it: the admin connection, monitor and audit's), ``admin_dsn`` (its console, database ``pgbouncer``),
    ``mode`` (``pool_mode``), ``pool_size``, ``max_client_conn``, ``pid``, ``version`` (PgBouncer's);
    ``config_path`` (its ``pgbouncer.ini``) and ``upstream`` (the server its ``[databases]`` line names), for a
    re-point after a failover (:mod:`.repoint`)."""

    kind: str
    dsn: str
    dsn_direct: str
    admin_dsn: str
    mode: str
    pool_size: int
    max_client_conn: int
    pid: int
    version: str
    config_path: str = ""
    upstream: Upstream | None = None


class PgBouncerRecipe(Recipe):
    """PgBouncer as an embedded "server": no data directory to create (its ``pgbouncer.ini`` and ``auth_file`` are
    written in ``data/`` at each launch, with that launch's port), started as a child in its own session (under
    root it changes to the servers' user itself: its ``user`` setting), probed through itself to the server
    and on its console, stopped with SIGTERM."""

    label = "PgBouncer"
    prefix = "qbench-pgbouncer-"
    users = PostgresRecipe.users
    create_user = PostgresRecipe.create_user
    user_reason = "the embedded servers' user; PgBouncer refuses root"
    create_reason = "PgBouncer refuses root"
    wrap_commands = False  # started as root it changes user itself (runuser would stand between us and its pid)
    init_word = "config"
    extra_dirs = ("data",)

    def __init__(self, upstream: Upstream, mode: str, pool_size: int, max_client_conn: int):
        self.upstream, self.mode, self.pool_size, self.max_client_conn = upstream, mode, pool_size, max_client_conn
        self.binary = ""
        self.proc: subprocess.Popen | None = None
        self.ini_path: pathlib.Path | None = None  # written at each launch

    def find_binaries(self) -> None:
        self.binary = find_pgbouncer()

    def version_argv(self) -> list[str]:
        return [self.binary, "--version"]

    def version(self, out: str) -> str:
        m = re.search(r"PgBouncer\s+(\S+)", out)
        if m is None:
            raise EmbeddedError(f"{self.binary} --version printed {out!r}, not PgBouncer's version")
        return m.group(1)

    def where(self) -> str:
        up = self.upstream
        return (f"binary: {self.binary}; pool_mode {self.mode}, default_pool_size {self.pool_size}, max_client_conn "
                f"{self.max_client_conn}; in front of {up.host}:{up.port}/{up.dbname}")

    def init_argv(self, srv: EmbeddedServer) -> list[str]:  # noqa: ARG002 - a hook
        """Nothing to create: :meth:`launch` writes the configuration with the port it is given."""
        return []

    def logs(self, srv: EmbeddedServer) -> tuple[pathlib.Path, ...]:
        """Its log file (PgBouncer writes it as its user), then its standard streams (a failure before the log)."""
        return srv.data_dir / "pgbouncer.log", srv.data_dir / "pgbouncer.out"

    def dsn(self, port: int) -> str:
        return self._url(port, self.upstream.dbname)

    def admin_dsn(self, port: int) -> str:
        """The console's DSN: database ``pgbouncer``, as ``admin_users``' one user."""
        return self._url(port, "pgbouncer")

    def _url(self, port: int, dbname: str) -> str:
        user = urllib.parse.quote(self.upstream.user, safe="")
        return f"postgresql://{user}@127.0.0.1:{port}/{urllib.parse.quote(dbname, safe='')}"

    def _write_config(self, srv: EmbeddedServer) -> pathlib.Path:
        """``pgbouncer.ini`` and ``userlist.txt`` in ``data/``, mode 0600, the pooler's user's; returns the ini."""
        run_as, data = srv.run_as, srv.data_dir
        files = {data / "pgbouncer.ini": ini_text(self.upstream, data_dir=data, port=srv.port, mode=self.mode,
                                                  pool_size=self.pool_size, max_client_conn=self.max_client_conn,
                                                  os_user=run_as.name if run_as.other_user else None),
                 data / "userlist.txt": auth_file_text(self.upstream.user)}
        for path, text in files.items():
            path.write_text(text)
            os.chmod(path, 0o600)  # the server's password, when the DSN had one
            if run_as.other_user:
                os.chown(path, run_as.uid, run_as.gid)
        self.ini_path = data / "pgbouncer.ini"
        return self.ini_path

    def launch(self, srv: EmbeddedServer) -> str | None:
        """``pgbouncer pgbouncer.ini`` in its own session (a Ctrl-C at the terminal reaches us, and we stop it),
        its file limit raised for ``max_client_conn`` (:func:`fd_limits`)."""
        ini = self._write_config(srv)
        limits, note = fd_limits(fds_needed(self.max_client_conn, self.pool_size))
        if note:
            srv.log(note)
        with open(self.logs(srv)[1], "ab") as out:
            try:
                self.proc = subprocess.Popen([self.binary, str(ini)], stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=out, cwd=srv.root, start_new_session=True,
                                             preexec_fn=functools.partial(resource.setrlimit, resource.RLIMIT_NOFILE,
                                                                          limits))
            except OSError as exc:
                return f"cannot run {self.binary}: {exc}"
        return None

    def exited(self, srv: EmbeddedServer) -> str | None:  # noqa: ARG002 - a hook
        code = self.proc.poll() if self.proc is not None else None
        return None if code is None else f"pgbouncer exited with status {code}"

    def probe(self, srv: EmbeddedServer, timeout: int) -> str | None:
        """Once it wrote its pid file (no answer is ours before): ``SELECT 1`` through it to the server, and
        ``SHOW VERSION`` on its console."""
        try:
            if int((srv.data_dir / "pgbouncer.pid").read_text().strip()) != self.proc.pid:
                return "it wrote no pid file"
        except (OSError, ValueError):
            return "it wrote no pid file"
        try:
            with connect(srv.dsn, connect_timeout_s=timeout, application_name="queue-bench embedded") as conn, \
                    translated():
                conn.execute("SELECT 1")
            console_rows(self.admin_dsn(srv.port), "SHOW VERSION", timeout_s=timeout)
        except EngineError as exc:
            return str(exc)
        return None

    def shutdown(self, srv: EmbeddedServer, problems: list[str]) -> None:  # noqa: ARG002 - a hook
        """SIGTERM (PgBouncer 1.18's immediate shutdown: its clients are the run's, already gone) and wait;
        SIGKILL after :data:`STOP_TIMEOUT_S`."""
        proc, self.proc = self.proc, None
        stop_child(proc, STOP_TIMEOUT_S, problems)


def fd_limits(needed: int) -> tuple[tuple[int, int], str | None]:
    """(soft, hard) ``RLIMIT_NOFILE`` for the pooler's process: at least ``needed`` (the hard limit raised too
    where this process may: :func:`can_raise_hard_limit`; else the soft one up to the hard one), and a note when
    it stays below."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return (soft, hard), None
    if hard == resource.RLIM_INFINITY or hard >= needed:
        return (needed, hard), None
    if can_raise_hard_limit():
        return (needed, needed), None
    return (hard, hard), (f"PgBouncer may need {needed} file descriptors and the hard limit is {hard} (raising it "
                          "needs CAP_SYS_RESOURCE): clients past it are refused; raise the limit, or run fewer workers")


def can_raise_hard_limit() -> bool:
    """True when this process may raise a hard resource limit: ``CAP_SYS_RESOURCE`` (bit 24) in its effective
    capabilities (``/proc/self/status``; root in a container may lack it)."""
    try:
        with open("/proc/self/status") as status:
            caps = next((line.split()[1] for line in status if line.startswith("CapEff:")), "0")
    except OSError:
        return False
    return bool(int(caps, 16) >> 24 & 1)


def read_upstream(dsn: str, pool_size: int) -> Upstream:
    """The server behind the pooler as a direct connection to ``dsn`` reaches it (libpq's defaults resolved), after
    checking that ``pool_size`` server connections fit in its free ones. Raises ConfigError (``POOL_SIZE``) or the
    adapter's refusal (``DSN``)."""
    with connect_dsn(dsn, application_name="queue-bench pooler check") as conn:
        info = conn.info
        room = connection_headroom(conn)
        upstream = Upstream(host=info.host, port=int(info.port), dbname=info.dbname, user=info.user,
                            password=info.password or None)
    if pool_size > room["available"]:
        raise ConfigError("POOL_SIZE", f"{pool_size} is above the server's {room['available']} free connections "
                                       f"(max_connections {room['max_connections']} - reserved {room['reserved']} - "
                                       f"in use {room['in_use']}); allowed: {option('pool_size')} from 1 to "
                                       f"{max(1, room['available'])}, or a server with a larger max_connections")
    return upstream


@contextlib.contextmanager
def embedded_pgbouncer(dsn_direct: str, mode: str, pool_size: int, clients: int, *,
                       base_dir: pathlib.Path | None = None, log: Callable[[str], None] = print) -> Iterator[Pooler]:
    """Start a throwaway PgBouncer in front of ``dsn_direct`` (``pool_mode`` ``mode``, ``default_pool_size``
    ``pool_size``, ``max_client_conn`` ``clients`` + :data:`CLIENT_MARGIN`), yield its :class:`Pooler` once a
    client reaches the server through it, stop it and delete its directory on exit. Raises ConfigError
    (``POOLER``: no binary; ``POOL_SIZE``: above the server's free connections) before anything is started,
    EmbeddedError when it does not start."""
    recipe = PgBouncerRecipe(read_upstream(dsn_direct, pool_size), mode, pool_size, clients + CLIENT_MARGIN)
    recipe.find_binaries()  # refused here, before the watchdog and the directory
    with embedded(recipe, recipe.max_client_conn, base_dir, log) as dsn:
        port = urllib.parse.urlsplit(dsn).port
        version = recipe.version(" ".join(str(v) for v in console_rows(recipe.admin_dsn(port), "SHOW VERSION")[0].values()))
        yield Pooler(kind="pgbouncer", dsn=dsn, dsn_direct=dsn_direct, admin_dsn=recipe.admin_dsn(port), mode=mode,
                     pool_size=pool_size, max_client_conn=recipe.max_client_conn, pid=recipe.proc.pid,
                     version=version, config_path=str(recipe.ini_path), upstream=recipe.upstream)
