"""The run report's wait-events part: the table of where the sampled backends' active time went and one figure,
the active backends by wait event type each second (docs/network.md, "Where the server's time goes: wait
events"); a run without ``summary.json`` ``wait_events`` (written before they were sampled) has neither."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from bench.report.format import fmt_num
from bench.report.render import legend_above, say
from bench.results.wait_event_columns import CPU, OTHER_COLUMN, TYPE_COLUMNS

__all__ = ["WAIT_FIGURES", "wait_event_rows"]

#: Each type's colour in the figure (CPU green, locks red, I/O blue), the rest after them.
_COLOURS = {CPU: "C2", "Lock": "C3", "LWLock": "C1", "IO": "C0", "IPC": "C4", "Client": "C7", "Timeout": "C5",
            "BufferPin": "C6", "Extension": "C8", "other": "C9"}


def _pct(share) -> str:
    return fmt_num(None if share is None else share * 100, 1, "%")


def wait_event_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, value) rows of the wait events' table; one row saying why where they were not measured; [] for a
    run written before they were sampled."""
    w = summary.get("wait_events")
    if not w:
        return []
    if not w["measured"]:
        return [("wait events", w["not_measured"])]
    rows = [("backends sampled", f"{w['backends']}, {fmt_num(1 / w['sample_every_s'])} samples a second, "
                                 f"{fmt_num(w['samples'])} samples in the window"),
            ("their samples running a statement (active)", f"{_pct(w['active_share'])} of {fmt_num(w['backend_samples'])}"
                                                            f" (mean active backends {fmt_num(w['mean_active_backends'], 2)})"),
            ("by wait event type, share of the active samples",
             ", ".join(f"{name} {_pct(share)}" for name, share in w["by_type"].items()) or "no active sample")]
    rows += [(f"  {e['event']}", f"{_pct(e['share'])} ({fmt_num(e['samples'])} samples)") for e in w["top_events"]]
    rows.append(("the samples' queries, time per second (inside the monitor's)",
                 fmt_num(None if w["query_us_per_s"] is None else w["query_us_per_s"] / 1000, 2, "ms per s")))
    return rows


def draw_wait_events(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:  # noqa: ARG001
    """The sampled backends active in each second, stacked by wait event type (mean backends over the second's
    samples), one bar a second; a second without a sample has no bar."""
    columns = {**{name: column for name, column in TYPE_COLUMNS.items()}, "other": OTHER_COLUMN}
    shown = {name: column for name, column in columns.items() if column in df and df[column].fillna(0).gt(0).any()}
    if not shown:
        say(ax, "no active backend sampled" if "wait_samples" in df and df["wait_samples"].fillna(0).gt(0).any()
            else "the wait events were not sampled")
        return
    bottom = pd.Series(0.0, index=df.index)
    handles = []
    for name, column in shown.items():
        values = df[column].fillna(0.0)
        handles.append(ax.bar(df["t_s"], values, width=1.0, bottom=bottom, color=_COLOURS[name], label=name,
                              align="edge", linewidth=0))
        bottom = bottom + values
    ax.set_ylabel("active backends (mean)")
    ax.set_ylim(bottom=0)
    legend_above(ax, handles, ncol=len(handles))


#: (file name, title, caption, drawing function) of the wait events' figure.
WAIT_FIGURES = (
    ("wait_events", "Where the server's time goes: wait events",
     "The sampled backends running a statement (pg_stat_activity state active), ten samples a second, by what each "
     "was waiting for (wait_event_type, https://www.postgresql.org/docs/current/monitoring-stats.html#WAIT-EVENT-TABLE): "
     "the mean number in each state over the second's samples. CPU is an active backend with no wait event: on a "
     "core or runnable. A backend idle between statements (waiting for its client: Client:ClientRead on an idle "
     "backend) is not counted; that is the client's and the network's time. Without a pooler the workers' backends; "
     "behind one every server connection of the pool (they serve workers, producers and the reaper alike).",
     draw_wait_events),
)
