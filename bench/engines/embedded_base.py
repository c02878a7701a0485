"""What both engines' throwaway servers share: the temporary directory they live in and the shape
of their stop.

Each engine's ``embedded_server.Server`` subclasses :class:`ThrowawayServer` and adds how its server
is installed, started and shut down (:meth:`ThrowawayServer._shutdown`). The directory is made by
:meth:`ThrowawayServer._make_root` and handed to ``on_root`` at once (the watchdog of
:mod:`bench.engines.embedded_watchdog` guards it from then on); :meth:`ThrowawayServer.stop` shuts
the server down, deletes the directory and logs one line, however often it is called.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import tempfile
import threading
import time
from typing import Callable

__all__ = ["ThrowawayServer"]


class ThrowawayServer:
    """A server in a temporary directory of its own, removed by :meth:`stop` (idempotent).

    Subclasses set :attr:`label` (the engine in log lines), :attr:`prefix` (of the directory's
    name), :attr:`error` (the exception :meth:`_make_root` raises) and implement
    :meth:`_shutdown`. ``max_connections`` is the server's setting; the directory is made in
    ``base_dir`` (None: the system's temporary directory); ``log`` receives short progress lines.
    """

    label = "server"
    prefix = "qbench-"
    error: type[Exception] = RuntimeError

    def __init__(self, max_connections: int, base_dir: pathlib.Path | None, log: Callable[[str], None]):
        self.max_connections = max_connections
        self.base_dir = base_dir
        self.log = log
        self.on_root: Callable[[pathlib.Path], None] = lambda _path: None  # told the directory once made
        self.root: pathlib.Path | None = None  # the owned temporary directory; data/ inside
        self.port: int | None = None
        self.version = "?"
        self.started = False  # from the moment the server may exist until stop has dealt with it
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def data_dir(self) -> pathlib.Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def stopped(self) -> bool:
        """True once ``stop`` has run to its end (or found nothing to stop)."""
        return self._stopped

    def _make_root(self, owner: tuple[str, int, int] | None, can_traverse: Callable[[pathlib.Path], bool],
                   why: str) -> None:
        """Make the temporary directory (``base_dir`` first, if missing) and tell ``on_root``. With an
        ``owner`` (user name, uid, gid: the server runs as another user) give it the directory and
        raise :attr:`error` when that user cannot enter one of its parents; ``why`` says why the
        server runs as that user, for the message."""
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        self.root = pathlib.Path(
            tempfile.mkdtemp(prefix=self.prefix, dir=str(self.base_dir) if self.base_dir else None)
        ).resolve()
        self.on_root(self.root)
        if owner is None:
            return
        name, uid, gid = owner
        os.chown(self.root, uid, gid)
        for parent in self.root.parents:
            if not can_traverse(parent):
                raise self.error(
                    f"user {name!r} ({why}) cannot enter {parent} (mode {stat.filemode(parent.stat().st_mode)}); "
                    "pick a base directory whose parents are world-traversable, e.g. under /tmp"
                )

    def _shutdown(self, problems: list[str]) -> None:
        """Stop the server's processes, appending to ``problems`` what went wrong; called by
        :meth:`stop` under its lock, with the directory still in place."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server (:meth:`_shutdown`) and delete the temporary directory, then log one line.

        Safe to call more than once and from atexit; a call interrupted halfway (e.g. by a second
        Ctrl-C) can be repeated.
        """
        with self._lock:
            if self._stopped or self.root is None:
                self._stopped = True
                return
            t0 = time.monotonic()
            problems: list[str] = []
            self._shutdown(problems)
            self.started = False
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                problems.append(f"could not remove {self.root}")
            self._stopped = True
            note = f" ({'; '.join(problems)})" if problems else ""
            self.log(f"embedded {self.label} stopped in {time.monotonic() - t0:.1f} s, data dir removed{note}")
