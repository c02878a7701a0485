"""Real queue libraries as queue definitions (``queues/procrastinate``, ``queues/pgqueuer``) on the real
PostgreSQL, on their SQL path (``LIBRARY_MODE=sql``: their statements sent by the tool's workers): their
tables made by their own schema, driven through their own claim path, 10 workers draining 1,000 jobs,
and every job done exactly once according to the library's own tables (not the tool's audit: the
library's record of what it did). The libraries' own workers (``LIBRARY_MODE=worker``):
tests/test_library_workers.py."""

from __future__ import annotations

import csv
import html
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from bench.config.queue_definition import load_queue
from bench.config.run_config import build_config
from bench.errors import ConfigError
from conftest import qbench, run_and_load

JOBS = 1000
DRAIN = ("--library-mode", "sql", "--workers", "10", "--backlog", str(JOBS), "--duration", "4s", "--warmup", "0s")


def _rows(dsn: str, schema: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        return conn.execute(query).fetchall()


@pytest.mark.slow
def test_procrastinate_runs_every_job_exactly_once_by_its_own_tables(dsn, tmp_path):
    schema = "qb_procrastinate"
    run_dir, summary, proc = run_and_load(dsn, tmp_path / "r", "--queue", "procrastinate", "--schema", schema, *DRAIN)
    assert summary["queue_definition"]["library"]["mode"] == "sql"
    assert "procrastinate driven on its SQL path" in proc.stdout  # the terminal's last block says it too
    assert _rows(dsn, schema, "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1") == [("succeeded", JOBS)]
    # procrastinate's events (written by its own triggers): one start and one success per job
    per_job = _rows(dsn, schema, """
        SELECT count(*) FILTER (WHERE type = 'started'), count(*) FILTER (WHERE type = 'succeeded')
        FROM procrastinate_events GROUP BY job_id""")
    assert len(per_job) == JOBS and set(per_job) == {(1, 1)}
    # its workers' registrations: one per worker connection (and the check's and the plan capture's)
    assert _rows(dsn, schema, "SELECT count(*) FROM procrastinate_workers")[0][0] >= 10
    assert summary["invariants"] == {k: 0 for k in ("double_claims", "lost_jobs", "duplicated_jobs", "over_claims",
                                                    "double_completions")}
    assert set(summary["uncheckable_invariants"]) == {"stale_completions_applied"}
    report = (run_dir / "report.html").read_text()
    assert "procrastinate_fetch_job_v2" in report and "PL/pgSQL" in report  # how it was driven, what plans mean


@pytest.mark.slow
def test_pgqueuer_runs_every_job_exactly_once_by_its_own_tables(dsn, tmp_path):
    schema = "qb_pgqueuer"
    run_dir, summary, _ = run_and_load(dsn, tmp_path / "r", "--queue", "pgqueuer", "--schema", schema, "--batch", "5",
                                       *DRAIN)
    assert _rows(dsn, schema, "SELECT count(*) FROM pgqueuer")[0][0] == 0  # done jobs leave the queue table
    per_job = _rows(dsn, schema, """
        SELECT count(*) FILTER (WHERE status = 'queued'), count(*) FILTER (WHERE status = 'picked'),
               count(*) FILTER (WHERE status = 'successful')
        FROM pgqueuer_log GROUP BY job_id""")
    assert len(per_job) == JOBS and set(per_job) == {(1, 1, 1)}
    assert summary["invariants"]["lost_jobs"] == 0 and summary["invariants"]["double_claims"] == 0
    assert summary["invariants"]["over_claims"] == 0 and summary["max_rows_per_claim"] == 5
    report = (run_dir / "report.html").read_text()
    assert "pgqueuer" in report and "QueueManager loop is not run" in report


def test_a_library_version_other_than_the_definitions_is_refused(tmp_path):
    text = (Path(load_queue("procrastinate").path)).read_text().replace('version = "3.10.0"', 'version = "2.0.0"')
    path = tmp_path / "old" / "queue.toml"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        build_config("default", {"queue": str(path)})
    assert err.value.param == "QUEUE" and "procrastinate 2.0.0" in str(err.value) and "3.10.0 is installed" in str(err.value)


@pytest.mark.slow
def test_producers_that_cannot_keep_the_rate_make_the_run_suspect(dsn, tmp_path):
    """One producer asked for far more arrivals than its inserts allow falls behind its schedule: the
    run says the queue was not offered RATE; at a rate it keeps, it does not."""
    args = ("--queue", "pgqueuer", "--library-mode", "sql", "--workers", "4", "--duration", "3s", "--warmup", "1s",
            "--producers", "1")
    _, behind, _ = run_and_load(dsn, tmp_path / "behind", *args, "--rate", "20000")
    assert any("behind their schedule" in r and "was not offered RATE" in r for r in behind["suspect_reasons"])
    assert behind["producer_lag_ms"]["p50"] > 1000
    _, kept, _ = run_and_load(dsn, tmp_path / "kept", *args, "--rate", "50")
    assert not any("behind their schedule" in r for r in kept["suspect_reasons"])
    assert kept["producer_lag_ms"]["p50"] < 1000 and kept["invariants"]["lost_jobs"] == 0


@pytest.mark.slow
def test_a_library_measured_on_its_sql_path_says_so_in_its_report_and_beside_the_other_queues(dsn, tmp_path):
    """A queue library driven through its SQL from queue-bench's own workers is not the library's own worker
    (its client can be several times slower): its run report says so in red, cells.csv records how it was
    driven, and the comparison page's queues table labels its row and warns against ranking libraries by it;
    the tool's own queue gets neither."""
    spec = tmp_path / "queues.toml"
    spec.write_text('description = "test"\nworkload = "default"\nrepetitions = 1\n'
                    'cells = [{ queue = "builtin" }, { queue = "procrastinate", library_mode = "sql" }]\n'
                    '[fixed]\nworkers = 4\nbacklog = 2000\nduration = "2s"\nwarmup = "0s"\n')
    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(tmp_path / "results"), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = next((tmp_path / "results" / "sweeps").iterdir())
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        cells = {r["queue"]: r for r in csv.DictReader(fh)}
    assert cells["procrastinate"]["library_mode"] == "sql" and cells["builtin"]["library_mode"] == ""
    library_report = html.unescape((sweep_dir / cells["procrastinate"]["run_dir"] / "report.html").read_text())
    own_report = (sweep_dir / cells["builtin"]["run_dir"] / "report.html").read_text()
    assert "procrastinate driven on its SQL path" in library_report and "not the library's own worker" in library_report
    assert "driven on its SQL path" not in own_report
    compare = (sweep_dir / "compare.html").read_text()
    table = compare.split('<table id="queues">', 1)[1].split("</table>", 1)[0]
    rows = {line.split("</td>")[0].rsplit(">", 1)[1]: line for line in table.splitlines() if "<td>" in line}
    assert "procrastinate (its SQL path, not its own worker)" in rows and "builtin" in rows, list(rows)
    assert 'id="library-sql-path"' in compare and "do not choose a library from them" in compare
    assert "procrastinate: a queue library measured on its SQL path" in compare  # the page's red lines
    assert "builtin: a queue library" not in compare
