"""Capacity-planning math (scipy): the USL fit (Gunther, "Guerrilla Capacity Planning", Springer, 2007, ch. 4);
Little's law L = λW (Little, "A Proof for the Queuing Formula L = λW", Operations Research 9(3):383-387, 1961);
t intervals and Welch's t-test (Welch, "The generalization of 'Student's' problem when several different
population variances are involved", Biometrika 34, 1947)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, stats

__all__ = ["UslFit", "usl_throughput", "fit_usl", "workers_needed", "mean_ci", "compare_samples"]


def usl_throughput(workers, lambda_jobs_per_s, sigma, kappa):
    """Throughput X(N) = λN / (1 + σ(N−1) + κN(N−1)) in jobs/s (Gunther 2007, ch. 4): a float, or an array of N's
    shape. ``lambda_jobs_per_s`` is X(1); ``sigma`` the contention, ``kappa`` the coherency coefficient."""
    n = np.asarray(workers, dtype=float)
    x = lambda_jobs_per_s * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
    return float(x) if x.ndim == 0 else x


@dataclass(frozen=True)
class UslFit:
    """A USL fit (Gunther 2007, ch. 4): ``peak_workers`` N* = sqrt((1 − σ) / κ) (unclamped), ``peak_jobs_per_s``
    X(N*) (κ == 0: inf and λ/σ); ``rmse_jobs_per_s``; ``mape_pct`` over throughput > 0; ``r2``; ``n_points``;
    ``sigma_stderr``/``kappa_stderr`` from the covariance. nan where undefined."""

    lambda_jobs_per_s: float
    sigma: float
    kappa: float
    peak_workers: float
    peak_jobs_per_s: float
    rmse_jobs_per_s: float
    mape_pct: float
    r2: float
    n_points: int
    sigma_stderr: float
    kappa_stderr: float

    def predict(self, workers):
        """Fitted throughput in jobs/s at ``workers``: a float for a number, a numpy array for an array."""
        return usl_throughput(workers, self.lambda_jobs_per_s, self.sigma, self.kappa)


def _initial_guess(n: np.ndarray, x: np.ndarray) -> tuple[float, float, float]:
    """Starting (λ, σ, κ): N/X(N) = (1 + (σ+κ)(N−1) + κ(N−1)²)/λ fitted as a quadratic in N − 1 by weighted
    linear least squares (relative residuals), clipped into the bounds; λ = the best X(N)/N at the smallest N
    when the intercept is not positive."""
    keep = x > 0
    m, inv = n[keep] - 1.0, n[keep] / x[keep]
    c2, c1, c0 = np.polyfit(m, inv, 2, w=1.0 / inv) if np.unique(m).size >= 3 else (0.0, 0.0, 0.0)
    if c0 > 0:
        lam = 1.0 / c0
        kappa = max(c2 / c0, 0.0)
        sigma = min(max(c1 / c0 - kappa, 0.0), 1.0)
    else:
        lam = float(np.max(x[n == n.min()] / n.min()))
        sigma, kappa = 0.0, 0.0
    return lam, sigma, kappa


def fit_usl(workers: Sequence[float], throughput_jobs_per_s: Sequence[float]) -> UslFit:
    """Fit the USL (Gunther 2007, ch. 4) to equal-length ``workers`` and ``throughput_jobs_per_s`` (jobs/s) with
    λ > 0, 0 ≤ σ ≤ 1, κ ≥ 0 (``scipy.optimize.least_squares``, relative residuals). Raises ValueError for
    unequal lengths, a non-finite or negative input, 0 workers, no positive throughput, < 3 distinct N."""
    n = np.asarray(workers, dtype=float).ravel()
    x = np.asarray(throughput_jobs_per_s, dtype=float).ravel()
    if n.size != x.size:
        raise ValueError(f"fit_usl: workers ({n.size}) and throughput ({x.size}) differ in length")
    if not (np.all(np.isfinite(n)) and np.all(np.isfinite(x))):
        raise ValueError("fit_usl: workers and throughput must be finite numbers")
    if np.any(n <= 0) or np.any(x < 0):
        raise ValueError("fit_usl: worker counts must be > 0 and throughput >= 0")
    if np.unique(n).size < 3:
        raise ValueError(f"fit_usl needs throughput at 3 or more distinct worker counts, got {np.unique(n).size}")
    if not np.any(x > 0):
        raise ValueError("fit_usl: every throughput is 0; nothing to fit")

    p0 = _initial_guess(n, x)
    # Relative residuals: run-to-run spread grows with the throughput level. Scaled by the
    # starting model rather than by X itself, so a point with X = 0 cannot divide by zero.
    scale = usl_throughput(n, *p0)
    lower, upper = np.array([np.finfo(float).tiny, 0.0, 0.0]), np.array([np.inf, 1.0, np.inf])
    res = optimize.least_squares(lambda p: (usl_throughput(n, *p) - x) / scale, p0,
                                 bounds=(lower, upper), x_scale="jac", max_nfev=10_000)
    # The trust-region iterates stay strictly inside the bounds: put a parameter the solver
    # reports as held by its bound (e.g. κ = 0, Amdahl's law) exactly on it.
    popt = np.where(res.active_mask < 0, lower, np.where(res.active_mask > 0, upper, res.x))
    lam, sigma, kappa = (float(v) for v in popt)
    # Covariance as scipy.optimize.curve_fit computes it: (JᵀJ)⁺ · residual variance.
    dof = n.size - 3
    if dof > 0:
        j_pinv = np.linalg.pinv(res.jac)
        stderr = np.sqrt(np.diag(j_pinv @ j_pinv.T) * (2.0 * res.cost / dof))
    else:
        stderr = np.full(3, np.nan)

    if kappa > 0:
        peak_n = math.sqrt((1.0 - sigma) / kappa)
        peak_x = usl_throughput(peak_n, lam, sigma, kappa)
    else:
        peak_n = math.inf
        peak_x = lam / sigma if sigma > 0 else math.inf

    resid = x - usl_throughput(n, lam, sigma, kappa)
    ss_tot = float(np.sum((x - x.mean()) ** 2))
    pos = x > 0
    return UslFit(
        lambda_jobs_per_s=lam,
        sigma=sigma,
        kappa=kappa,
        peak_workers=peak_n,
        peak_jobs_per_s=float(peak_x),
        rmse_jobs_per_s=float(np.sqrt(np.mean(resid**2))),
        mape_pct=float(np.mean(np.abs(resid[pos]) / x[pos]) * 100.0),
        r2=1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else math.nan,
        n_points=int(n.size),
        sigma_stderr=float(stderr[1]),
        kappa_stderr=float(stderr[2]),
    )


def workers_needed(arrival_jobs_per_s: float, job_s: float, utilisation: float = 0.7) -> int:
    """Workers (≥ 1) for ``arrival_jobs_per_s`` at ``utilisation`` u by Little's law (Little 1961): ceil(rate ×
    ``job_s`` / u, rounded to 9 decimals). ValueError for a rate or time not positive and finite, u outside (0, 1]."""
    if not (math.isfinite(arrival_jobs_per_s) and arrival_jobs_per_s > 0):
        raise ValueError(f"workers_needed: arrival_jobs_per_s must be > 0, got {arrival_jobs_per_s}")
    if not (math.isfinite(job_s) and job_s > 0):
        raise ValueError(f"workers_needed: job_s must be > 0, got {job_s}")
    if not (0 < utilisation <= 1):
        raise ValueError(f"workers_needed: utilisation must be in (0, 1], got {utilisation}")
    return max(1, math.ceil(round(arrival_jobs_per_s * job_s / utilisation, 9)))


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): mean ± t(confidence, n − 1) · s/√n (``scipy.stats.t``); (value, nan, nan) for one value,
    (mean, mean, mean) when all are equal. ValueError for no or non-finite values, confidence outside (0, 1)."""
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("mean_ci: no values")
    if not np.all(np.isfinite(v)):
        raise ValueError("mean_ci: values must be finite numbers")
    if not (0 < confidence < 1):
        raise ValueError(f"mean_ci: confidence must be in (0, 1), got {confidence}")
    mean = float(v.mean())
    if v.size == 1:
        return mean, math.nan, math.nan
    se = float(stats.sem(v))
    if se == 0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, v.size - 1, loc=mean, scale=se)
    return mean, float(low), float(high)


