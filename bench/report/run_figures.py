"""The run report's figures: which plots, in what order, with what captions, drawn to PNG on fresh axes (time
on x, a grid, the fault windows shaded) and written to the run's ``plots/``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib.pyplot as plt
import pandas as pd

from bench.report.pooler_page import POOLER_FIGURES
from bench.report.replica_page import REPLICA_FIGURES
from bench.report.wait_events_page import WAIT_FIGURES
from bench.report.render import LABEL_BOX, new_figure, save_png, say, write_plot
from bench.report.run_format import engine_capability
from bench.results.histograms import read_hlog, spectrum
from bench.results.model import read_table
from bench.results.failover_line import event_times
from bench.report.run_plots import (
    SPECTRUM_SERIES, draw_latency_spectrum, draw_claim_latency, draw_claim_vs_table, draw_dead_tuples, draw_history_list, draw_lock_queue, draw_locks_running, draw_loop_lag,
    draw_oldest_age, draw_priority_ages, draw_throughput,
)

__all__ = ["FIGURES", "draw_figure", "figure_label", "run_figures"]

X_LABEL = "time since measured start (s)"


def run_figures(run_dir: Path, intervals: pd.DataFrame, summary: dict) -> list[dict]:
    """Draw every figure of the run report (:data:`FIGURES`, then the per-priority ages when
    ``priority_ages.csv`` exists) from ``intervals`` and ``summary``, each written to
    ``run_dir/plots/<name>.png``; returns one ``{"name", "title", "caption", "data_uri"}`` per figure, in
    report order (``data_uri``: the PNG as a base64 data URI)."""
    figures = []
    vacuum = engine_capability(summary, "vacuum")  # else old row versions are an undo log's history list
    figure_specs = [HISTORY_LIST if spec[0] == "dead_tuples" and not vacuum else spec for spec in FIGURES]
    if (run_dir / "priority_ages.csv").is_file():
        by_priority = read_table(run_dir, "priority_ages.csv", summary)
        figure_specs.append((
            "oldest_age_by_priority", "Oldest eligible age per priority",
            "Age of the oldest eligible job of each priority, sampled with the oldest-age query. A "
            "priority whose line climbs while another stays flat is being starved by the higher one "
            "(lower number = claimed first); gaps are seconds without a sample.",
            lambda ax, df, summ: draw_priority_ages(ax, by_priority, df["t_s"])))
    if summary.get("migrations"):
        figure_specs.append(LOCK_QUEUE)
    figure_specs.append(_spectrum_spec(run_dir, bool(summary.get("offered_rate_jobs_per_s"))))
    if summary.get("replica"):
        figure_specs += REPLICA_FIGURES
    if (summary.get("pooler") or {}).get("measured"):
        figure_specs += POOLER_FIGURES
    if (summary.get("wait_events") or {}).get("measured"):
        figure_specs += WAIT_FIGURES
    for name, title, caption, draw in figure_specs:
        if name == "oldest_age" and not summary.get("offered_rate_jobs_per_s"):
            caption = caption.replace(OPEN_LOOP_AGE_SENTENCE, CLOSED_LOOP_AGE_SENTENCE)
        png = save_png(draw_figure(draw, intervals, summary, f"{title}: {figure_label(summary)}"))
        figures.append({"name": name, "title": title, "caption": caption,
                        "data_uri": write_plot(run_dir / "plots", name, png)})
    return figures


def _spectrum_spec(run_dir: Path, open_loop: bool) -> tuple[str, str, str, Callable]:
    """The percentile-spectrum figure from ``histograms/*.hlog`` (the whole measured window); pickup only with
    arrivals (``open_loop``)."""
    spectra = {}
    for name, _ in SPECTRUM_SERIES:
        if name == "pickup_latency_us" and not open_loop:
            continue
        hist = read_hlog(run_dir / "histograms" / f"{name}.hlog")
        if hist is not None:
            spectra[name] = spectrum(hist)

    def draw(ax, df, summary):
        draw_latency_spectrum(ax, spectra)
    draw.time_axis = False
    return ("latency_spectrum", "Latency by percentile",
            "Claim, completion and (with arrivals) pickup latency at each percentile over the measured window, from "
            "the run's HdrHistogram logs (histograms/*.hlog); each step right is ten times rarer. A line that "
            "bends up at the right is a tail a p99 alone hides.", draw)


def figure_label(summary: dict) -> str:
    """What every figure's title says after its own, the design and the run ('skip_locked, batch 1, partial
    index, 10 workers, run <id>')."""
    c = summary.get("config") or {}
    return (f"{c.get('policy')}, batch {c.get('batch')}, {c.get('index')} index, {c.get('workers')} workers, "
            f"run {summary.get('run_id')}")


def draw_figure(draw: Callable[[plt.Axes, pd.DataFrame, dict], None], df: pd.DataFrame, summary: dict,
                title: str) -> plt.Figure:
    """Run one figure-drawing function on fresh axes (9 × 3.8 in at 100 dpi) titled ``title``; returns the
    figure (the caller saves and closes it; it is closed here when drawing fails)."""
    fig, ax = new_figure(9, 3.8)
    fig.suptitle(title, fontsize="small", color="#333")
    try:
        ax.set_xlabel(X_LABEL)
        ax.grid(True, alpha=0.3)
        if df.empty:
            say(ax, "no per-second data recorded")
        ax.margins(x=0.015)
        draw(ax, df, summary)
        time_axis = getattr(draw, "time_axis", True)  # False: x is not the measured window's time
        if not df.empty and time_axis:  # the whole measured window, even when a series has few points
            ax.set_xlim(df["t_s"].min() - 0.3, df["t_s"].max() + 0.3)
        faults = (summary.get("faults") or []) if time_axis else []
        for i, fault in enumerate(faults):  # shade each fault window
            ax.axvspan(fault["start_s"], fault["end_s"], color=f"C{(i % 4) + 6}", alpha=0.12, zorder=0)
            # windows that start close together (within a tenth of the axis) get their labels one below the other
            near_s = 0.1 * (ax.get_xlim()[1] - ax.get_xlim()[0])
            row = sum(1 for f in faults[:i] if abs(f["start_s"] - fault["start_s"]) < near_s)
            ax.text(fault["start_s"], 0.98 - 0.08 * row, f" {fault['kind']}", transform=ax.get_xaxis_transform(),
                    fontsize="x-small", va="top", color="#555", zorder=5, bbox=LABEL_BOX)
        if time_axis:
            _worker_markers(ax, summary.get("worker_changes") or [])
            _failover_markers(ax, summary.get("failover"))
        return fig
    except BaseException:
        plt.close(fig)
        raise


def _worker_markers(ax: plt.Axes, changes: list[dict]) -> None:
    """A dotted line and a label at each second in which the running workers changed (``worker_changes``)."""
    for change in changes:
        ax.axvline(change["t_s"], color="#333", linestyle=":", linewidth=1.2, zorder=4)
        ax.text(change["t_s"], 0.02, f" {change['workers_before']}\u2192{change['workers']} workers",
                transform=ax.get_xaxis_transform(), fontsize="x-small", va="bottom", color="#333", zorder=5, bbox=LABEL_BOX)


def _failover_markers(ax: plt.Axes, record: dict | None) -> None:
    """A dashed line and a label at the failover's moments (:func:`event_times`): the kill and the promotion,
    or, observed, the old primary's last answer and the new one's first; the WAL receiver's stop when there was one."""
    if not record:
        return
    labels = ("killed", "promoted") if record.get("caused", True) else ("old last seen", "new first seen")
    moments = [*zip(event_times(record), labels), (record.get("wal_receiver_stopped_at_s"), "WAL stop")]
    for t_s, label in moments:
        if t_s is not None:
            ax.axvline(t_s, color="#b22222", linestyle="--", linewidth=1.1, zorder=4)
            ax.text(t_s, 0.10, f" {label}", transform=ax.get_xaxis_transform(), fontsize="x-small", va="bottom",
                    color="#b22222", zorder=5, bbox=LABEL_BOX)


#: The oldest-age caption's last sentence with arrivals (RATE), and without: in a closed-loop drain the
#: age is the seeded backlog's, which grows as the workers work through it whatever they do.
OPEN_LOOP_AGE_SENTENCE = "Age rising while depth looks flat means the queue is falling behind."
CLOSED_LOOP_AGE_SENTENCE = ("This run drains a seeded backlog (no RATE): the age is the backlog's oldest job "
                            "ageing as the workers work through it, not the queue falling behind.")

#: (file name, title, caption, drawing function) of each figure every run has; the report shows them
#: in this order (a run with priority_ages.csv has one more, last).
FIGURES: tuple[tuple[str, str, str, Callable], ...] = (
    ("throughput", "Throughput",
     "Jobs completed and claims made in each second of the measured window; the dashed "
     "line is the run's mean throughput. Dips show stalls. Empty claims (a claim that returned no "
     "row) are drawn when there were any. In a run that drains a seeded backlog and returns no row "
     "to the queue, a red cross marks each second whose empty claims came back while rows were "
     "certainly pending (the pending rows the audit found at the end plus the jobs claimed later: "
     "summary.json empty_claims_while_work_waited, field case FR-07).",
     draw_throughput),
    ("claim_latency", "Claim latency",
     "Per-second p50/p95/p99 of claim latency in ms (lock waits included); gaps are seconds "
     "with no claims. A widening p99 over p50 means some claims queue behind locks. Dotted: the round trip the "
     "run's probe measured each second (p50), the part of every claim no server can shorten (docs/network.md).",
     draw_claim_latency),
    ("claim_vs_table", "Claim latency against table size",
     "Each second's claim p50 and p99 against the queue table's size in that second (PostgreSQL: its live + "
     "dead tuples; MariaDB: InnoDB's estimate of its rows, which includes no old row versions). "
     "A flat cloud means the claim's cost does not depend on the table; a rising one means every "
     "claim reads more as the table grows (a plan that scans the table, or dead index entries it "
     "steps over) and the run's figures depend on how long it ran.",
     draw_claim_vs_table),
    ("loop_lag", "Load generator event-loop lag",
     "How late a 10 ms timer in the load generator fired, p99 of each second. Every latency the "
     "generator measures ends when its greenlet runs again, so it can be inflated by this much; a "
     "generator waiting for a core shows it here even while its CPU reads low. The dashed line is "
     "the run's suspect limit for the window's p99 (loop_lag_limit_us; the rule is in docs/reading-the-report.md).",
     draw_loop_lag),
    ("oldest_age", "Oldest eligible age and queue depth",
     "Age of the oldest eligible job (left axis, the queue's lag) and eligible rows waiting "
     "(right axis, an exact count taken as often as its cost stays within 2 % of the time); "
     "gaps in the age line are seconds the monitor missed, gaps in the depth line seconds it was not "
     "counted (no line is drawn through them). " + OPEN_LOOP_AGE_SENTENCE,
     draw_oldest_age),
    ("locks_running", "Lock waiters and running jobs",
     "Sessions waiting on a lock, sampled each second (PostgreSQL: a heavyweight lock wait: row, transaction or "
     "relation extension; MariaDB: transactions waiting for an InnoDB row or gap lock) and jobs in the running state (counted "
     "as often as the count's cost allows; with TXN=hold the claim is not committed while the job "
     "runs, so other sessions, the monitor included, see no running rows). Lock "
     "waiters above zero for long stretches point to a convoy; gaps are seconds without a sample or count. "
     "With WAKEUP=notify the dotted line counts the commits waiting on the lock that a committing transaction "
     "which sent NOTIFY holds (wait event Lock:object, one lock for the whole server, FR-10).",
     draw_locks_running),
    ("dead_tuples", "Dead tuples",
     "Dead row versions in the queue table (pg_stat_user_tables.n_dead_tup, sampled each second; "
     "the statistics lag by up to a second). Every claim and completion leaves one behind until "
     "vacuum removes it; a climbing line means vacuum is not keeping up, or something (a long "
     "transaction) stops it, and claims have to step over them. The dashed line is the age of the "
     "oldest snapshot held in this database (backend_xmin), in transactions: while it grows, vacuum "
     "can remove nothing newer. Gaps in either line are seconds the monitor missed. Triangles along the "
     "bottom mark the seconds a periodic VACUUM started (VACUUM_EVERY_S) and the seconds an autovacuum "
     "of the queue table ended (pg_stat_user_tables.autovacuum_count rose); the note at the top right "
     "gives the size of the claim's index (pg_relation_size), which dead entries at its head make "
     "claims step over until vacuum removes them (FR-12). Shaded bands on "
     "every plot are fault-injection windows (a failover's WAL stop, kill and promotion dashed red lines); a dotted line marks a second in which the number of "
     "running workers changed (the web UI, or a lost load generator process).",
     draw_dead_tuples),
)

#: With a migration window (FAULTS=migration): the lock queue on the queue table.
LOCK_QUEUE = (
    "lock_queue", "Lock queue on the queue table",
    "Requests waiting for a lock on the queue table, by mode (pg_locks, not granted; the most seen at one of "
    "the samples taken every 100 ms in each second; the monitor's own left out; MariaDB's processlist gives no "
    "mode, so there only the stall is drawn), and the migration's stall: the ms of each second in which the "
    "migration held or asked for a lock that blocks the claims while a worker waited for the table (right "
    "axis; the rule is in docs/migrations.md, \"The stall\"). An access exclusive request with row share / row exclusive requests behind it is the "
    "stall: every new claim waits behind the migration, which waits behind the oldest open transaction.",
    draw_lock_queue)

#: On MariaDB the dead-tuples figure is replaced by this one: InnoDB keeps old row versions in its
#: undo log, not in the table, so dead tuples and xmin age have no meaning there (empty columns).
HISTORY_LIST = (
    "history_list_length", "InnoDB history list length",
    "Undo records InnoDB has not purged yet (information_schema.INNODB_METRICS trx_rseg_history_len, "
    "sampled each second). This stands in for PostgreSQL's dead tuples and xmin age, which have no "
    "meaning on InnoDB (their columns are empty, not zero): every claim and completion leaves undo "
    "behind until purge removes it, and an open read view (a long transaction) holds purge back, so a "
    "climbing line means purge is not keeping up or something stops it. Gaps are seconds the monitor "
    "missed. Shaded bands on every plot are fault-injection windows (a failover's WAL stop, kill and promotion dashed red lines); a dotted line marks a second in "
    "which the number of running workers changed (the web UI, or a lost load generator process).",
    draw_history_list)
