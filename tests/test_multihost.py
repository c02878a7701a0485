"""Load from several hosts (docs/processes-and-ui.md, "On several hosts"): ``qbench master`` here and a ``qbench
worker`` in each of two network namespaces with host names of their own, against a PostgreSQL server this module
starts on the namespaces' veth addresses; and the faults of a master and its workers that need no second host
(its port after a run, a stop while it waits, the seconds a process's part is missing)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import psycopg
import pytest

from bench.cli.checks import check_can_listen
from bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, ConfigError
from conftest import CLEAN_INVARIANTS, REPO
from waiting import measured_seconds, wait_until

QBENCH = [sys.executable, "-m", "bench.cli.main"]


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class Lines:
    """A process's output written to ``path``, each line stamped with when :meth:`seen` first read it
    (time.monotonic(); a file, not a pipe: a full pipe would block the process)."""

    def __init__(self, path: Path):
        self.path, self.lines = path, []

    def seen(self, text: str) -> tuple[float, str] | None:
        """The first line with ``text`` and when it was read, or None (reads what was written since)."""
        now = time.monotonic()
        done = self.path.read_text(errors="replace") if self.path.exists() else ""
        fresh = done[:done.rfind("\n") + 1].splitlines()[len(self.lines):]
        self.lines += [(now, line) for line in fresh]
        return next(((t, line) for t, line in self.lines if text in line), None)

    def text(self) -> str:
        self.seen("")
        return "\n".join(line for _, line in self.lines)


def test_a_port_whose_last_run_left_time_wait_is_free_for_the_master():
    """The master's port after a run: its accepted connections closed by the master wait in TIME_WAIT for up to
    60 s; Locust's ZeroMQ listener binds with SO_REUSEADDR, so the check must too. A port another process listens
    on is still refused."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ's listener
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the master's side closes first: it is the one left in TIME_WAIT
    client.close()
    with pytest.raises(ConfigError, match="cannot listen"):
        check_can_listen("127.0.0.1", port, "MASTER_PORT")
    listener.close()
    check_can_listen("127.0.0.1", port, "MASTER_PORT")


def test_a_second_without_a_process_part_counts_none_of_its_workers():
    """intervals.csv ``workers``: a second merged without a process's part (it died, or is late) counts only the
    workers of the processes whose part it holds, from that very second (not from when the process is named
    lost)."""
    from bench.load.process_merge import MergedProcesses
    from bench.measure import interval_codec, metrics

    merged = MergedProcesses()
    merged._init_processes(types.SimpleNamespace(warmup_s=0), None, lambda m: None, (1, 2), "qbench-test-")
    try:
        def second(index: int, present: dict[int, int]) -> None:
            for process, workers in present.items():
                part = metrics.Recorder(1).rotate(index, index, index + 1)
                merged._take_interval(process, {"interval": interval_codec.encode(part), "workers": workers})
                part.release()
            merged._merge_second(metrics.Recorder(1).rotate(index, index, index + 1), index, [1, 2], 0.01).release()

        second(0, {1: 4, 2: 4})
        assert merged.running_workers() == 8
        second(1, {1: 4})  # process 2 sent nothing: not named lost yet, but its part is not in the second
        assert merged.running_workers() == 4
        assert merged.stats[2]["missing_seconds"] == [1] and merged.stats[1]["missing_seconds"] == []
        second(2, {1: 4, 2: 3})
        assert merged.running_workers() == 7
    finally:
        merged.measured_parts.hold({}, {})
        shutil.rmtree(merged.tmp, ignore_errors=True)


