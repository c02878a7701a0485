"""Bounded memory: the histogram logs are written second by second while the run runs, and
the harness's RSS is measured.

One ``qbench run`` (``--duration 8s --warmup 1s --workers 4``) started as a subprocess; while it
runs the test polls its ``histograms/claim_latency_us.hlog``. Intervals there before the process
has exited prove the log is streamed (the run keeps no interval after writing it); after the
run every measured second is one interval and the summary's percentiles come back from the log.
"""

from __future__ import annotations

import csv

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hdrh.log import HistogramLogReader

from bench.measure import metrics
from bench.measure.rss import RssLog
from conftest import CLEAN_INVARIANTS, REPO

MEASURED_S = 8


def _complete_intervals(path: Path, copy: Path) -> list:
    """The interval histograms of the complete lines of ``path`` (a log may be mid-write),
    read with hdrh's HistogramLogReader from a copy holding only those lines."""
    text = path.read_text()
    copy.write_text(text[:text.rfind("\n") + 1])
    reader = HistogramLogReader(str(copy), metrics.new_histogram("pickup_latency_us"))
    out = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        out.append(hist)
    return out


@pytest.fixture(scope="module")
def streamed(dsn, tmp_path_factory):
    """(run_dir, summary, the claim log's interval counts seen while the process was still running,
    in the order seen)."""
    tmp = tmp_path_factory.mktemp("stream")
    results = tmp / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.cli.main", "run", "--dsn", dsn, "--results", str(results),
         "--duration", f"{MEASURED_S}s", "--warmup", "1s", "--workers", "4"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen_running: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            logs = list(results.glob("*/histograms/claim_latency_us.hlog")) if results.is_dir() else []
            if logs:
                count = len(_complete_intervals(logs[0], tmp / "partial.hlog"))
                if proc.poll() is None and not list(results.glob("*/summary.json")):
                    seen_running.append(count)
            time.sleep(0.2)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir, json.loads((run_dir / "summary.json").read_text()), seen_running


@pytest.mark.slow
def test_histogram_log_grows_while_the_run_runs(streamed):
    """Before the run has ended (no summary.json yet) the claim log was seen holding some of the
    measured seconds, fewer than the whole window, and more over time: it is written as each
    second ends."""
    _, summary, seen_running = streamed
    assert summary["complete"] is True and summary["invariants"] == CLEAN_INVARIANTS
    assert any(1 <= count < MEASURED_S for count in seen_running), seen_running
    assert seen_running == sorted(seen_running) and len(set(seen_running)) >= 3, seen_running


@pytest.mark.slow
def test_one_interval_per_measured_second_and_summary_percentiles_from_the_log(streamed, tmp_path):
    """Every .hlog holds one interval per measured second, each about 1 s long and starting where
    the previous ended; the sums of the claim and completion logs give the summary's p50/p99/max
    and count (HdrHistogram precision), as the whole-window running totals must."""
    run_dir, s, _ = streamed
    for name in metrics.HISTOGRAM_NAMES:
        hists = _complete_intervals(run_dir / "histograms" / f"{name}.hlog", tmp_path / f"{name}.hlog")
        assert len(hists) == MEASURED_S, name
        for prev, cur in zip(hists, hists[1:]):
            assert abs(cur.get_start_time_stamp() - prev.get_end_time_stamp()) <= 1, name
            assert 900 <= cur.get_end_time_stamp() - cur.get_start_time_stamp() <= 1100, name
    for name in ("claim_latency_us", "complete_latency_us"):
        total = metrics.new_histogram(name)
        for hist in _complete_intervals(run_dir / "histograms" / f"{name}.hlog", tmp_path / "sum.hlog"):
            total.add(hist)
        assert total.get_total_count() > 0
        for pct in (50, 99):
            recomputed = total.get_value_at_percentile(pct)
            assert total.values_are_equivalent(recomputed, s[name][f"p{pct}"]), (name, pct, recomputed, s[name])
        assert total.values_are_equivalent(total.get_max_value(), s[name]["max"]), name
        if name == "claim_latency_us":  # one value per claim statement
            with (run_dir / "intervals.csv").open(newline="") as fh:
                claims = sum(int(r["claims"]) for r in csv.DictReader(fh))
            assert total.get_total_count() == claims


@pytest.mark.slow
def test_summary_reports_the_harness_rss(streamed):
    """harness_rss_mb: no minute sample in an 8 s run, an end RSS of a Python process with
    gevent, psycopg and hdrh loaded (over 20 MB), and a peak at least that."""
    _, s, _ = streamed
    rss = s["harness_rss_mb"]
    assert rss["at_1m"] is None and rss["per_minute"] == [] and rss["growth_mb_per_min"] is None
    assert 20 < rss["end"] <= rss["max"]


@pytest.mark.slow
def test_rss_log_samples_each_minute_and_sees_an_allocation():
    """RssLog samples only on whole minutes; 64 MiB written between two samples shows in the
    second sample and in growth_mb_per_min (RSS of this very process, via psutil)."""
    lines: list[str] = []
    log = RssLog(psutil.Process(), lines.append)
    log.tick(59)
    assert log.per_minute_mb == [] and lines == []
    log.tick(60)
    block = b"\x01" * (64 * 1024 * 1024)  # written, so resident
    log.tick(120)
    summary = log.summary()
    assert len(block) and len(lines) == 2 and "at 2 min" in lines[1]
    assert summary["at_1m"] == log.per_minute_mb[0] and summary["at_5m"] is None
    assert summary["per_minute"][1] - summary["per_minute"][0] >= 60
    assert summary["growth_mb_per_min"] == pytest.approx(summary["per_minute"][1] - summary["per_minute"][0], abs=0.01)
    assert summary["max"] >= summary["per_minute"][1]


@pytest.mark.slow
def test_a_released_interval_is_freed_without_the_cyclic_collector():
    """hdrh histograms and their encoders refer to each other: without release() a dropped
    interval waits for a full cyclic collection (RSS grew ~10 MB a minute in a soak)."""
    import gc
    import weakref

    recorder = metrics.Recorder(batch=1)
    recorder.claim(120, 1, [5])
    gc.disable()
    try:
        kept = recorder.rotate(0, 0.0, 1.0)
        kept_ref = weakref.ref(kept.histograms["claim_latency_us"])
        released = recorder.rotate(1, 1.0, 2.0)
        released_ref = weakref.ref(released.histograms["claim_latency_us"])
        released.release()
        del kept, released
        assert released_ref() is None  # freed by reference counting alone
        assert kept_ref() is not None  # the cycle holds it until a collection
    finally:
        gc.enable()
        gc.collect()
