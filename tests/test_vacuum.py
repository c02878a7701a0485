"""Vacuum of the queue table (field case FR-12): AUTOVACUUM_SETTINGS reach pg_class.reloptions of
the queue table only, with the ranges the server itself accepts; VACUUM_EVERY_S runs timed passes
that intervals.csv marks and that keep dead tuples down against the same run without them."""

from __future__ import annotations

import csv
import json

import psycopg
import pytest
from psycopg import sql

from bench.config.autovacuum import SETTINGS, parse_autovacuum_settings, short_names
from bench.config.run_config import build_config
from bench.engines.postgres import embedded
from bench.engines.postgres.embedded import embedded_postgres
from bench.experiments.catalogue import load_experiment
from bench.experiments.driver import run_catalogue
from bench.errors import ConfigError
from bench.report.run_notes import vacuum_note
from bench.run_summary import vacuum_during
from conftest import CLEAN_INVARIANTS, qbench, run_and_load

AGGRESSIVE = "vacuum_scale_factor=0,autovacuum_vacuum_threshold=1000,vacuum_cost_delay=0"
AGGRESSIVE_RELOPTIONS = {"autovacuum_vacuum_scale_factor=0.0", "autovacuum_vacuum_threshold=1000",
                         "autovacuum_vacuum_cost_delay=0.0"}


def _rows(run_dir) -> list[dict]:
    with (run_dir / "intervals.csv").open() as fh:
        return list(csv.DictReader(fh))


def _reloptions(dsn: str, schema: str = "qbench") -> dict[str, set[str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT relname, coalesce(reloptions, '{}') FROM pg_class WHERE relkind = 'r' "
                            "AND relnamespace = %s::regnamespace", (schema,)).fetchall()
    return {name: set(options) for name, options in rows}


def test_each_settings_range_is_the_servers(dsn):
    """Every setting's bounds are accepted by the server and by the parser, and the value just outside
    each bound is refused by both: the parser's table is PostgreSQL's, not a guess."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE ranges (id int)")
        for name, (kind, low, high, _) in SETTINGS.items():
            step = 1 if kind == "int" else 0.001
            for value, ok in ((low, True), (high, True), (low - step, False), (high + step, False)):
                statement = sql.SQL("ALTER TABLE ranges SET ({} = {})").format(sql.Identifier(name), sql.Literal(value))
                try:
                    conn.execute(statement)
                    server_ok = True
                except (psycopg.errors.InvalidParameterValue, psycopg.errors.NumericValueOutOfRange):  # 22023, 22003
                    server_ok = False
                assert server_ok is ok, (name, value)
                if ok:
                    assert parse_autovacuum_settings(f"{name}={value}") == ((name, value),)
                else:
                    with pytest.raises(ConfigError):
                        parse_autovacuum_settings(f"{name}={value}")


@pytest.mark.parametrize("layout, tables", [("partitioned", ("jobs_history", "jobs_live")), ("archive", ("jobs",))])
@pytest.mark.slow
def test_autovacuum_settings_reach_the_queue_tables_reloptions_only(dsn, tmp_path, layout, tables):
    """Set on each leaf of the queue table (partitions; not the archive), read back from pg_class and
    recorded in run.json's config by PostgreSQL's full names; the monitor's dead tuples and index size
    are the partitions' sums."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--workers", "2", "--backlog", "3000", "--duration", "2s", "--warmup", "0s",
                           "--layout", layout, "--autovacuum-settings", AGGRESSIVE)
    held = _reloptions(dsn)
    for table in tables:
        assert held[table] == AGGRESSIVE_RELOPTIONS, held
    others = {name: options for name, options in held.items() if name not in tables}
    assert all(not options for options in others.values()), others  # jobs_archive keeps none
    assert {t: set(o) for t, o in s["autovacuum"]["reloptions"].items()} == {t: held[t] for t in tables}
    assert s["config"]["autovacuum_settings"] == {"autovacuum_vacuum_cost_delay": 0.0,
                                                  "autovacuum_vacuum_scale_factor": 0.0,
                                                  "autovacuum_vacuum_threshold": 1000}
    assert s["monitor_errors"] == {} and s["claim_index_bytes"]["max"] > 0  # the stats query on this layout
    # claims and completions leave dead tuples in the partitions (the partitioned parent's own count is 0)
    assert max(int(r["dead_tuples"] or 0) for r in _rows(run_dir)) > 0
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
def test_periodic_vacuum_passes_are_timed_marked_and_keep_dead_tuples_down(dsn, tmp_path):
    """VACUUM_EVERY_S=1 over a 5 s window: at least 3 passes with durations, each marked in
    intervals.csv; with autovacuum off on the table, the last second's dead tuples are under half of
    the same run's without the passes."""
    common = ("--workers", "4", "--backlog", "20000", "--duration", "5s", "--warmup", "1s", "--no-autovacuum")
    vac_dir, vac, _ = run_and_load(dsn, tmp_path / "with", *common, "--vacuum-every-s", "1")
    plain_dir, plain, _ = run_and_load(dsn, tmp_path / "without", *common)

    passes = vac["vacuum_passes"]
    assert passes["every_s"] == 1.0 and passes["count"] >= 3, passes
    assert 0 < passes["duration_ms"]["p50"] <= passes["duration_ms"]["max"], passes
    assert passes["run_count"] >= passes["count"]
    rows = _rows(vac_dir)
    marked = [r for r in rows if int(r["vacuum_passes"]) > 0]
    assert sum(int(r["vacuum_passes"]) for r in rows) == passes["count"]
    assert len(marked) >= 3 and all(float(r["vacuum_ms"]) > 0 for r in marked), marked
    assert max(float(r["vacuum_ms"]) for r in marked) == pytest.approx(passes["duration_ms"]["max"], abs=0.01)
    assert plain["vacuum_passes"] is None
    assert all(r["vacuum_passes"] == "" for r in _rows(plain_dir))

    dead_with = int(rows[-1]["dead_tuples"])
    dead_without = int(_rows(plain_dir)[-1]["dead_tuples"])
    assert dead_without > 1000 and dead_with < 0.5 * dead_without, (dead_with, dead_without)
    # the claim's index is sampled every second (INDEX=partial)
    assert all(int(r["claim_index_bytes"]) > 0 for r in rows) and vac["claim_index_bytes"]["max"] > 0
    assert vac["invariants"] == plain["invariants"] == CLEAN_INVARIANTS


