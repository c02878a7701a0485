"""The machine's CPU outside the run (bench/measure/machine_cpu.py): the share's arithmetic on fake counters, the
process trees' CPU on fake process tables, the per-run figures and the rule that judges them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.measure.machine_cpu import (MachineMeter, MachineTimes, OtherProcesses, ProcTimes, TreeCpu, busy_share,
                                       tree_pids)
from bench.results.model import harness_limited, machine_busy
from bench.run_summary.rows import busy_figures
from bench.run_summary.suspect import SUSPECT_OUTSIDE_CPU_PCT
from conftest import run_and_load


def test_the_outside_share_is_the_machine_busy_less_the_run_own_cpu_of_all_its_time():
    # 2 cores over 1 s: 2 s of machine time; 1.2 s busy, of which the run's processes used 0.7 s
    before, after = MachineTimes(10.0, 1.0, 100.0), MachineTimes(11.2, 1.1, 102.0)
    share = busy_share(before, after, own_s=0.7)
    assert share.outside_cpu_pct == pytest.approx(25.0)  # 0.5 s of 2 s
    assert share.steal_pct == pytest.approx(5.0)  # 0.1 s of 2 s
    assert share.columns() == {"outside_cpu_pct": 25.0, "steal_pct": 5.0, "kernel_cpu_pct": 0.0}


def test_the_kernel_work_is_its_own_share_not_outside_the_run():
    """Busy time no process was charged for (kernel threads, interrupts between processes) carries the run's own
    packets and writes (the loopback's softirqs, the WAL's writeback): at 18,000 jobs/s on a quiet machine it
    alone passed the outside limit."""
    # 2 s of machine time, 1.2 s busy: the run's processes 0.7 s, every process 0.9 s, so 0.3 s no process's
    before, after = MachineTimes(10.0, 1.0, 100.0), MachineTimes(11.2, 1.0, 102.0)
    share = busy_share(before, after, own_s=0.7, everyone_s=0.9)
    assert share.outside_cpu_pct == pytest.approx(10.0)  # 0.2 s of 2 s
    assert share.kernel_cpu_pct == pytest.approx(15.0)  # 0.3 s of 2 s


def test_the_outside_share_is_never_negative_nor_above_the_whole_machine():
    before = MachineTimes(10.0, 1.0, 100.0)
    # the run's processes read a moment after the machine: more than the machine's busy time
    assert busy_share(before, MachineTimes(10.5, 1.0, 102.0), own_s=0.9).outside_cpu_pct == 0.0
    assert busy_share(before, MachineTimes(14.0, 1.0, 102.0), own_s=0.0).outside_cpu_pct == 100.0
    assert busy_share(before, before, own_s=0.0).outside_cpu_pct == 0.0  # no time passed


def test_the_process_trees_cpu_counts_growth_new_processes_and_what_exited_processes_used():
    table = {1: ProcTimes(0.0, 0.0, 0), 10: ProcTimes(5.0, 0.0, 1), 11: ProcTimes(1.0, 0.0, 10),
             12: ProcTimes(2.0, 0.0, 10), 20: ProcTimes(50.0, 0.0, 1), 30: ProcTimes(7.0, 0.0, 1)}
    assert tree_pids([10, 30, 99], {p: t.ppid for p, t in table.items()}) == {10, 11, 12, 30}
    tree = TreeCpu(lambda: (10, 30), processes=lambda: dict(table))
    # 10 grows 0.5 s; 11 grows 0.2; 12 exits having used 0.3 s more than last read (10 reaps 2.3 s);
    # 13 is new with 0.4 s; 20 (not the run's) grows 9 s; 30 grows 0.1
    table.update({10: ProcTimes(5.5, 2.3, 1), 11: ProcTimes(1.2, 0.0, 10), 13: ProcTimes(0.4, 0.0, 11),
                  20: ProcTimes(59.0, 0.0, 1), 30: ProcTimes(7.1, 0.0, 1)})
    del table[12]
    assert tree.used_s() == pytest.approx(0.5 + 0.2 + 0.3 + 0.4 + 0.1)
    assert tree.used_s() == 0.0  # nothing since


def test_a_process_counted_alone_counts_its_own_time_not_what_it_reaped():
    """A shared server's postmaster: the backends of other clients that it reaps are not the run's."""
    table = {1: ProcTimes(0.0, 0.0, 0), 40: ProcTimes(3.0, 10.0, 1), 41: ProcTimes(1.0, 0.0, 40),
             42: ProcTimes(8.0, 0.0, 40), 50: ProcTimes(0.0, 0.0, 1)}
    tree = TreeCpu(lambda: (50,), lambda: (40, 41), processes=lambda: dict(table))
    del table[42]  # another client's backend exits: the postmaster reaps its 8.5 s
    table.update({40: ProcTimes(3.1, 18.5, 1), 41: ProcTimes(1.5, 0.0, 40), 50: ProcTimes(0.2, 0.0, 1)})
    assert tree.used_s() == pytest.approx(0.1 + 0.5 + 0.2)


def test_the_meter_subtracts_the_run_own_trees_from_the_machine():
    table = {1: ProcTimes(0.0, 0.0, 0), 10: ProcTimes(0.0, 0.0, 1), 20: ProcTimes(0.0, 0.0, 1)}
    machine = [MachineTimes(0.0, 0.0, 0.0)]
    meter = MachineMeter(machine=lambda: machine[-1], tree=TreeCpu(lambda: (10,), processes=lambda: dict(table)))
    table.update({10: ProcTimes(0.8, 0.0, 1), 20: ProcTimes(0.6, 0.0, 1)})  # the run 0.8 s, another program 0.6 s
    machine.append(MachineTimes(1.4, 0.2, 2.0))
    share = meter.read()
    assert share.outside_cpu_pct == pytest.approx(30.0) and share.steal_pct == pytest.approx(10.0)


def test_the_meter_counts_other_programs_from_their_processes_and_the_rest_as_the_kernel():
    table = {1: ProcTimes(0.0, 0.0, 0), 2: ProcTimes(0.0, 0.0, 0), 3: ProcTimes(1.0, 0.0, 2),
             10: ProcTimes(0.0, 0.0, 1), 20: ProcTimes(0.0, 0.0, 1), 21: ProcTimes(0.0, 0.0, 20)}
    listing = lambda: dict(table)  # noqa: E731
    machine = [MachineTimes(0.0, 0.0, 0.0)]
    meter = MachineMeter(machine=lambda: machine[-1], tree=TreeCpu(lambda: (10,), processes=listing),
                         everyone=TreeCpu(lambda: (1,), processes=listing))
    # the run 0.8 s; another program 0.1 s and its short-lived child 0.2 s (exited, reaped by it); a kernel
    # thread (a child of pid 2) 0.2 s; 0.1 s of interrupts charged to no process
    del table[21]
    table.update({3: ProcTimes(1.2, 0.0, 2), 10: ProcTimes(0.8, 0.0, 1), 20: ProcTimes(0.1, 0.2, 1)})
    machine.append(MachineTimes(1.4, 0.0, 2.0))
    share = meter.read()
    assert share.outside_cpu_pct == pytest.approx(15.0) and share.kernel_cpu_pct == pytest.approx(15.0)


def test_the_busiest_other_processes_are_counted_from_the_window_start_the_run_and_the_kernel_left_out(monkeypatch):
    monkeypatch.setattr("bench.measure.machine_cpu.command_of", lambda pid: f"cmd {pid}")
    others = OtherProcesses()
    others.add({30: ProcTimes(5.0, 0.0, 1)}, set())  # before start: nothing counted
    assert others.busiest() == []
    others.start({10: ProcTimes(1.0, 0.0, 1), 30: ProcTimes(5.0, 0.0, 1), 40: ProcTimes(0.0, 0.0, 2)})
    # the run's 10 grows 1 s, another program's 30 grows 0.5 s, a new 31 used 0.25 s, a kernel thread 40 2 s
    others.add({10: ProcTimes(2.0, 0.0, 1), 30: ProcTimes(5.5, 0.0, 1), 31: ProcTimes(0.25, 0.0, 30),
                40: ProcTimes(2.0, 0.0, 2)}, {10})
    others.add({30: ProcTimes(6.0, 0.0, 1)}, {10})  # 30 grows 0.5 s more; 31 gone
    others._started_unix, others._ended_unix = 100.0, 102.0  # a 2 s window
    assert others.busiest() == [{"pid": 30, "command": "cmd 30", "cpu_s": 1.0, "cpu_pct": 50.0},
                                {"pid": 31, "command": "cmd 31", "cpu_s": 0.25, "cpu_pct": 12.5}]
    assert others.busiest(1) == others.busiest()[:1]


def test_a_run_outside_share_past_the_limit_is_named_and_older_results_judge_nothing():
    figures = busy_figures([{"outside_cpu_pct": 10.0, "steal_pct": 0.0}, {"outside_cpu_pct": 30.0, "steal_pct": 2.0},
                            {"t_s": 2}])  # a second without the columns (older rows) is left out
    assert figures == {"outside_cpu_pct": {"mean": 20.0, "max": 30.0}, "steal_pct": {"mean": 1.0, "max": 2.0},
                       "kernel_cpu_pct": {"mean": None, "max": None}}
    summary = {**figures, "outside_cpu_limit_pct": 20.5}
    assert ("20 % of its CPU outside the run and the hypervisor took 1 % (21 % in all), mean over the window: "
            "more than the 20.5 %") in machine_busy(summary)
    assert harness_limited(summary) == machine_busy(summary)  # the plan retries such a step
    assert machine_busy({**summary, "outside_cpu_limit_pct": 21.0}) is None  # judged by the limit it was run with
    assert machine_busy({"harness_cpu_limit_pct": 90.0}) is None and machine_busy(busy_figures([])) is None
    assert SUSPECT_OUTSIDE_CPU_PCT > 0


@pytest.mark.slow
def test_a_run_beside_a_cpu_hog_is_suspect_naming_the_share_and_a_run_alone_measures_less(dsn, tmp_path):
    """The same short run alone, then beside busy loops asking for every core twice over (the whole machine on a
    quiet one, and still the larger part beside other programs): the run beside them is suspect for a busy
    machine, naming the share it measured, which is above the run alone's (the machine may be shared: only the
    order is asserted, not the run alone's figure)."""
    args = ("--duration", "4s", "--warmup", "1s", "--workers", "4")
    _, alone, _ = run_and_load(dsn, tmp_path / "alone", *args)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        run_dir, beside, _ = run_and_load(dsn, tmp_path / "beside", *args)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    share = beside["outside_cpu_pct"]["mean"]
    assert alone["outside_cpu_pct"]["mean"] < share and alone["kernel_cpu_pct"]["mean"] is not None
    assert share > beside["outside_cpu_limit_pct"] == SUSPECT_OUTSIDE_CPU_PCT
    assert beside["suspect"] and any(f"the machine spent {share:g} % of its CPU outside the run" in reason
                                     for reason in beside["suspect_reasons"])
    # the busiest processes outside the run are the hogs, named in run.json and in the reason
    busiest = json.loads((run_dir / "run.json").read_text())["outside_processes"]
    assert busiest and {p["pid"] for p in busiest} <= {h.pid for h in hogs}, busiest
    assert busiest[0]["cpu_pct"] >= 30 and "while True: pass" in busiest[0]["command"], busiest
    assert any(f"(pid {busiest[0]['pid']}, " in reason for reason in beside["suspect_reasons"])


