"""What the tool's own measurement cost over the measured window, from the run's own files: the CPU of the tool's
process, the monitor's query time per second and its server backends' CPU (docs/reading-the-report.md,
"Measurement cost"; measured against a library's own worker in docs/measurements/overhead.md)."""

from __future__ import annotations

import csv
from pathlib import Path

from bench.run_summary.rows import column


def process_cpu_means(path: Path) -> dict[str, float]:
    """``processes.csv``'s mean CPU per process over the measured seconds (% of a core, keyed by the process
    number as text); empty when the file is missing or has no row."""
    if not path.is_file():
        return {}
    sums: dict[str, list[float]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("cpu_pct"):
                sums.setdefault(row["process"], []).append(float(row["cpu_pct"]))
    return {p: round(sum(v) / len(v), 1) for p, v in sums.items()}


def _mean(values: list) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def measurement_cost(rows: list[dict], cpu_means: dict[str, float] | None) -> dict:
    """``{tool_process_cpu_pct, tool_process_does, monitor_query_us_per_s, monitor_server_cpu_pct}``: the mean CPU of
    the tool's own process (% of a core; with worker processes, process 0 of ``cpu_means``, which runs the monitor
    and merges their seconds: the measurement only; alone, ``rows``' harness CPU, which runs the load too), the
    monitor's query time per second (µs) and its server backends' CPU (% of a core; None with the server on
    another host)."""
    others = [p for p in (cpu_means or {}) if p != "0"]
    alone = not others or "0" not in (cpu_means or {})
    monitor_cpu = column(rows, "server_cpu_monitor_us")
    return {"tool_process_cpu_pct": _mean(column(rows, "harness_cpu_pct")) if alone else cpu_means["0"],
            "tool_process_does": "load and measurement" if alone else "measurement",
            "monitor_query_us_per_s": _mean(column(rows, "monitor_query_us")),
            "monitor_server_cpu_pct": round(sum(monitor_cpu) / len(monitor_cpu) / 1e4, 2) if monitor_cpu else None}


def measurement_line(cost: dict | None) -> str | None:
    """The terminal's line for ``cost`` (:func:`measurement_cost`), None for a run without one."""
    if not cost or cost.get("tool_process_cpu_pct") is None:
        return None
    server = ("" if cost.get("monitor_server_cpu_pct") is None
              else f", its server backends {cost['monitor_server_cpu_pct']:.2f} % of a core")
    queries = cost.get("monitor_query_us_per_s")
    return (f"measurement cost: the tool's process {cost['tool_process_cpu_pct']:.1f} % of a core "
            f"({cost['tool_process_does']}); the monitor's queries "
            f"{'-' if queries is None else f'{queries / 1000:,.1f} ms'} per second{server} (means over the window)")