def compare_samples(a: Sequence[float], b: Sequence[float]) -> dict:
    """``{"mean_a", "mean_b", "rel_diff" ((b − a)/a, nan for a == 0), "p_value" (two-sided Welch 1947,
    ``scipy.stats.ttest_ind(equal_var=False)``; None under 2 values a side or zero variance), "significant"
    (p < 0.05), "n_a", "n_b", "test"}``. Raises ValueError for an empty side or a non-finite value."""
    xa = np.asarray(a, dtype=float).ravel()
    xb = np.asarray(b, dtype=float).ravel()
    if xa.size == 0 or xb.size == 0:
        raise ValueError("compare_samples: each sample needs at least one value")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(xb))):
        raise ValueError("compare_samples: values must be finite numbers")
    mean_a, mean_b = float(xa.mean()), float(xb.mean())
    p_value = None
    if xa.size >= 2 and xb.size >= 2 and (np.ptp(xa) > 0 or np.ptp(xb) > 0):
        p = float(stats.ttest_ind(xa, xb, equal_var=False).pvalue)
        p_value = p if math.isfinite(p) else None
    return {
        "mean_a": mean_a,
        "mean_b": mean_b,
        "rel_diff": (mean_b - mean_a) / mean_a if mean_a != 0 else math.nan,
        "p_value": p_value,
        "significant": None if p_value is None else p_value < 0.05,
        "n_a": int(xa.size),
        "n_b": int(xb.size),
        "test": "Welch t-test",
    }