@pytest.mark.slow
def test_a_master_stopped_while_it_waits_for_workers_leaves_nothing(dsn, tmp_path):
    """SIGTERM while ``qbench master`` waits for the second of its workers: exit 130, no run directory and no
    results directory it created, the schema it prepared dropped; the worker that had joined exits 1 (its master
    stopped), saying so in one line, not as one refused."""
    results = tmp_path / "results" / "deeper"
    said, worker_said = Lines(tmp_path / "master.err"), Lines(tmp_path / "worker.err")
    port = _free_port()
    master = subprocess.Popen([*QBENCH, "master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                               "--master-port", str(port), "--dsn", dsn, "--backlog", "100",
                               "--results", str(results)], cwd=REPO, stdout=said.path.open("w"),
                              stderr=subprocess.STDOUT)
    worker = None
    try:
        wait_until(lambda: said.seen("master: waiting for 2 workers"), 60, "the master waiting for its workers")
        worker = subprocess.Popen([*QBENCH, "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                                   "--dsn", dsn], cwd=REPO, stdout=worker_said.path.open("w"), stderr=subprocess.STDOUT)
        wait_until(lambda: said.seen("joined"), 60, "the first worker joined")
        master.send_signal(signal.SIGTERM)
        master.wait(timeout=60)
        worker.wait(timeout=60)
    finally:
        for proc in (master, worker):
            if proc is not None:
                proc.kill()
    lines = said.text()
    assert master.returncode == EXIT_INTERRUPTED, lines
    assert worker.returncode == 1 and worker_said.seen("qbench worker: the master at 127.0.0.1"), worker_said.text()
    assert "refused" not in worker_said.text(), worker_said.text()
    assert not (tmp_path / "results").exists(), list((tmp_path / "results").rglob("*"))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'qbench'").fetchone()[0] == 0


# -- two hosts: network namespaces


class Hosts(types.SimpleNamespace):
    """Two network namespaces ``ns[i]`` (host names ``names[i]``), each joined to this one by a veth pair: this
    side ``here[i]``, theirs ``there[i]``; a PostgreSQL server on ``here[0]`` and ``here[1]`` at ``pg_port``."""

    def dsn(self, i: int) -> str:
        """The server as namespace ``i`` reaches it."""
        return f"postgresql://postgres@{self.here[i]}:{self.pg_port}/postgres"

    def worker(self, i: int, master_port: int, log: Path) -> subprocess.Popen:
        """``qbench worker`` in namespace ``i`` under its own host name; its pid is the worker's (each step
        execs the next)."""
        argv = [*QBENCH, "worker", "--master-host", self.here[i], "--master-port", str(master_port),
                "--dsn", self.dsn(i), "--allow-remote"]
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        return subprocess.Popen(["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "sh", "-c",
                                 f'hostname {self.names[i]} && exec "$@"', "sh", *argv], cwd=REPO, env=env,
                                stdout=log.open("w"), stderr=subprocess.STDOUT)

    def cut_off(self, i: int) -> None:
        """A partition: namespace ``i``'s link goes down on this side (its packets go nowhere, nothing resets)."""
        subprocess.run(["ip", "link", "set", f"{self.links[i]}", "down"], check=True)


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def hosts():
    """:class:`Hosts`, removed afterwards whatever happened; skipped with the reason where the machine refuses."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("`ip` (iproute2) or `unshare` (util-linux) is missing")
    tag = f"qbmh{os.getpid() % 100_000}"
    net = 10 + os.getpid() % 240  # 10.213.<net>.0/29: two /30s of this test's own
    undo: list[list[str]] = []
    pg_dir = None
    try:
        h = Hosts(ns=[], names=[], here=[], there=[], links=[])
        for i in (0, 1):
            ns, here, there, link = f"{tag}-{i}", f"10.213.{net}.{4 * i + 1}", f"10.213.{net}.{4 * i + 2}", f"{tag}h{i}"
            try:
                _sh("ip", "netns", "add", ns)
            except subprocess.CalledProcessError as err:
                pytest.skip(f"this machine refuses network namespaces: {err.stderr.strip()}")
            undo.append(["ip", "netns", "del", ns])
            try:
                _sh("ip", "link", "add", link, "type", "veth", "peer", "name", f"{tag}n{i}")
            except subprocess.CalledProcessError as err:
                pytest.skip(f"this machine refuses veth pairs: {err.stderr.strip()}")
            undo.append(["ip", "link", "del", link])
            _sh("ip", "link", "set", f"{tag}n{i}", "netns", ns)
            _sh("ip", "addr", "add", f"{here}/30", "dev", link)
            _sh("ip", "link", "set", link, "up")
            for cmd in (["ip", "addr", "add", f"{there}/30", "dev", f"{tag}n{i}"], ["ip", "link", "set", f"{tag}n{i}", "up"],
                        ["ip", "link", "set", "lo", "up"]):
                _sh("ip", "netns", "exec", ns, *cmd)
            h.ns.append(ns), h.names.append(f"qb-worker-host-{i + 1}"), h.here.append(here), h.there.append(there)
            h.links.append(link)
        # A PostgreSQL server of this module's own, on both veth addresses (the embedded one listens on 127.0.0.1)
        pg_dir = Path(tempfile.mkdtemp(prefix="qbench-multihost-pg-"))
        shutil.chown(pg_dir, "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
        _sh(*as_postgres, "initdb", "-D", str(pg_dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        with open(pg_dir / "data" / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all 10.213.{net}.0/29 trust\n")
        h.pg_port = _free_port(h.here[0])
        options = (f"-c listen_addresses='{h.here[0]},{h.here[1]}' -c port={h.pg_port} "
                   f"-c unix_socket_directories='{pg_dir}' -c fsync=off -c max_connections=60")
        _sh(*as_postgres, "pg_ctl", "-D", str(pg_dir / "data"), "-l", str(pg_dir / "log"), "-o", options, "-w", "start")
        undo.append([*as_postgres, "pg_ctl", "-D", str(pg_dir / "data"), "-m", "immediate", "-w", "stop"])
        yield h
    finally:
        for cmd in reversed(undo):
            subprocess.run(cmd, capture_output=True)
        if pg_dir is not None:
            shutil.rmtree(pg_dir, ignore_errors=True)


@pytest.mark.slow
def test_a_master_here_and_a_worker_on_each_of_two_hosts(hosts, tmp_path):
    """One run: a master in this namespace, a worker in each of two others under its own host name, the server on
    a veth address. Worker 1 is killed with -9 in the window and worker 2 cut off by a partition in its last
    second: each is named lost (host, pid) within NAMED_LOST_WITHIN_S, the seconds each missed count none of its
    workers, the totals are the sum of the processes' parts, the audit is clean, processes.csv and the report name
    each host, the jobs the killed worker left running are told with their leases, and the cut-off worker exits
    1 in one line."""
    from bench.load.distributed import NAMED_LOST_WITHIN_S

    port = _free_port("0.0.0.0")
    master = subprocess.Popen([*QBENCH, "master", "--expect-workers", "2", "--master-bind-host", "0.0.0.0",
                               "--master-port", str(port), "--dsn", hosts.dsn(0), "--allow-remote",
                               "--workers", "4", "--work-ms", "20", "--backlog", "20000", "--duration", "7s",
                               "--warmup", "1s", "--results", str(tmp_path / "run")],
                              cwd=REPO, stdout=(tmp_path / "master.log").open("w"), stderr=subprocess.STDOUT,
                              env={k: v for k, v in os.environ.items() if k != "DATABASE_URL"})
    said = Lines(tmp_path / "master.log")
    logs = [tmp_path / f"worker-{i}.log" for i in (0, 1)]
    workers = [hosts.worker(i, port, logs[i]) for i in (0, 1)]
    try:
        wait_until(lambda: said.seen("worker 2 of 2 joined: host "), 90, "both workers joined")
        wait_until(lambda: (measured_seconds(tmp_path / "run") or [0])[-1] >= 2, 60, "2 measured seconds")
        workers[0].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: said.seen(f"pid {workers[0].pid}) lost"), 30, "the killed worker named lost", poll_s=0.02)
        wait_until(lambda: (measured_seconds(tmp_path / "run") or [0])[-1] >= 6, 60, "6 measured seconds")
        hosts.cut_off(1)  # in the window's last second: no second of the window is left to miss
        cut_at = time.monotonic()
        wait_until(lambda: said.seen(f"pid {workers[1].pid}) lost"), 30, "the cut-off worker named lost", poll_s=0.02)
        master.wait(timeout=180)
        codes = [w.wait(timeout=60) for w in workers]
    finally:
        for p in (master, *workers):
            p.kill()
    text = [log.read_text() for log in logs]
    master_says = said.text()
    assert master.returncode in (0, 5), (master_says, text)  # 5 would be a suspect run under --strict only
    assert codes[0] == -signal.SIGKILL and codes[1] == EXIT_FAILED, (codes, text)
    # the cut-off worker says in one line that it lost the master
    gone = [line for line in text[1].splitlines() if "lost the master" in line]
    assert len(gone) == 1 and "Traceback" not in text[1], text[1]
    assert "connected to the master at" in text[1] and "connected to the master at" in text[0], text

    run_dir = next((tmp_path / "run").iterdir())
    s = json.loads((run_dir / "summary.json").read_text())
    procs = {p["host"]: p for p in s["processes"]}
    assert set(procs) == set(hosts.names), s["processes"]
    killed, cut = procs[hosts.names[0]], procs[hosts.names[1]]
    assert killed["pid"] == workers[0].pid and cut["pid"] == workers[1].pid
    assert killed["lost"] and cut["lost"], s["processes"]
    # each named lost, with its host and pid, within the bound
    for p, since in ((killed, killed_at), (cut, cut_at)):
        name = f"load generator process {p['process']} (host {p['host']}, pid {p['pid']}) lost"
        seen = said.seen(name)
        assert seen is not None, master_says
        assert seen[0] - since <= NAMED_LOST_WITHIN_S, (seen, since, master_says)
    # the exact merge: the run's totals are the sum of the processes' measured parts
    for key in ("jobs_claimed", "jobs_completed", "empty_claims"):
        assert sum(p["counters"][key] for p in s["processes"]) == s[key], key
    assert killed["counters"]["jobs_completed"] > 0 and cut["counters"]["jobs_completed"] > 0
    assert s["invariants"] == CLEAN_INVARIANTS, s["invariants"]
    # the seconds the killed worker's part is missing count none of its workers
    with open(run_dir / "intervals.csv", newline="") as fh:
        seconds = {int(r["t_s"]): r for r in csv.DictReader(fh)}
    with open(run_dir / "processes.csv", newline="") as fh:
        per_process = list(csv.DictReader(fh))
    assert killed["missing_seconds"], killed
    for t_s in killed["missing_seconds"]:
        present = 0 if t_s in cut["missing_seconds"] else cut["workers"]
        assert int(seconds[t_s]["workers"]) == present, (t_s, seconds[t_s], s["processes"])
        assert {r["process"] for r in per_process if int(r["t_s"]) == t_s} == {"0"} | (
            {str(cut["process"])} if present else set())
    # processes.csv names each process's host and pid; the master's is process 0
    named = {(r["process"], r["host"], r["pid"]) for r in per_process}
    assert ("0", socket.gethostname(), str(master.pid)) in named, named
    for p in (killed, cut):
        assert (str(p["process"]), p["host"], str(p["pid"])) in named, named
    # the jobs each lost process's workers left running, as the database has them, and when their leases expire
    with psycopg.connect(hosts.dsn(0)) as conn:
        held = {p["process"]: conn.execute(
            "SELECT count(*), extract(epoch FROM max(lease_expires_at))::float8 FROM qbench.jobs "
            "WHERE status = 'running' AND locked_by LIKE %s", (f"p{p['process']}-%",)).fetchone()
            for p in (killed, cut)}
    assert held[killed["process"]][0] > 0, held  # its 2 workers each held a job as it died
    for p in (killed, cut):
        jobs, until = held[p["process"]]
        assert p["left_running"]["jobs"] == jobs, (p, held)
        assert p["left_running"]["leases_expire_unix"] == pytest.approx(until, abs=1e-3) if jobs else True, (p, held)
    jobs = held[killed["process"]][0]
    assert said.seen(f"pid {killed['pid']}) left {jobs} job{'s' if jobs != 1 else ''} running: their leases expire by"), \
        master_says
    page = (run_dir / "report.html").read_text()
    table = page[page.index('<table id="processes">'):]
    table = table[:table.index("</table>")]
    assert all(f"<td>{name}</td>" in table for name in hosts.names), table
    assert f"left {jobs} job{'s' if jobs != 1 else ''} running, leases until" in table, table