def test_an_unknown_setting_names_the_parameter_and_lists_every_allowed_name(tmp_path):
    proc = qbench("run", "--autovacuum-settings", "vacuum_speed=3", "--results", str(tmp_path / "r"), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("qbench: --autovacuum-settings: unknown setting 'vacuum_speed'; allowed: ") and short_names() in line


def test_settings_with_autovacuum_off_are_refused_in_one_line(tmp_path):
    proc = qbench("run", "--no-autovacuum", "--autovacuum-settings", "vacuum_threshold=100",
                  "--results", str(tmp_path / "r"), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("qbench: --autovacuum-settings: has no effect with --no-autovacuum") and "allowed:" in line
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.parametrize("key, value", [("vacuum_every_s", "5"), ("autovacuum_settings", "vacuum_threshold=10")])
def test_vacuum_parameters_do_not_apply_on_mariadb(key, value):
    with pytest.raises(ConfigError) as err:
        build_config("default", {"engine": "mariadb", key: value})
    assert err.value.param == key.upper() and "does not apply on mariadb" in str(err.value)
    cfg = build_config("default", {"engine": "mariadb"})
    assert cfg.vacuum_every_s == cfg.autovacuum_settings == "n/a" and not cfg.vacuums()


@pytest.mark.slow
def test_aggressive_settings_make_autovacuum_take_the_queue_table_within_a_quick_run(tmp_path):
    """On the embedded server (autovacuum_naptime 1 s) the aggressive settings make autovacuum run on
    the queue table at least twice in 6 s, and intervals.csv's autovacuum_count rises with them."""
    proc = qbench("run", "--results", str(tmp_path), "--workers", "4", "--backlog", "40000", "--duration", "6s",
                  "--warmup", "1s", "--autovacuum-settings", AGGRESSIVE, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["embedded_database"] and run["server_settings"]["autovacuum_naptime"] == "1s"
    # the embedded server's autovacuum can run: recorded so, and no line says it never runs
    assert run["server_settings"]["autovacuum"] == run["server_settings"]["track_counts"] == "on"
    assert s["autovacuum"]["server_blocked"] is None and "autovacuum never runs" not in proc.stdout + proc.stderr
    assert s["autovacuum"]["enabled"] and s["autovacuum"]["autovacuum_runs"] >= 2, s["autovacuum"]
    counts = [int(r["autovacuum_count"]) for r in _rows(run_dir) if r["autovacuum_count"]]
    assert counts == sorted(counts) and counts[-1] - counts[0] >= 1, counts
    assert counts[-1] - counts[0] <= s["autovacuum"]["autovacuum_runs"]  # the window's rises, within the run's


def test_the_reports_vacuum_note_names_the_passes_and_the_settings():
    passes = {"every_s": 1.0, "count": 5, "duration_ms": {"p50": 8.5, "max": 17.9}, "run_count": 7}
    off = vacuum_note({"autovacuum": {"enabled": False, "server_autovacuum": False}, "vacuum_passes": passes})
    assert "started 5 times" in off and "8.5 ms at the median and 17.9 ms at most" in off
    assert "dead tuples stayed" not in off  # the passes removed them
    on = vacuum_note({"autovacuum": {"enabled": True, "server_autovacuum": True, "autovacuum_runs": 3,
                                     "autoanalyze_runs": 1, "settings": {"autovacuum_vacuum_threshold": 1000}},
                      "vacuum_passes": None})
    assert "ran 3 and autoanalyze 1 times" in on and "autovacuum_vacuum_threshold = 1000" in on
    assert "VACUUM_EVERY_S" not in on


def test_no_autovacuum_run_under_a_naptime_longer_than_the_run_is_unobservable_not_a_failure():
    """The rule alone: autovacuum on, no run seen, and a naptime not shorter than the watched span ->
    ``unobservable`` with the reason; a naptime shorter than the span, or a run seen, -> no such note."""
    cfg = build_config(overrides={"autovacuum_settings": AGGRESSIVE})
    counts = {"autovacuum_count": 0, "autoanalyze_count": 0, "last_autovacuum": None, "last_autoanalyze": None,
              "server_autovacuum": True, "naptime_s": 60.0, "at_s": 1000.0}
    av = vacuum_during(counts, {**counts, "at_s": 1017.0}, cfg)
    assert (av["naptime_s"], av["watched_s"], av["autovacuum_runs"]) == (60.0, 17.0, 0)
    assert "autovacuum_naptime (60 s)" in av["unobservable"] and "17 s" in av["unobservable"]
    assert "unobservable" not in vacuum_during({**counts, "naptime_s": 1.0}, {**counts, "naptime_s": 1.0, "at_s": 1017.0}, cfg)
    assert "unobservable" not in vacuum_during(counts, {**counts, "at_s": 1017.0, "autovacuum_count": 1}, cfg)
    off = {**counts, "server_autovacuum": False}
    assert vacuum_during(off, {**off, "at_s": 1017.0}, cfg)["unobservable"] == (
        "the server runs with autovacuum = off: no per-table setting can make autovacuum run")
    tracked_off = vacuum_during(counts, {**counts, "at_s": 1017.0}, cfg, {"autovacuum": "on", "track_counts": "off"})
    assert tracked_off["server_blocked"] == "track_counts = off" and tracked_off["enabled"] is False
    assert "track_counts = off" in tracked_off["unobservable"]


@pytest.mark.slow
def test_a_run_records_the_servers_naptime_and_the_span_it_watched(dsn, tmp_path):
    """Against the test server: summary.json's autovacuum block holds its autovacuum_naptime and the
    seconds between the two counts; no autovacuum run within a span shorter than the naptime is
    marked unobservable (the system server's naptime is 60 s, so the experiment says inconclusive)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        naptime = conn.execute("SELECT setting::float8 FROM pg_settings WHERE name = 'autovacuum_naptime'").fetchone()[0]
    _, s, _ = run_and_load(dsn, tmp_path, "--workers", "2", "--backlog", "3000", "--duration", "2s", "--warmup", "0s",
                           "--autovacuum-settings", AGGRESSIVE)
    av = s["autovacuum"]
    assert av["naptime_s"] == naptime
    assert 2 <= av["watched_s"] < 120, av
    if not av["server_autovacuum"]:
        assert av["unobservable"] == (f"the server runs with {av['server_blocked']}: no per-table setting can make "
                                      "autovacuum run")
    else:
        expect_unobservable = av["autovacuum_runs"] == 0 and naptime >= av["watched_s"]
        assert ("unobservable" in av) == expect_unobservable, av


UNOBSERVABLE_EXPERIMENT = '''
number = 99
title = "t"
claim = "per-table autovacuum settings make autovacuum take the queue table"
measures = "autovacuum runs on the queue table"
budget_s = 60
engines = ["postgres"]
[runs]
cells = [{ autovacuum_settings = "vacuum_scale_factor=0,autovacuum_vacuum_threshold=1000,vacuum_cost_delay=0" }]
[runs.fixed]
workers = 2
backlog = 3000
duration = "2s"
warmup = "0s"
[[figures]]
name = "autovacuum runs"
measure = "value"
key = "autovacuum.autovacuum_runs"
holds_if = "> 0"
'''

@pytest.mark.slow
def test_an_experiment_on_a_server_whose_naptime_outlasts_its_run_is_inconclusive_and_says_why(tmp_path, monkeypatch):
    """A server of the test's own, autovacuum on with autovacuum_naptime = 60 s (as the system
    server's), and an experiment whose 2 s run asks per-table autovacuum settings to act: no
    autovacuum run is seen, and the verdict is inconclusive, naming the naptime, not "does not hold"."""
    (tmp_path / "unobservable.toml").write_text(UNOBSERVABLE_EXPERIMENT)
    monkeypatch.setattr(embedded, "AUTOVACUUM_NAPTIME", "60s")  # the server's own start option
    with embedded_postgres(20, log=lambda _line: None) as server:
        with psycopg.connect(server, autocommit=True) as conn:
            assert conn.execute("SHOW autovacuum").fetchone()[0] == "on"
            assert conn.execute("SELECT setting FROM pg_settings WHERE name = 'autovacuum_naptime'").fetchone()[0] == "60"
        exp = load_experiment(tmp_path / "unobservable.toml", dsn=server)
        catalogue = run_catalogue([exp], server, "postgres", tmp_path / "results", probe_runner=dict,
                                  log=lambda _line: None)
    outcome = json.loads((catalogue / exp.name / "outcome.json").read_text())
    (figure,) = outcome["figures"]
    assert figure["values"] == [0], figure
    assert outcome["verdict"] == "inconclusive", outcome
    assert any("autovacuum_naptime (60 s) is not shorter than the" in r for r in outcome["reasons"]), outcome["reasons"]
