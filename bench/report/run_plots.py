"""The run report's plots: one function per figure, drawing one run's per-second data (``intervals.csv``,
``t_s`` in seconds) and ``summary.json`` on axes :mod:`bench.report.run_figures` gives; a missing column or
sample is said on the axes, never raised."""

from __future__ import annotations

from functools import partial

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator, NullLocator, StrMethodFormatter

from bench.analysis.empty_claims import empty_while_work_waited
from bench.report.format import fmt_num, is_missing
from bench.usage import setting
from bench.report.render import LABEL_BOX, label_log_axis, legend_above, say, spans_wide, y_scale
from bench.report.run_format import engine_capability

__all__ = ["draw_claim_latency", "draw_claim_vs_table", "draw_dead_tuples", "draw_history_list", "draw_locks_running",
           "draw_loop_lag", "draw_oldest_age", "draw_priority_ages", "draw_throughput"]

#: Legend entries per row above a plot; more wrap to another row (a wider row squeezes the axes).
LEGEND_COLUMNS = 4
_legend = partial(legend_above, ncol=LEGEND_COLUMNS)


def _count_axis(ax: plt.Axes, ylabel: str, integer: bool = True, **label_kw) -> None:
    """Linear y axis labelled ``ylabel`` from 0 with thousands separators, 5 % of headroom above the autoscaled
    top."""
    ax.set_ylabel(ylabel, **label_kw)
    ax.set_ylim(bottom=0)
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.05 if top > 0 else 1)
    if integer:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}" if integer else "{x:,g}"))


def _marker(df: pd.DataFrame) -> str | None:
    """Markers make isolated points (between gaps) visible on short runs only."""
    return "." if len(df) <= 180 else None


def _line(ax: plt.Axes, df: pd.DataFrame, column: str, label: str, ylabel: str, *, integer: bool = True,
          twin: bool = False, label_color: bool = False, **style):
    """``df[column]`` against ``t_s`` on ``ax`` (on a twin y axis at the right when ``twin``), its axis a count
    axis labelled ``ylabel`` (in the line's colour when ``label_color``); returns the line."""
    target = ax.twinx() if twin else ax
    (line,) = target.plot(df["t_s"], df[column], label=label, **style)
    _count_axis(target, ylabel, integer, **({"color": style["color"]} if label_color else {}))
    return line


