"""How busy the machine was outside the run, second by second: the CPU of every process (the tree under
init) less the run's own processes', the kernel's own work (the machine's busy CPU from ``/proc/stat``,
``psutil.cpu_times``, proc(5), that no process was charged for) and the steal time, each in % of the whole
machine (all cores) (docs/reading-the-report.md, "A busy machine")."""

from __future__ import annotations

import os
import time
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

    def counted(self) -> set[int]:
        """The pids the last :meth:`used_s` (or construction) counted as the run's."""
        return set(self._last)

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
        self.others = OtherProcesses()

    def count_others_from_now(self) -> None:
        """Start :attr:`others`' count (the measured window's first second): the busiest processes outside the
        run, from the process listing each :meth:`read` makes (none when ``tree`` is given without one)."""
        self.others.start(self._listing)

    def read(self) -> BusyShare:
        """The shares since the previous read (or construction)."""
        if self._listed:
            self._listing = all_proc_times()
        own_s = self._tree.used_s()
        self.others.add(self._listing, self._tree.counted())
        everyone_s = self._everyone.used_s() if self._everyone else None
        now = self._machine()
        share = busy_share(self._last, now, own_s, everyone_s)
        self._last = now
        return share


class OtherProcesses:
    """CPU seconds each process outside the run used over the measured window, to name the busiest when the
    machine is judged busy: from successive listings (pid -> :class:`ProcTimes`), the growth of a process seen in
    both and the whole time of one that appeared (its children's reaped time not counted: they are listed
    themselves). Counts nothing until :meth:`start`."""

    def __init__(self):
        self._last: dict[int, ProcTimes] | None = None
        self._used_s: dict[int, float] = {}
        self._commands: dict[int, str] = {}
        self._started_unix = self._ended_unix = 0.0

    def start(self, listing: dict[int, ProcTimes]) -> None:
        """Count from ``listing`` on."""
        self._last, self._used_s = dict(listing), {}
        self._started_unix = self._ended_unix = time.time()

    def add(self, listing: dict[int, ProcTimes], own: set[int]) -> None:
        """Count the growth since the previous listing of every process not in ``own`` (the run's pids)."""
        if self._last is None:
            return
        for pid, t in listing.items():
            grown = t.own_s - self._last[pid].own_s if pid in self._last else t.own_s
            if pid not in own and grown > 0 and 2 not in (pid, t.ppid):  # kthreadd's: the kernel's share
                self._used_s[pid] = self._used_s.get(pid, 0.0) + grown
                self._commands.setdefault(pid, command_of(pid))
        self._last, self._ended_unix = listing, time.time()  # each read's listing is a new dict

    def busiest(self, n: int | None = 3) -> list[dict]:
        """The ``n`` (None: all) processes outside the run that used the most CPU over the window, busiest first:
        ``[{"pid", "command", "cpu_s", "cpu_pct"}]`` (``cpu_pct``: mean % of one core over the window)."""
        window_s = self._ended_unix - self._started_unix
        if window_s <= 0:
            return []
        top = sorted(self._used_s.items(), key=lambda item: -item[1])[:n]
        return [{"pid": pid, "command": self._commands.get(pid, "?"), "cpu_s": round(used, 2),
                 "cpu_pct": round(100.0 * used / window_s, 1)} for pid, used in top]


def command_of(pid: int) -> str:
    """Process ``pid``'s command line (its first 80 characters, as ``ps`` shows it), its name when the command
    line is empty (a kernel thread), "?" when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read().split(b"\0")
        line = b" ".join(w for w in words if w).decode(errors="replace")
        if not line:
            with open(f"/proc/{pid}/comm", "rb") as fh:
                line = f"[{fh.read().decode(errors='replace').strip()}]"
        return line[:80]
    except OSError:
        return "?"
