"""Queue libraries' own workers (``LIBRARY_MODE=worker``) on the real PostgreSQL: procrastinate's worker and
pgqueuer's QueueManager in processes of their own, measured at their public seams, and checked against
the libraries' own tables (their record of what they did, not the tool's audit): every job done exactly
once, the tool's jobs/s and pickup against counts and timestamps the test reads itself, a killed worker
process whose jobs come back through the library's own recovery, and a missing driver refused in one line."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import html
import json
import re
import sys

import psycopg
import pytest

#: libuv's timer resolution (ms): https://docs.libuv.org/en/v1.x/timer.html, https://docs.libuv.org/en/v1.x/loop.html#c.uv_now
LOOP_TICK_US = 1000
from psycopg import sql

from bench.usage import typed
from cli_in_process import qbench_in_process
from conftest import REPO, qbench, run_and_load

JOBS = 2000
#: Per library: its schema's queries, in the tool's schema.
#: done: (job id, times done) for every job; finished_at: each completion's database time (epoch s);
#: pickups: each job picked in [start, end): its pick minus its eligible time (s), from the library's own rows.
TABLES = {
    "procrastinate": {
        "done": """SELECT j.id, count(e.id) FILTER (WHERE e.type = 'succeeded') FROM procrastinate_jobs j
                   LEFT JOIN procrastinate_events e ON e.job_id = j.id GROUP BY j.id""",
        "finished_in": """SELECT count(*) FROM procrastinate_events WHERE type = 'succeeded'
                          AND at >= to_timestamp(%s) AND at < to_timestamp(%s)""",
        "pickups": """SELECT extract(epoch FROM e.at - j.scheduled_at)::float8 FROM procrastinate_events e
                      JOIN procrastinate_jobs j ON j.id = e.job_id WHERE e.type = 'started'
                      AND e.at >= to_timestamp(%s) AND e.at < to_timestamp(%s)""",
        "claimed_twice": """SELECT count(*) FROM (SELECT job_id FROM procrastinate_events WHERE type = 'started'
                            GROUP BY job_id HAVING count(*) > 1) AS again""",
    },
    "pgqueuer": {
        # a done job leaves the queue table for pgqueuer_log: one 'successful' row each
        "done": """SELECT job_id, count(*) FILTER (WHERE status = 'successful') FROM pgqueuer_log GROUP BY job_id
                   UNION ALL SELECT id, 0 FROM pgqueuer""",
        "finished_in": """SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'
                          AND created >= to_timestamp(%s) AND created < to_timestamp(%s)""",
        "pickups": """SELECT extract(epoch FROM p.created - q.created)::float8 FROM pgqueuer_log p
                      JOIN pgqueuer_log q ON q.job_id = p.job_id AND q.status = 'queued'
                      WHERE p.status = 'picked' AND p.created >= to_timestamp(%s) AND p.created < to_timestamp(%s)""",
        "claimed_twice": """SELECT count(*) FROM (SELECT job_id FROM pgqueuer_log WHERE status = 'picked'
                            GROUP BY job_id HAVING count(*) > 1) AS again""",
    },
}
#: Per library: what it runs with besides the shared parameters (pgqueuer: a batch of 5, 10 >= 2 x 5).
EXTRA = {"procrastinate": (), "pgqueuer": ("--batch", "5")}
#: Per library, in the open-loop run: procrastinate's fetch is planned on the table's statistics, and a table
#: analyzed empty gets an anti-join whose cost grows with the backlog (docs/queues.md): finished rows as a
#: production table has them keep the plan the one a running queue gets.
OPEN_LOOP = {"procrastinate": ("--history", "20000"), "pgqueuer": ()}


def _query(dsn: str, schema: str, query: str, args=()) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        return conn.execute(query, args).fetchall()


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def _window(run_dir) -> tuple[float, float]:
    run = json.loads((run_dir / "run.json").read_text())
    return _epoch(run["measured_start"]), _epoch(run["measured_end"])


def _intervals(run_dir) -> list[dict]:
    with (run_dir / "intervals.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


@pytest.mark.parametrize("library", ["procrastinate", "pgqueuer"])
@pytest.mark.slow
def test_a_librarys_own_worker_does_every_job_once_and_its_figures_agree_with_its_own_tables(dsn, tmp_path, library):
    schema = f"qb_{library}_worker"
    run_dir, summary, proc = run_and_load(
        dsn, tmp_path / "drain", "--queue", library, "--schema", schema, "--workers", "10", "--work-ms", "5",
        "--backlog", str(JOBS), "--duration", "20s", "--warmup", "0s", *EXTRA[library])
    assert summary["queue_definition"]["library"]["mode"] == "worker"
    assert "driven on its SQL path" not in proc.stdout  # the caveat of LIBRARY_MODE=sql is not this run's
    assert f"{library} {summary['queue_definition']['library']['version']}: its own worker, in 1 process (0 lost)" \
        in proc.stdout
    # every job done exactly once, by the library's own record
    done = _query(dsn, schema, TABLES[library]["done"])
    assert len(done) == JOBS and {times for _, times in done} == {1}
    assert summary["invariants"]["lost_jobs"] == 0 and summary["invariants"]["duplicated_jobs"] == 0
    assert summary["jobs_completed"] == JOBS
    # the work is a 5 ms sleep on the library's event loop; pgqueuer's runs on uvloop, whose timers count whole
    # milliseconds from the loop time cached at the start of its tick (libuv: uv_now, uv_timer_start), so a sleep can
    # end up to one millisecond before 5 ms after the perf_counter taken when it began
    assert summary["dispatch_delay_us"]["p50"] is not None and summary["work_duration_us"]["p50"] >= 5000 - LOOP_TICK_US
    # the measurement's cost: the tool's own process (process 0 of processes.csv: the monitor and the merge), read here
    with (run_dir / "processes.csv").open(newline="") as fh:
        own = [float(r["cpu_pct"]) for r in csv.DictReader(fh) if r["process"] == "0"]
    cost = summary["measurement_cost"]
    assert cost["tool_process_does"] == "measurement" and own
    assert cost["tool_process_cpu_pct"] == pytest.approx(sum(own) / len(own), abs=0.051)
    assert f"measurement cost: the tool's process {cost['tool_process_cpu_pct']:.1f} % of a core (measurement)" \
        in proc.stdout
    # jobs/s over the seconds the backlog kept the worker busy, against the library's own count
    start, _ = _window(run_dir)
    rows = _intervals(run_dir)
    first = float(rows[0]["jobs_completed"])
    busy = next((k for k, r in enumerate(rows) if float(r["jobs_completed"]) < first / 2), len(rows))
    assert busy >= 1, rows
    tool = sum(float(r["jobs_completed"]) for r in rows[:busy]) / busy
    table = _query(dsn, schema, TABLES[library]["finished_in"], (start, start + busy))[0][0] / busy
    assert table > 0 and abs(tool - table) <= 0.10 * table, (tool, table, busy)

    # at about half of that capacity, open loop: the tool's pickup p50 against the library's timestamps
    rate = round(0.5 * tool)
    run_dir, summary, _ = run_and_load(
        dsn, tmp_path / "half", "--queue", library, "--schema", schema, "--workers", "10", "--work-ms", "5",
        "--rate", str(rate), "--backlog", "0", "--duration", "5s", "--warmup", "1s", *EXTRA[library],
        *OPEN_LOOP[library])
    start, end = _window(run_dir)
    pickups = [r[0] for r in _query(dsn, schema, TABLES[library]["pickups"], (start, end))]
    assert len(pickups) >= 0.5 * rate * (end - start), (len(pickups), rate)
    table_ms = 1000 * _median(pickups)
    tool_ms = summary["pickup_latency_ms"]["p50"]
    # The tool times a pickup from the job's intended arrival, the library's table from its insert: the
    # producers' lag behind the schedule (this run's own, measured) is in the tool's figure and not the table's.
    lag_ms = summary["producer_lag_ms"]["p50"] or 0.0
    assert -max(0.10 * table_ms, 2.0) <= tool_ms - table_ms <= max(0.10 * table_ms, 2.0) + lag_ms, \
        (tool_ms, table_ms, lag_ms)
    # it kept up with what arrived in this window (the producers' own count, not RATE: on a loaded machine they lag)
    assert summary["invariants"]["lost_jobs"] == 0 and summary["jobs_completed"] >= 0.9 * summary["jobs_produced"], \
        (summary["jobs_completed"], summary["jobs_produced"])


@pytest.mark.parametrize("library", ["procrastinate", "pgqueuer"])
@pytest.mark.slow
def test_a_killed_library_worker_process_is_named_and_its_jobs_come_back_through_the_library(dsn, tmp_path, library):
    """One of two worker processes is killed with SIGKILL a second into the window, while the backlog lasts (20
    workers at 20 ms a job finish at most 1,000 jobs/s, so 3,000 last at least 3 s): the jobs it held come back
    by the library's own recovery (procrastinate: its stalled-jobs retry every LEASE_S; pgqueuer: its dequeue
    re-picks a job whose heartbeat is older than LEASE_S), every job is done exactly once by its tables,
    nothing is lost, the run names the lost process, and what it did before the kill is counted."""
    schema, jobs = f"qb_{library}_kill", 3000
    run_dir, summary, proc = run_and_load(
        dsn, tmp_path / "kill", "--queue", library, "--schema", schema, "--workers", "20", "--processes", "2",
        "--work-ms", "20", "--backlog", str(jobs), "--lease-s", "2", "--poll-ms", "500", "--duration", "14s",
        "--warmup", "0s", "--faults", "process_kill@1-2", *EXTRA[library])
    lost = [p for p in summary["processes"] if p["lost"]]
    assert len(lost) == 1 and summary["process_kills"] == 1
    assert f"library worker process {lost[0]['process']} (pid {lost[0]['pid']}) lost" in proc.stdout
    assert lost[0]["counters"]["jobs_completed"] > 0 and lost[0]["missing_seconds"][0] == 1  # its second 0 counted
    done = _query(dsn, schema, TABLES[library]["done"])
    assert len(done) == jobs and {times for _, times in done} == {1}, sorted({t for _, t in done})
    assert _query(dsn, schema, TABLES[library]["claimed_twice"])[0][0] >= 1  # the killed process's jobs came back
    assert summary["invariants"]["lost_jobs"] == 0 and summary["invariants"]["duplicated_jobs"] == 0
    # the tool's count misses only what the killed process finished between its last second and the kill
    assert 0 <= jobs - summary["jobs_completed"] <= 0.05 * jobs, summary["jobs_completed"]


@contextlib.contextmanager
def _without(module: str):
    """Within the block, ``module`` (and its submodules) can be neither found nor imported, as if it were not
    installed: the import system's "halted" marker stands in sys.modules for it; the modules are put back after."""
    saved = {name: m for name, m in sys.modules.items() if name == module or name.startswith(module + ".")}
    for name in saved:
        del sys.modules[name]
    sys.modules[module] = None
    try:
        yield
    finally:
        del sys.modules[module]
        sys.modules.update(saved)


