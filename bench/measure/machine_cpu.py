"""How busy the machine was outside the run, second by second: the CPU of every process (the tree under
init) less the run's own processes', the kernel's own work (the machine's busy CPU from ``/proc/stat``,
``psutil.cpu_times``, proc(5), that no process was charged for) and the steal time, each in % of the whole
machine (all cores) (docs/reading-the-report.md, "A busy machine")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import psutil


class MachineTimes(NamedTuple):
    """Cumulative CPU seconds of the whole machine (all cores): ``busy_s`` (user, nice, system, irq, softirq:
    guest time is inside user and nice), ``steal_s`` (taken by the hypervisor), ``total_s`` (every state)."""

    busy_s: float
    steal_s: float
    total_s: float


def machine_times() -> MachineTimes:
    """The machine's :class:`MachineTimes` now (``psutil.cpu_times()``: /proc/stat's ``cpu`` line on Linux;
    fields a platform lacks count 0)."""
    t = psutil.cpu_times()
    busy = sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
    steal = getattr(t, "steal", 0.0)
    idle = sum(getattr(t, name, 0.0) for name in ("idle", "iowait"))
    return MachineTimes(busy, steal, busy + steal + idle)


class ProcTimes(NamedTuple):
    """One process's cumulative CPU seconds: ``own_s`` (user + system) and ``reaped_s`` (its waited-for
    children's, which they no longer report), and its parent's pid."""

    own_s: float
    reaped_s: float
    ppid: int


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def proc_times(pid: int) -> ProcTimes:
    """Process ``pid``'s :class:`ProcTimes` from ``/proc/<pid>/stat`` (proc(5): field 4 ppid, 14-17 utime,
    stime, cutime, cstime in clock ticks). Raises OSError when the process is gone."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rpartition(b")")[2].split()
    return ProcTimes((int(fields[11]) + int(fields[12])) * _TICK_S, (int(fields[13]) + int(fields[14])) * _TICK_S,
                     int(fields[1]))


def _proc_stat_times() -> dict[int, ProcTimes]:
    """Every process's :func:`proc_times`: a third of ``psutil.process_iter``'s CPU for the same figures, read
    every second."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            found[int(name)] = proc_times(int(name))
        except OSError:  # exited while listed
            continue
    return found


def all_proc_times() -> dict[int, ProcTimes]:
    """Every process's :class:`ProcTimes`, pid -> times: from /proc on Linux, else ``psutil.process_iter``; a
    process that exits while listed is left out."""
    if os.path.isdir("/proc/self"):
        return _proc_stat_times()
    found = {}
    for process in psutil.process_iter(["ppid", "cpu_times"]):
        ppid, t = process.info["ppid"], process.info["cpu_times"]
        if ppid is not None and t is not None:  # None: gone or unreadable while listed
            found[process.pid] = ProcTimes(t.user + t.system, t.children_user + t.children_system, ppid)
    return found


def tree_pids(roots: Iterable[int], parents: dict[int, int]) -> set[int]:
    """``roots`` (those alive in ``parents``, pid -> parent pid) and all their descendants."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


class TreeCpu:
    """CPU seconds used by the run's processes between successive :meth:`used_s` calls: the trees under
    ``trees()`` (each root and its descendants: each process's growth, a new one's whole time, and what one that
    exited used after its last read, which its parent's reaped time grew by) and the processes ``alone()`` names,
    counted without their children or what they reaped (a shared server's postmaster, whose other clients'
    backends are not the run's). ``processes()``: every process's times now (:func:`all_proc_times`)."""

    def __init__(self, trees: Callable[[], Iterable[int]], alone: Callable[[], Iterable[int]] = tuple,
                 processes: Callable[[], dict[int, ProcTimes]] = all_proc_times):
        self._trees, self._alone, self._processes = trees, alone, processes
        self._last, self._in_trees = self._now()

    def _now(self) -> tuple[dict[int, ProcTimes], set[int]]:
        every = self._processes()
        in_trees = tree_pids(self._trees(), {p: t.ppid for p, t in every.items()})
        pids = in_trees | {p for p in self._alone() if p in every}
        return {pid: every[pid] for pid in pids}, in_trees

    def used_s(self) -> float:
        """CPU seconds the run's processes used since the previous call (or construction); never negative."""
        (now, in_trees), last = self._now(), self._last
        used = sum(t.own_s - last[pid].own_s if pid in last else t.own_s for pid, t in now.items())
        gone: dict[int, float] = {}  # parent pid -> the last-read time of its children that exited since
        for pid in last.keys() - now.keys():
            gone[last[pid].ppid] = gone.get(last[pid].ppid, 0.0) + last[pid].own_s + last[pid].reaped_s
        for pid, t in now.items():
            if pid in last and pid in in_trees and pid in self._in_trees:
                used += max(0.0, t.reaped_s - last[pid].reaped_s - gone.get(pid, 0.0))
        self._last, self._in_trees = now, in_trees
        return max(0.0, used)


