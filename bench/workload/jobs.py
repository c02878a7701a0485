"""What a simulated job does: its duration, whether it fails (poison), its retry and NOWAIT back-offs
(docs/design.md)."""

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
    """True when job ``job_id`` is one of the ``share`` (0..1) of jobs that always fail: ``id × 2654435761 mod
    2^32 < share × 2^32`` (Knuth, TAOCP vol. 3, 6.4)."""
    return share > 0 and (job_id * _HASH_MULTIPLIER) % _HASH_MODULUS < share * _HASH_MODULUS


#: SQL predicate true for exactly the ids :func:`is_poison` names, on PostgreSQL and MariaDB; format
#: with ``threshold`` (:func:`poison_threshold`, an integer literal). See :func:`poison_sql`.
POISON_SQL = "((id * 2654435761) % 4294967296) < {threshold}"


def poison_threshold(share: float) -> int:
    """The integer ``t`` (0..2^32) with ``is_poison(i, share) == (hash(i) < t)``: ceil(``share`` × 2^32), 0 for
    ``share`` not above 0 (NaN too), 2^32 from 1 on."""
    if not share > 0:
        return 0
    if share >= 1:
        return _HASH_MODULUS
    return math.ceil(share * _HASH_MODULUS)


def poison_sql(share: float) -> str:
    """:data:`POISON_SQL` for ``share`` (an integer threshold): the job set of :func:`is_poison`, on PostgreSQL
    and MariaDB."""
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
    """The mean job duration (s) asked for: ``work_ms`` (fixed, exponential), ``work_ms · exp(σ²/2)``
    (lognormal), the ``slow_share``-weighted mean (bimodal)."""
    base_s = cfg.work_ms / 1000.0
    if cfg.work_dist == "bimodal":
        return (1 - cfg.slow_share) * base_s + cfg.slow_share * cfg.work_slow_ms / 1000.0
    if cfg.work_dist == "lognormal" and base_s > 0:
        return base_s * math.exp(cfg.work_sigma ** 2 / 2)
    return base_s


def retry_delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Back-off (s) before retrying after failed attempt ``attempt`` (1, 2, …): doubling from ``base_s``, capped
    at ``cap_s``, "equal jitter" (Marc Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog,
    2015)."""
    ceiling = min(cap_s, base_s * 2 ** (max(1, attempt) - 1))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def nowait_backoff_s(level: int, rng: random.Random | None = None) -> float:
    """The sleep (s) after a 55P03 at back-off ``level`` (1, 2, …): uniform in [c/2, c], c = min(200 ms, 4 ms ×
    2^(level−1)), so 2–200 ms ("equal jitter": Marc Brooker, "Exponential Backoff And Jitter", AWS
    Architecture Blog, 2015, https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/).
    Raises ValueError for a level below 1."""
    if level < 1:
        raise ValueError(f"nowait_backoff_s: level must be >= 1, got {level}")
    return retry_delay_s(min(level, NOWAIT_BACKOFF_MAX_LEVEL), 2 * NOWAIT_BACKOFF_BASE_S, NOWAIT_BACKOFF_CAP_S, rng)
