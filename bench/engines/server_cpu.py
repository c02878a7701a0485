"""The database server's own CPU time, read from ``/proc`` (through psutil) when the server runs on this host:
the client backends apart from the rest of the server (docs/results.md, "Cost per job")."""

from __future__ import annotations

from typing import Mapping

import psutil

#: The kinds of server process whose CPU is counted apart.
KINDS = ("backends", "monitor", "background")

#: Process names a PostgreSQL server's processes carry (``comm``), and MariaDB's.
SERVER_NAMES = {"postgres", "postmaster", "mariadbd", "mysqld"}


def _cpu_us(times) -> int:
    return int((times.user + times.system) * 1e6)


class ServerCpu:
    """Cumulative CPU (µs) of a server's processes since construction, by kind: ``backends`` (client backends),
    ``monitor`` (the backends of the tool's own monitor) and ``background`` (the postmaster, its other
    children, and what processes that exited between two reads used after their last read). A
    process-per-connection server (PostgreSQL) has children; a threaded one (MariaDB) is one process, all
    of it ``backends``."""

    def __init__(self, root: psutil.Process, threaded: bool = False):
        self.root = root
        self.threaded = threaded
        self.totals_us = dict.fromkeys(KINDS, 0)
        self._last: dict[int, tuple[str, int]] = {}  # pid -> (kind, cpu µs at the last read)
        self._root_us, self._reaped_us = self._root_now()
        self.read({})
        self.totals_us = dict.fromkeys(KINDS, 0)

    @classmethod
    def local(cls, backend_pid: int, threaded: bool = False) -> "ServerCpu | None":
        """The meter of the server whose process (a backend's, or the threaded server's) is ``backend_pid``
        when that process is on this host and is a database server's; None otherwise (another host)."""
        try:
            process = psutil.Process(backend_pid)
            root = process if threaded else process.parent()
            if root is None or root.name() not in SERVER_NAMES or process.name() not in SERVER_NAMES:
                return None
            return cls(root, threaded)
        except (psutil.Error, OSError):
            return None

    def _root_now(self) -> tuple[int, int]:
        times = self.root.cpu_times()
        return _cpu_us(times), int((times.children_user + times.children_system) * 1e6)

    def read(self, kinds: Mapping[int, str]) -> dict[str, int]:
        """``{kind: µs}`` used since construction (:data:`KINDS`); ``kinds``: the kind of each client backend's
        process id now (a child not among them counts as ``background``). Raises psutil.Error when the
        server is gone."""
        root_us, reaped_us = self._root_now()
        if self.threaded:
            self.totals_us["backends"] += root_us - self._root_us
            self._root_us = root_us
            return dict(self.totals_us)
        self.totals_us["background"] += root_us - self._root_us
        now: dict[int, tuple[str, int]] = {}
        for child in self.root.children():
            try:
                used = _cpu_us(child.cpu_times())
            except psutil.Error:  # exited since listed: its time reaches the parent's children time
                continue
            kind = kinds.get(child.pid, "background")
            now[child.pid] = (kind, used)
            self.totals_us[kind] += used - self._last.get(child.pid, (kind, 0))[1]
        gone = [self._last[pid] for pid in self._last.keys() - now.keys()]
        # what the processes that exited used after their last read: the parent's children time grew by
        # their whole lives; their last reads were counted already
        rest = max(0, reaped_us - self._reaped_us - sum(used for _, used in gone))
        if rest:
            self.totals_us[gone[0][0] if gone and len({k for k, _ in gone}) == 1 else "background"] += rest
        self._last, self._root_us, self._reaped_us = now, root_us, reaped_us
        return dict(self.totals_us)
