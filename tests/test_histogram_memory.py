"""Seconds read back leave nothing for the cyclic collector: an hdrh histogram and its encoder refer to each
other, so a dropped one (about 100 KB of counts) stayed in memory until a full collection, which a process
holding the report's libraries seldom runs. Summing a run's ``.hlog`` for the report held every second's
histogram (+20 MB for a 150 s run at 50 workers; docs/measurements/harness.md), and the multi-process merge
held every part it decoded. Counted with the collector off, so nothing is freed but what is freed at once."""

import contextlib
import gc
from collections import Counter

from hdrh.histogram import HdrHistogram

from bench.measure import interval_codec
from bench.measure.metrics import HISTOGRAM_NAMES, Interval, new_histogram
from bench.results.histograms import read_hlog, sum_log
from bench.results.run_files import HistogramLogs

SECONDS = 300  # five minutes of one-second intervals


def _second(t_s: int) -> Interval:
    hists = {name: new_histogram(name) for name in HISTOGRAM_NAMES}
    for v in range(1, t_s % 7 + 2):  # 1 to 7 values, each second's own
        hists["claim_latency_us"].record_value(100 * v + t_s)
    return Interval(t_s, float(t_s), t_s + 1.0, hists, Counter(), Counter())


@contextlib.contextmanager
def _collector_off():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _histograms_alive() -> int:
    return sum(isinstance(o, HdrHistogram) for o in gc.get_objects())


def test_summing_a_long_log_holds_one_histogram_not_one_per_second(tmp_path):
    expected = 0
    with HistogramLogs(tmp_path, ["claim_latency_us"], base_time_s=1_000_000.0) as logs:
        for t_s in range(SECONDS):
            second = _second(t_s)
            logs.write(second)
            expected += second.histograms["claim_latency_us"].get_total_count()
            second.release()
    with _collector_off():
        before = _histograms_alive()
        n, total = sum_log(tmp_path / "claim_latency_us.hlog")
        held = _histograms_alive() - before
    assert n == SECONDS and total.get_total_count() == expected
    assert held == 1, f"{held} histograms still held after summing {SECONDS} seconds (1: the sum)"
    with _collector_off():
        before = _histograms_alive()
        merged = read_hlog(tmp_path / "claim_latency_us.hlog")
        assert _histograms_alive() - before == 1
    assert merged.get_value_at_percentile(100) == total.get_max_value()


def test_decoding_seconds_from_other_processes_holds_only_what_it_returns():
    wire = [interval_codec.encode(_second(t_s)) for t_s in range(SECONDS)]
    with _collector_off():
        before = _histograms_alive()
        counted = 0
        for data in wire:
            part = interval_codec.decode(data)
            counted += part.histograms["claim_latency_us"].get_total_count()
            part.release()
        del part
        held = _histograms_alive() - before
    assert counted == sum(t_s % 7 + 1 for t_s in range(SECONDS))
    assert held == 0, f"{held} histograms still held after decoding {SECONDS} seconds"
