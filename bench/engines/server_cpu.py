"""The database server's own CPU time, read from ``/proc/<pid>/stat`` when the server runs on this host: its
client backends apart from the rest of the server (docs/results.md, "Cost per job")."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import psutil

from bench.measure.machine_cpu import proc_times

#: Process names a PostgreSQL server's processes carry (``comm``), and MariaDB's.
SERVER_NAMES = {"postgres", "postmaster", "mariadbd", "mysqld"}
#: The kinds of server process whose CPU is counted apart.
KINDS = ("backends", "monitor", "background")
#: The kind given to the root's children that do not serve the run (other databases' sessions): followed, never counted.
OTHER = "other"


def _stat_us(pid: int) -> tuple[int, int]:
    """(user + system CPU µs of process ``pid``, that of its waited-for children). Raises OSError when the
    process is gone."""
    times = proc_times(pid)
    return round(times.own_s * 1e6), round(times.reaped_s * 1e6)


class ServerCpu:
    """Cumulative CPU (µs) of a server's processes since construction, by kind (:data:`KINDS`): ``backends``,
    ``monitor`` (the tool's monitor's backends) and ``background`` (the postmaster, its background processes,
    and what processes that exited between two reads used after their last read). A process-per-connection
    server (PostgreSQL) is read process by process; a threaded one (MariaDB) is one process, all of it
    ``backends``."""

    def __init__(self, root_pid: int, threaded: bool = False):
        self.root_pid, self.threaded = root_pid, threaded
        self.totals_us = dict.fromkeys(KINDS, 0)
        self._last: dict[int, tuple[str, int]] = {}  # pid -> (kind, cpu µs at the last read)
        self._root_us, self._reaped_us = _stat_us(root_pid)
        self._primed = threaded  # a process-per-connection server's first read only notes where each process is

    @property
    def pids(self) -> tuple[int, ...]:
        """The processes read at the last :meth:`read` that serve the run: the root (the postmaster, or a threaded
        server's one process) first, then the background processes and this database's backends it was given
        then (not the root's other children: other databases' sessions)."""
        return (self.root_pid, *(pid for pid, (kind, _) in self._last.items() if kind != OTHER))

    @classmethod
    def local(cls, backend_pid: int) -> "ServerCpu | None":
        """The meter of the process-per-connection server (PostgreSQL) one of whose backends is ``backend_pid``,
        when that process is on this host and is a database server's; None otherwise (another host)."""
        try:
            process = psutil.Process(backend_pid)
            root = process.parent()
            if root is None or root.name() not in SERVER_NAMES or process.name() not in SERVER_NAMES:
                return None
            return cls(root.pid)
        except (psutil.Error, OSError):
            return None

    @classmethod
    def threaded_server(cls, pid_file: str, port: int) -> "ServerCpu | None":
        """The meter of a threaded server (MariaDB) whose pid file, as the server names it, is on this host and
        whose process listens on TCP ``port``; None otherwise (another host, or a file of another server)."""
        try:
            process = psutil.Process(int(Path(pid_file).read_text().split()[0]))
            listening = any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                            for c in process.net_connections(kind="tcp"))
            return cls(process.pid, threaded=True) if listening and process.name() in SERVER_NAMES else None
        except (psutil.Error, OSError, ValueError, IndexError):
            return None

    def read(self, kinds: Mapping[int, str]) -> dict[str, int]:
        """``{kind: µs}`` used since construction; ``kinds``: the kind of each of the server's processes that serve
        this run now (a process-per-connection server's; the server lists them). The root's other children (other
        databases' sessions) are followed too but never counted, so that when one exits its life is not taken
        for the run's. Raises OSError when the server is gone."""
        root_us, reaped_us = _stat_us(self.root_pid)
        if self.threaded:
            self.totals_us["backends"] += root_us - self._root_us
            self._root_us = root_us
            return dict(self.totals_us)
        if self._primed:
            self.totals_us["background"] += root_us - self._root_us
        now: dict[int, tuple[str, int]] = {}
        for pid, kind in {**dict.fromkeys(self._children(), OTHER), **kinds}.items():
            try:
                used = _stat_us(pid)[0]
            except OSError:  # exited since listed: its time reaches the parent's children time
                continue
            now[pid] = (kind, used)
            if self._primed and kind != OTHER:  # a process new since the last read started since: all its time is new
                self.totals_us[kind] += used - self._last.get(pid, (kind, 0))[1]
        self._count_exited([self._last[pid] for pid in self._last.keys() - now.keys()], reaped_us)
        self._last, self._root_us, self._reaped_us, self._primed = now, root_us, reaped_us, True
        return dict(self.totals_us)

    def _children(self) -> list[int]:
        """The pids of the root's children now (none when it cannot be read)."""
        try:
            return [child.pid for child in psutil.Process(self.root_pid).children()]
        except psutil.Error:
            return []

    def _count_exited(self, gone: list[tuple[str, int]], reaped_us: int) -> None:
        """Count what the processes that exited since the last read used after it: the root's children time grew
        by their whole lives, and their last reads are known. It goes to their kind (``background`` when they
        were of several), and to none when no process of the run's exited (the growth is another session's, or
        a process's that started and ended between two reads without being seen)."""
        rest = max(0, reaped_us - self._reaped_us - sum(used for _, used in gone))
        ours = {kind for kind, _ in gone if kind != OTHER}
        if rest and self._primed and ours:
            self.totals_us[ours.pop() if len(ours) == 1 else "background"] += rest
