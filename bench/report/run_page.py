"""Render one run's result files into a self-contained HTML report.

The report reads only the result files of a run directory (``run.json``,
``intervals.csv``, ``summary.json``); it never touches a database, so any run
can be re-rendered later. Figures are drawn with matplotlib (Agg backend),
embedded in the HTML as base64 PNG data URIs, and also written as PNG files to
``RUN_DIR/plots/`` for quick viewing.

Public API:
    render_report(run_dir) -> Path of the written ``report.html``
    ReportError            -> raised when the run directory cannot be rendered
"""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from jinja2 import Environment, FileSystemLoader  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FuncFormatter, MaxNLocator, NullFormatter, StrMethodFormatter,
)

__all__ = ["ReportError", "render_report"]

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "report_templates"
TEMPLATE_NAME = "report.html.j2"

REQUIRED_FILES = ("run.json", "intervals.csv", "summary.json")
PLOTTED_COLUMNS = (
    "t_s", "claims", "jobs_completed", "claim_p50_us", "claim_p95_us",
    "claim_p99_us", "queue_depth", "oldest_eligible_age_s", "running", "lock_waiters",
)
INVARIANT_ORDER = ("double_claims", "lost_jobs", "duplicated_jobs", "over_claims", "stale_completions_applied")
HARNESS_CPU_LIMIT_PCT = 90.0
#: Latency-table keys that older result files lack (the row is left out then).
OPTIONAL_LATENCY_KEYS = ("work_duration_us", "loop_lag_us", "nowait_backoff_us")
LOG_SCALE_RATIO = 20.0  # claim-latency plot switches to a log y axis above this max/min ratio
X_LABEL = "time since measured start (s)"
NA = "n/a"

BACKLOG_DRY_TEXT = ("backlog ran dry: throughput is bounded by the seeded backlog, "
                    "not by the queue")


class ReportError(ValueError):
    """A run directory is missing a required file or holds unreadable data."""


# --------------------------------------------------------------------------- public


