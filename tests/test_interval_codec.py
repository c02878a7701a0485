"""Seconds shipped between processes (bench/measure/interval_codec.py): encoded and decoded they keep
every value, and merged they give the percentiles of the union of the values, not an average."""

import random
from collections import Counter

import msgpack

from bench.measure import interval_codec
from bench.measure.metrics import HISTOGRAM_NAMES, Interval, Recorder, new_histogram


def _second(seed: int, n: int, scale: int, index: int = 3):
    rng = random.Random(seed)
    rec = Recorder(batch=1)
    values = [max(1, int(rng.expovariate(1 / scale))) for _ in range(n)]
    for v in values:
        rec.claim(v, 1, [v * 2])
    rec.error("55P03")
    rec.count("nowait_retries", 2)
    return rec.rotate(index, 1.0 + seed * 0.01, 2.0), values


def test_encode_decode_keeps_every_value_through_msgpack():
    interval, _ = _second(1, 5000, 800)
    wire = msgpack.unpackb(msgpack.packb(interval_codec.encode(interval)))  # what Locust's messages do
    back = interval_codec.decode(wire)
    for name, hist in interval.histograms.items():
        assert back.histograms[name].get_total_count() == hist.get_total_count()
        for q in (50, 90, 99, 99.9, 100):
            assert back.histograms[name].get_value_at_percentile(q) == hist.get_value_at_percentile(q)
    assert back.counters == interval.counters and back.errors == interval.errors
    assert (back.index, back.start_s, back.end_s) == (interval.index, interval.start_s, interval.end_s)


def test_merged_p99_is_the_p99_of_the_union_not_an_average():
    fast, fast_values = _second(2, 5000, 300)
    slow, slow_values = _second(3, 5000, 20_000)
    merged = interval_codec.merge(3, [interval_codec.decode(interval_codec.encode(p)) for p in (fast, slow)])
    union = sorted(fast_values + slow_values)
    exact_p99 = union[int(0.99 * len(union)) - 1]
    got = merged.histograms["claim_latency_us"].get_value_at_percentile(99)
    assert abs(got - exact_p99) <= 0.001 * exact_p99 + 1, (got, exact_p99)  # HdrHistogram's 3 digits
    mean_of_p99s = (fast.histograms["claim_latency_us"].get_value_at_percentile(99)
                    + slow.histograms["claim_latency_us"].get_value_at_percentile(99)) / 2
    assert abs(mean_of_p99s - exact_p99) > 0.2 * exact_p99  # the wrong way gives another figure
    assert merged.counters["claims"] == 10_000 and merged.errors["55P03"] == 2
    assert merged.counters["nowait_retries"] == 4
    assert (merged.start_s, merged.end_s) == (fast.start_s, fast.end_s)  # the first part's (the master's) span
    # a process's stop-phase part is stamped 0, 0: it must not stretch the run's second
    stop_part = interval_codec.merge(3, [slow, Interval(3, 0.0, 0.0, {n: new_histogram(n) for n in HISTOGRAM_NAMES},
                                                        Counter(), Counter(), 0)])
    assert (stop_part.start_s, stop_part.end_s) == (slow.start_s, slow.end_s)


def test_round_trip_counters_merge_exactly_and_per_job_is_their_ratio():
    """The round trips each process counted (bench/load/swarm.py, producers.py) cross the wire and add up exactly,
    and round trips per job over the merged seconds is the sum over the sum, not a mean of the processes' ratios."""
    from bench.run_summary.round_trips import round_trips_per_job

    parts = []
    for trips, jobs, claim_trips in ((4000, 2000, 2001), (37, 3, 20)):  # a busy process and a nearly idle one
        rec = Recorder(batch=1)
        for _ in range(jobs):
            rec.complete(100, 1, 0)
        rec.count("worker_round_trips", trips)
        rec.count("claim_round_trips", claim_trips)
        rec.count("producer_round_trips", 0)  # counted, none sent: present as 0
        parts.append(interval_codec.decode(msgpack.unpackb(msgpack.packb(interval_codec.encode(rec.rotate(5, 1.0, 2.0))))))
    merged = interval_codec.merge(5, parts)
    assert merged.counters["worker_round_trips"] == 4037 and merged.counters["claim_round_trips"] == 2021
    assert "producer_round_trips" in merged.counters and merged.counters["producer_round_trips"] == 0
    per_job = round_trips_per_job(merged.counters, batch=1)
    assert per_job["per_job"] == round(4037 / 2003, 3) != round((4000 / 2000 + 37 / 3) / 2, 3)
    assert per_job["minimum_per_job"] == 2