def test_no_outside_share_when_the_server_is_on_this_host_but_none_of_its_processes_is_found():
    """A loopback DSN whose server's processes are not on this host's /proc (a container): its CPU would read
    as outside, so the second has no share; a server found here, or on another host, leaves the share as read."""
    from types import SimpleNamespace

    from bench.measure.machine_cpu import BusyShare
    from bench.runner.run import Run

    run = Run.__new__(Run)  # only the meter, the monitor and where the DSN points
    run.machine = SimpleNamespace(read=lambda: BusyShare(50.0, 1.0))
    run.monitor, run.server_elsewhere = SimpleNamespace(server_pids=lambda: ()), False
    assert run._busy() is None
    run.server_elsewhere = True
    assert run._busy() == BusyShare(50.0, 1.0)
    run.monitor, run.server_elsewhere = SimpleNamespace(server_pids=lambda: (4321,)), False
    assert run._busy() == BusyShare(50.0, 1.0)


def test_a_server_the_tool_started_is_the_run_whole_tree_a_shared_one_only_what_serves_it():
    """A server the tool started serves no one else: its root (and its embedded standby's) is a root of the run's
    trees, so what it starts and reaps between two reads (autovacuum workers) is the run's; a shared server's root
    is counted alone."""
    from types import SimpleNamespace

    from bench.runner.run import Run

    run = Run.__new__(Run)
    run.monitor, run.driver = SimpleNamespace(server_pids=lambda: (40, 41)), SimpleNamespace(local_pids=lambda: (7,))
    run.embedded, run.pooler_pid, run.relay, run.round_trip = True, None, None, SimpleNamespace(pid=51)
    run.standby_root = None
    assert run._own_trees() == (7, 40, 51)  # 51: the round-trip probe, the run's own
    run.standby_root = 60  # REPLICA=1's embedded standby: the tool's too
    assert run._own_trees() == (7, 40, 60, 51)
    run.embedded, run.standby_root = False, None
    assert run._own_trees() == (7, 51)
