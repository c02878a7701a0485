"""The embedded server lifecycle for every engine (each a :class:`Recipe`): a throwaway server in its own temporary
directory for one run, stopped and deleted however it ends (docs/architecture.md, "The embedded servers")."""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from typing import Callable, ContextManager, Iterator

from bench.engines import embedded_watchdog
from bench.engines.embedded_host import LOG_TAIL_LINES, RunAs, end_processes, free_port, log_tail, sigterm_as_exit
from bench.errors import RunFailed

__all__ = ["EmbeddedError", "EmbeddedServer", "Recipe", "START_TIMEOUT_S", "STOP_TIMEOUT_S", "embedded"]

START_TIMEOUT_S = 60
"""Seconds allowed from starting the server until a client connection succeeds."""

STOP_TIMEOUT_S = 60
"""Seconds the server's normal shutdown may take before a harder one."""

INIT_TIMEOUT_S = 120
"""Seconds the command creating the data directory may take."""

_PORT_ATTEMPTS = 3  # a port picked by bind(0) can be taken before the server binds it


class EmbeddedError(RunFailed):
    """The throwaway server could not be found, started or stopped; the message (for the user as is) ends
    with the last lines of the server's log when there is one."""


class Recipe:
    """How one engine's throwaway server is found, created, started, probed and stopped; one per server.
    ``users``/``create_user``: who runs it under root; ``wrap_commands``: run commands as that user via runuser
    (False: the server drops to it); ``extra_dirs``: made mode 0700; ``max_connections_range``: accepted."""

    label = "server"
    prefix = "qbench-"
    users: tuple[str, ...] = ()
    create_user: str | None = None
    user_reason = ""
    create_reason = ""
    wrap_commands = True
    init_word = "init"
    extra_dirs: tuple[str, ...] = ()
    max_connections_range: tuple[int, int] | None = None

    @classmethod
    def server(cls, max_connections: int, *, base_dir: pathlib.Path | None = None,
               log: Callable[[str], None] = print, **options) -> ContextManager[str]:
        """:func:`embedded` by a fresh recipe of this class made with ``options`` (e.g. PostgreSQL's
        ``pg_version``): ``with PostgresRecipe.server(20) as dsn: ...``."""
        return embedded(cls(**options), max_connections, base_dir, log)

    def find_binaries(self) -> None:
        """Find the binaries (kept on the recipe); raise a one-line error when there are none."""
        raise NotImplementedError

    def reach(self, srv: EmbeddedServer) -> None:
        """Make the binaries usable by ``srv.run_as`` (copied where it can enter them), or raise a one-line
        error; called before the server's directory is made. The machine's own need nothing (the default)."""

    def version_argv(self) -> list[str]:
        """The command printing the server binary's version."""
        raise NotImplementedError

    def version(self, out: str) -> str:
        """The version in ``out`` (that command's output); raise :class:`EmbeddedError` for a wrong server."""
        raise NotImplementedError

    def where(self) -> str:
        """Where the binaries are, for the starting line."""
        raise NotImplementedError

    def init_argv(self, srv: EmbeddedServer) -> list[str]:
        """The command creating the data directory ``srv.data_dir`` ([]: none)."""
        raise NotImplementedError

    def launch(self, srv: EmbeddedServer) -> str | None:
        """Start the server on ``srv.port``; None when started, else why not."""
        raise NotImplementedError

    def exited(self, srv: EmbeddedServer) -> str | None:  # noqa: ARG002 - a hook
        """Why the server is gone while it is awaited (None: it may still come up)."""
        return None

    def probe(self, srv: EmbeddedServer, timeout: int) -> str | None:
        """One attempt (``timeout`` s) to use the server as a client; None when it answered, else why not."""
        raise NotImplementedError

    def logs(self, srv: EmbeddedServer) -> tuple[pathlib.Path, ...]:
        """The server's logs, the one that says "already in use" first."""
        raise NotImplementedError

    def dsn(self, port: int) -> str:
        """The DSN of the server on 127.0.0.1:``port``."""
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        """The environment of the server's commands (None: this process's)."""
        return None

    def shutdown(self, srv: EmbeddedServer, problems: list[str]) -> None:
        """Stop the started server, appending to ``problems`` what went wrong."""
        raise NotImplementedError


