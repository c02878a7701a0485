"""The run report's standby part (``REPLICA=1``): its table rows and two figures, replay lag and what the
standby costs the primary (docs/replicas.md); nothing without ``summary.json`` ``replica``."""

from __future__ import annotations

from functools import partial

import matplotlib.pyplot as plt
import pandas as pd

from bench.report.format import fmt_num
from bench.report.render import legend_above, say

__all__ = ["REPLICA_FIGURES", "replica_rows"]

_legend = partial(legend_above, ncol=3)
_CAUSES = ("snapshot", "lock", "bufferpin", "deadlock", "tablespace")


def replica_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, value) rows of the standby section; [] without a standby."""
    r = summary.get("replica")
    if not r:
        return []
    def spread(d: dict, unit: str, decimals: int) -> str:
        return " / ".join(fmt_num(d.get(k), decimals, unit) for k in ("mean", "p95", "max"))
    rows = [("standby", f"{r['source']}; hot_standby_feedback {r['hot_standby_feedback']}, "
                        f"max_standby_streaming_delay {fmt_num(r['max_standby_streaming_delay_s'], 1, 's')}"),
            ("replay lag, bytes (mean / p95 / max)", spread(r["lag_bytes"], "B", 0)),
            ("replay lag, seconds (mean / p95 / max)", spread(r["lag_s"], "s", 3)),
            ("standby cancellations by cause", ", ".join(f"{c} {r['conflicts'][c]}" for c in _CAUSES)),
            ("primary: dead tuples of the queue table, max", fmt_num(r["primary_dead_tuples_max"])),
            ("primary: xmin age the standby holds, max", fmt_num(r["primary_xmin_age_max"]))]
    if r["readers"]:
        rows += [("readers", f"{r['readers']} in REPEATABLE READ transactions of {fmt_num(r['reader_s'], 1, 's')}"),
                 ("reader queries / cancelled / other errors",
                  f"{r['reads']:,} / {r['read_cancels']:,} / {r['read_errors']:,}"),
                 ("reader query p99, worst second", fmt_num(r["read_p99_us_max"] and r["read_p99_us_max"] / 1000, 3, "ms")),
                 ("stale reads", f"not counted: {r['stale_reads_not_counted']}"
                  if r["stale_reads"] is None else f"{r['stale_reads']:,}")]
    return rows


def draw_replica_lag(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:  # noqa: ARG001
    """Replay lag in bytes (left) and seconds (right), per second."""
    if "replica_lag_bytes" not in df or df["replica_lag_bytes"].isna().all():
        say(ax, "no standby sample")
        return
    (a,) = ax.plot(df["t_s"], df["replica_lag_bytes"] / 1e6, color="C0", label="replay lag (MB of WAL, left)")
    ax.set_ylabel("replay lag (MB)")
    right = ax.twinx()
    (b,) = right.plot(df["t_s"], df["replica_lag_s"], color="C1", linestyle="--", label="replay lag (s, right)")
    right.set_ylabel("replay lag (s)")
    _legend(ax, [a, b])


def draw_replica_primary(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:  # noqa: ARG001
    """The primary's dead tuples in the queue table (left), the xmin age the standby holds (right), and the
    standby's cancellations (markers at the bottom)."""
    handles = [ax.plot(df["t_s"], df.get("dead_tuples"), color="C4", label="primary: dead tuples (left)")[0]]
    ax.set_ylabel("dead tuples (rows)")
    if "replica_xmin_age" in df and df["replica_xmin_age"].notna().any():
        right = ax.twinx()
        handles.append(right.plot(df["t_s"], df["replica_xmin_age"], color="C5", linestyle="--",
                                  label="xmin age held by the standby (right)")[0])
        right.set_ylabel("xmin age (transactions)")
    cancels = sum(df.get(f"replica_conflicts_{c}", pd.Series(dtype=float)).fillna(0) for c in _CAUSES)
    if isinstance(cancels, pd.Series) and cancels.sum() > 0:
        hit = df.loc[cancels > 0, "t_s"]
        handles.append(ax.scatter(hit, [0] * len(hit), marker="v", color="C3", label="standby cancellations"))
    _legend(ax, handles)


#: (file name, title, caption, drawing function) of the standby's figures, after the run's own.
REPLICA_FIGURES = (
    ("replica_lag", "Standby replay lag",
     "Replay lag each second: the WAL bytes between the primary's current position and the standby's replay "
     "position (pg_wal_lsn_diff, the standby read first), and in seconds the standby's now() - "
     "pg_last_xact_replay_timestamp() (0 when replay has reached the primary). A line climbing one second per "
     "second is replay waiting for a reader's query that conflicts with it, up to max_standby_streaming_delay.",
     draw_replica_lag),
    ("replica_primary", "What the standby holds on the primary",
     "Dead row versions in the primary's queue table (pg_stat_user_tables.n_dead_tup) and the age of the xmin "
     "the standby's feedback holds (pg_stat_replication.backend_xmin; empty with hot_standby_feedback off). "
     "With feedback on the readers' long snapshots keep vacuum from removing dead rows on the primary; with it "
     "off the standby cancels the readers instead (triangles: seconds with cancellations, "
     "pg_stat_database_conflicts). FR-02 seen from a replica.",
     draw_replica_primary),
)
