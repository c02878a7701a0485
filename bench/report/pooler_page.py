"""The run report's pooler part (a run behind a pooler): its table rows and one figure, the pool each second
(docs/poolers.md, "Reading the pooler figures"); nothing without ``summary.json`` ``pooler``. PgBouncer keeps no
distribution of the waits: its wait figures are means and maxima, labelled so, never percentiles."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from bench.report.format import fmt_num
from bench.report.render import legend_above, say

__all__ = ["POOLER_FIGURES", "pooler_rows"]


def _ms(us) -> str:
    return fmt_num(None if us is None else us / 1000, 3, "ms")


def pooler_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, value) rows of the pooler section; [] without a pooler."""
    p = summary.get("pooler")
    if not p:
        return []
    console = p.get("console") or {}
    rows = [("pooler", f"{p['embedded'] or 'yours'}, POOL_MODE {p['pool_mode']}"),
            ("detection (through it, without its console)", p.get("detection") or "not run (the embedded pooler's "
                                                                                   "mode is known)"),
            ("its console", f"not read ({console['error']})" if "error" in console else
             f"{console['version']}, pool_mode {console['pool_mode']}, default_pool_size {console['pool_size']}, "
             f"max_client_conn {console['max_client_conn']}" if console else "not given (POOLER_ADMIN_DSN)")]
    rows += [("pool mode disagrees", text) for text in p.get("mode_disagrees") or []]
    if not p["measured"]:
        return rows + [("pooler figures", p["not_measured"])]
    def spread(d: dict) -> str:
        return f"{fmt_num(d['mean'], 1)} / {fmt_num(d['max'])}"
    cpu = p.get("cpu_pct")
    return rows + [
        ("clients active (mean / max)", spread(p["clients_active"])),
        ("clients waiting for a server connection (mean / max)", spread(p["clients_waiting"])),
        ("seconds with a client waiting", f"{p['seconds_with_waiting']} of {p['seconds_sampled']}"),
        ("oldest wait now (maxwait), largest sample", _ms(p["maxwait_us_max"])),
        ("mean wait per transaction (no percentile: PgBouncer keeps none)", _ms(p["wait_mean_us"])),
        ("server connections active (mean / max)", spread(p["server_active"])),
        ("server connections idle (mean / max)", spread(p["server_idle"])),
        ("server connections idle awaiting a check (sv_used), max", fmt_num(p["server_used_max"])),
        ("server connections, all states, max", fmt_num(p["server_conns_max"])),
        ("transactions / queries through it", f"{fmt_num(p['transactions'])} / {fmt_num(p['queries'])}"),
        ("mean transaction time / mean query time (the pooler's)", f"{_ms(p['xact_mean_us'])} / "
                                                                   f"{_ms(p['query_mean_us'])}"),
        ("the pooler's CPU, % of a core (mean / max)", p["cpu_not_measured"] if cpu is None else
         f"{fmt_num(cpu['mean'], 1)} / {fmt_num(cpu['max'], 1)} (limit {fmt_num(p['cpu_limit_pct'])}: one core is "
         "all PgBouncer uses)"),
        ("console reads failed", fmt_num(p["sampler_errors"]))]


def draw_pool(ax: plt.Axes, df: pd.DataFrame, summary: dict) -> None:
    """Clients waiting for a server connection and server connections active, per second (counts), with the
    pool size as a line when known."""
    if "pooler_cl_waiting" not in df or df["pooler_cl_waiting"].isna().all():
        say(ax, "the pooler was not sampled")
        return
    handles = [ax.plot(df["t_s"], df["pooler_cl_waiting"], color="C3", label="clients waiting (cl_waiting)")[0],
               ax.plot(df["t_s"], df["pooler_sv_active"], color="C0", label="server connections active (sv_active)")[0]]
    size = ((summary.get("pooler") or {}).get("console") or {}).get("pool_size")
    if size is not None:
        handles.append(ax.axhline(size, color="C7", linestyle=":", label=f"pool size ({size})"))
    ax.set_ylabel("connections")
    ax.set_ylim(bottom=0)
    legend_above(ax, handles, ncol=3)


#: (file name, title, caption, drawing function) of the pooler's figure, after the run's own.
POOLER_FIGURES = (
    ("pooler_pool", "Pool: clients waiting, servers active",
     "The pooler's pool at the middle of each second (PgBouncer's SHOW POOLS, https://www.pgbouncer.org/usage.html): "
     "clients waiting for a server connection (cl_waiting) and server connections running a client's transaction "
     "(sv_active), with the pool size (default_pool_size, SHOW CONFIG). Server connections all active with "
     "clients waiting is a pool that sets the pace; clients waiting with server connections idle is not.",
     draw_pool),
)
