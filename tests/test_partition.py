"""A network partition (``FAULTS=partition@S-E``; docs/network.md, "Partitions and keepalives"): the delay
relay's black hole on plain sockets (no database), the refusals, and one run in which every worker gives up
within ``TCP_USER_TIMEOUT_MS`` + 2 s of the partition's start, reconnects after it heals, and the audit is clean."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from bench.engines.relay.core import DelayRelay
from cli_in_process import qbench_in_process
from echo_server import echo_server
from conftest import CLEAN_INVARIANTS, REPO, fresh_database

#: TCP_USER_TIMEOUT (linux/tcp.h; Python names it from 3.12 only): ms unacknowledged before the kernel gives up.
TCP_USER_TIMEOUT = 18


#: A DSN no refusal reaches (nothing is created before the refusal).
NEVER = "postgresql://postgres@127.0.0.1:5432/qbench_never_created"


@pytest.mark.parametrize("args, option, allowed", [
    (("--tcp-user-timeout-ms", "500"), "--tcp-user-timeout-ms", "allowed: 0 (the kernel's defaults), or 1,000–3,600,000"),
    (("--tcp-user-timeout-ms", "-1"), "--tcp-user-timeout-ms", "allowed:"),
    (("--tcp-user-timeout-ms", "3600001"), "--tcp-user-timeout-ms", "allowed:"),
    (("--faults", "partition@1-2:share=0.5"), "--faults", "allowed for partition: no options"),
    (("--faults", "partition@1-2", "--workers", "2", "--processes", "2"), "--faults", "allowed: partition with"),
    (("--faults", "partition@1-5;partition@4-8"), "--faults", "allowed: partition windows one after another"),
    (("--faults", "partition@1-2", "--queue", "procrastinate"), "--faults", "or --library-mode sql"),
])
def test_each_bad_partition_or_liveness_value_is_refused_in_one_line(tmp_path, args, option, allowed):
    """Refused before anything is created: one line naming the option and what is allowed, exit 2."""
    proc = qbench_in_process("run", "--dsn", NEVER, "--results", str(tmp_path / "r"), *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"qbench: {option}: "), proc.stderr
    assert allowed in lines[0], lines[0]
    assert not (tmp_path / "r").exists()


def test_qbench_master_refuses_a_partition_its_remote_workers_could_not_cross(tmp_path):
    proc = qbench_in_process("master", "--expect-workers", "1", "--faults", "partition@1-2", "--dsn", NEVER,
                             "--results", str(tmp_path / "r"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("qbench: --faults: "), proc.stderr
    assert "allowed: no partition window with qbench master" in lines[0] and "cannot reach" in lines[0], lines[0]


def _echoes(sock: socket.socket, data: bytes = b"ping") -> bool:
    sock.sendall(data)
    return sock.recv(64) == data


def test_black_hole_times_out_the_client_and_heals():
    """Partitioned, a client with TCP_USER_TIMEOUT 1 s gets ETIMEDOUT within 1–3 s (no reset, no answer), a new
    connection gets no answer; the connections to the target are left open throughout (the server learns
    nothing). Healed, one opened before that sent nothing meanwhile echoes again, the one that gave up is found
    and closed, and a new connection echoes."""
    relay = DelayRelay(echo_server(), 0.0).start()
    try:
        cut, quiet = (socket.create_connection(("127.0.0.1", relay.port)) for _ in range(2))
        cut.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, 1000)
        assert _echoes(cut) and _echoes(quiet)
        assert relay.partition() == 2
        started = time.monotonic()
        cut.sendall(b"lost")
        with pytest.raises(TimeoutError):  # ETIMEDOUT: the kernel gave up; a reset would be ConnectionResetError
            cut.recv(64)
        assert 1.0 <= time.monotonic() - started <= 3.0
        with pytest.raises((TimeoutError, socket.timeout)):  # the SYN is dropped: no answer, not a refusal
            socket.create_connection(("127.0.0.1", relay.port), timeout=1.0)
        assert len(relay.pairs) == 2  # both still forwarded: nothing was closed toward the target
        relay.heal()
        quiet.settimeout(5)
        assert _echoes(quiet)
        deadline = time.monotonic() + 5  # the client that gave up: found by the relay's probe, its pair closed
        while len(relay.pairs) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(relay.pairs) == 1
        fresh = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        assert _echoes(fresh)
        for sock in (cut, quiet, fresh):
            sock.close()
    finally:
        relay.close()
    # closed, it watches nothing: in this gevent-patched process a selector left open on a socket at end of file
    # woke the loop for ever, a core taken from every later test's run (judged busy)
    assert relay.selector.get_map() is None and not relay.pairs


#: The run's partition: TCP_USER_TIMEOUT_MS, and the window (s since measured start).
TIMEOUT_MS, START_S, END_S = 3000, 4, 14


def test_a_partition_every_worker_gives_up_in_time_reconnects_and_the_audit_is_clean(tmp_path):
    """``FAULTS=partition@4-14`` with ``TCP_USER_TIMEOUT_MS=3000`` and no ``NET_DELAY_MS``: the relay started at 0 ms
    for it (its line, run.json); every worker noticed within 3 + 2 s of the cut, as intervals.csv's error counts
    agree (none before the cut, one in each second a worker noticed in); every one reconnected after the heal and
    jobs were completed again; the reaper took leases back; the audit is clean; the relay is gone. The jobs take
    100 ms, so a worker is inside one as the cut begins (its completion cut off, its lease left to expire): with 5 ms
    jobs, one run in three found no worker holding a job at the cut and no lease to take back."""
    with fresh_database() as dsn:
        proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "run", "--dsn", dsn, "--results", str(tmp_path),
                               "--workers", "4", "--work-ms", "100", "--lease-s", "3", "--reaper-interval-s", "1",
                               "--tcp-user-timeout-ms", str(TIMEOUT_MS), "--faults", f"partition@{START_S}-{END_S}",
                               "--duration", "20s", "--warmup", "1s"],
                              cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "delay relay (started at 0 ms for FAULTS=partition" in proc.stdout
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run_json = json.loads((run_dir / "run.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run_json["relay"]["started_by"] == "FAULTS" and run_json["relay"]["delay_ms_each_way"] == 0
    assert run_json["tcp_liveness"] == {"tcp_user_timeout_ms": 3000, "keepalives_idle_s": 1, "keepalives_interval_s": 1,
                                        "keepalives_count": 3, "applied_to": ["workers", "reaper", "round-trip probe"]}
    assert summary["round_trip"]["errors"] >= 1, summary["round_trip"]  # the probe gave up as the workers did
    (part,) = summary["partitions"]
    assert part["workers"] == part["noticed"] == 4 and part["late"] == [], part
    assert all(0 < s <= TIMEOUT_MS / 1000 + 2 for s in part["noticed_by_worker"].values()), part
    assert part["reconnections"] == 4 and part["reconnected_after_heal_s"]["max"] < 6, part
    assert part["lease_expiries"] > 0 and part["audit_clean"], part
    assert {k: summary["invariants"][k] for k in CLEAN_INVARIANTS} == CLEAN_INVARIANTS
    with open(run_dir / "intervals.csv", newline="") as fh:
        rows = {int(r["t_s"]): r for r in csv.DictReader(fh)}
    assert all(int(rows[t]["errors"]) == 0 for t in range(START_S)), rows
    for after_s in part["noticed_by_worker"].values():  # each worker's first error in the second it noticed in
        assert int(rows[int(START_S + after_s)]["errors"]) > 0, (after_s, rows)
    assert sum(int(rows[t]["jobs_completed"]) for t in range(END_S + 1, 20)) > 0
    assert not psutil.pid_exists(run_json["relay"]["pid"])
    assert f"partition {START_S}–{END_S} s: 4 of 4 workers noticed" in proc.stdout


def _socket_options(fd: int) -> tuple[int, int, int, int, int]:
    """(TCP_USER_TIMEOUT ms, SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT) of the socket ``fd``, read back."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        return (sock.getsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                *(sock.getsockopt(socket.IPPROTO_TCP, o) for o in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL,
                                                                   socket.TCP_KEEPCNT)))
    finally:
        sock.close()


