"""The default database: a throwaway PostgreSQL server started for one run.

When the user gives no ``DSN``/``DATABASE_URL``, queue-bench starts its own
PostgreSQL in a fresh temporary data directory, runs against it over TCP on
127.0.0.1, and stops it and deletes the data directory afterwards::

    with embedded_postgres(max_connections=workers + 10) as dsn:
        run_benchmark(dsn)     # dsn == "postgresql://postgres@127.0.0.1:PORT/postgres"

Server binaries (``initdb``, ``pg_ctl``, ``postgres``) are taken from the
machine first (``pg_config --bindir``, then the highest
``/usr/lib/postgresql/*/bin``, then ``PATH``) and otherwise from the
``pgserver`` wheel, which bundles a PostgreSQL build.

The server keeps PostgreSQL's durability defaults (``fsync=on``,
``synchronous_commit=on``): queue-bench measures a real queue, so commits pay
for the WAL flush.  Only ``initdb`` runs with ``--no-sync`` (it writes the
empty cluster; nothing there needs to survive a crash).

``initdb`` refuses to run as root, so under root the server runs as the
``postgres`` system user if it exists, otherwise as a ``qbench`` system user
created on first use.

The server is stopped on normal exit, on any exception (including
``KeyboardInterrupt``), on SIGTERM (while the context is open in the main
thread and no other SIGTERM handler was installed), and by an ``atexit``
fallback.  Only SIGKILL of the Python process can leave it running.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import glob
import os
import pathlib
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from typing import Callable, Iterator

from bench.errors import RunFailed

__all__ = ["EmbeddedError", "ServerBinaries", "find_server_binaries", "embedded_postgres"]

START_TIMEOUT_S = 60
"""Seconds allowed from ``pg_ctl start`` until a client connection succeeds."""

STOP_TIMEOUT_S = 60
"""Seconds ``pg_ctl stop -m fast`` may take (it writes a shutdown checkpoint)."""

SHARED_BUFFERS = "256MB"
FALLBACK_USER = "qbench"
_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
_LOG_TAIL_LINES = 20
_PORT_ATTEMPTS = 3  # a port picked by bind(0) can be taken before the server binds it
_MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


class EmbeddedError(RunFailed):
    """The throwaway PostgreSQL server could not be found, started or stopped.

    The message is meant for the user as is: it says what failed and, where
    the server got as far as writing a log, ends with the last lines of it.
    """


@dataclasses.dataclass(frozen=True)
class ServerBinaries:
    """A directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    ``source`` says where it was found: ``"pg_config"``,
    ``"/usr/lib/postgresql"``, ``"PATH"`` or ``"pgserver wheel"``.
    """

    bindir: pathlib.Path
    source: str

    @property
    def initdb(self) -> str:
        return str(self.bindir / "initdb")

    @property
    def pg_ctl(self) -> str:
        return str(self.bindir / "pg_ctl")

    @property
    def postgres(self) -> str:
        return str(self.bindir / "postgres")


# ---------------------------------------------------------------------------
# Finding binaries


def _is_server_bindir(path: pathlib.Path) -> bool:
    return all(os.access(path / name, os.X_OK) and (path / name).is_file() for name in _SERVER_BINARIES)


def _version_key(path: str) -> tuple[int, ...]:
    # /usr/lib/postgresql/15/bin -> (15,); non-numeric names sort first
    name = pathlib.Path(path).parent.name
    return tuple(int(p) for p in re.findall(r"\d+", name)) or (-1,)


def _pgserver_bindir() -> pathlib.Path | None:
    try:
        from pgserver import _commands  # type: ignore[import-not-found]
    except Exception:  # not installed, or broken on this platform
        return None
    path = getattr(_commands, "POSTGRES_BIN_PATH", None)
    return pathlib.Path(path) if path else None


def find_server_binaries() -> ServerBinaries:
    """Locate PostgreSQL server binaries.

    Order: the directory ``pg_config --bindir`` names (if it holds
    ``initdb``); the highest-numbered ``/usr/lib/postgresql/*/bin``; the
    directory of ``initdb`` on ``PATH`` (symlinks resolved); the binaries
    bundled in the ``pgserver`` wheel.  A candidate counts only if it holds
    executable ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises:
        EmbeddedError: none found (one-line message telling the user to pass DSN=).
    """
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and _is_server_bindir(pathlib.Path(out)):
            return ServerBinaries(pathlib.Path(out), "pg_config")

    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        if _is_server_bindir(pathlib.Path(bindir)):
            return ServerBinaries(pathlib.Path(bindir), "/usr/lib/postgresql")

    initdb = shutil.which("initdb")
    if initdb:
        bindir = pathlib.Path(initdb).resolve().parent
        if _is_server_bindir(bindir):
            return ServerBinaries(bindir, "PATH")

    bindir = _pgserver_bindir()
    if bindir is not None and _is_server_bindir(bindir):
        return ServerBinaries(bindir, "pgserver wheel")

    raise EmbeddedError(
        "no PostgreSQL server binaries found (initdb, pg_ctl, postgres: not via pg_config, "
        "/usr/lib/postgresql/*/bin, PATH or the pgserver package); "
        "install PostgreSQL or pgserver, or pass DSN=postgresql://... to use an existing database"
    )


