"""What a simulated job does: how long it runs, whether it fails, when it is retried.

- Durations (``WORK_DIST``): ``fixed`` (``work_ms``), ``exponential`` (mean
  ``work_ms``), ``lognormal`` (median ``work_ms``, shape ``work_sigma``: the
  log of the duration is normal with that standard deviation), ``bimodal``
  (``work_ms``, or ``work_slow_ms`` with probability ``slow_share``).
- Poison jobs: a fixed share of job ids that always fail, chosen by a
  multiplicative hash of the id (Knuth, TAOCP vol. 3, 6.4: multiply by
  2654435761 modulo 2^32), so the audit can name the same jobs in SQL
  (:data:`POISON_SQL`).
- Retry back-off: exponential from ``retry_base_s``, doubled per attempt, capped
  at ``retry_cap_s``, with "equal jitter" (half fixed, half uniform random),
  which keeps successive gaps non-decreasing until the cap (Marc Brooker,
  "Exponential Backoff And Jitter", AWS Architecture Blog, 2015).
"""

from __future__ import annotations

import math
import random
from typing import Callable

from .config import RunConfig

_HASH_MULTIPLIER = 2654435761
_HASH_MODULUS = 2 ** 32

#: SQL predicate true for poison jobs; format with ``share`` (a float literal).
POISON_SQL = "((id * 2654435761) % 4294967296) < {share} * 4294967296"


def is_poison(job_id: int, share: float) -> bool:
    """True when job ``job_id`` is one of the ``share`` (0..1) of jobs that always fail."""
    return share > 0 and (job_id * _HASH_MULTIPLIER) % _HASH_MODULUS < share * _HASH_MODULUS


def duration_sampler(cfg: RunConfig, rng: random.Random | None = None) -> Callable[[], float]:
    """A function returning one job's duration in seconds, drawn per ``cfg.work_dist``."""
    rng = rng or random.Random()
    base_s = cfg.work_ms / 1000.0
    if base_s <= 0 and cfg.work_dist != "bimodal":
        return lambda: 0.0
    if cfg.work_dist == "exponential":
        return lambda: rng.expovariate(1.0 / base_s)
    if cfg.work_dist == "lognormal":
        mu = math.log(base_s)
        return lambda: rng.lognormvariate(mu, cfg.work_sigma)
    if cfg.work_dist == "bimodal":
        slow_s = cfg.work_slow_ms / 1000.0
        return lambda: slow_s if rng.random() < cfg.slow_share else base_s
    return lambda: base_s


def retry_delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Back-off before retry after failed attempt number ``attempt`` (1, 2, …), in seconds."""
    ceiling = min(cap_s, base_s * 2 ** (max(1, attempt) - 1))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)
