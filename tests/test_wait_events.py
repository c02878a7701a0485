"""The wait events of the workers' active backends (docs/network.md, "Where the server's time goes: wait events"),
in process with fake pg_stat_activity rows (the database is not the point here): which backends count, the
folding of samples into each second's columns and counts, the run's shares, and the report's table and figure.
The real sampling under a held lock is checked in tests/test_swarm.py (test_concurrency_is_real)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from bench.engines.wait_events import POOL, SAMPLE_EVERY_S, WORKERS, WaitEventFold
from bench.report.run_page import render_report
from bench.results.wait_event_columns import WAIT_EVENT_COLUMNS
from bench.run_summary.wait_events import wait_event_figures

FIXTURE = Path(__file__).parent / "fixtures" / "run_small"

#: One sample's backends: (application_name, state, wait_event_type, wait_event).
SAMPLE = [
    ("queue-bench worker-1", "active", None, None),                          # on a core: CPU
    ("queue-bench worker-2", "active", "Lock", "transactionid"),             # waiting for a row's locker
    ("queue-bench p2-worker-3", "active", "Lock", "transactionid"),
    ("queue-bench worker-4", "idle", "Client", "ClientRead"),                # waiting for its client: not counted
    ("queue-bench worker-5", "idle in transaction", "Client", "ClientRead"),  # TXN=hold, working: not counted
    ("queue-bench worker-6 effects", "active", "IO", "WALSync"),             # a worker's effect connection
    ("queue-bench producer-1", "active", "LWLock", "WALWrite"),              # not a worker's
    ("queue-bench reaper", "active", None, None),
    ("queue-bench admin", "active", None, None),
    ("", "active", "IO", "DataFileRead"),                                    # no name: not the tool's
]


def _second(fold: WaitEventFold, samples: list) -> dict:
    acc = fold.new_second()
    for rows in samples:
        fold.fold(acc, rows, 0.0002)
    return fold.columns(acc)


def test_only_the_workers_active_backends_count_and_no_wait_event_is_cpu():
    columns = _second(WaitEventFold(), [SAMPLE, SAMPLE, None])  # the failed sample is not counted
    assert columns["wait_samples"] == 2
    assert columns["wait_events"] == {"CPU": 2, "Lock:transactionid": 4, "IO:WALSync": 2}
    assert (columns["wait_cpu_backends"], columns["wait_lock_backends"], columns["wait_io_backends"]) == (1, 2, 1)
    assert columns["wait_lwlock_backends"] == columns["wait_client_backends"] == 0
    assert columns["wait_states"] == {"active": 8, "idle": 2, "idle in transaction": 2}
    assert columns["wait_query_us"] == 600 and columns["cost_s"] == pytest.approx(0.0006)  # the failed one cost too


def test_behind_a_pooler_every_server_connection_of_the_pool_counts_and_the_tools_own_do_not():
    fold = WaitEventFold(behind_pooler=True)
    columns = _second(fold, [SAMPLE])
    assert fold.info() == {"sample_every_s": SAMPLE_EVERY_S, "backends": POOL}
    assert columns["wait_events"] == {"CPU": 2, "Lock:transactionid": 2, "IO:WALSync": 1, "LWLock:WALWrite": 1,
                                      "IO:DataFileRead": 1}
    assert columns["wait_io_backends"] == 2 and columns["wait_lwlock_backends"] == 1


def test_a_second_without_a_sample_is_empty_not_zero():
    columns = _second(WaitEventFold(), [None])
    assert columns["wait_samples"] == 0 and columns["wait_cpu_backends"] is None and columns["wait_events"] == {}


def test_the_runs_shares_are_of_the_active_samples_and_mariadb_says_not_measured():
    fold = WaitEventFold()
    rows = [_second(fold, [SAMPLE] * 10), _second(fold, [SAMPLE[:3]] * 10)]
    w = wait_event_figures(rows, {"wait_events": fold.info()})
    active = 4 * 10 + 3 * 10
    assert (w["measured"], w["backends"], w["samples"], w["active_samples"]) == (True, WORKERS, 20, active)
    assert w["by_type"] == {"Lock": round(40 / active, 4), "CPU": round(20 / active, 4), "IO": round(10 / active, 4)}
    assert w["top_events"][0] == {"event": "Lock:transactionid", "samples": 40, "share": round(40 / active, 4)}
    assert w["active_share"] == round(active / (6 * 10 + 3 * 10), 4)
    assert w["mean_active_backends"] == round(active / 20, 3)
    assert w["query_us_per_s"] == pytest.approx(2000, abs=1)  # ten samples of 200 µs a second
    missing = wait_event_figures(rows, {"wait_events": {"not_measured": "not measured on MariaDB: ..."}})
    assert missing == {"measured": False, "not_measured": "not measured on MariaDB: ..."}


def test_the_report_draws_the_stacked_figure_from_the_columns_and_lists_the_top_events(tmp_path, monkeypatch):
    """The fixture run given wait-event columns and block: the figure's bars are the columns, stacked."""
    import bench.report.run_figures as run_figures
    from bench.report.render import save_png

    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    with (run_dir / "intervals.csv").open() as fh:
        table = list(csv.DictReader(fh))
    fold, seconds = WaitEventFold(), []
    for i, row in enumerate(table):
        second = _second(fold, [SAMPLE[: 1 + i % 3]] * 10)
        seconds.append(second)
        row.update({k: second[k] for k in WAIT_EVENT_COLUMNS})
    with (run_dir / "intervals.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["wait_events"] = wait_event_figures(seconds, {"wait_events": fold.info()})
    (run_dir / "summary.json").write_text(json.dumps(summary))
    bars = {}

    def recording_save_png(fig):
        if "wait events" in fig.texts[0].get_text() if fig.texts else False:
            for patch in fig.axes[0].patches:
                bars.setdefault(round(patch.get_x()), []).append(patch.get_height())
        return save_png(fig)

    monkeypatch.setattr(run_figures, "save_png", recording_save_png)
    page = render_report(run_dir).read_text(encoding="utf-8")
    assert (run_dir / "plots" / "wait_events.png").is_file()
    for row, second in zip(table, seconds):
        active = second["wait_cpu_backends"] + second["wait_lock_backends"]
        assert sum(bars[int(row["t_s"])]) == pytest.approx(active), row["t_s"]
    assert '<table id="wait-events">' in page and "Lock:transactionid" in page


def test_the_monitor_row_is_in_ms_per_s_and_says_what_the_samples_took():
    """The row read µs as ms once (5,700 µs a second showed as "5,700.000 ms")."""
    from bench.report.run_tables import summary_rows

    rows = summary_rows({"monitor_query_us": {"mean": 5700.0, "max": 8100}, "wait_events": {"query_us_per_s": 1234.0}},
                        {})
    row = next(r for r in rows if r["label"].startswith("the monitor's queries' time per second"))
    assert row["value"] == "5.7 / 8.1 (of which the wait events' samples 1.23 mean)"


def test_the_terminal_line_gives_the_types_shares_and_the_event_most_sampled():
    from bench.run_summary.wait_events import wait_events_line

    fold = WaitEventFold()
    w = wait_event_figures([_second(fold, [SAMPLE] * 10)], {"wait_events": fold.info()})
    assert wait_events_line(w) == ("wait events (the workers' backends, active in 67 % of their samples): Lock 50.0 %, "
                                   "CPU 25.0 %, IO 25.0 %; most sampled Lock:transactionid 50.0 %")
    assert wait_events_line({"measured": False, "not_measured": "not measured on MariaDB"}) is None
