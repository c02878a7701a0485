"""The run report's tables: what is called changed from the defaults, and how latencies are written."""

from __future__ import annotations

from bench.config.parameters import defaults_on
from bench.config.run_config import build_config
from bench.report.run_page import _config_rows


def test_only_parameters_set_away_from_their_default_are_called_changed():
    """A default run changes nothing; a parameter that does not apply (LIBRARY_MODE without a library: n/a)
    is not a change; a set one is, with its default beside it."""
    defaults = defaults_on("postgres")
    plain = build_config().public()
    assert plain["library_mode"] == "n/a" and defaults["library_mode"] == "worker"
    assert _config_rows(plain, defaults)["changed_rows"] == []
    set_ = build_config(overrides={"workers": 7}).public()
    assert _config_rows(set_, defaults)["changed_rows"] == [("workers", "7", str(defaults["workers"]))]


def test_the_latency_table_gives_ms_with_us_precision_and_seconds_from_10_s():
    from bench.report.run_tables import latency_rows

    summary = {"claim_latency_us": {"p50": 412, "p95": 9_999_999, "p99": 10_000_000, "max": 133_000, "mean": None},
               "complete_latency_us": {}, "pickup_latency_ms": {"p50": 19_021.823}, "work_duration_us": {},
               "loop_lag_us": {}, "nowait_backoff_us": None}
    rows = {r["label"].split(",")[0]: r["cells"] for r in latency_rows(summary)}
    assert rows["claim latency"] == ["0.412 ms", "9,999.999 ms", "10.00 s", "133.000 ms", "n/a"]
    assert rows["pickup latency"][0] == "19.02 s"


def test_the_workers_connected_row_is_red_when_a_run_started_or_ended_short():
    from bench.report.run_tables import _cost_rows
    def row(seen):
        rows = [r for r in _cost_rows({"workers_connected": seen}, {}) if r["label"].startswith("workers connected")]
        return rows[0] if rows else None
    full = row({"asked": 10, "at_start": 10, "at_end": 10, "connect_wait_s": 0.42})
    assert full == {"label": "workers connected at start / at end, of WORKERS (connect wait)",
                    "value": "10 / 10 of 10 (0.4 s)", "bad": False}
    assert row({"asked": 10, "at_start": 9, "at_end": 10, "connect_wait_s": 60.0})["bad"] is True
    assert row({"asked": 10, "at_start": 10, "at_end": 8, "connect_wait_s": 1.0})["bad"] is True
    assert row(None) is None  # a run written before it was kept