INIT_PID = 1  # every process but the kernel's threads descends from it, or is reaped by it when orphaned


@dataclass
class BusyShare:
    """One second's shares of the machine (% of all cores): ``outside_cpu_pct`` (other programs' processes),
    ``steal_pct`` and ``kernel_cpu_pct`` (busy time no process was charged for: kernel threads, interrupts
    between processes; the run's own packets and writes among them, so not judged)."""

    outside_cpu_pct: float
    steal_pct: float
    kernel_cpu_pct: float = 0.0

    def columns(self) -> dict[str, float]:
        """The intervals.csv columns (1 decimal)."""
        return {"outside_cpu_pct": round(self.outside_cpu_pct, 1), "steal_pct": round(self.steal_pct, 1),
                "kernel_cpu_pct": round(self.kernel_cpu_pct, 1)}


def busy_share(before: MachineTimes, after: MachineTimes, own_s: float, everyone_s: float | None = None) -> BusyShare:
    """The shares between two machine readings, the run's own processes having used ``own_s`` CPU seconds and
    every process (the run's included) ``everyone_s`` in between: outside = (everyone − own) / all the machine's
    time; kernel = (machine busy − everyone) / all; steal = steal / all. Without ``everyone_s`` (no process
    listing) outside = (machine busy − own) / all and kernel 0. Each never below 0 (they are read a moment apart);
    all 0 when no time passed."""
    total_s = after.total_s - before.total_s
    if total_s <= 0:
        return BusyShare(0.0, 0.0, 0.0)
    busy_s = after.busy_s - before.busy_s
    outside_s, kernel_s = (busy_s - own_s, 0.0) if everyone_s is None else (everyone_s - own_s, busy_s - everyone_s)
    steal_s = after.steal_s - before.steal_s
    return BusyShare(*(min(100.0, max(0.0, 100.0 * s / total_s)) for s in (outside_s, steal_s, kernel_s)))


class MachineMeter:
    """The machine's :class:`BusyShare` between successive :meth:`read` calls. The run's own processes: this
    process and its descendants (its load generator processes, a queue library's worker processes), the pids
    ``more()`` names with theirs (load generator processes on this host that this process did not start), and
    those ``alone()`` names by themselves (the server under test's processes that serve this run, when on this
    host). Every process: the tree under :data:`INIT_PID` (``everyone``), from the same listing of the processes
    (none when ``tree`` is given without it)."""

    def __init__(self, more: Callable[[], Iterable[int]] = tuple, alone: Callable[[], Iterable[int]] = tuple,
                 machine: Callable[[], MachineTimes] = machine_times, tree: TreeCpu | None = None,
                 everyone: TreeCpu | None = None):
        self._machine, self._listed = machine, tree is None  # listed: the default trees share one listing a read
        self._listing = all_proc_times() if self._listed else {}
        self._tree = tree or TreeCpu(lambda: (os.getpid(), *more()), alone, processes=lambda: self._listing)
        if everyone is None and self._listed:
            everyone = TreeCpu(lambda: (INIT_PID,), processes=lambda: self._listing)
        self._everyone = everyone
        self._last = machine()

    def read(self) -> BusyShare:
        """The shares since the previous read (or construction)."""
        if self._listed:
            self._listing = all_proc_times()
        own_s = self._tree.used_s()
        everyone_s = self._everyone.used_s() if self._everyone else None
        now = self._machine()
        share = busy_share(self._last, now, own_s, everyone_s)
        self._last = now
        return share
