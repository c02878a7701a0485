"""What a run through the delay relay (``NET_DELAY_MS``, ``NET_JITTER_MS``; docs/network.md) records of it in
``summary.json`` ``relay``: its settings, the connections that crossed it, its process's CPU over the measured
window, judged by the load generator's limit (the relay forwards on one core: its threads share Python's lock).
The round trip it makes is not here: the run measures that on its own connection."""

from __future__ import annotations

from bench.run_summary.rows import column


def relay_figures(rows: list[dict], run_info: dict, cpu_limit_pct: float) -> dict | None:
    """``summary.json`` ``relay``: ``delay_ms_each_way``, ``jitter_ms``, ``timer_resolution_us``, ``crossing``,
    ``connections`` (accepted over the run), ``cpu_pct`` {``mean``, ``max``} of one core (None when not read) and
    ``cpu_limit_pct``; None for a run without a relay."""
    record = run_info.get("relay")
    if not record:
        return None
    cpu = column(rows, "relay_cpu_pct")
    return {"delay_ms_each_way": record["delay_ms_each_way"], "jitter_ms": record["jitter_ms"],
            "timer_resolution_us": record["timer_resolution_us"], "crossing": record["crossing"],
            "connections": (record.get("counts") or {}).get("connections"),
            "cpu_pct": {"mean": round(sum(cpu) / len(cpu), 1) if cpu else None, "max": max(cpu) if cpu else None},
            "cpu_limit_pct": cpu_limit_pct}


def relay_reasons(rows: list[dict], cpu_limit_pct: float) -> list[str]:
    """The relay's process past ``cpu_limit_pct`` in a second: it may set the pace, not the database."""
    cpu = column(rows, "relay_cpu_pct")
    if not cpu or max(cpu) <= cpu_limit_pct:
        return []
    return [f"the delay relay's process reached {max(cpu):.0f} % of a core (> {cpu_limit_pct:.0f} %): it forwards "
            "on one core, so it may set the pace and add its own queueing to the delay it emulates"]
