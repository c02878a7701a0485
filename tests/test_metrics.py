"""The recorder's batched histogram path gives the same histograms as one ``record_value`` per value."""

import random

import pytest

from bench.measure import metrics


def _one_by_one(name: str, values: list[int], highest: int):
    hist = metrics.new_histogram(name)
    for value in values:
        hist.record_value(min(max(1, value), highest))
    return hist


@pytest.mark.parametrize("name,highest", [("claim_latency_us", metrics.LATENCY_MAX_US),
                                          ("pickup_latency_us", metrics.PICKUP_MAX_US)])
def test_record_values_matches_record_value_bucket_for_bucket(name, highest):
    rng = random.Random(7)
    # every bucket boundary region: sub-µs clamps, the linear first bucket, powers of two and their
    # neighbours, log-normal bulk, the top of the range and beyond it
    values = [0, -5, 1, 2, 2047, 2048, 2049, 4095, 4096, highest - 1, highest, highest + 10]
    values += [2 ** k + d for k in range(1, 39) for d in (-1, 0, 1) if 2 ** k + d <= highest]
    values += [int(rng.lognormvariate(6, 2.5)) for _ in range(20_000)]
    expected = _one_by_one(name, values, highest)
    batched = metrics.new_histogram(name)
    metrics.record_values(batched, values, highest)
    assert list(batched.counts) == list(expected.counts)
    assert batched.get_total_count() == expected.get_total_count() == len(values)
    assert (batched.get_min_value(), batched.get_max_value()) == (expected.get_min_value(), expected.get_max_value())
    for pct in (50, 95, 99, 99.9, 100):
        assert batched.get_value_at_percentile(pct) == expected.get_value_at_percentile(pct)
    assert batched.get_mean_value() == expected.get_mean_value()


def test_record_values_adds_to_what_is_there_and_ignores_an_empty_list():
    hist = metrics.new_histogram("claim_latency_us")
    hist.record_value(500)
    metrics.record_values(hist, [], metrics.LATENCY_MAX_US)
    metrics.record_values(hist, [500, 70_000], metrics.LATENCY_MAX_US)
    assert hist.get_total_count() == 3
    assert hist.get_count_at_value(500) == 2
    assert hist.get_max_value() == hist.get_highest_equivalent_value(70_000)


def test_rotate_folds_the_interval_into_histograms_and_counters():
    recorder = metrics.Recorder(batch=2)
    recorder.claim(300, 2, [10, 20])
    recorder.claim(40, 0, [])
    recorder.claim(50, 3, [1, 2, 3])  # more than the batch
    recorder.complete(90, 1, 1)
    recorder.count("retries")
    recorder.error("55P03")
    interval = recorder.rotate(0, 0.0, 1.0)
    assert interval.histograms["claim_latency_us"].get_total_count() == 3
    assert interval.histograms["pickup_latency_us"].get_total_count() == 5
    assert interval.histograms["complete_latency_us"].get_total_count() == 1
    assert interval.counters == {"claims": 3, "empty_claims": 1, "jobs_claimed": 5, "over_claims": 1,
                                 "jobs_completed": 1, "stale_completions": 1, "retries": 1}
    assert interval.errors == {"55P03": 1}
    assert interval.max_rows_per_claim == 3
    after = recorder.rotate(1, 1.0, 2.0)  # the next interval starts empty
    assert after.counters == {} and after.histograms["claim_latency_us"].get_total_count() == 0


@pytest.mark.parametrize("shape", ["lognormal", "one_value", "two_far_apart", "top_of_range"])
def test_values_at_percentiles_match_hdrh_walk(shape):
    rng = random.Random(11)
    values = {"lognormal": [int(rng.lognormvariate(7, 1.5)) for _ in range(5000)],
              "one_value": [777] * 10,
              "two_far_apart": [3] * 99 + [9_000_000],
              "top_of_range": [metrics.LATENCY_MAX_US, 1]}[shape]
    hist = metrics.new_histogram("claim_latency_us")
    metrics.record_values(hist, values, metrics.LATENCY_MAX_US)
    percentiles = [0, 0.1, 1, 25, 50, 90, 95, 99, 99.9, 99.99, 100]
    assert metrics.values_at_percentiles(hist, percentiles) == [hist.get_value_at_percentile(p) for p in percentiles]


def test_values_at_percentiles_of_an_empty_histogram_are_zero():
    hist = metrics.new_histogram("claim_latency_us")
    assert metrics.values_at_percentiles(hist, (50, 99)) == [0, 0] == [hist.get_value_at_percentile(50),
                                                                       hist.get_value_at_percentile(99)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mean_value_matches_hdrh(seed):
    rng = random.Random(seed)
    hist = metrics.new_histogram("pickup_latency_us")
    values = [int(rng.lognormvariate(9, 3)) for _ in range(3000)] + [1, metrics.PICKUP_MAX_US]
    metrics.record_values(hist, values, metrics.PICKUP_MAX_US)
    assert metrics.mean_value(hist) == hist.get_mean_value()
    assert metrics.mean_value(metrics.new_histogram("claim_latency_us")) == 0.0


def test_recorded_counts_are_hdrhs_recorded_iterator():
    import random

    from bench.measure.metrics import new_histogram, recorded_counts

    hist = new_histogram("claim_latency_us")
    rng = random.Random(3)
    for _ in range(5000):
        hist.record_value(int(rng.lognormvariate(7, 1.5)) + 1)
    expected = [(item.value_iterated_to, item.count_at_value_iterated_to) for item in hist.get_recorded_iterator()]
    assert recorded_counts(hist) == expected and sum(n for _, n in expected) == 5000
