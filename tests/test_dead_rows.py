"""Whether autovacuum can take the queue table at all (the server's ``autovacuum`` and ``track_counts``), seen by a
real run on the service server, and the one rule for "dead rows grew with no vacuum pass"
(``bench/results/dead_rows.py``) on made-up seconds. The plan's use of it: tests/test_plan.py."""

from __future__ import annotations

import json

import psycopg
import pytest

from bench.report.run_notes import vacuum_note
from bench.report.run_page import render_report
from bench.results.dead_rows import (GROWTH_FACTOR, dead_rows_growth, growth_text, server_blocks_autovacuum,
                                     table_autovacuum_ineffective, vacuum_threshold)
from conftest import run_and_load

NOTE = "autovacuum never runs on this server"


@pytest.mark.slow
def test_a_run_records_the_servers_autovacuum_and_says_when_it_never_runs(dsn, tmp_path):
    """A 2 s run on a throwaway database of the service server: run.json holds the server's own ``autovacuum`` and
    ``track_counts`` as SHOW gives them, and the terminal line, the summary and the report's parameter row say that
    autovacuum never runs exactly when one of them is off (the run's AUTOVACUUM is on, the default)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        shown = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in ("autovacuum", "track_counts")}
    run_dir, s, proc = run_and_load(dsn, tmp_path, "--workers", "2", "--backlog", "2000", "--duration", "2s",
                                    "--warmup", "0s")
    run = json.loads((run_dir / "run.json").read_text())
    assert {k: run["server_settings"][k] for k in shown} == shown and s["config"]["autovacuum"] is True
    off = next((f"{name} = {value}" for name, value in shown.items() if value == "off"), None)
    output = proc.stdout + proc.stderr
    assert (f"note: {NOTE} ({off})" in output) if off else (NOTE not in output), output
    assert s["autovacuum"]["server_blocked"] == off and s["autovacuum"]["enabled"] is (off is None)
    html = render_report(run_dir).read_text()
    assert (f"yes (no effect: {off} on this server)" in html) == (off is not None)
    assert (f"Autovacuum is off on this server ({off})" in html) == (off is not None)


@pytest.mark.parametrize("settings, blocked", [
    ({"autovacuum": "on", "track_counts": "on"}, None),
    ({"autovacuum": "off", "track_counts": "on"}, "autovacuum = off"),
    ({"autovacuum": "on", "track_counts": "off"}, "track_counts = off"),
    ({"innodb_purge_threads": "4"}, None),  # MariaDB: no autovacuum, nothing to say
])
def test_autovacuum_never_runs_when_the_server_turns_it_or_its_counts_off(settings, blocked):
    assert server_blocks_autovacuum(settings) == blocked
    assert table_autovacuum_ineffective({"autovacuum": True}, settings) == blocked
    assert table_autovacuum_ineffective({"autovacuum": "on"}, settings) == blocked  # an older run's choice
    assert table_autovacuum_ineffective({"autovacuum": False}, settings) is None  # off on the table anyway
    assert table_autovacuum_ineffective({"autovacuum": "n/a"}, settings) is None


def _run(autovacuum: str = "off", naptime: str = "1min", own: dict | None = None, table: bool = True) -> dict:
    return {"server_settings": {"autovacuum": autovacuum, "track_counts": "on", "autovacuum_naptime": naptime,
                                "autovacuum_vacuum_threshold": "50", "autovacuum_vacuum_scale_factor": "0.2"},
            "config": {"autovacuum": table, "autovacuum_settings": own or {}}}


def _seconds(first: int, last: int, n: int = 120, live: int = 10_000, passes_at: int | None = None) -> list[dict]:
    """``intervals.csv`` rows as text: dead rows from ``first`` to ``last`` evenly; ``autovacuum_count`` rises by one
    at second ``passes_at`` (None: never)."""
    out = []
    for t in range(n):
        dead = round(first + (last - first) * t / (n - 1))
        out.append({"t_s": str(t), "dead_tuples": str(dead), "table_tuples": str(live + dead),
                    "autovacuum_count": str(int(passes_at is not None and t >= passes_at)), "vacuum_passes": ""})
    return out


def test_dead_rows_grew_is_at_least_the_growth_factor_and_past_the_tables_threshold():
    """The threshold of 10,000 live rows is 50 + 0.2 x 10,000 = 2,050 dead rows (PostgreSQL's formula); growth is
    at least GROWTH_FACTOR x the first sample."""
    assert vacuum_threshold(_run(), 10_000) == 2050
    start = 1500
    grew = dead_rows_growth(_seconds(start, int(GROWTH_FACTOR * start)), _run())
    assert grew == {"start": 1500, "end": 3000, "window_s": 120, "threshold": 2050,
                    "why_none": "autovacuum = off on this server"}
    assert growth_text(grew) == ("dead rows grew from 1,500 to 3,000 with no autovacuum pass in 120 s "
                                 "(autovacuum = off on this server)")
    assert dead_rows_growth(_seconds(start, int(GROWTH_FACTOR * start) - 1), _run()) is None  # not doubled
    assert dead_rows_growth(_seconds(500, 2000), _run()) is None  # quadrupled, under the threshold
    # the run's own AUTOVACUUM_SETTINGS set the threshold over the server's: 1,000 dead rows, whatever the size
    own = {"autovacuum_vacuum_threshold": 1000, "autovacuum_vacuum_scale_factor": 0.0}
    assert dead_rows_growth(_seconds(500, 2000), _run(own=own))["threshold"] == 1000


def test_a_vacuum_pass_or_a_launcher_that_need_not_have_woken_means_no_growth_is_named():
    rows = _seconds(1198, 61720)
    assert dead_rows_growth(_seconds(1198, 61720, passes_at=60), _run()) is None  # autovacuum ran in the window
    with_pass = [{**r, "vacuum_passes": "1" if r["t_s"] == "30" else ""} for r in rows]
    assert dead_rows_growth(with_pass, _run()) is None  # a periodic VACUUM (VACUUM_EVERY_S) ran
    # the server's autovacuum on: due and none came only when the launcher woke in the window (naptime shorter)
    assert dead_rows_growth(rows, _run("on", naptime="1s"))["why_none"] is None
    assert dead_rows_growth(rows, _run("on", naptime="2min")) is None
    assert dead_rows_growth(rows, _run("on", table=False))["why_none"] == "AUTOVACUUM=0"
    assert dead_rows_growth([{**r, "dead_tuples": ""} for r in rows], _run()) is None  # not sampled (MariaDB)


def test_the_reports_vacuum_note_names_the_growth_with_its_figures():
    summary = {"config": {"autovacuum": True},
               "autovacuum": {"enabled": False, "server_autovacuum": False, "server_blocked": "autovacuum = off"}}
    growth = dead_rows_growth(_seconds(1198, 61720, live=30_000), _run())
    note = vacuum_note(summary, growth)
    assert note.startswith("Autovacuum is off on this server (autovacuum = off): autovacuum never runs there, "
                           "whatever the queue table's autovacuum_enabled says (AUTOVACUUM on, to no effect)")
    assert note.endswith(" In the measured window the queue table's dead rows grew from 1,198 to 61,720 with no "
                         "autovacuum pass in 120 s (autovacuum = off on this server).")
    assert "dead rows grew" not in vacuum_note(summary, dead_rows_growth(_seconds(1198, 1198), _run()))