class EmbeddedServer:
    """One throwaway server run by ``recipe``: :meth:`start`, :meth:`stop` (idempotent); its directory in
    ``base_dir`` (None: the system's temporary directory), told to ``on_root`` once made."""

    def __init__(self, recipe: Recipe, max_connections: int, base_dir: pathlib.Path | None,
                 log: Callable[[str], None]):
        self.recipe = recipe
        self.max_connections = max_connections
        self.base_dir = base_dir
        self.log = log
        self.on_root: Callable[[pathlib.Path], None] = lambda _path: None
        self.run_as = RunAs()
        self.root: pathlib.Path | None = None  # the owned temporary directory; data/ inside
        self.port: int | None = None
        self.version = "?"
        self.started = False  # from the moment the server may exist until stop has dealt with it
        self._lock = threading.Lock()
        self.stopped = False  # once stop has run to its end (or found nothing to stop)

    @property
    def data_dir(self) -> pathlib.Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def dsn(self) -> str:
        return self.recipe.dsn(self.port)

    def run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Run ``argv`` in the directory (as the server's user when the recipe wraps commands), output captured."""
        extra: dict = {}
        if self.recipe.wrap_commands:
            argv, extra = self.run_as.wrap(argv)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.root,
                              stdin=subprocess.DEVNULL, env=self.recipe.env(), **extra)

    # -- start -------------------------------------------------------------

    def start(self) -> str:
        """Find the binaries, create the data directory, start the server; its DSN once it accepts a
        connection. Raises the recipe's ConfigError (no binaries, nothing created) or :class:`EmbeddedError`
        (not started within :data:`START_TIMEOUT_S`, or a step failed; what started is left for ``stop``)."""
        self.recipe.find_binaries()
        self.run_as = self._pick_run_as()
        self.recipe.reach(self)
        self._make_root()
        t_begin = time.monotonic()
        self._check_binaries()
        self._init()
        self._launch(deadline=time.monotonic() + START_TIMEOUT_S)
        self.log(f"embedded {self.recipe.label} ready at {self.dsn} "
                 f"({self.recipe.init_word} + start {time.monotonic() - t_begin:.1f} s)")
        return self.dsn

    def _pick_run_as(self) -> RunAs:
        recipe = self.recipe
        if os.geteuid() != 0:
            return RunAs()
        for name in (*recipe.users, *([recipe.create_user] if recipe.create_user else [])):
            with contextlib.suppress(KeyError):
                pw = pwd.getpwnam(name)
                return RunAs(name, pw.pw_uid, pw.pw_gid)
        if recipe.create_user is None:
            return RunAs("root", 0, 0)
        name = recipe.create_user
        self.log(f"creating system user {name!r} to run {recipe.label} ({recipe.create_reason})")
        try:
            err = subprocess.run([shutil.which("useradd") or "/usr/sbin/useradd", "--system", "--no-create-home",
                                  name], capture_output=True, text=True, timeout=30).stderr.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            err = str(exc)
        try:  # also covers a concurrent run having created it first
            pw = pwd.getpwnam(name)
        except KeyError:
            raise EmbeddedError(f"running as root and could not create system user {name!r} for {recipe.label} "
                                f"({err or 'useradd failed'}); run as a non-root user or pass DSN=") from None
        return RunAs(name, pw.pw_uid, pw.pw_gid)

    def servers_dir(self) -> pathlib.Path:
        """Where the server's directory is made: ``base_dir``, else the system's temporary directory. Raises
        EmbeddedError when the server's user cannot enter it or a parent."""
        base = self.base_dir if self.base_dir is not None else pathlib.Path(tempfile.gettempdir())
        base = base.resolve()
        if self.run_as.other_user:
            for parent in (*reversed(base.parents), base):
                if not self.run_as.can_traverse(parent):
                    where = ("pick a base directory" if self.base_dir is not None
                             else "point TMPDIR at a directory")
                    raise EmbeddedError(
                        f"user {self.run_as.name!r} ({self.recipe.user_reason}) cannot enter {parent} (mode "
                        f"{stat.filemode(parent.stat().st_mode)}); {where} whose parents are world-traversable, "
                        "e.g. under /tmp")
        return base

    def _make_root(self) -> None:
        """Make the temporary directory in :meth:`servers_dir` (EmbeddedError when the server's user cannot
        enter it), tell ``on_root``, give it to the server's user."""
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        self.root = pathlib.Path(tempfile.mkdtemp(prefix=self.recipe.prefix, dir=str(self.servers_dir())))
        self.on_root(self.root)
        run_as = self.run_as
        if run_as.other_user:
            os.chown(self.root, run_as.uid, run_as.gid)
        for name in self.recipe.extra_dirs:
            (self.root / name).mkdir(mode=0o700)
            if run_as.other_user:
                os.chown(self.root / name, run_as.uid, run_as.gid)

    def _check_binaries(self) -> None:
        argv = self.recipe.version_argv()
        try:
            proc = self.run(argv, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"cannot run {argv[0]}: {exc}") from exc
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            who = f" as user {self.run_as.name!r}" if self.recipe.wrap_commands and self.run_as.other_user else ""
            raise EmbeddedError(f"cannot run {argv[0]}{who}: {out}")
        self.version = self.recipe.version(out)

    def _init(self) -> None:
        argv = self.recipe.init_argv(self)
        if not argv:  # nothing to create (PgBouncer: its launch writes its files)
            return
        name = pathlib.Path(argv[0]).name
        try:
            proc = self.run(argv, timeout=INIT_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedError(f"{name} failed: {exc}") from exc
        if proc.returncode != 0:
            out = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise EmbeddedError(f"{name} failed (exit {proc.returncode}):\n{out}")

    def _launch(self, deadline: float) -> None:
        """Start the server on a free port (at most :data:`_PORT_ATTEMPTS`) and wait until it answers."""
        recipe = self.recipe
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = free_port()
            running = f"; running as {self.run_as.name}" if self.run_as.name else ""
            self.log(f"embedded {recipe.label} {self.version} starting in {self.root} on port {self.port} "
                     f"({recipe.where()}{running})")
            self.started = True  # from here on stop() must look for a server
            why = recipe.launch(self) or self._wait_ready(deadline)
            if why is None:
                return
            first_log = recipe.logs(self)[0]
            if attempt < _PORT_ATTEMPTS and "already in use" in log_tail(first_log):
                self.log(f"port {self.port} was taken meanwhile; retrying on another port")
                first_log.unlink(missing_ok=True)
                continue
            raise EmbeddedError(f"embedded {recipe.label} failed to start ({why}); last {LOG_TAIL_LINES} lines of "
                                f"the server log:\n{log_tail(*recipe.logs(self))}")

    def _wait_ready(self, deadline: float) -> str | None:
        """Probe the server until it answers (None) or is gone, or ``deadline`` passes (why not)."""
        why = "no answer"
        while True:
            gone = self.recipe.exited(self)
            if gone is not None:
                return gone
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"no connection accepted within {START_TIMEOUT_S} s: {why}"
            why = self.recipe.probe(self, max(1, min(5, int(remaining))))
            if why is None:
                return None
            time.sleep(0.05)

    # -- stop --------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server, end whatever else names its data directory, delete the directory, log one line;
        safe to repeat (atexit, a second Ctrl-C)."""
        with self._lock:
            if self.stopped or self.root is None:
                self.stopped = True
                return
            t0 = time.monotonic()
            problems: list[str] = []
            if self.started:
                self.recipe.shutdown(self, problems)
            if self.data_dir.exists():
                end_processes(self.data_dir)
            self.started = False
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                problems.append(f"could not remove {self.root}")
            self.stopped = True
            note = f" ({'; '.join(problems)})" if problems else ""
            self.log(f"embedded {self.recipe.label} stopped in {time.monotonic() - t0:.1f} s, data dir removed{note}")


@contextlib.contextmanager
def embedded(recipe: Recipe, max_connections: int, base_dir: pathlib.Path | None = None,
             log: Callable[[str], None] = print) -> Iterator[str]:
    """Start a throwaway server by ``recipe``, yield its DSN, stop and delete it on exit; ``max_connections``
    is clipped into ``recipe.max_connections_range``. Raises ValueError (``max_connections`` not a positive
    int), :class:`EmbeddedError` or the recipe's ConfigError."""
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ValueError(f"max_connections must be a positive int, got {max_connections!r}")
    setting = max_connections
    if recipe.max_connections_range is not None:
        low, high = recipe.max_connections_range
        setting = min(max(max_connections, low), high)
        if setting != max_connections:
            log(f"max_connections {max_connections} is outside {recipe.label}'s {low}..{high}; "
                f"the server gets {setting}")
    server = EmbeddedServer(recipe, setting, pathlib.Path(base_dir) if base_dir is not None else None, log)
    watchdog = embedded_watchdog.spawn()  # for a death no hook survives (kill -9)
    server.on_root = watchdog.guard
    atexit.register(server.stop)
    try:
        with sigterm_as_exit():
            try:
                yield server.start()
            finally:
                server.stop()
    finally:
        if server.stopped:
            atexit.unregister(server.stop)
            watchdog.close()