# ---------------------------------------------------------------------------
# Running as an unprivileged user


@dataclasses.dataclass(frozen=True)
class _RunAs:
    """How to run server commands: as ourselves (``name is None``) or as another user."""

    name: str | None = None
    uid: int = -1
    gid: int = -1

    def wrap(self, argv: list[str]) -> tuple[list[str], dict]:
        """Return (argv, extra subprocess kwargs) running ``argv`` as this user."""
        if self.name is None:
            return argv, {}
        runuser = shutil.which("runuser") or next(
            (p for p in ("/usr/sbin/runuser", "/sbin/runuser") if os.access(p, os.X_OK)), None
        )
        if runuser:
            return [runuser, "-u", self.name, "--", *argv], {}
        # No runuser: let subprocess drop privileges in the child (thread-safe, unlike preexec_fn).
        groups = os.getgrouplist(self.name, self.gid)
        return argv, {"user": self.uid, "group": self.gid, "extra_groups": groups}

    def can_traverse(self, path: pathlib.Path) -> bool:
        if self.name is None:
            return os.access(path, os.X_OK)
        st = path.stat()
        if st.st_uid == self.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid in os.getgrouplist(self.name, self.gid):
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)


def _run_as(log: Callable[[str], None]) -> _RunAs:
    """Pick the user to run initdb/pg_ctl as; creates ``qbench`` under root if needed."""
    if os.geteuid() != 0:
        return _RunAs()
    for name in ("postgres", FALLBACK_USER):
        try:
            pw = pwd.getpwnam(name)
            return _RunAs(name, pw.pw_uid, pw.pw_gid)
        except KeyError:
            continue
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    log(f"creating system user {FALLBACK_USER!r} to run PostgreSQL (initdb refuses root)")
    try:
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", FALLBACK_USER],
            capture_output=True, text=True, timeout=30,
        )
        err = proc.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        err = str(exc)
    try:  # also covers a concurrent run having created it first
        pw = pwd.getpwnam(FALLBACK_USER)
    except KeyError:
        raise EmbeddedError(
            f"running as root and could not create system user {FALLBACK_USER!r} for PostgreSQL "
            f"({err or 'useradd failed'}); run as a non-root user or pass DSN="
        ) from None
    return _RunAs(FALLBACK_USER, pw.pw_uid, pw.pw_gid)


# ---------------------------------------------------------------------------
# Helpers


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: pathlib.Path, n: int = _LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no server log)"
    return "\n".join(lines[-n:]) if lines else "(server log is empty)"


