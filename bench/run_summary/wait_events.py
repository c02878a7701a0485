"""``summary.json`` ``wait_events``: where the sampled backends' active time went over the measured window, from
each second's counts (bench/engines/wait_events.py; docs/network.md, "Where the server's time goes: wait events").
A share is of the active backend samples: the fraction of the server's time on those backends spent in that
state, as sampled."""

from __future__ import annotations

from collections import Counter

from bench.run_summary.rows import column

#: The events the block (and the report's table) lists, most sampled first.
TOP_EVENTS = 10
#: Why a run has no wait events when run.json says nothing of them (written before they were sampled).
NOT_SAMPLED = "not measured: the run was written before wait events were sampled"


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def wait_event_figures(rows: list[dict], run_info: dict) -> dict:
    """``{measured, sample_every_s, backends, samples, backend_samples, active_samples, active_share,
    mean_active_backends, by_type, top_events, states, query_us_per_s}`` over ``rows`` (the measured seconds, each
    with its ``wait_events`` and ``wait_states`` counts); ``{measured: false, not_measured}`` where the engine does not
    sample them (``run_info`` ``wait_events``)."""
    info = run_info.get("wait_events") or {"not_measured": NOT_SAMPLED}
    if "not_measured" in info:
        return {"measured": False, "not_measured": info["not_measured"]}
    events, states = Counter(), Counter()
    for row in rows:
        events.update(row.get("wait_events") or {})
        states.update(row.get("wait_states") or {})
    by_type: Counter = Counter()
    for event, count in events.items():
        by_type[event.split(":", 1)[0]] += count
    samples, active, sampled = sum(column(rows, "wait_samples")), sum(events.values()), sum(states.values())
    costs = column(rows, "wait_query_us")
    return {"measured": True, **info, "samples": samples, "backend_samples": sampled, "active_samples": active,
            "active_share": _share(active, sampled),
            "mean_active_backends": round(active / samples, 3) if samples else None,
            "by_type": {name: _share(count, active) for name, count in by_type.most_common()},
            "top_events": [{"event": event, "samples": count, "share": _share(count, active)}
                           for event, count in events.most_common(TOP_EVENTS)],
            "states": dict(states.most_common()),
            "query_us_per_s": round(sum(costs) / len(costs), 1) if costs else None}


def wait_events_line(w: dict | None) -> str | None:
    """The terminal's line for ``summary.json`` ``wait_events``: the types' shares of the active samples and the
    event most sampled; None for a run without the block or one that did not sample them."""
    if not w or not w.get("measured"):
        return None
    if not w["active_samples"]:
        return f"wait events ({w['backends']}): no active sample of {w['samples']}"
    types = ", ".join(f"{name} {share * 100:.1f} %" for name, share in w["by_type"].items())
    top = w["top_events"][0]
    return (f"wait events ({w['backends']}, active in {w['active_share'] * 100:.0f} % of their samples): {types}; "
            f"most sampled {top['event']} {top['share'] * 100:.1f} %")
