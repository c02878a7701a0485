"""``qbench run --ui`` (make bench-ui): Locust's own web UI over a run, against the real PostgreSQL.
The person's worker-count change reaches the run and is marked in its files; Stop ends the run as
a complete one with its report; a count beyond what the database was checked for is refused."""

from __future__ import annotations

import csv
import json
import math
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from conftest import CLEAN_INVARIANTS, REPO, qbench
from waiting import measured_seconds, wait_until


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ui_run(dsn, tmp_path, *args: str):
    """Start ``qbench run --ui`` and return (process, base URL, the output lines read so far: a list
    that a thread keeps filling) once the UI answers."""
    port = _free_port()
    argv = [sys.executable, "-m", "bench.cli.main", "run", "--dsn", dsn, "--results", str(tmp_path), "--ui",
            "--web-port", str(port), *args]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(base + "/", timeout=2).status_code == 200:
                return proc, base, lines
        except requests.ConnectionError:
            pass
        assert proc.poll() is None, "".join(lines)
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the web UI never answered:\n" + "".join(lines))


def _stats(base: str) -> dict:
    """Locust's statistics as its web UI serves them."""
    return requests.get(base + "/stats/requests", timeout=5).json()


def _seconds_in_window(lines: list[str]) -> bool:
    return any("stopped in the web UI" in line for line in lines)


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.slow
def test_the_web_ui_changes_the_workers_and_its_stop_ends_a_complete_run(dsn, tmp_path, processes):
    """From 2 workers to 5 in the UI (with 2 processes Locust's master splits them 3 + 2): the run's
    seconds show the change, its summary marks it, Locust's own charts get the claims, and Stop
    writes a complete, audited run."""
    proc, base, lines = _ui_run(dsn, tmp_path, "--processes", processes, "--workers", "2", "--max-workers", "6",
                                "--work-ms", "5",
                                "--backlog", "50000", "--duration", "120s", "--warmup", "1s")
    try:
        claims = lambda: next((s["num_requests"] for s in _stats(base)["stats"] if s["name"] == "claim"), 0)  # noqa: E731
        wait_until(lambda: _stats(base)["user_count"] == 2 and claims() > 0, 60, "2 workers claiming in Locust's stats")
        refused = requests.post(base + "/swarm", data={"user_count": 7, "spawn_rate": 50}, timeout=5).json()
        assert refused["success"] is False and "1 to 6 workers" in refused["message"], refused
        refused = requests.post(base + "/swarm", data={"user_count": 3, "spawn_rate": 0}, timeout=5).json()
        assert refused["success"] is False and refused["message"].startswith("spawn rate: 0"), refused
        assert requests.post(base + "/swarm", data={"user_count": 5, "spawn_rate": 50}, timeout=5).json()["success"]
        wait_until(lambda: _stats(base)["user_count"] == 5, 60, "5 workers in Locust's stats")
        # the change is in the run's seconds: 2 more measured seconds, each ending with 5 workers
        seen = measured_seconds(tmp_path)[-1]
        wait_until(lambda: measured_seconds(tmp_path)[-1] >= seen + 2, 60, "2 measured seconds with 5 workers")
        assert claims() > 0
        seen_before_stop = measured_seconds(tmp_path)[-1]
        assert requests.post(base + "/stop", timeout=30).json()["success"]
        proc.wait(timeout=120)
    finally:
        proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, out
    assert _seconds_in_window(lines), out
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["complete"] is True and s["invariants"] == CLEAN_INVARIANTS, (s["complete"], s["invariants"])
    # ended by Stop, long before DURATION, and not before the seconds already written (the last of them may
    # be the second Stop cut short: 5 lines with measured_s 4.962)
    assert seen_before_stop <= math.ceil(s["measured_s"]) and s["measured_s"] < 60, (seen_before_stop, s["measured_s"])
    assert s["web_ui"]["stopped_at_t_s"] == s["measured_s"] and s["web_ui"]["max_workers"] == 6, s["web_ui"]
    with open(run_dir / "intervals.csv", newline="") as fh:
        workers = [int(r["workers"]) for r in csv.DictReader(fh)]
    assert workers[0] == 2 and workers[-1] == 5, workers
    changes = s["worker_changes"]
    assert changes and changes[0]["workers_before"] == 2 and changes[-1]["workers"] == 5, changes
    assert sum(p["counters"]["jobs_completed"] for p in s["processes"]) == s["jobs_completed"]
    assert len(s["processes"]) == int(processes) and not any(p["lost"] for p in s["processes"])
    page = (run_dir / "report.html").read_text()
    assert "worker count changes" in page and "ended by its Stop" in page


@pytest.mark.slow
def test_ui_options_without_ui_and_a_taken_port_are_one_line(dsn, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--web-port", "8090"], "--web-port: has no effect without --ui"),
            (["--ui", "--web-port", "0"], "--web-port: 0 is out of range"),
            (["--ui", "--web-port", str(port)], f"--web-port: cannot listen on 127.0.0.1:{port}"),
            (["--ui", "--workers", "4", "--max-workers", "3"], "--max-workers: 3 is out of range"),
            (["--ui", "--workers", "4", "--max-workers", "1000"], "--max-workers: "),  # the server has 100 connections
        ]
        for args, start in cases:
            proc = qbench("run", "--dsn", dsn, "--results", str(tmp_path), *args)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"qbench: {start}"), (args, proc.stderr)
    assert not any(tmp_path.iterdir())
