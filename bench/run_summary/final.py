"""The lines a run ends with in its log."""

from __future__ import annotations

from bench.measure import seconds
from bench.measure.rss import RSS_REPORTED_MIN
from bench.results.failover_line import failover_line
from bench.results.partition_line import partition_line
from bench.results.values import library_caveat_line
from bench.results.verdict import end_block
from bench.run_summary.measurement_cost import measurement_line
from bench.run_summary.pooler import pooler_line
from bench.run_summary.replica import replica_line
from bench.run_summary.round_trips import round_trip_lines
from bench.run_summary.wait_events import wait_events_line
from bench.usage import setting


def final_lines(log, s: dict) -> None:
    """Log the lines a run ends with: the end block (:func:`bench.results.verdict.end_block`), a queue
    library's SQL-path caveat or own-worker line, RSS, SUSPECT."""
    if not s["measured_s"]:
        log("nothing was measured: the run stopped during the warm-up")
        return
    for line in end_block(s):
        log(line)
    if caveat := library_caveat_line(s):
        log(caveat)
    library = (s.get("queue_definition") or {}).get("library") or {}
    if library.get("mode") == "worker":
        workers = [p for p in s.get("processes") or [] if p.get("role") == "worker"]
        dispatch = s.get("dispatch_delay_us") or {}
        log(f"{library['package']} {library['version']}: its own worker, in {len(workers)} process"
            f"{'es' if len(workers) != 1 else ''} ({sum(1 for p in workers if p.get('lost'))} lost); "
            f"dispatch delay p50 {seconds.fmt_ms(dispatch.get('p50'))}, p99 {seconds.fmt_ms(dispatch.get('p99'))}"
            f" ({setting('library_mode', 'sql')} sends its SQL from the tool's workers instead)")
    if s.get("replica"):
        log(replica_line(s["replica"]))
    if s.get("pooler"):
        log(pooler_line(s["pooler"]))
    for line in round_trip_lines(s):
        log(line)
    for m in s.get("migrations") or []:
        log(migration_line(m))
    for p in s.get("partitions") or []:
        log(partition_line(p))
    if s.get("failover"):
        log(failover_line(s["failover"]))
    if line := wait_events_line(s.get("wait_events")):
        log(line)
    if line := measurement_line(s.get("measurement_cost")):
        log(line)
    rss = s["harness_rss_mb"]
    at = ", ".join(f"{rss[f'at_{m}m']:,.1f} MB at {m} min" for m in RSS_REPORTED_MIN if rss[f"at_{m}m"] is not None)
    growth = "" if rss["growth_mb_per_min"] is None else f", {rss['growth_mb_per_min']:+,.2f} MB per minute"
    log(f"harness RSS {(at + ', ') if at else ''}{rss['end']:,.1f} MB at the end, peak {rss['max']:,.1f} MB{growth}")


def migration_line(m: dict) -> str:
    """One migration window in a line: its attempts and outcome, the stall and the claims it delayed
    (the rule: :mod:`bench.run_summary.migration`)."""
    outcome = (f"done at {m['done_s']:g} s" if m["succeeded"] else "still waiting at the end, cancelled"
               if m["unfinished_at_end"] else f"not done ({m['error'] or 'every attempt timed out'})")
    stall = ("stall and delayed claims " + m["workers_not_measured"] if m.get("workers_not_measured") else
             "stall not sampled" if m["stall_s"] is None else
             f"stall {m['stall_s']} s (longest {m['longest_stall_s']} s), {m['delayed_claims']} claims seen delayed")
    return (f"migration {m['ddl']} ({m['timeout_set']}): {m['attempts']} attempt{'s' if m['attempts'] != 1 else ''}, "
            f"{m['lock_timeouts']} lock timeout{'s' if m['lock_timeouts'] != 1 else ''}, {outcome}; {stall}; {m['claimless_s']} s without a claim")
