"""What a simulated job does: how long it runs, whether it fails, when it is retried.

- Durations (``WORK_DIST``): ``fixed`` (``work_ms``), ``exponential`` (mean
  ``work_ms``), ``lognormal`` (median ``work_ms``, shape ``work_sigma``: the
  log of the duration is normal with that standard deviation), ``bimodal``
  (``work_ms``, or ``work_slow_ms`` with probability ``slow_share``).
- Poison jobs: a fixed share of job ids that always fail, chosen by a
  multiplicative hash of the id (Knuth, TAOCP vol. 3, 6.4: multiply by
  2654435761 modulo 2^32), so the audit can name the same jobs in SQL
  (:func:`poison_sql`).
- NOWAIT back-off (:func:`nowait_backoff_s`): the sleep after a 55P03, 2 ms to 200 ms.
- Retry back-off: exponential from ``retry_base_s``, doubled per attempt, capped
  at ``retry_cap_s``, with "equal jitter" (half fixed, half uniform random),
  which keeps successive gaps non-decreasing until the cap (Marc Brooker,
  "Exponential Backoff And Jitter", AWS Architecture Blog, 2015).
"""

from __future__ import annotations

import math
import random
from typing import Callable

from bench.config.run_config import RunConfig

#: NOWAIT retry back-off (see :func:`nowait_backoff_s`): sleeps from 2 ms to 200 ms.
NOWAIT_BACKOFF_BASE_S = 0.002
NOWAIT_BACKOFF_CAP_S = 0.200
#: The back-off level whose ceiling first reaches the cap (7: 4 ms × 2^6 = 256 ms ≥ 200 ms).
NOWAIT_BACKOFF_MAX_LEVEL = 1 + math.ceil(math.log2(NOWAIT_BACKOFF_CAP_S / (2 * NOWAIT_BACKOFF_BASE_S)))

_HASH_MULTIPLIER = 2654435761
_HASH_MODULUS = 2 ** 32

def is_poison(job_id: int, share: float) -> bool:
    """True when job ``job_id`` is one of the ``share`` (0..1) of jobs that always fail."""
    return share > 0 and (job_id * _HASH_MULTIPLIER) % _HASH_MODULUS < share * _HASH_MODULUS


#: SQL predicate true for exactly the ids :func:`is_poison` names, on PostgreSQL and MariaDB; format
#: with ``threshold`` (:func:`poison_threshold`, an integer literal). See :func:`poison_sql`.
POISON_SQL = "((id * 2654435761) % 4294967296) < {threshold}"


def poison_threshold(share: float) -> int:
    """The integer ``t`` (0..2^32) with ``is_poison(i, share) == (hash(i) < t)`` for every id ``i``:
    the ceiling of ``share × 2^32`` computed as :func:`is_poison` computes it, in binary floating
    point (a power-of-two scaling, exact), 0 when ``share`` is not above 0 (NaN included), 2^32
    from 1 on."""
    if not share > 0:
        return 0
    if share >= 1:
        return _HASH_MODULUS
    return math.ceil(share * _HASH_MODULUS)


def poison_sql(share: float) -> str:
    """:data:`POISON_SQL` for ``share``: the same job set as :func:`is_poison`, on PostgreSQL
    and MariaDB alike.

    An earlier form wrote ``share`` as a decimal literal (``… < {share} * 4294967296``), which both
    engines multiply exactly as a decimal: the shortest repr of a float is not the float, so when ``share × 2^32``
    is a whole number ``h`` (a share on a multiple of 2^-32, e.g. 0.06423439900390804) the SQL
    threshold lands just above ``h`` and the job whose hash is ``h`` is poison in SQL but not in
    Python. An integer threshold has no such rounding."""
    return POISON_SQL.format(threshold=poison_threshold(share))


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


def expected_work_s(cfg: RunConfig) -> float:
    """The mean job duration (s) the configured distribution gives: ``work_ms`` for ``fixed`` and
    ``exponential``, ``work_ms · exp(σ²/2)`` for ``lognormal`` (median ``work_ms``), the
    ``slow_share``-weighted mean of ``work_ms`` and ``work_slow_ms`` for ``bimodal``.
    What the configuration asks for; the run measures what it got (``work_duration_us``)."""
    base_s = cfg.work_ms / 1000.0
    if cfg.work_dist == "bimodal":
        return (1 - cfg.slow_share) * base_s + cfg.slow_share * cfg.work_slow_ms / 1000.0
    if cfg.work_dist == "lognormal" and base_s > 0:
        return base_s * math.exp(cfg.work_sigma ** 2 / 2)
    return base_s


def retry_delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Back-off before retry after failed attempt number ``attempt`` (1, 2, …), in seconds."""
    ceiling = min(cap_s, base_s * 2 ** (max(1, attempt) - 1))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def nowait_backoff_s(level: int, rng: random.Random | None = None) -> float:
    """The sleep (s) after a 55P03 at back-off ``level`` (1, 2, …): exponential with "equal jitter".

    ``ceiling = min(CAP, 2 × BASE × 2^(level−1))`` and the sleep is uniform in
    ``[ceiling/2, ceiling]``: level 1 sleeps 2–4 ms, level 2 4–8 ms, …, from level 7 on
    100–200 ms; so every sleep lies in [:data:`NOWAIT_BACKOFF_BASE_S`,
    :data:`NOWAIT_BACKOFF_CAP_S`] = [2 ms, 200 ms]. The worker raises its level by one per
    55P03, up to :data:`NOWAIT_BACKOFF_MAX_LEVEL` (the first whose ceiling is the cap), and
    lowers it by one per claim that returns rows (it does not reset to 1: under sustained contention
    the level settles where claims and conflicts balance instead of restarting at 2 ms after
    every claim). Source of the jitter rule: Marc Brooker, "Exponential Backoff
    And Jitter", AWS Architecture Blog, 2015,
    https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/.
    Raises ValueError for a level below 1.
    """
    if level < 1:
        raise ValueError(f"nowait_backoff_s: level must be >= 1, got {level}")
    return retry_delay_s(min(level, NOWAIT_BACKOFF_MAX_LEVEL), 2 * NOWAIT_BACKOFF_BASE_S, NOWAIT_BACKOFF_CAP_S, rng)