@pytest.mark.parametrize("library", ["procrastinate", "pgqueuer"])
def test_a_queue_library_not_installed_is_one_line_naming_its_extra(tmp_path, library):
    """QUEUE=<library> without the library (its extra not installed) is refused before anything is created:
    one line naming the extra that installs it, exit 2."""
    with _without(library):
        proc = qbench_in_process("run", "--queue", library, "--dsn",
                                 "postgresql://postgres@127.0.0.1:5432/qbench_never_created", "--results",
                                 str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qbench: --queue:"), lines
    assert f"{library} " in lines[0] and "not installed" in lines[0], lines[0]
    assert lines[0].endswith(f"allowed: make install EXTRAS={library} (in {REPO}; elsewhere pip install "
                             f"'queue-bench[{library}]')"), lines[0]
    assert not (tmp_path / "r").exists()


def test_a_missing_driver_of_a_librarys_own_worker_is_one_line_naming_what_to_install(tmp_path):
    """pgqueuer's own worker runs over asyncpg: without it, LIBRARY_MODE=worker is refused before anything is
    created (one line, exit 2), naming the extra; LIBRARY_MODE=sql does not need it."""
    base = ["run", "--queue", "pgqueuer", "--dsn", "postgresql://postgres@127.0.0.1:5432/qbench_never_created",
            "--results", str(tmp_path / "r")]
    with _without("asyncpg"):
        proc = qbench_in_process(*base)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qbench: --library-mode:"), lines
    assert "'asyncpg'" in lines[0] and "pip install 'queue-bench[pgqueuer]') (it brings pgqueuer[asyncpg]==1.6.0)" in lines[0]
    assert not (tmp_path / "r").exists()
    with _without("asyncpg"):
        plan = qbench_in_process("run", "--queue", "pgqueuer", "--library-mode", "sql", "--help")
    assert plan.returncode == 0


def test_library_worker_parameters_are_refused_in_one_line_where_its_worker_has_no_equivalent():
    """The library's own worker decides TXN and POLICY, has no WAKEUP=poll (pgqueuer always listens) and needs
    WORKERS >= 2 x BATCH (pgqueuer); the tool's own worker faults do not apply to it."""
    cases = [(("--queue", "procrastinate", "--txn", "hold"), "TXN:"),
             (("--queue", "pgqueuer", "--wakeup", "poll"), "WAKEUP:"),
             (("--queue", "pgqueuer", "--workers", "10", "--batch", "10"), "WORKERS:"),
             (("--queue", "pgqueuer", "--workers", "10", "--batch", "5", "--processes", "2"), "WORKERS:"),
             (("--queue", "procrastinate", "--faults", "crash_after_claim@1-2"), "FAULTS:"),
             (("--queue", "procrastinate", "--faults", "process_kill@1-2"), "FAULTS:"),  # one process
             (("--queue", "procrastinate", "--library-mode", "sql", "--faults", "process_kill@1-2", "--processes", "2"),
              "FAULTS:"),
             (("--library-mode", "worker",), "LIBRARY_MODE:"),
             (("--queue", "procrastinate", "--ui"), "LIBRARY_MODE:"),
             (("--queue", "procrastinate", "--library-mode", "client"), "LIBRARY_MODE:")]
    for args, prefix in cases:
        proc = qbench("run", "--dsn", "postgresql://postgres@127.0.0.1:5432/qbench_never_created", *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"qbench: {typed(prefix[:-1])}:"), (args, proc.stderr)


@pytest.mark.slow
def test_the_comparison_page_shows_a_library_by_its_own_worker_and_its_two_modes_side_by_side(dsn, tmp_path):
    """A sweep of one library in both modes beside the tool's queue: the queues table shows the library by its
    own worker and says so in its heading; its SQL path goes to the modes table, whose ratio is the SQL path's
    jobs/s over its own worker's, from the runs' own figures (cells.csv)."""
    spec = tmp_path / "modes.toml"
    spec.write_text('description = "test"\nworkload = "default"\nrepetitions = 1\n'
                    'cells = [{ queue = "builtin" }, { queue = "procrastinate", library_mode = "worker" },'
                    ' { queue = "procrastinate", library_mode = "sql" }]\n'
                    '[fixed]\nworkers = 4\nwork_ms = 2\nbacklog = 3000\nduration = "2s"\nwarmup = "0s"\n')
    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(tmp_path / "results"), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = next((tmp_path / "results" / "sweeps").iterdir())
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        cells = {(r["queue"], r["library_mode"]): r for r in csv.DictReader(fh)}
    assert set(cells) == {("builtin", ""), ("procrastinate", "worker"), ("procrastinate", "sql")}
    compare = html.unescape((sweep_dir / "compare.html").read_text())
    heading = compare.split("<h2>Queues side by side", 1)[1].split("</h2>", 1)[0]
    assert "by their own workers (LIBRARY_MODE=worker)" in heading
    queues = compare.split('<table id="queues">', 1)[1].split("</table>", 1)[0]
    assert "procrastinate (its own worker)" in queues and "its SQL path" not in queues
    modes = compare.split('<table id="library-modes">', 1)[1].split("</table>", 1)[0]
    ratio = float(re.search(r"<td>([0-9.]+)x</td>", modes).group(1))
    expected = (float(cells[("procrastinate", "sql")]["throughput_jobs_per_s"])
                / float(cells[("procrastinate", "worker")]["throughput_jobs_per_s"]))
    assert abs(ratio - expected) <= 0.006, (ratio, expected)
