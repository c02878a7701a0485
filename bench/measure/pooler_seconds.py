"""intervals.csv's pooler columns of one second, from the pooler's per-second samples (its pool now, its totals so
far: :class:`bench.engines.postgres.pooler.watch.PoolerWatch`). PgBouncer's ``SHOW STATS`` averages refresh only
every ``stats_period``, so the per-second figures are the growth of its totals between two samples, each taken at
the middle of its second, and a mean is a ratio of two growths (https://www.pgbouncer.org/usage.html, "SHOW
STATS"). PgBouncer keeps no distribution of the waits: there is no wait percentile to give."""

from __future__ import annotations

#: The pooler's totals in a sample and the intervals.csv column of each one's growth over a second.
POOLER_TOTALS = {"pooler_xact_total": "pooler_xacts", "pooler_query_total": "pooler_queries",
                 "pooler_wait_total_us": "pooler_wait_us", "pooler_xact_time_total_us": "pooler_xact_time_us",
                 "pooler_query_time_total_us": "pooler_query_time_us", "pooler_cpu_total_us": "pooler_cpu_us"}
#: The means worked out from those growths: column -> (numerator column, denominator column).
POOLER_MEANS = {"pooler_wait_mean_us": ("pooler_wait_us", "pooler_xacts"),
                "pooler_xact_mean_us": ("pooler_xact_time_us", "pooler_xacts"),
                "pooler_query_mean_us": ("pooler_query_time_us", "pooler_queries")}


def growth(before: int | None, now: int | None) -> int | None:
    """``now - before`` of a total; None when either sample lacks it (a missed or failed read) or it went down
    (the pooler restarted and its totals began again: the second's growth is unknown)."""
    if before is None or now is None or now < before:
        return None
    return now - before


def ratio(part: int | None, whole: int | None) -> float | None:
    """``part / whole`` rounded to 0.1, None when either is unknown or ``whole`` is 0 (nothing to average)."""
    if part is None or not whole:
        return None
    return round(part / whole, 1)


def pooler_columns(samples: dict[int, dict], k: int) -> dict:
    """The pooler's growth columns of second ``k`` (:data:`POOLER_TOTALS`, :data:`POOLER_MEANS`, ``pooler_cpu_pct``:
    the process's CPU as % of one core over the time between the two reads) from the samples of seconds ``k - 1``
    and ``k``; {} when neither second has a pooler sample (no pooler read)."""
    before, now = samples.get(k - 1, {}), samples.get(k, {})
    if "pooler_at_s" not in before and "pooler_at_s" not in now:
        return {}
    out = {column: growth(before.get(total), now.get(total)) for total, column in POOLER_TOTALS.items()}
    out.update({column: ratio(out[part], out[whole]) for column, (part, whole) in POOLER_MEANS.items()})
    elapsed_s = now["pooler_at_s"] - before["pooler_at_s"] if "pooler_at_s" in before and "pooler_at_s" in now else 0
    cpu_us = out.pop("pooler_cpu_us")
    out["pooler_cpu_pct"] = round(cpu_us / (elapsed_s * 1e4), 1) if cpu_us is not None and elapsed_s > 0 else None
    return out
