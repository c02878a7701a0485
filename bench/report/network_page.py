"""The run report's network part (a run through the delay relay, ``NET_DELAY_MS``; docs/network.md): which
connections crossed the relay and which went direct, its setting and timer, its process's CPU; nothing without
``summary.json`` ``relay``. The setting is not a round trip: the round trip is what the run measured."""

from __future__ import annotations

from bench.report.format import fmt_num

__all__ = ["relay_rows"]

#: The connections that never cross the relay: the instrument (docs/network.md, "The delay relay").
DIRECT_TEXT = "admin, monitor, audit and the tool's other own connections"


def relay_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, value) rows of the network section; [] without a relay."""
    r = summary.get("relay")
    if not r:
        return []
    jitter = f" + 0–{fmt_num(r['jitter_ms'], 3)} ms uniform jitter" if r.get("jitter_ms") else ""
    cpu = r.get("cpu_pct") or {}
    over = cpu.get("max") is not None and cpu["max"] > r["cpu_limit_pct"]
    return [
        ("crossed the delay relay", ", ".join(r["crossing"])
         + (f" ({fmt_num(r['connections'])} connections accepted)" if r.get("connections") is not None else "")),
        ("went direct", DIRECT_TEXT),
        ("the relay's setting, each way (not a round trip)", f"{fmt_num(r['delay_ms_each_way'], 3)} ms{jitter}"),
        ("the relay's timer resolution (median lateness, measured as it started)",
         f"{fmt_num(r['timer_resolution_us'], 1)} µs"),
        ("the relay's CPU, % of a core (mean / max)" + (" — past the load generator's limit" if over else ""),
         f"{fmt_num(cpu.get('mean'), 1)} / {fmt_num(cpu.get('max'), 1)}"),
    ]
