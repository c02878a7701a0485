"""Round trips per job (docs/network.md, "Round trips per job"): one worker's cycle on a real PostgreSQL session,
counted at the adapter (bench/engines/postgres/adapter/wire.py) and by the swarm (bench/load/swarm.py), read by
the one rule (bench/run_summary/round_trips.py); and the round-trip probe's process (bench/engines/round_trip.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import gevent
import pytest

from bench.config.run_config import build_config
from bench.engines import get_engine, round_trip_probe
from bench.engines import round_trip
from bench.engines.postgres import db
from bench.load import swarm
from bench.measure.claimlog import ClaimLog
from bench.measure.metrics import Recorder
from bench.run_summary.round_trips import round_trips_per_job
from bench.runner.round_trip import RoundTripProbe
from conftest import REPO


@pytest.mark.parametrize("txn,per_cycle,per_claim,per_completion", [
    ("short", 2, 1, 1),  # the minimum path: the claim, one complete_many for the batch
    ("hold", 4, 2, 2),  # BEGIN rides with the claim's timing, COMMIT with the completion's
])
def test_a_batch_of_ten_costs_the_round_trips_its_transaction_mode_sends(dsn, txn, per_cycle, per_claim,
                                                                        per_completion):
    cfg = build_config("default", {"batch": 10, "txn": txn, "work_ms": 0, "schema": f"qbench_rt_{txn}"}, dsn=dsn)
    conn = db.connect(dsn)
    db.prepare(conn, cfg, 30, log=lambda _m: None)
    conn.close()
    recorder = Recorder(cfg.batch)
    ctx = swarm.SwarmContext(cfg=cfg, sessions=get_engine("postgres").sessions(dsn, cfg), recorder=recorder,
                             log=ClaimLog())
    worker = swarm.QueueWorker(SimpleNamespace(run_context=ctx))
    worker.on_start()
    try:
        for _ in range(3):
            worker.claim_work_complete()
    finally:
        worker.on_stop()
        ctx.log.close()
    counters = recorder.rotate(0, 0.0, 1.0).counters
    assert counters["jobs_completed"] == 30 and counters["claims"] == 3, counters
    assert counters["worker_round_trips"] == 3 * per_cycle
    assert counters["claim_round_trips"] == 3 * per_claim and counters["complete_round_trips"] == 3 * per_completion
    figures = round_trips_per_job(counters, cfg.batch)
    assert figures["per_job"] == per_cycle / 10 and figures["minimum_per_job"] == 0.2
    assert figures["per_claim"] == per_claim


def test_the_probe_samples_until_its_input_closes(monkeypatch):
    """The probe's loop with a fake ping: one line per sample at its period, a failed sample written as such and
    the connection reopened, and it returns once its standard input reports end of file."""
    opened, pings = [], []

    def open_probe(dsn):
        opened.append(dsn)

        def ping():
            pings.append(time.monotonic())
            if len(pings) == 2:
                raise OSError("connection lost\nsecond line")
        return ping, lambda: None

    monkeypatch.setattr(round_trip, "RECONNECT_S", 0.005)
    read_end, write_end = os.pipe()
    out = io.StringIO()
    with os.fdopen(read_end) as stdin:
        threading.Timer(0.1, os.close, (write_end,)).start()  # the parent going away, while probe() waits
        round_trip.probe(open_probe, "the dsn", out, stdin, period_s=0.001)
    lines = out.getvalue().splitlines()
    assert opened and set(opened) == {"the dsn"} and len(opened) == 2  # reopened once after the failure
    assert lines[1].startswith("E ") and lines[1].endswith("OSError: connection lost")
    assert all(len(line.split()) == 2 and int(line.split()[1]) >= 0 for line in lines[:1] + lines[2:])


def test_the_probe_process_answers_and_exits_with_its_parent_input(dsn):
    """The probe as the run starts it (its DSN in the environment only): samples come, and it exits once its
    standard input closes, as when the run ends however it ends."""
    argv, env, period_s = round_trip_probe("postgres", dsn)
    assert dsn not in argv and period_s == round_trip.PERIOD_S
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, **env})
    try:
        first = proc.stdout.readline().split()
        assert len(first) == 2 and 0 < int(first[1]) < 1e9, first  # a round trip in ns, under a second
        proc.stdin.close()
        assert proc.wait(timeout=5) == 0
    finally:
        proc.kill()


def test_the_runs_side_folds_the_samples_into_their_seconds_and_the_window():
    """RoundTripProbe (bench/runner/round_trip.py) over a stand-in process writing the probe's lines: each sample
    lands in the second its monotonic time falls in, a second without one has no column, the window counts its
    own samples and failures; a probe with no sample says why instead of a figure."""
    lines = ["10.20 150000", "10.70 250000", "11.10 900000", "E 11.50 OSError: gone", "13.90 400000"]
    script = "import sys; print(%r); sys.stdout.flush(); sys.stdin.read()" % "\n".join(lines)
    probe = RoundTripProbe([sys.executable, "-c", script], {}, period_s=0.1)
    deadline = time.monotonic() + 10
    while len(probe.samples) < 4 and time.monotonic() < deadline:
        gevent.sleep(0.01)
    probe.stop()
    probe.stop()  # a second stop does nothing
    rows = [{"t_s": t} for t in range(4)]
    probe.add_columns(rows, n_warm=0, t0=10.0)
    assert [(r.get("round_trip_p50_us"), r.get("round_trip_p99_us")) for r in rows] == [
        (150, 250), (900, 900), (None, None), (400, 400)]
    window = probe.window(11.0, 13.0)
    assert (window["samples"], window["errors"], window["p50_us"]) == (1, 1, 900) and "not_measured" not in window
    empty = probe.window(12.0, 13.0)
    assert empty["samples"] == 0 and empty["p50_us"] is None and "gave no sample" in empty["not_measured"]