def draw_throughput(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Jobs completed and claims per second (jobs produced and errors too when there were any), and
    the run's mean throughput (``summary["throughput_jobs_per_s"]``, jobs/s) as a dashed line."""
    m = _marker(df)
    ax.plot(df["t_s"], df["jobs_completed"], marker=m, label="jobs completed / s")
    # dashed over the solid line: at batch 1 with no empty claim the two are equal, and both must show
    ax.plot(df["t_s"], df["claims"], marker="x" if m else None, linestyle="--", label="claims / s")
    # drawn when there were any: open-loop arrivals, errors (e.g. NOWAIT's 55P03 retries), empty claims
    for col, color, label in (("jobs_produced", "C2", "jobs produced / s"), ("errors", "C3", "errors / s (all kinds)"),
                              ("empty_claims", "C4", "empty claims / s")):
        if col in df and df[col].fillna(0).sum() > 0:
            ax.plot(df["t_s"], df[col] if col == "errors" else df[col].fillna(0), marker=m, color=color, label=label)
    if "empty_claims" in df and df["empty_claims"].fillna(0).sum() > 0:
        # FR-07: claims that came back empty while rows were pending (bench.analysis.empty_claims)
        counts = summary.get("status_counts") or {}
        _, waited = empty_while_work_waited(summary.get("config") or {}, df["jobs_claimed"].tolist(),
                                            df["empty_claims"].tolist(), counts.get("pending", 0) if counts else None)
        if waited:
            hit = df[pd.Series(waited, index=df.index) & (df["empty_claims"].fillna(0) > 0)]
            if len(hit):
                ax.plot(hit["t_s"], hit["empty_claims"], linestyle="none", marker="x", markersize=8,
                        color="#c62828", label="empty while work waited")
    mean = summary.get("throughput_jobs_per_s")
    if not is_missing(mean):
        ax.axhline(float(mean), color="C0", linestyle="--", linewidth=1,
                   label=f"mean throughput ({fmt_num(mean, 1)} jobs/s)")
    _count_axis(ax, "rate (per second)")
    _legend(ax)


def draw_claim_latency(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Per-second claim latency p50/p95/p99 in ms (the ``claim_p*_us`` columns, µs), and beside them the round trip
    the run's probe measured (``round_trip_p50_us``, dotted, when measured: the part of a claim no server can
    shorten); a log y axis when the largest value is more than :data:`LOG_SCALE_RATIO` times the smallest positive
    one."""
    ms = {f"claim latency {p}": df[f"claim_{p}_us"] / 1000.0 for p in ("p50", "p95", "p99")}
    styles = dict.fromkeys(ms, "-")
    if "round_trip_p50_us" in df and df["round_trip_p50_us"].notna().any():
        ms["round trip p50 (the probe's)"] = pd.to_numeric(df["round_trip_p50_us"], errors="coerce") / 1000.0
        styles["round trip p50 (the probe's)"] = ":"
    use_log = spans_wide(pd.concat(list(ms.values())))
    for label, series in ms.items():
        ax.plot(df["t_s"], series.where(series > 0) if use_log else series, marker=_marker(df), label=label,
                linestyle=styles[label], **({"color": "#555"} if styles[label] == ":" else {}))
    what = "claim latency and round trip" if len(ms) > 3 else "claim latency"
    y_scale(ax, use_log, f"{what} (ms)", f"{what} (ms, log scale)")
    _legend(ax)


#: The series the monitor's table queries give (the others come from its statistics query every second).
TABLE_QUERY_COLUMNS = {"oldest_eligible_age_s", "queue_depth", "running"}


def _no_samples(ax: plt.Axes, df: pd.DataFrame, columns: tuple[str, ...], ylabel: str, summary: dict) -> bool:
    """When a monitor series has no sample at all, say so on the axes, with why (the table queries turned off
    by ``MONITOR=stats`` or too expensive on this table; the statistics query failing), and return True."""
    if df.empty or not all(df[c].isna().all() for c in columns):
        return False
    if not TABLE_QUERY_COLUMNS & set(columns):
        why = "the monitor's statistics query returned none"
    elif (summary.get("config") or {}).get("monitor") == "stats":
        why = f"the monitor's table queries were off ({setting('monitor', 'stats', quote=False)})"
    else:
        why = "the monitor's table query is too expensive on this table"
    say(ax, f"no samples of {', '.join(columns)} in the measured window:\n{why} (see 'Monitor' above the plots)",
        fontsize="small", color="#c62828")
    ax.set_xlim(df["t_s"].min() - 0.5, df["t_s"].max() + 0.5)
    ax.set_yticks([])
    ax.set_ylabel(ylabel)
    return True


def draw_oldest_age(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Oldest eligible age (s, left axis) and queue depth (eligible rows, right axis) per second."""
    if _no_samples(ax, df, ("oldest_eligible_age_s", "queue_depth"), "oldest eligible age (s)", summary):
        return
    m = _marker(df)
    age_line = _line(ax, df, "oldest_eligible_age_s", "oldest eligible age (s, left)", "oldest eligible age (s)",
                     integer=False, label_color=True, marker=m, color="C3")
    # Counted only as often as their cost allows: a second without a count is a gap, not a line
    # drawn through values nobody measured; markers keep an isolated count visible.
    depth_line = _line(ax, df, "queue_depth", "queue depth (rows, right)", "queue depth (eligible rows)", twin=True,
                       label_color=True, marker=m or ".", color="C0", linestyle="--")
    _legend(ax, [age_line, depth_line])


def draw_locks_running(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Running jobs and lock waiters per second (counts); ``notify_lock_waiters`` (FR-10) with ``WAKEUP=notify``
    or any sample above 0."""
    if _no_samples(ax, df, ("running", "lock_waiters"), "count", summary):
        return
    m = _marker(df)
    # counted only as often as their cost allows: gaps where a second has no count (see draw_oldest_age)
    if df["running"].notna().any():  # none without the table queries (MONITOR=stats): no empty legend entry
        ax.plot(df["t_s"], df["running"], marker=m or ".", label="running jobs")
    ax.plot(df["t_s"], df["lock_waiters"], marker=m, label="lock waiters (sessions)")
    notify = df["notify_lock_waiters"] if "notify_lock_waiters" in df else None
    if notify is not None and notify.notna().any() and (
            (summary.get("config") or {}).get("wakeup") == "notify" or notify.max() > 0):
        ax.plot(df["t_s"], notify, marker=m, linestyle=":", label="of them: on the notify lock at commit")
    _count_axis(ax, "count")
    _legend(ax)


def draw_lock_queue(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Requests waiting for a lock on the queue table by mode (the most at one 100 ms sample of each second) and
    the migration's stall in the second (ms, right axis)."""
    m = _marker(df)
    modes = [c for c in df.columns if c.startswith("lock_queue_") and c != "lock_queue_workers"
             and df[c].fillna(0).max() > 0]
    lines = [ax.plot(df["t_s"], df[c], marker=m, label=c.removeprefix("lock_queue_").replace("_", " "))[0]
             for c in modes]
    _count_axis(ax, "requests waiting (most at a sample)")
    if "stall_ms" in df and df["stall_ms"].notna().any():
        lines.append(_line(ax, df, "stall_ms", "stall (ms of the second, right)", "stall (ms of the second)",
                           twin=True, label_color=True, color="#c62828", linestyle="--", marker=m))
    _legend(ax, lines)


def draw_priority_ages(ax: plt.Axes, by_priority: pd.DataFrame, seconds: pd.Series) -> None:
    """Oldest eligible age (s) per priority from ``priority_ages.csv`` (``t_s``, ``priority``,
    ``oldest_eligible_age_s``); a measured second without a sample is a gap."""
    for priority, group in by_priority.groupby("priority"):
        ages = group.set_index("t_s")["oldest_eligible_age_s"]
        ages = ages.reindex(ages.index.union(seconds))  # NaN in a second without a sample
        ax.plot(ages.index, ages.to_numpy(), marker=_marker(ages), label=f"priority {priority}")
    _count_axis(ax, "oldest eligible age (s)", integer=False)
    _legend(ax)


def draw_loop_lag(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """The load generator's event-loop lag p99 per second in ms (``loop_lag_p99_us``, µs), with the
    run's suspect limit (``summary["loop_lag_limit_us"]``) as a dashed line."""
    if "loop_lag_p99_us" not in df or df["loop_lag_p99_us"].isna().all():
        say(ax, "no event-loop lag recorded (a run from before loop_lag_p99_us existed)", fontsize="small")
        return
    ax.plot(df["t_s"], df["loop_lag_p99_us"] / 1000.0, marker=_marker(df), color="C1",
            label="event-loop lag p99 in the second (ms)")
    limit = summary.get("loop_lag_limit_us")
    if not is_missing(limit):
        ax.axhline(float(limit) / 1000.0, color="C3", linestyle="--", linewidth=1,
                   label=f"suspect above this for the whole window ({fmt_num(float(limit) / 1000, 2, 'ms')})")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("event-loop lag (ms)")
    _legend(ax)


def draw_dead_tuples(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Dead tuples in the queue table per second (rows, left axis) and, when sampled, the oldest
    snapshot's xmin age (transactions, right axis); a second without a sample is a gap in its line."""
    if "dead_tuples" not in df or _no_samples(ax, df, ("dead_tuples",), "dead tuples (rows)", summary):
        return
    # Sampled every second: an empty cell is a missed sample, NaN here, a gap in the line.
    handles = [_line(ax, df, "dead_tuples", "dead tuples in the queue table (rows, left)", "dead tuples (rows)",
                     marker=_marker(df), color="C4")]
    if "xmin_age" in df and df["xmin_age"].notna().any():
        handles.append(_line(ax, df, "xmin_age", "oldest snapshot's xmin age (transactions, right)",
                             "xmin age (transactions)", twin=True, marker=_marker(df), color="C5", linestyle="--"))
    handles += _vacuum_markers(ax, df)
    index = summary.get("claim_index_bytes")
    if index:
        mb = {k: fmt_num(v / 1e6, 2, "MB") for k, v in index.items() if k in ("first", "last", "max")}
        ax.text(0.99, 0.97, f"claim's index: {mb['first']} at the start, {mb['last']} at the end (largest {mb['max']})",
                transform=ax.transAxes, ha="right", va="top",
                fontsize="small", bbox=LABEL_BOX)
    _legend(ax, handles)


def _vacuum_markers(ax: plt.Axes, df: pd.DataFrame) -> list:
    """Markers at the seconds a periodic VACUUM started (``vacuum_passes`` > 0) or ``autovacuum_count`` rose;
    returns their legend handles."""
    passes = df.loc[df["vacuum_passes"].fillna(0) > 0, "t_s"] if "vacuum_passes" in df else []
    counts = df[["t_s", "autovacuum_count"]].dropna() if "autovacuum_count" in df else None
    ended = counts.loc[counts["autovacuum_count"].diff() > 0, "t_s"] if counts is not None else []
    at_bottom = ax.get_xaxis_transform()  # x in seconds, y in axes fractions
    return [ax.scatter(t, [y] * len(t), transform=at_bottom, marker=marker, s=18, color=color, zorder=3, label=label)
            for t, y, marker, color, label in ((passes, 0.03, "^", "C2", "VACUUM pass"),
                                               (ended, 0.08, "v", "C3", "autovacuum ended")) if len(t)]


def draw_history_list(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """InnoDB's history list length per second (undo records not yet purged; MariaDB/MySQL runs)."""
    if "history_list_length" not in df or _no_samples(ax, df, ("history_list_length",), "history list length", summary):
        return
    _line(ax, df, "history_list_length", "InnoDB history list length (undo records not yet purged)",
          "history list length", marker=_marker(df), color="C4")
    _legend(ax)


def draw_claim_vs_table(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Per-second claim p50/p99 (ms) against the queue table's tuples (live + dead) in that second; the
    x axis is not time (``time_axis`` False), and ``summary["claim_growth"]`` adds a note when it grows."""
    if "table_tuples" not in df or df["table_tuples"].isna().all():
        say(ax, "no table_tuples samples in this run's intervals.csv", fontsize="small", color="#c62828")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for col, label in (("claim_p50_us", "p50"), ("claim_p99_us", "p99")):
        points = df[["table_tuples", col]].dropna()
        ax.plot(points["table_tuples"], points[col] / 1000.0, linestyle="none", marker="o", markersize=3,
                label=f"claim latency {label}")
    ax.set_xlabel("queue table rows, InnoDB's estimate (information_schema.TABLES.TABLE_ROWS)"
                  if engine_capability(summary, "table_rows_estimated")
                  else "queue table tuples, live + dead (pg_stat_user_tables)")
    ax.set_ylabel("claim latency (ms)")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    growth = summary.get("claim_growth") or {}
    if growth.get("grows"):
        ax.text(0.01, 0.97, f"claim latency grows with the table: +{fmt_num(growth['slope_us_per_1k_tuples'], 1)} µs "
                f"per 1,000 tuples (r = {growth['r']:.2f})", transform=ax.transAxes, va="top",
                fontsize="small", color="#c62828")
    _legend(ax)


draw_claim_vs_table.time_axis = False


#: The operations of the percentile spectrum: (histogram file, label).
SPECTRUM_SERIES = (("claim_latency_us", "claim"), ("complete_latency_us", "completion"), ("pickup_latency_us", "pickup"))


def draw_latency_spectrum(ax: plt.Axes, spectra: dict[str, list[tuple[float, int]]]) -> None:
    """Latency (ms, log) against percentile on HdrHistogram's axis, x = 1 / (1 − p); each series' maximum
    drawn one decade past the rarest percentile shown, marked "max"."""
    ticks: dict[float, str] = {}
    finite = [1 / (1 - p / 100) for points in spectra.values() for p, _ in points if p < 100]
    max_x = max(finite, default=1.0) * 10  # one place for every series' maximum, a decade past the rarest
    for name, label in SPECTRUM_SERIES:
        points = spectra.get(name)
        if not points:
            continue
        xs = [1 / (1 - p / 100) if p < 100 else max_x for p, _ in points]
        ax.plot(xs, [v / 1000 for _, v in points], marker="o", markersize=3, label=label)
        for (p, _), x in zip(points, xs):
            ticks[x] = "max" if p == 100 else f"{p:g}%"
    if not ticks:
        say(ax, "no latency histogram recorded")
        return
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sorted(ticks), [ticks[x] for x in sorted(ticks)], fontsize="x-small")
    ax.xaxis.set_minor_locator(NullLocator())
    label_log_axis(ax.yaxis)
    ax.set_xlabel("percentile (HdrHistogram's axis: 1 / (1 - p))")
    ax.set_ylabel("latency (ms, log scale)")
    _legend(ax)


draw_latency_spectrum.time_axis = False
