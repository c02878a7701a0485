"""The delay relay (``NET_DELAY_MS``, ``NET_JITTER_MS``; bench/engines/relay/, docs/network.md): its timing through
a loopback echo (the round trip against the relay's own at 0 ms), bytes kept whole and in order under jitter, its
refusal below its timer's resolution, the workers' DSN pointed at it (``SELECT 1`` takes the added round trip),
one run through it end to end, and no relay left after ``kill -9`` of the tool."""

from __future__ import annotations

import csv
import json
import socket
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from bench.config.run_config import build_config
from bench.engines import relayed
from bench.engines.mariadb import dsn as mariadb_dsn
from bench.engines.postgres.adapter import connect
from bench.engines.relay import delay_relay
from bench.errors import ConfigError
from bench.results import verdict
from bench.results.model import harness_limited
from bench.run_summary.relay import relay_figures, relay_reasons
from bench.run_summary.suspect import SUSPECT_CPU_PCT
from cli_in_process import qbench_in_process
from echo_server import echo_server
from conftest import CLEAN_INVARIANTS, REPO, fresh_database
from waiting import wait_until


def _client(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _round_trips_ms(port: int, count: int = 40, size: int = 100) -> list[float]:
    """``count`` round trips of ``size`` bytes through 127.0.0.1:``port``, ms, one at a time."""
    out = []
    with _client(port) as sock:
        for i in range(count):
            message = bytes([i % 256]) * size
            start = time.perf_counter()
            sock.sendall(message)
            got = b""
            while len(got) < size:
                got += sock.recv(65536)
            out.append((time.perf_counter() - start) * 1000)
            assert got == message
    return out


def test_a_round_trip_through_the_relay_gains_twice_the_delay():
    """At d = 2 ms the round trip p50 is 2d plus the relay's own (its p50 at 0 ms), within 20 %."""
    target, delay_ms = echo_server(), 2.0
    with delay_relay(target, 0.0, 0.0) as relay:
        own_ms = statistics.median(_round_trips_ms(relay.port))
    with delay_relay(target, delay_ms, 0.0) as relay:
        measured_ms = statistics.median(_round_trips_ms(relay.port))
        assert relay.timer_late_us["p50_us"] < delay_ms * 1000  # what makes d = 2 ms a setting it can keep
    expected_ms = 2 * delay_ms + own_ms
    assert abs(measured_ms - expected_ms) <= 0.2 * expected_ms, (measured_ms, own_ms)


def test_jitter_keeps_each_connections_bytes_whole_and_in_order():
    """Jitter of 3 ms on 1 ms: 300 distinct chunks written back to back come back whole and in order, and single
    round trips spread over the jitter (p90 - p10 at least 1.5 ms of the 0-6 ms two draws span)."""
    target = echo_server()
    with delay_relay(target, 1.0, 3.0) as relay:
        sent = b"".join(i.to_bytes(4, "big") * 250 for i in range(300))
        with _client(relay.port) as sock:
            for i in range(300):
                sock.sendall(sent[i * 1000:(i + 1) * 1000])
            got = b""
            while len(got) < len(sent):
                got += sock.recv(65536)
        spread = sorted(_round_trips_ms(relay.port, count=60))
        counts = relay.ask("stats")
    assert got == sent
    assert spread[53] - spread[6] >= 1.5, spread
    assert counts["connections"] == 2 and counts["bytes_to_server"] == counts["bytes_to_client"] == len(sent) + 6000


def test_a_setting_below_the_timers_resolution_is_refused_and_the_relay_stopped():
    with pytest.raises(ConfigError) as err:
        with delay_relay(echo_server(), 0.001, 0.0):
            pass
    assert err.value.param == "NET_DELAY_MS" and "timer resolution" in str(err.value) and "allowed: 0, or" in str(err.value)
    assert not _relays()


def test_the_workers_dsn_crosses_the_relay_and_the_tools_own_does_not(dsn):
    """``relayed``: the DSN it gives reaches the server through the relay (``SELECT 1`` takes at least 2d), and the
    relay's ``upstream_dsn`` is the one it was given, where the tool's own connections go."""
    delay_ms = 3.0
    cfg = build_config("default", {"net_delay_ms": delay_ms}, dsn=dsn)
    with relayed(cfg, dsn, log=lambda line: None) as (run_dsn, relay):
        assert relay.upstream_dsn == dsn and f"port={relay.port}" in run_dsn
        with connect(run_dsn) as conn:
            times = []
            for _ in range(5):
                start = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                times.append((time.perf_counter() - start) * 1000)
    assert min(times) >= 2 * delay_ms, times
    assert not psutil.pid_exists(relay.pid)


def test_a_relay_past_the_load_generators_cpu_limit_makes_the_run_suspect():
    """The relay's CPU judged by the generator's one limit: a second past it is a reason, one at it is not."""
    record = {"relay": {"delay_ms_each_way": 1.0, "jitter_ms": 0.0, "timer_resolution_us": 80.0,
                        "crossing": ["workers"], "counts": {"connections": 4}}}
    at_limit = [{"relay_cpu_pct": 40.0}, {"relay_cpu_pct": SUSPECT_CPU_PCT}, {"relay_cpu_pct": None}]
    past = [*at_limit, {"relay_cpu_pct": SUSPECT_CPU_PCT + 5}]
    assert relay_reasons(at_limit, SUSPECT_CPU_PCT) == []
    (reason,) = relay_reasons(past, SUSPECT_CPU_PCT)
    assert f"{SUSPECT_CPU_PCT + 5:.0f} % of a core" in reason and "delay relay" in reason
    figures = relay_figures(past, record, SUSPECT_CPU_PCT)
    assert figures["cpu_pct"]["max"] == SUSPECT_CPU_PCT + 5 and figures["connections"] == 4
    assert relay_figures(past, {"relay": None}, SUSPECT_CPU_PCT) is None


def test_a_mariadb_dsn_is_pointed_at_the_relay_with_its_credentials_kept():
    given = "mysql://root:s3cret@db.example:3307/qbench?connect_timeout=5"
    assert mariadb_dsn.relay_target(given) == ("db.example", 3307)
    through = mariadb_dsn.through(given, "127.0.0.1", 4000)
    assert mariadb_dsn.connect_args(through) == {**mariadb_dsn.connect_args(given), "host": "127.0.0.1", "port": 4000}


@pytest.mark.parametrize("args, allowed", [
    (["--dsn", "host=/var/run/postgresql dbname=postgres"], "a DSN with one host and port"),
    (["--dsn", "host=127.0.0.1,127.0.0.2 dbname=postgres"], "a DSN with one host and port"),
    (["--engine", "mariadb", "--dsn", "mysql://root@127.0.0.1/?unix_socket=/run/mysqld.sock"], "a DSN with a host"),
], ids=["unix-socket", "several-hosts", "mariadb-socket"])
def test_a_dsn_the_relay_cannot_stand_in_front_of_is_refused_in_one_line(tmp_path, args, allowed):
    proc = qbench_in_process("run", *args, "--net-delay-ms", "2", "--results", str(tmp_path / "results"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("qbench: --net-delay-ms: ") and allowed in lines[0], lines[0]
    assert not (tmp_path / "results").exists()


def test_a_jitter_alone_is_the_parameter_a_refusal_names(tmp_path):
    """With NET_JITTER_MS alone (the relay started by it), a DSN the relay cannot front, and qbench master, are
    refused naming --net-jitter-ms, the option typed."""
    run = qbench_in_process("run", "--dsn", "service=foo", "--net-jitter-ms", "2", "--results", str(tmp_path / "r"))
    master = qbench_in_process("master", "--expect-workers", "1", "--net-jitter-ms", "2", "--dsn",
                               "postgresql://postgres@127.0.0.1:5432/postgres", "--results", str(tmp_path / "r"))
    for proc in (run, master):
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("qbench: --net-jitter-ms: "), lines
        assert "NET_DELAY_MS" not in lines[0] and "NET_JITTER_MS" not in lines[0], lines[0]
    assert not (tmp_path / "r").exists()


def test_a_plan_or_a_sweep_below_the_timers_resolution_is_refused_before_anything_is_created(tmp_path):
    """The resolution checked before any server, plan directory or sweep cell: one line, exit 2, nothing created
    (a sweep's second cell below it too)."""
    dsn = "postgresql://postgres@127.0.0.1:5432/postgres"
    spec = tmp_path / "net.toml"
    spec.write_text('description = "t"\nworkload = "default"\n[fixed]\nworkers = 2\n[matrix]\nnet_delay_ms = [0, 0.001]\n')
    plan = qbench_in_process("plan", "--dsn", dsn, "--rate", "10", "--slo", "pickup_p99<=1s", "--net-delay-ms",
                             "0.001", "--results", str(tmp_path / "r"))
    sweep = qbench_in_process("sweep", str(spec), "--dsn", dsn, "--results", str(tmp_path / "r"))
    for proc in (plan, sweep):
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "timer resolution" in lines[0], proc.stdout + proc.stderr
        assert lines[0].startswith("qbench: --net-delay-ms: 0.001 ms is below") and not proc.stdout.strip()
    assert not (tmp_path / "r").exists()


def test_qbench_master_refuses_a_relay_its_remote_workers_could_not_reach(tmp_path):
    proc = qbench_in_process("master", "--expect-workers", "1", "--net-delay-ms", "2", "--dsn",
                             "postgresql://postgres@127.0.0.1:5432/postgres", "--results", str(tmp_path / "results"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("qbench: --net-delay-ms: "), proc.stderr
    assert "cannot reach" in lines[0] and not (tmp_path / "results").exists()


def _relays(parent: int | None = None) -> list[psutil.Process]:
    """The delay relay processes running now (children of ``parent`` only, when given); not the short-lived
    measurement of its timer before a run (``--measure``), which forwards nothing."""
    found = []
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = proc.info["cmdline"] or []
        if "bench.engines.relay" in cmdline and "--target" in cmdline and parent in (None, proc.info["ppid"]):
            found.append(proc)
    return found


def _qbench_run(dsn: str, results, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.cli.main", "run", "--dsn", dsn, "--results", str(results),
                             *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_run_through_the_relay_records_it_and_its_cpu(tmp_path):
    """``qbench run --net-delay-ms 2`` with workers, a reaper and producers: one terminal line, run.json's relay
    record (setting, timer, pid, what crossed it: exactly those connections, as the relay counted them), its CPU in
    every measured second, the report's section, the audit clean, and the relay gone after the run."""
    with fresh_database() as dsn:
        proc = _qbench_run(dsn, tmp_path, "--net-delay-ms", "2", "--workers", "3", "--reaper-interval-s", "1",
                           "--rate", "50", "--producers", "2", "--work-ms", "5", "--duration", "3s", "--warmup", "1s")
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, out + err
    assert sum(1 for line in out.splitlines() if line.startswith("delay relay: 2 ms added each way")) == 1, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run_json = json.loads((run_dir / "run.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    relay = run_json["relay"]
    assert (relay["delay_ms_each_way"], relay["jitter_ms"]) == (2.0, 0.0) and relay["crossing"] == [
        "workers", "producers", "reaper", "round-trip probe"]
    # 3 workers, 2 producers, the reaper, the round-trip probe, and the session that reads SYNC_COMMIT back as a
    # worker's (before the load: docs/failover.md)
    assert 0 < relay["timer_resolution_us"] < 2000 and relay["counts"]["connections"] == 3 + 2 + 1 + 1 + 1
    assert not psutil.pid_exists(relay["pid"])
    with open(run_dir / "intervals.csv", newline="") as fh:
        cpu = [float(r["relay_cpu_pct"]) for r in csv.DictReader(fh)]
    assert len(cpu) == 3 and all(c > 0 for c in cpu), cpu
    assert summary["relay"]["cpu_pct"]["max"] == max(cpu) and summary["jobs_completed"] > 0
    assert {k: summary["invariants"][k] for k in CLEAN_INVARIANTS} == CLEAN_INVARIANTS
    report = (run_dir / "report.html").read_text()
    assert "crossed the delay relay</th><td>workers, producers, reaper, round-trip probe (8 connections accepted)" in report


def _forwarding(relay: psutil.Process) -> bool:
    """True once ``relay`` forwards the workers' connections (both sides of at least one established)."""
    return sum(1 for c in relay.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED) >= 2


def test_kill_9_of_the_tool_leaves_no_relay(tmp_path):
    """The tool killed with -9 while its workers go through the relay: the relay ends by itself (its input closed)."""
    relay = None
    with fresh_database() as dsn:
        proc = _qbench_run(dsn, tmp_path, "--net-delay-ms", "1", "--workers", "2", "--duration", "60s",
                           "--warmup", "0s")
        try:
            (relay,) = wait_until(lambda: _relays(proc.pid), timeout_s=60, what="the run's relay")
            wait_until(lambda: _forwarding(relay), timeout_s=60, what="the workers connected through the relay")
            proc.kill()
            proc.wait()
            wait_until(lambda: not relay.is_running() or relay.status() == psutil.STATUS_ZOMBIE, timeout_s=10,
                       what="the relay gone after kill -9 of the tool")
        finally:
            proc.kill()
            proc.communicate()
            if relay is not None and relay.is_running():
                relay.kill()


def test_a_net_delay_sweep_runs_each_cell_through_its_own_relay(tmp_path):
    """Two cells, NET_DELAY_MS 0 and 2: both done and clean; the cell at 0 has no relay, the one at 2 its own
    (run.json, cells.csv's setting and the relay's CPU), and the sweep's log has one relay line."""
    spec = tmp_path / "net.toml"
    spec.write_text('description = "test"\nworkload = "default"\n[fixed]\nworkers = 2\nduration = "1s"\n'
                    'warmup = "1s"\nbacklog = 1000\n[matrix]\nnet_delay_ms = [0, 2]\n')
    with fresh_database() as dsn:
        proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "sweep", str(spec), "--dsn", dsn, "--results",
                               str(tmp_path / "results")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (sweep_dir,) = (tmp_path / "results" / "sweeps").iterdir()
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        rows = {r["net_delay_ms"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"0.0", "2.0"} and {r["status"] for r in rows.values()} == {"done"}
    relays = {delay: json.loads((sweep_dir / row["run_dir"] / "run.json").read_text())["relay"]
              for delay, row in rows.items()}
    assert relays["0.0"] is None and rows["0.0"]["relay_cpu_max_pct"] == ""
    assert relays["2.0"]["delay_ms_each_way"] == 2.0 and float(rows["2.0"]["relay_cpu_max_pct"]) > 0
    # the round trip each run measured, beside the setting: twice the delay at 2 ms, well under it at 0
    assert float(rows["2.0"]["round_trip_p50_us"]) >= 4000 > float(rows["0.0"]["round_trip_p50_us"]) * 4, rows
    assert (sweep_dir / "sweep.log").read_text().count("delay relay: 2 ms added each way") == 1


def test_the_relays_cpu_is_in_the_trust_line_and_past_the_limit_the_run_is_harness_limited():
    summary = {"harness_cpu_max_pct": 10.0, "harness_cpu_limit_pct": SUSPECT_CPU_PCT, "loop_lag_us": {"p99": 900},
               "complete": True, "invariants": {"lost_jobs": 0}, "relay": {"cpu_pct": {"mean": 40.0, "max": 55.5}}}
    (trust,) = [item for item in verdict.items(summary) if item.name == "trust"]
    assert "delay relay CPU max 55.5 %" in trust.reason
    assert harness_limited(summary) is None
    summary["relay"]["cpu_pct"]["max"] = SUSPECT_CPU_PCT + 1
    assert "delay relay" in harness_limited(summary)


def test_the_relay_is_one_of_the_runs_own_process_trees():
    """The busy-machine meter's roots (``Run._own_trees``) hold the relay's process beside the load generators' (and
    the round-trip probe's)."""
    from types import SimpleNamespace

    from bench.runner.run import Run

    run = Run.__new__(Run)
    run.driver, run.monitor = SimpleNamespace(local_pids=lambda: (11,)), SimpleNamespace(server_pids=lambda: (21,))
    run.embedded, run.pooler_pid, run.relay, run.round_trip = False, 31, SimpleNamespace(pid=41), SimpleNamespace(pid=51)
    run.standby_root = None  # no REPLICA=1 standby in this run
    assert run._own_trees() == (11, 31, 41, 51)