def _postmaster_pid(data_dir: pathlib.Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` has exited (a zombie counts as exited)."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _kill_leftovers(data_dir: pathlib.Path, pid: int | None = None) -> None:
    """Last resort: SIGKILL the postmaster (and its children) and any process naming ``data_dir``."""
    import psutil

    victims: dict[int, psutil.Process] = {}
    pid = pid or _postmaster_pid(data_dir)
    if pid:
        try:
            proc = psutil.Process(pid)
            if "postgres" in proc.name() or "postmaster" in proc.name():
                victims[pid] = proc
                for child in proc.children(recursive=True):
                    victims[child.pid] = child
        except psutil.Error:
            pass
    needle = str(data_dir)
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(needle in arg for arg in proc.info["cmdline"] or ()):
                victims[proc.pid] = proc
        except psutil.Error:
            pass
    victims.pop(os.getpid(), None)
    for proc in victims.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(victims.values()), timeout=10)


# ---------------------------------------------------------------------------
# The server


class _Server:
    """One throwaway cluster: created by ``start``, removed by ``stop`` (idempotent)."""

    def __init__(self, max_connections: int, base_dir: pathlib.Path | None, log: Callable[[str], None]):
        self.max_connections = max_connections
        self.base_dir = base_dir
        self.log = log
        self.root: pathlib.Path | None = None  # owned temp dir: data/ + server.log
        self.port: int | None = None
        self.run_as = _RunAs()
        self.bins: ServerBinaries | None = None
        self.version = "?"
        self.started = False
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def data_dir(self) -> pathlib.Path:
        assert self.root is not None
        return self.root / "data"

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
        self.bins = find_server_binaries()
        self.run_as = _run_as(self.log)
        self._make_root()
        t_begin = time.monotonic()
        self._check_binaries()
        self._initdb()
        t0 = time.monotonic()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = _free_port()
            self.log(
                f"embedded PostgreSQL {self.version} starting in {self.root} on port {self.port} "
                f"(binaries: {self.bins.bindir}, {self.bins.source}"
                + (f"; running as {self.run_as.name}" if self.run_as.name else "") + ")"
            )
            ok, why = self._pg_ctl_start()
            if ok:
                break
            if attempt < _PORT_ATTEMPTS and "already in use" in _tail(self.logfile):
                self.log(f"port {self.port} was taken meanwhile; retrying on another port")
                self.logfile.unlink(missing_ok=True)
                continue
            raise EmbeddedError(
                f"embedded PostgreSQL failed to start ({why}); last {_LOG_TAIL_LINES} lines of "
                f"the server log:\n{_tail(self.logfile)}"
            )
        self._wait_connectable(deadline=t0 + START_TIMEOUT_S)
        self.log(
            f"embedded PostgreSQL ready at {self.dsn} "
            f"(initdb + start {time.monotonic() - t_begin:.1f} s)"
        )
        return self.dsn

    def _make_root(self) -> None:
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        self.root = pathlib.Path(
            tempfile.mkdtemp(prefix="qbench-pg-", dir=str(self.base_dir) if self.base_dir else None)
        ).resolve()
        if self.run_as.name is None:
            return
        os.chown(self.root, self.run_as.uid, self.run_as.gid)
        for parent in self.root.parents:
            if not self.run_as.can_traverse(parent):
                raise EmbeddedError(
                    f"user {self.run_as.name!r} (PostgreSQL runs as it, initdb refuses root) cannot "
                    f"enter {parent} (mode {stat.filemode(parent.stat().st_mode)}); "
                    "pick a base directory whose parents are world-traversable, e.g. under /tmp"
                )

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
        argv = [
            self.bins.initdb, "-D", str(self.data_dir),
            "--auth=trust", "-U", "postgres", "--encoding=UTF8",
            "--locale=C",  # independent of whatever LANG the caller has (possibly not installed)
            "--no-sync",   # speeds up initdb only; the running server keeps fsync on
        ]
        try:
            proc = self._run(argv, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"initdb failed: {exc}") from exc
        if proc.returncode != 0:
            out = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_LOG_TAIL_LINES:])
            raise EmbeddedError(f"initdb failed (exit {proc.returncode}):\n{out}")

    def _server_options(self) -> str:
        socket_dir = str(self.data_dir)
        if len(socket_dir) + len(f"/.s.PGSQL.{self.port}") > _MAX_SOCKET_PATH:
            socket_dir = ""  # path too long for a Unix socket; TCP only (all we use)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            # PostgreSQL list syntax: double quotes keep spaces/commas in the path intact
            "unix_socket_directories": f'"{socket_dir}"' if socket_dir else "",
            "max_connections": str(self.max_connections),
            "shared_buffers": SHARED_BUFFERS,
        }
        if self._pg_stat_statements_library():
            # The tool owns this whole server: per-statement statistics for the claim.
            settings["shared_preload_libraries"] = "pg_stat_statements"
        # pg_ctl hands -o to /bin/sh, hence shlex.quote
        return " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in settings.items())

    def _pg_stat_statements_library(self) -> bool:
        """True when the server's library directory holds pg_stat_statements (a contrib module)."""
        assert self.bins is not None
        return any(self.bins.bindir.parent.glob("lib/**/pg_stat_statements.so"))

    def _pg_ctl_start(self) -> tuple[bool, str]:
        assert self.bins is not None
        argv = [
            self.bins.pg_ctl, "start", "-D", str(self.data_dir), "-l", str(self.logfile),
            "-w", "-t", str(START_TIMEOUT_S), "-o", self._server_options(),
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
                    f"({last}); last {_LOG_TAIL_LINES} lines of the server log:\n{_tail(self.logfile)}"
                )
            try:
                with psycopg.connect(self.dsn, connect_timeout=max(1, min(5, int(remaining))),
                                     autocommit=True) as conn:
                    conn.execute("SELECT 1")
                    if self._pg_stat_statements_library():
                        try:
                            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                        except psycopg.Error as exc:  # e.g. the extension's SQL files are not installed
                            self.log(f"pg_stat_statements not available on the embedded server: {exc}")
                return
            except psycopg.Error as exc:
                last = exc
                time.sleep(0.1)

    # -- stop --------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server (fast shutdown, escalating if needed) and delete the temp dir.

        Safe to call more than once and from atexit; a call interrupted halfway
        (e.g. by a second Ctrl-C) can be repeated.
        """
        with self._lock:
            if self._stopped or self.root is None:
                self._stopped = True
                return
            t0 = time.monotonic()
            problems = []
            if self.started and self.bins is not None and (self.data_dir / "postmaster.pid").exists():
                pid = _postmaster_pid(self.data_dir)
                if not self._pg_ctl_stop("fast", STOP_TIMEOUT_S):
                    problems.append("fast shutdown failed")
                    if not self._pg_ctl_stop("immediate", 30):
                        problems.append("immediate shutdown failed; killed")
                        _kill_leftovers(self.data_dir)
                # pg_ctl -w returns once postmaster.pid is gone, a moment before the
                # process itself exits; wait so that "stopped" really means no process.
                if pid and not _wait_gone(pid, timeout=10):
                    problems.append(f"postmaster {pid} lingered; killed")
                    _kill_leftovers(self.data_dir, pid)
            elif self.started:
                # Interrupted between pg_ctl's fork and the postmaster writing its pid
                # file: find it by its command line (-D <our unique data dir>).
                _kill_leftovers(self.data_dir)
            self.started = False
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                problems.append(f"could not remove {self.root}")
            self._stopped = True
            note = f" ({'; '.join(problems)})" if problems else ""
            self.log(f"embedded PostgreSQL stopped in {time.monotonic() - t0:.1f} s, data dir removed{note}")

    def _pg_ctl_stop(self, mode: str, timeout: int) -> bool:
        assert self.bins is not None
        argv = [self.bins.pg_ctl, "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", str(timeout)]
        try:
            proc = self._run(argv, timeout=timeout + 15)
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0 or not (self.data_dir / "postmaster.pid").exists()


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While open, turn SIGTERM into SystemExit so ``finally`` blocks (and stop) run.

    Only in the main thread and only if SIGTERM still has its default action,
    so handlers installed by the caller (or Locust) are left alone.
    """
    installed = False
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _raise_exit)
                installed = True
    try:
        yield
    finally:
        if installed and signal.getsignal(signal.SIGTERM) is _raise_exit:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_exit(signum, frame):  # noqa: ARG001 - signal handler signature
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def embedded_postgres(
    max_connections: int,
    *,
    base_dir: pathlib.Path | None = None,
    log: Callable[[str], None] = print,
) -> Iterator[str]:
    """Start a throwaway PostgreSQL server; yield its DSN; stop it and delete it on exit.

    Args:
        max_connections: the server's ``max_connections`` (connections, int >= 1).
            Pass the run's workers plus headroom (monitor, reaper, producers, and
            PostgreSQL's own 3 ``superuser_reserved_connections``).
        base_dir: directory to create the temporary cluster directory in
            (created if missing); default: the system temp dir.  Under root its
            parents must be traversable by the ``postgres``/``qbench`` user.
        log: receives short progress lines (one ``str`` per call, no newline).

    Yields:
        ``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust auth, TCP on
        loopback only).  The server listens on 127.0.0.1:PORT, its Unix socket
        lives in the data directory, ``shared_buffers=256MB``, and fsync /
        synchronous_commit are at their defaults (on).

    Raises:
        EmbeddedError: no binaries (message says to pass DSN=), initdb failed,
            the server did not start or accept a connection within 60 s
            (message includes the last 20 lines of the server log), or running
            as root without a usable unprivileged user.
        ValueError: ``max_connections`` is not a positive int.

    On leaving the block, normally or by any exception (``KeyboardInterrupt``
    included), the server gets ``pg_ctl stop -m fast -w`` (escalating to
    immediate shutdown, then SIGKILL) and the temporary directory is removed.
    An ``atexit`` hook does the same if the block is never left cleanly.
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ValueError(f"max_connections must be a positive int, got {max_connections!r}")
    server = _Server(max_connections, pathlib.Path(base_dir) if base_dir is not None else None, log)
    atexit.register(server.stop)
    try:
        with _sigterm_as_exit():
            try:
                dsn = server.start()
                yield dsn
            finally:
                server.stop()
    finally:
        if server._stopped:
            atexit.unregister(server.stop)
