"""bench.analysis.statistics: USL fit, Little's-law sizing, confidence intervals, Welch's test.

Pure math: no database. Synthetic data come from seeded RNGs. The USL recovery tests
use 12 worker counts × 5 repetitions with 2 % multiplicative noise: with that design the
5 % tolerance on σ and κ held for ≥ 99.7 % of 1000 seeds (a single run of 12 points
at 3 % noise does not pin σ and κ down to 5 %: the data, not the fitter, is the limit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.analysis.statistics import UslFit, compare_samples, fit_usl, mean_ci, usl_throughput, workers_needed

WORKERS = np.array([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 200], dtype=float)


def synthetic(lam, sigma, kappa, noise, seed, reps=1):
    n = np.repeat(WORKERS, reps)
    rng = np.random.default_rng(seed)
    return n, usl_throughput(n, lam, sigma, kappa) * (1.0 + noise * rng.standard_normal(n.size))


# --- usl_throughput ----------------------------------------------------------------------

def test_usl_throughput_formula():
    # X(1) = λ whatever σ and κ are; X(10) = 1000·10 / (1 + 0.05·9 + 0.0005·10·9) = 10000 / 1.495
    assert usl_throughput(1, 1000, 0.05, 0.0005) == pytest.approx(1000)
    assert usl_throughput(10, 1000, 0.05, 0.0005) == pytest.approx(10000 / 1.495)
    assert usl_throughput(10, 1000, 0, 0) == pytest.approx(10000)  # linear scaling
    out = usl_throughput([1, 10], 1000, 0.05, 0.0005)
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    assert isinstance(usl_throughput(3, 1.0, 0.1, 0.01), float)


# --- fit_usl -----------------------------------------------------------------------------

def test_fit_exact_data_recovers_parameters():
    n = WORKERS
    fit = fit_usl(n, usl_throughput(n, 1000, 0.05, 0.0005))
    assert isinstance(fit, UslFit)
    assert fit.lambda_jobs_per_s == pytest.approx(1000, rel=1e-6)
    assert fit.sigma == pytest.approx(0.05, rel=1e-6)
    assert fit.kappa == pytest.approx(0.0005, rel=1e-6)
    assert fit.peak_workers == pytest.approx(math.sqrt(0.95 / 0.0005), rel=1e-6)
    assert fit.peak_jobs_per_s == pytest.approx(usl_throughput(math.sqrt(0.95 / 0.0005), 1000, 0.05, 0.0005), rel=1e-6)
    assert fit.rmse_jobs_per_s < 1e-6 and fit.mape_pct < 1e-6
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n_points == 12


@pytest.mark.parametrize("lam, sigma, kappa", [(1000, 0.05, 0.0005), (500, 0.1, 0.002)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fit_recovers_sigma_kappa_from_noisy_data(lam, sigma, kappa, seed):
    n, x = synthetic(lam, sigma, kappa, noise=0.02, seed=seed, reps=5)
    fit = fit_usl(n, x)
    assert fit.sigma == pytest.approx(sigma, rel=0.05)
    assert fit.kappa == pytest.approx(kappa, rel=0.05)
    assert fit.lambda_jobs_per_s == pytest.approx(lam, rel=0.05)
    true_peak = math.sqrt((1 - sigma) / kappa)
    assert fit.peak_workers == pytest.approx(math.sqrt((1 - fit.sigma) / fit.kappa), rel=1e-12)
    assert fit.peak_workers == pytest.approx(true_peak, rel=0.05)
    # X(N*) is the maximum of the fitted curve
    grid = np.linspace(1, 400, 4000)
    assert fit.peak_jobs_per_s == pytest.approx(fit.predict(fit.peak_workers))
    assert fit.peak_jobs_per_s >= fit.predict(grid).max() - 1e-9
    assert fit.n_points == 60
    assert fit.r2 > 0.99
    assert 0.5 < fit.mape_pct < 3.0  # 2 % Gaussian noise: mean |error| ≈ 1.6 %
    assert fit.rmse_jobs_per_s > 0
    assert 0 < fit.sigma_stderr < 0.05 * sigma and 0 < fit.kappa_stderr < 0.05 * kappa


def test_fit_stderr_coverage():
    """σ ± t·stderr covers the true σ about 95 % of the time (12 points, 3 % noise, 9 dof)."""
    t = stats.t.ppf(0.975, len(WORKERS) - 3)
    hits_sigma = hits_kappa = 0
    runs = 300
    for seed in range(runs):
        n, x = synthetic(1000, 0.05, 0.0005, noise=0.03, seed=seed)
        fit = fit_usl(n, x)
        hits_sigma += abs(fit.sigma - 0.05) <= t * fit.sigma_stderr
        hits_kappa += abs(fit.kappa - 0.0005) <= t * fit.kappa_stderr
    assert 0.88 <= hits_sigma / runs <= 0.99
    assert 0.88 <= hits_kappa / runs <= 0.99


def test_fit_no_coherency_term():
    """κ = 0 (Amdahl): no peak; peak_workers is inf and peak_jobs_per_s the asymptote λ/σ."""
    fit = fit_usl(WORKERS, usl_throughput(WORKERS, 100, 0.1, 0.0))
    assert fit.kappa == 0.0
    assert fit.sigma == pytest.approx(0.1, rel=1e-6)
    assert fit.peak_workers == math.inf
    assert fit.peak_jobs_per_s == pytest.approx(100 / 0.1, rel=1e-6)


def test_fit_linear_scaling():
    fit = fit_usl([1, 2, 4, 8], [50, 100, 200, 400])
    assert fit.lambda_jobs_per_s == pytest.approx(50)
    assert fit.sigma == 0.0 and fit.kappa == 0.0
    assert fit.peak_workers == math.inf and fit.peak_jobs_per_s == math.inf


def test_fit_three_points_has_no_stderr():
    n = [1, 8, 64]
    fit = fit_usl(n, usl_throughput(np.array(n), 1000, 0.05, 0.0005))
    assert fit.sigma == pytest.approx(0.05, rel=1e-6) and fit.kappa == pytest.approx(0.0005, rel=1e-6)
    assert math.isnan(fit.sigma_stderr) and math.isnan(fit.kappa_stderr)


def test_fit_predict_shapes():
    fit = fit_usl(WORKERS, usl_throughput(WORKERS, 1000, 0.05, 0.0005))
    assert isinstance(fit.predict(10), float)
    assert fit.predict(10) == pytest.approx(10000 / 1.495, rel=1e-6)
    assert fit.predict(WORKERS) == pytest.approx(usl_throughput(WORKERS, 1000, 0.05, 0.0005), rel=1e-6)


@pytest.mark.parametrize("workers, throughput", [
    ([1, 2], [10, 19]),
    ([4, 4, 8, 8, 8], [40, 41, 70, 71, 69]),  # repetitions do not add distinct worker counts
    ([5], [50]),
    ([], []),
])
def test_fit_needs_three_distinct_worker_counts(workers, throughput):
    with pytest.raises(ValueError, match="needs throughput at 3 or more distinct worker counts"):
        fit_usl(workers, throughput)


@pytest.mark.parametrize("workers, throughput", [
    ([1, 2, 4], [10, math.nan, 30]),
    ([1, 2, math.inf], [10, 20, 30]),
    ([1, 2, 4], [10, -20, 30]),
    ([-1, 2, 4], [10, 20, 30]),
    ([0, 2, 4], [0, 20, 30]),
    ([1, 2, 4], [10, 20]),
    ([1, 2, 4], [0, 0, 0]),
])
def test_fit_rejects_bad_input(workers, throughput):
    with pytest.raises(ValueError):
        fit_usl(workers, throughput)


# --- workers_needed ----------------------------------------------------------------------

@pytest.mark.parametrize("arrival, job_s, utilisation, expected", [
    (1000, 0.05, 0.7, 72),   # 50 busy / 0.7 = 71.4
    (1000, 0.05, 1.0, 50),
    (100, 0.07, 0.7, 10),    # exactly 10 (10.000000000000002 in floats) must not become 11
    (200, 0.02, 0.8, 5),
    (0.1, 0.01, 0.7, 1),     # a fraction of a worker is still one worker
])
def test_workers_needed(arrival, job_s, utilisation, expected):
    assert workers_needed(arrival, job_s, utilisation) == expected


def test_workers_needed_default_utilisation_is_70_pct():
    assert workers_needed(1000, 0.05) == 72


@pytest.mark.parametrize("args", [
    (0, 0.05, 0.7), (-5, 0.05, 0.7), (math.nan, 0.05, 0.7), (math.inf, 0.05, 0.7),
    (1000, 0, 0.7), (1000, -0.1, 0.7), (1000, math.nan, 0.7),
    (1000, 0.05, 0), (1000, 0.05, -0.5), (1000, 0.05, 1.01), (1000, 0.05, math.nan),
])
def test_workers_needed_rejects_bad_input(args):
    with pytest.raises(ValueError):
        workers_needed(*args)


# --- mean_ci -----------------------------------------------------------------------------

def test_mean_ci_known_values():
    # n = 5, mean 3, s = sqrt(2.5), s/sqrt(n) = 0.7071068; t(0.975, 4) = 2.776445, t(0.995, 4) = 4.604095
    mean, low, high = mean_ci([1, 2, 3, 4, 5])
    assert mean == 3
    assert low == pytest.approx(3 - 2.776445 * 0.7071068, rel=1e-6)
    assert high == pytest.approx(3 + 2.776445 * 0.7071068, rel=1e-6)
    mean, low, high = mean_ci([1, 2, 3, 4, 5], confidence=0.99)
    assert (low, high) == pytest.approx((3 - 4.604095 * 0.7071068, 3 + 4.604095 * 0.7071068), rel=1e-6)


def test_mean_ci_large_sample_approaches_normal():
    v = np.random.default_rng(7).normal(50, 10, 10_000)
    mean, low, high = mean_ci(v)
    se = v.std(ddof=1) / math.sqrt(v.size)
    assert mean == pytest.approx(v.mean())
    assert (high - low) / 2 == pytest.approx(1.959964 * se, rel=1e-3)


def test_mean_ci_edge_cases():
    mean, low, high = mean_ci([42.0])
    assert mean == 42.0 and math.isnan(low) and math.isnan(high)
    assert mean_ci([7, 7, 7]) == (7, 7, 7)
    with pytest.raises(ValueError):
        mean_ci([])
    with pytest.raises(ValueError):
        mean_ci([1, math.nan])
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError):
            mean_ci([1, 2, 3], confidence=bad)


# --- compare_samples ---------------------------------------------------------------------

def test_compare_detects_real_difference():
    rng = np.random.default_rng(11)
    a, b = rng.normal(100, 5, 20), rng.normal(110, 5, 20)
    r = compare_samples(a, b)
    assert r["p_value"] < 0.001 and r["significant"] is True
    assert r["mean_a"] == pytest.approx(a.mean()) and r["mean_b"] == pytest.approx(b.mean())
    assert r["rel_diff"] == pytest.approx((b.mean() - a.mean()) / a.mean())
    assert 0.05 < r["rel_diff"] < 0.15
    assert (r["n_a"], r["n_b"], r["test"]) == (20, 20, "Welch t-test")


def test_compare_identical_samples_not_significant():
    a = [101.0, 99.5, 100.2, 98.7, 100.9]
    r = compare_samples(a, list(reversed(a)))
    assert r["p_value"] == pytest.approx(1.0) and r["significant"] is False
    assert r["rel_diff"] == pytest.approx(0.0)


def test_compare_false_positive_rate_and_power():
    """Same distribution: ~5 % flagged. A 1-standard-deviation shift with n = 20: nearly always flagged."""
    rng = np.random.default_rng(2024)
    runs = 400
    same = sum(compare_samples(rng.normal(100, 5, 10), rng.normal(100, 5, 10))["significant"] for _ in range(runs))
    shifted = sum(compare_samples(rng.normal(100, 5, 20), rng.normal(105, 5, 20))["significant"] for _ in range(runs))
    assert 0.02 <= same / runs <= 0.09
    assert shifted / runs >= 0.8  # power of Welch's test here ≈ 0.87


def test_compare_uses_welch_not_student():
    a = [10, 11, 12, 13, 14, 15]  # variance 3.5
    b = [10, 20, 30]              # variance 100
    va, vb, na, nb = 3.5 / 6, 100 / 3, 6, 3
    t = (20 - 12.5) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))  # Welch–Satterthwaite
    welch_p = 2 * stats.t.sf(t, df)
    student_p = stats.ttest_ind(a, b, equal_var=True).pvalue
    r = compare_samples(a, b)
    assert r["p_value"] == pytest.approx(welch_p, rel=1e-9)
    assert abs(r["p_value"] - student_p) > 0.1  # ~0.32 vs ~0.10: the pooled test would differ
    assert r["significant"] is False


def test_compare_without_a_test():
    r = compare_samples([100.0], [110.0, 112.0])
    assert r["p_value"] is None and r["significant"] is None
    assert r["rel_diff"] == pytest.approx(0.11)
    r = compare_samples([5, 5, 5], [6, 6])  # both variances zero
    assert r["p_value"] is None and r["significant"] is None
    r = compare_samples([5, 5, 5], [6, 7, 8])  # one variance zero is fine for Welch: t = 2/sqrt(1/3), df = 2
    assert r["p_value"] == pytest.approx(2 * stats.t.sf(2 / math.sqrt(1 / 3), 2), rel=1e-6)
    assert r["p_value"] == pytest.approx(0.0742, abs=1e-4)
    r = compare_samples([0.0, 0.0], [1.0, 2.0])
    assert math.isnan(r["rel_diff"])
    with pytest.raises(ValueError):
        compare_samples([], [1.0, 2.0])
    with pytest.raises(ValueError):
        compare_samples([1.0, math.inf], [1.0, 2.0])