def test_the_application_sides_connections_have_the_liveness_recorded_on_both_engines():
    """``TCP_USER_TIMEOUT_MS=4500``: a reaper's connection (as every worker's and producer's, through
    ``application_dsn``) has TCP_USER_TIMEOUT 4500 ms and keepalives every 1 s (4500 // 3000), 3 probes, read back
    from its socket on PostgreSQL (libpq's keywords) and MariaDB (socket options); 0 leaves the kernel's."""
    from bench.config.run_config import build_config
    from bench.engines import get_engine
    from conftest import ADMIN_DSN, MARIADB_DSN

    expected = (4500, 1, 1, 1, 3)
    kernel = tuple(int(open(f"/proc/sys/net/ipv4/tcp_keepalive_{k}").read()) for k in ("time", "intvl", "probes"))
    for name, dsn, fd in (("postgres", ADMIN_DSN, lambda conn: conn.pgconn.socket),
                          ("mariadb", MARIADB_DSN, lambda conn: conn._sock.fileno())):  # pylint: disable=protected-access
        engine = get_engine(name)
        for timeout_ms, want in (("4500", expected), ("0", None)):
            cfg = build_config("default", {"engine": name, "tcp_user_timeout_ms": timeout_ms, "schema": "qbench"})
            conn = engine.connect(engine.application_dsn(dsn, cfg), "queue-bench liveness test")
            try:
                got = _socket_options(fd(conn))
            finally:
                conn.close()
            # 0: no user timeout, the kernel's keepalive times (libpq turns keepalives on by default, MariaDB not)
            assert got == want if want else (got[0] == 0 and got[2:] == kernel), (name, timeout_ms, got)