def render_report(run_dir: Path) -> Path:
    """Render ``run_dir/report.html`` from the run's result files.

    Args:
        run_dir: a run directory holding ``run.json``, ``intervals.csv`` and
            ``summary.json`` (the result-file contract; see docs/design.md).

    Returns:
        Path of the written ``report.html`` (UTF-8, self-contained: inline CSS,
        figures as base64 PNG data URIs). As a side effect each figure is also
        written to ``run_dir/plots/<name>.png`` (throughput, claim_latency, claim_vs_table,
        loop_lag, oldest_age, locks_running, dead_tuples).

    Raises:
        ReportError: a required file is absent (the message names it), a JSON
            file does not parse, or ``intervals.csv`` lacks a plotted column.
    """
    run_dir = Path(run_dir)
    run, summary, intervals = _load(run_dir)
    config = {**(summary.get("config") or {}), **(run.get("config") or {})}

    plots_dir = run_dir / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    figures = []
    figure_specs = list(_FIGURES)
    priority_ages = run_dir / "priority_ages.csv"
    if priority_ages.is_file():
        by_priority = pd.read_csv(priority_ages)
        figure_specs.append((
            "oldest_age_by_priority", "Oldest eligible age per priority",
            "Age of the oldest eligible job of each priority, sampled with the oldest-age query. A "
            "priority whose line climbs while another stays flat is being starved by the higher one "
            "(lower number = claimed first).",
            lambda ax, df, summ: _draw_priority_ages(ax, by_priority)))
    for name, title, caption, draw in figure_specs:
        png = _draw_png(draw, intervals, summary)
        (plots_dir / f"{name}.png").write_bytes(png)
        figures.append({
            "name": name,
            "title": title,
            "caption": caption,
            "data_uri": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
        })

    context = {
        "run_id": summary.get("run_id") or run.get("run_id") or run_dir.name,
        "headline": _headline(config, summary),
        "banners": _banners(summary),
        "monitor_notes": list(summary.get("monitor_notes") or []),
        "vacuum_note": _vacuum_note(summary),
        "claim_plan": _claim_plan(run_dir),
        "plan_rows": _plan_rows(summary),
        "summary_rows": _summary_rows(summary, config),
        "latency_rows": _latency_rows(summary),
        "figures": figures,
        "config_rows": [(k, _fmt_value(v)) for k, v in config.items()],
        "env_rows": _env_rows(run, summary),
        "server_settings": [(k, _fmt_value(v))
                            for k, v in sorted((run.get("server_settings") or {}).items())],
    }
    env = Environment(loader=FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    html = env.get_template(TEMPLATE_NAME).render(**context)
    out = run_dir / "report.html"
    out.write_text(html, encoding="utf-8")
    return out


# --------------------------------------------------------------------------- loading


def _load(run_dir: Path) -> tuple[dict, dict, pd.DataFrame]:
    """Read run.json, summary.json and intervals.csv; raise ReportError on problems."""
    for name in REQUIRED_FILES:
        if not (run_dir / name).is_file():
            raise ReportError(f"{name} not found in run directory {run_dir}")
    run = _read_json(run_dir / "run.json")
    summary = _read_json(run_dir / "summary.json")
    try:
        df = pd.read_csv(run_dir / "intervals.csv")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ReportError(f"intervals.csv in {run_dir} is unreadable: {exc}") from exc
    missing = [c for c in PLOTTED_COLUMNS if c not in df.columns]
    if missing:
        raise ReportError(f"intervals.csv in {run_dir} lacks columns: {', '.join(missing)}")
    df = df.apply(pd.to_numeric, errors="coerce").sort_values("t_s").reset_index(drop=True)
    return run, summary, df


def _read_json(path: Path) -> dict:
    """Parse a JSON object file; raise ReportError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{path.name} does not hold a JSON object")
    return data


# --------------------------------------------------------------------------- formatting


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _fmt_num(v: Any, decimals: int = 0, unit: str = "") -> str:
    """Thousands-separated number with a fixed number of decimals, or 'n/a'."""
    if _is_missing(v):
        return NA
    try:
        text = f"{float(v):,.{decimals}f}"
    except (TypeError, ValueError):
        return str(v)
    return f"{text} {unit}" if unit else text


def _fmt_us_as_ms(v: Any) -> str:
    """Microseconds shown as milliseconds with microsecond precision: 412 -> '0.412 ms'."""
    return NA if _is_missing(v) else _fmt_num(float(v) / 1000.0, 3, "ms")


def _fmt_value(v: Any) -> str:
    """Config/setting value as text: scalars as-is, containers as compact JSON."""
    if v is None:
        return NA
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def _as_int(v: Any) -> int | None:
    try:
        return None if _is_missing(v) else int(v)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- context


def _headline(config: dict, summary: dict | None = None) -> list[tuple[str, str]]:
    items = [(k, _fmt_value(config.get(k))) for k in ("policy", "workers", "batch", "index")]
    workers = ((summary or {}).get("plans") or {}).get("workers")
    if workers is not None:
        items.append(("workers' claim plan", workers_plan_label(workers, config)))
    return items


def workers_plan_label(workers: dict, config: dict) -> str:
    """e.g. ``generic (prepared, PLAN_CACHE=auto; 1,234 generic / 40 custom executions)``."""
    plan = workers.get("plan") or "unknown"
    if plan == "unprepared":
        return "unprepared (PREPARED=0: planned with its values on every claim)"
    counts = ("" if workers.get("generic_executions") is None else
              f"; {workers['generic_executions']:,} generic / {workers['custom_executions']:,} custom executions")
    return f"{plan} (prepared, PLAN_CACHE={workers.get('plan_cache') or config.get('plan_cache') or 'auto'}{counts})"


def _banners(summary: dict) -> list[str]:
    banners = list(summary.get("plan_warnings") or [])
    banners.extend(f"fault window {f} never opened: it starts after the measured window ended"
                   for f in summary.get("faults_not_opened") or [])
    if summary.get("complete") is False:
        banners.append("interrupted run: the measured window did not finish")
    if summary.get("suspect"):
        reasons = summary.get("suspect_reasons") or ["no reason recorded"]
        banners.extend(f"suspect run: {r}" for r in reasons)
    if summary.get("backlog_exhausted"):
        banners.append(BACKLOG_DRY_TEXT)
    if summary.get("saturated"):
        banners.append(f"the queue is {summary.get('saturation_verdict')}")
    return banners


def _vacuum_note(summary: dict) -> str | None:
    """One sentence on autovacuum/autoanalyze runs on the queue table during the run."""
    av = summary.get("autovacuum")
    if not av:
        return None
    if av.get("server_autovacuum") is False:
        return ("Autovacuum is off on this server (autovacuum = off): nothing vacuumed or analyzed the queue "
                "table during the run, so cached claim plans were never rebuilt and dead tuples stayed.")
    if not av.get("enabled"):
        return "Autovacuum was off on the queue table for this run (AUTOVACUUM=off)."
    if av.get("autovacuum_runs") is None:
        return "Whether autovacuum ran during the run is unknown (the database went away)."
    if not av.get("autovacuum_runs") and not av.get("autoanalyze_runs"):
        return "Autovacuum and autoanalyze did not run on the queue table during the run."
    return (f"During the run autovacuum ran {av['autovacuum_runs']} and autoanalyze {av['autoanalyze_runs']} "
            "times on the queue table; each analyze invalidates the workers' cached claim plans, which "
            "PostgreSQL then plans again on the table as it is.")


def _claim_plan(run_dir: Path) -> str | None:
    """The captured EXPLAIN text of one claim, if the run has one."""
    path = run_dir / "claim_plan.txt"
    return path.read_text(encoding="utf-8").rstrip() if path.is_file() else None


def _plan_rows(summary: dict) -> list[dict]:
    """One row per captured plan (custom, generic) and one for pg_stat_statements, for the plan table."""
    plans = summary.get("plans") or {}
    rows = []
    workers = plans.get("workers")
    if workers is not None:
        rows.append({"what": "the workers' claim, read on their own sessions: "
                             + workers_plan_label(workers, summary.get("config") or {}),
                     "scan": workers.get("scan") or workers.get("error") or NA,
                     "buffers": _fmt_value(workers.get("shared_buffers")),
                     "ms": NA if workers.get("execution_ms") is None else f"{workers['execution_ms']:,.3f}"})
    for mode in ("custom", "generic"):
        plan = plans.get(mode)
        if not plan:
            continue
        rows.append({"what": f"what the {mode} plan would do (a fresh statement)",
                     "scan": plan.get("scan") or plan.get("error") or NA,
                     "buffers": _fmt_value(plan.get("shared_buffers")),
                     "ms": NA if plan.get("execution_ms") is None else f"{plan['execution_ms']:,.3f}"})
    pgss = summary.get("pg_stat_statements") or {}
    if pgss:
        unavailable = pgss.get("unavailable")
        rows.append({"what": "pg_stat_statements, measured window",
                     "scan": f"not recorded: {unavailable}" if unavailable else f"{_fmt_value(pgss.get('calls'))} calls",
                     "buffers": NA if unavailable else _fmt_value(pgss.get("shared_blks_per_call")),
                     "ms": NA if unavailable or pgss.get("mean_ms") is None else f"{pgss['mean_ms']:,.3f}"})
    return rows


def _row(label: str, value: str, bad: bool = False) -> dict:
    return {"label": label, "value": value, "bad": bad}


def _summary_rows(summary: dict, config: dict) -> list[dict]:
    """Headline figures (latencies are in a separate table, see _latency_rows)."""
    batch = _as_int(config.get("batch"))
    max_rows = _as_int(summary.get("max_rows_per_claim"))
    over_batch = max_rows is not None and batch is not None and max_rows > batch
    age = summary.get("oldest_eligible_age_s") or {}
    cpu = summary.get("harness_cpu_max_pct")
    mon = summary.get("monitor_query_us") or {}

    rows = [
        _row("throughput", _fmt_num(summary.get("throughput_jobs_per_s"), 1, "jobs/s")),
        _row("claims per second", _fmt_num(summary.get("claims_per_s"), 1, "claims/s")),
        _row("measured window", _fmt_num(summary.get("measured_s"), 1, "s")),
        _row("jobs claimed", _fmt_num(summary.get("jobs_claimed"))),
        _row("jobs completed", _fmt_num(summary.get("jobs_completed"))),
        _row("empty claims", _fmt_num(summary.get("empty_claims"))),
        _row("max rows per claim",
             f"{_fmt_num(max_rows)} (batch {_fmt_num(batch)})", bad=over_batch),
        _row("oldest eligible age max / p95 / final",
             " / ".join(_fmt_num(age.get(k), 3) for k in ("max", "p95", "final")) + " s"),
        _row("errors", _fmt_errors(summary.get("errors"))),
    ]
    if summary.get("offered_rate_jobs_per_s"):
        lag = summary.get("producer_lag_ms") or {}
        rows.append(_row("offered load (open-loop producers)", _fmt_num(summary["offered_rate_jobs_per_s"], 1, "jobs/s")))
        rows.append(_row("jobs produced", _fmt_num(summary.get("jobs_produced"))))
        rows.append(_row("producer schedule lag p50 / p99 / max",
                         " / ".join(_fmt_num(lag.get(k), 3) for k in ("p50", "p99", "max")) + " ms"))
        rows.append(_row("does the queue keep up?", str(summary.get("saturation_verdict")),
                         bad=bool(summary.get("saturated"))))
    # Retry and lease figures (measured window), shown when the run has them.
    for key, label in (("nowait_retries", "NOWAIT retries (after back-off)"),
                       ("retries", "failed attempts re-queued with back-off"),
                       ("dead_lettered", "jobs dead-lettered"),
                       ("lease_expiries", "lease expiries (reaper)"),
                       ("stale_completions", "stale completions rejected by the token"),
                       ("redeliveries", "redeliveries (claims beyond a job's first)"),
                       ("crashed_claims", "claims abandoned by crashed workers (fault)"),
                       ("late_completions", "late completions (fault)"),
                       ("backend_kills", "backends killed (fault)")):
        if key in summary:
            rows.append(_row(label, _fmt_num(summary.get(key))))
    invariants = summary.get("invariants") or {}
    keys = [k for k in INVARIANT_ORDER if k in invariants]
    keys += sorted(k for k in invariants if k not in INVARIANT_ORDER)
    for key in keys:
        v = invariants[key]
        rows.append(_row(f"invariant: {key}", _fmt_num(v),
                         bad=_is_missing(v) or v != 0))
    batch_wait = summary.get("batch_wait_us") or {}
    if (batch or 1) > 1 and batch_wait.get("p50") is not None:
        rows.append(_row("per-job wait inside a batch p50 / p99 (claimed, not started)",
                         " / ".join(_fmt_num(batch_wait.get(k, 0) / 1000, 3) for k in ("p50", "p99")) + " ms"))
    if config.get("layout") == "archive":
        rows.append(_row("jobs moved to the archive (mover)", _fmt_num(summary.get("archived_jobs"))))
    sizes = summary.get("table_sizes") or {}
    if sizes.get("before") and sizes.get("after"):
        def mb(part: dict) -> str:
            text = f"table {part['table_bytes'] / 1e6:,.1f} MB, indexes {part['indexes_bytes'] / 1e6:,.1f} MB"
            return text + (f", archive {part['archive_bytes'] / 1e6:,.1f} MB" if part.get("archive_bytes") else "")
        rows.append(_row("sizes before / after the run", f"{mb(sizes['before'])} / {mb(sizes['after'])}"))
    rows.append(_row("harness CPU max", _fmt_num(cpu, 1, "%"),
                     bad=not _is_missing(cpu) and float(cpu) > HARNESS_CPU_LIMIT_PCT))
    rows.append(_row("monitor query cost mean / max",
                     f"{_fmt_num(mon.get('mean'), 1)} / {_fmt_num(mon.get('max'))} µs"))
    return rows


def _fmt_errors(errors: Any) -> str:
    """'55P03: 3, 40001: 1' for non-zero counts, largest first; 'none' when there are none."""
    if not errors:
        return "none"
    counts = [(k, v) for k, v in errors.items() if not _is_missing(v) and v != 0]
    counts.sort(key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k}: {_fmt_num(v)}" for k, v in counts) or "none"


def _latency_rows(summary: dict) -> list[dict]:
    """Rows of the latency table: label plus p50/p95/p99/max/mean cells, all in ms.

    Claim and completion latency arrive in µs and are shown as ms with 3 decimals.
    """
    stats = ("p50", "p95", "p99", "max", "mean")
    rows = []
    for label, key, fmt in (
        ("claim latency", "claim_latency_us", _fmt_us_as_ms),
        ("completion latency", "complete_latency_us", _fmt_us_as_ms),
        ("pickup latency", "pickup_latency_ms", lambda v: _fmt_num(v, 3, "ms")),
        ("job work, measured (configured mean "
         f"{_fmt_num(summary.get('work_expected_ms'), 3, 'ms')})", "work_duration_us", _fmt_us_as_ms),
        ("event-loop lag (10 ms timer, how late)", "loop_lag_us", _fmt_us_as_ms),
        ("NOWAIT back-off sleeps", "nowait_backoff_us", _fmt_us_as_ms),
    ):
        d = summary.get(key)
        if d is None and key in OPTIONAL_LATENCY_KEYS:  # runs recorded before the key existed
            continue
        if key == "nowait_backoff_us" and (d or {}).get("p50") is None:
            continue  # no 55P03, no back-off
        d = d or {}
        rows.append({"label": label, "cells": [fmt(d.get(s)) for s in stats]})
    return rows


def _env_rows(run: dict, summary: dict) -> list[tuple[str, str]]:
    client = run.get("client") or {}
    seed = run.get("seed") or {}
    mem = client.get("memory_bytes")
    return [
        ("engine", _fmt_value(run.get("engine"))),
        ("server version", _fmt_value(run.get("server_version"))),
        ("DSN (password masked)", _fmt_value(run.get("dsn_masked"))),
        ("embedded database", _fmt_value(run.get("embedded_database"))),
        ("client cores", _fmt_value(client.get("cores"))),
        ("client memory", NA if _is_missing(mem) else _fmt_num(mem / 2**30, 1, "GiB")),
        ("client python", _fmt_value(client.get("python"))),
        ("client platform", _fmt_value(client.get("platform"))),
        ("client hostname", _fmt_value(client.get("hostname"))),
        ("backlog chosen by", _fmt_value(run.get("backlog_computed"))),
        ("seed rows", _fmt_num(seed.get("rows"))),
        ("seed time", _fmt_num(seed.get("seconds"), 2, "s")),
        ("seed rate", _fmt_num(seed.get("rows_per_s"), 0, "rows/s")),
        ("run started", _fmt_value(run.get("started_at"))),
        ("measured window start",
         _fmt_value(run.get("measured_start") or summary.get("measured_start"))),
        ("measured window end",
         _fmt_value(run.get("measured_end") or summary.get("measured_end"))),
        ("run ended", _fmt_value(run.get("ended_at"))),
        ("tool version", _fmt_value(run.get("tool_version"))),
        ("git sha", _fmt_value(run.get("git_sha")) if run.get("git_sha") else "unknown"),
    ]


# --------------------------------------------------------------------------- figures


def _draw_png(draw: Callable[[plt.Axes, pd.DataFrame, dict], None],
              df: pd.DataFrame, summary: dict) -> bytes:
    """Run one figure-drawing function on fresh axes and return PNG bytes."""
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100, layout="constrained")
    try:
        ax.set_xlabel(X_LABEL)
        ax.grid(True, alpha=0.3)
        if df.empty:
            ax.text(0.5, 0.5, "no per-second data recorded", ha="center", va="center",
                    transform=ax.transAxes)
        ax.margins(x=0.015)
        draw(ax, df, summary)
        time_axis = getattr(draw, "time_axis", True)  # False: x is not the measured window's time
        if not df.empty and time_axis:  # the whole measured window, even when a series has few points
            ax.set_xlim(df["t_s"].min() - 0.3, df["t_s"].max() + 0.3)
        for i, fault in enumerate((summary.get("faults") or []) if time_axis else []):  # shade each fault window
            ax.axvspan(fault["start_s"], fault["end_s"], color=f"C{(i % 4) + 6}", alpha=0.12, zorder=0)
            ax.text(fault["start_s"], 1.0, f" {fault['kind']}", transform=ax.get_xaxis_transform(),
                    fontsize="x-small", va="top", color="#555")
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)


def _legend(ax: plt.Axes, handles: list | None = None) -> None:
    """One-row legend above the axes, so it never covers data."""
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=len(handles),
              frameon=False, fontsize="small", borderaxespad=0)


def _count_axis(ax: plt.Axes, integer: bool = True) -> None:
    """Linear y axis from 0 with thousands separators (1,400 rather than 1400)."""
    ax.set_ylim(bottom=0)
    if integer:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}" if integer else "{x:,g}"))


def _marker(df: pd.DataFrame) -> str | None:
    """Markers make isolated points (between gaps) visible on short runs only."""
    return "." if len(df) <= 180 else None


def _draw_throughput(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    m = _marker(df)
    ax.plot(df["t_s"], df["jobs_completed"], marker=m, label="jobs completed / s")
    ax.plot(df["t_s"], df["claims"], marker=m, label="claims / s")
    if "jobs_produced" in df and df["jobs_produced"].fillna(0).sum() > 0:  # open-loop arrivals
        ax.plot(df["t_s"], df["jobs_produced"].fillna(0), marker=m, color="C2", label="jobs produced / s")
    if "errors" in df and df["errors"].fillna(0).sum() > 0:  # e.g. NOWAIT's 55P03 retries
        ax.plot(df["t_s"], df["errors"], marker=m, color="C3", label="errors / s (all kinds)")
    mean = summary.get("throughput_jobs_per_s")
    if not _is_missing(mean):
        ax.axhline(float(mean), color="C0", linestyle="--", linewidth=1,
                   label=f"mean throughput ({_fmt_num(mean, 1)} jobs/s)")
    ax.set_ylabel("rate (per second)")
    _count_axis(ax)
    _legend(ax)


def _draw_claim_latency(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    cols = (("claim_p50_us", "p50"), ("claim_p95_us", "p95"), ("claim_p99_us", "p99"))
    ms = {label: df[col] / 1000.0 for col, label in cols}
    values = pd.concat(list(ms.values())) if ms else pd.Series(dtype=float)
    positive = values[values > 0]
    use_log = not positive.empty and positive.max() / positive.min() > LOG_SCALE_RATIO
    m = _marker(df)
    for label, series in ms.items():
        ax.plot(df["t_s"], series.where(series > 0) if use_log else series,
                marker=m, label=f"claim latency {label}")
    if use_log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("claim latency (ms, log scale)")
    else:
        ax.set_ylim(bottom=0)
        ax.set_ylabel("claim latency (ms)")
    _legend(ax)


def _no_samples(ax: plt.Axes, df: pd.DataFrame, columns: tuple[str, ...], ylabel: str) -> bool:
    """When a monitor series has no sample at all, say so on the axes and return True."""
    if df.empty or not all(df[c].isna().all() for c in columns):
        return False
    ax.text(0.5, 0.5, f"no samples of {', '.join(columns)} in the measured window:\nthe monitor's "
            "table query is too expensive on this table (see 'Monitor' above the plots)",
            ha="center", va="center", transform=ax.transAxes, fontsize="small", color="#c62828")
    ax.set_xlim(df["t_s"].min() - 0.5, df["t_s"].max() + 0.5)
    ax.set_yticks([])
    ax.set_ylabel(ylabel)
    return True


def _draw_oldest_age(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    if _no_samples(ax, df, ("oldest_eligible_age_s", "queue_depth"), "oldest eligible age (s)"):
        return
    m = _marker(df)
    (age_line,) = ax.plot(df["t_s"], df["oldest_eligible_age_s"], marker=m, color="C3",
                          label="oldest eligible age (s, left)")
    ax.set_ylabel("oldest eligible age (s)", color="C3")
    _count_axis(ax, integer=False)
    depth_ax = ax.twinx()
    depth = df[["t_s", "queue_depth"]].dropna()  # counted only as often as their cost allows
    (depth_line,) = depth_ax.plot(depth["t_s"], depth["queue_depth"], marker=m, color="C0",
                                  linestyle="--", label="queue depth (rows, right)")
    depth_ax.set_ylabel("queue depth (eligible rows)", color="C0")
    _count_axis(depth_ax)
    _legend(ax, [age_line, depth_line])


def _draw_locks_running(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    if _no_samples(ax, df, ("running", "lock_waiters"), "count"):
        return
    m = _marker(df)
    running = df[["t_s", "running"]].dropna()  # counted only as often as their cost allows
    ax.plot(running["t_s"], running["running"], marker=m, label="running jobs")
    ax.plot(df["t_s"], df["lock_waiters"], marker=m, label="lock waiters (sessions)")
    ax.set_ylabel("count")
    _count_axis(ax)
    _legend(ax)


def _draw_priority_ages(ax: plt.Axes, by_priority: pd.DataFrame) -> None:
    for priority, group in by_priority.groupby("priority"):
        ax.plot(group["t_s"], group["oldest_eligible_age_s"], marker=_marker(group),
                label=f"priority {priority}")
    ax.set_ylabel("oldest eligible age (s)")
    _count_axis(ax, integer=False)
    _legend(ax)


def _draw_loop_lag(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    if "loop_lag_p99_us" not in df or df["loop_lag_p99_us"].isna().all():
        ax.text(0.5, 0.5, "no event-loop lag recorded (a run from before loop_lag_p99_us existed)",
                ha="center", va="center", transform=ax.transAxes, fontsize="small")
        return
    ax.plot(df["t_s"], df["loop_lag_p99_us"] / 1000.0, marker=_marker(df), color="C1",
            label="event-loop lag p99 in the second (ms)")
    limit = summary.get("loop_lag_limit_us")
    if not _is_missing(limit):
        ax.axhline(float(limit) / 1000.0, color="C3", linestyle="--", linewidth=1,
                   label=f"suspect above this for the whole window ({float(limit) / 1000:,.2f} ms)")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("event-loop lag (ms)")
    _legend(ax)


def _draw_dead_tuples(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    if "dead_tuples" not in df or _no_samples(ax, df, ("dead_tuples",), "dead tuples (rows)"):
        return
    series = df[["t_s", "dead_tuples"]].dropna()
    (dead_line,) = ax.plot(series["t_s"], series["dead_tuples"], marker=_marker(df), color="C4",
                           label="dead tuples in the queue table (rows, left)")
    ax.set_ylabel("dead tuples (rows)")
    _count_axis(ax)
    handles = [dead_line]
    if "xmin_age" in df and df["xmin_age"].notna().any():
        xmin_ax = ax.twinx()
        xmin = df[["t_s", "xmin_age"]].dropna()
        (xmin_line,) = xmin_ax.plot(xmin["t_s"], xmin["xmin_age"], color="C5", linestyle="--",
                                    label="oldest snapshot's xmin age (transactions, right)")
        xmin_ax.set_ylabel("xmin age (transactions)")
        _count_axis(xmin_ax)
        handles.append(xmin_line)
    _legend(ax, handles)


def _draw_claim_vs_table(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Per-second claim p50/p99 against the queue table's tuples (live + dead) in that second."""
    if "table_tuples" not in df or df["table_tuples"].isna().all():
        ax.text(0.5, 0.5, "no table_tuples samples in this run's intervals.csv", ha="center", va="center",
                transform=ax.transAxes, fontsize="small", color="#c62828")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for col, label in (("claim_p50_us", "p50"), ("claim_p99_us", "p99")):
        points = df[["table_tuples", col]].dropna()
        ax.plot(points["table_tuples"], points[col] / 1000.0, linestyle="none", marker="o", markersize=3,
                label=f"claim latency {label}")
    ax.set_xlabel("queue table tuples, live + dead (pg_stat_user_tables)")
    ax.set_ylabel("claim latency (ms)")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    growth = summary.get("claim_growth") or {}
    if growth.get("grows"):
        ax.text(0.01, 0.97, f"claim latency grows with the table: +{growth['slope_us_per_1k_tuples']:,.1f} µs "
                f"per 1,000 tuples (r = {growth['r']:.2f})", transform=ax.transAxes, va="top",
                fontsize="small", color="#c62828")
    _legend(ax)


_draw_claim_vs_table.time_axis = False


# (file name, title, caption, drawing function); the report shows them in this order.
_FIGURES: tuple[tuple[str, str, str, Callable], ...] = (
    ("throughput", "Throughput",
     "Jobs completed and claims made in each second of the measured window; the dashed "
     "line is the run's mean throughput. Dips show stalls.",
     _draw_throughput),
    ("claim_latency", "Claim latency",
     "Per-second p50/p95/p99 of claim latency in ms (lock waits included); gaps are seconds "
     "with no claims. A widening p99 over p50 means some claims queue behind locks.",
     _draw_claim_latency),
    ("claim_vs_table", "Claim latency against table size",
     "Each second's claim p50 and p99 against the queue table's live + dead tuples in that second. "
     "A flat cloud means the claim's cost does not depend on the table; a rising one means every "
     "claim reads more as the table grows (a plan that scans the table, or dead index entries it "
     "steps over) and the run's figures depend on how long it ran.",
     _draw_claim_vs_table),
    ("loop_lag", "Load generator event-loop lag",
     "How late a 10 ms timer in the load generator fired, p99 of each second. Every latency the "
     "generator measures ends when its greenlet runs again, so it can be inflated by this much; a "
     "generator waiting for a core shows it here even while its CPU reads low. The dashed line is "
     "the run's suspect limit for the window's p99 (loop_lag_limit_us; the rule is in the README).",
     _draw_loop_lag),
    ("oldest_age", "Oldest eligible age and queue depth",
     "Age of the oldest eligible job (left axis, the queue's lag) and eligible rows waiting "
     "(right axis, an exact count taken as often as its cost stays within 2 % of the time); "
     "gaps in the age line are seconds the monitor missed. Age rising while depth looks flat "
     "means the queue is falling behind.",
     _draw_oldest_age),
    ("locks_running", "Lock waiters and running jobs",
     "Sessions waiting on a heavyweight lock (row, transaction or relation extension; sampled each second) and jobs in the running state (counted "
     "as often as the count's cost allows; with TXN=hold the claim is not committed while the job "
     "runs, so other sessions, the monitor included, see no running rows). Lock "
     "waiters above zero for long stretches point to a convoy; gaps are missed samples.",
     _draw_locks_running),
    ("dead_tuples", "Dead tuples",
     "Dead row versions in the queue table (pg_stat_user_tables.n_dead_tup, sampled each second; "
     "the statistics lag by up to a second). Every claim and completion leaves one behind until "
     "vacuum removes it; a climbing line means vacuum is not keeping up, or something (a long "
     "transaction) stops it, and claims have to step over them. The dashed line is the age of the "
     "oldest snapshot held in this database (backend_xmin), in transactions: while it grows, vacuum "
     "can remove nothing newer. Shaded bands on every plot are fault-injection windows.",
     _draw_dead_tuples),
)
