"""summary.json's round-trip blocks: the measured round trip (``round_trip``), round trips per job
(``round_trips``) and the claim's and completion's latencies split into server execution and the rest
(``latency_split``); and their terminal lines. The definitions: docs/network.md, "The round trip and where a
claim's time goes"."""

from __future__ import annotations

from bench.measure import metrics
from bench.run_summary.facts import Figures

#: The minimum path of a batch: what the protocol needs, the built-in queue's claim and one completion of the
#: whole batch (``complete_many``), one round trip each.
MINIMUM_ROUND_TRIPS_PER_BATCH = 2
#: What a latency is beside its server execution: the commit's WAL flush is not in the statement's time.
REST_LABEL = "network, client and commit"
#: Why round trips are not counted under a queue library's own worker.
LIBRARY_NOT_COUNTED = ("a queue library's own worker sends its SQL through its own driver: its round trips are "
                       "not counted at the tool's seam")


def _ratio(numerator: float, denominator: float, digits: int = 3) -> float | None:
    return round(numerator / denominator, digits) if denominator else None


def round_trips_per_job(counters, batch: int) -> dict:
    """Round trips per job, defined once: every round trip the workers' sessions sent in the measured window
    (claims, empty ones and NOWAIT retries included, completions, ``fail``, effects, ``BEGIN``/``COMMIT``,
    ``ROLLBACK``, a stateless session's ``SET LOCAL``s) over the jobs completed in it; beside it the minimum path
    (:data:`MINIMUM_ROUND_TRIPS_PER_BATCH` / ``batch``), the round trips timed in the claims and completions per
    call, and the producers' per job produced (their inserts). ``counters``: the window's counters."""
    return {"per_job": _ratio(counters["worker_round_trips"], counters["jobs_completed"]),
            "minimum_per_job": round(MINIMUM_ROUND_TRIPS_PER_BATCH / batch, 3),
            "worker_round_trips": counters["worker_round_trips"],
            "per_claim": _ratio(counters["claim_round_trips"], counters["claims"]),
            "per_completion": None,  # filled by round_trip_figures (the completions are a histogram's count)
            "producer_per_job": _ratio(counters["producer_round_trips"], counters["jobs_produced"]),
            "not_measured": None}


def _split(mean_us: float | None, server_us: float | None, round_trips: float | None, rtt_mean_us: float | None,
           why: str | None) -> dict:
    """One latency's split: its client mean, the server's execution per call, the rest (``mean - server``), and
    the network's estimate (the probe's mean round trip × round trips per call); means with means."""
    network = round(rtt_mean_us * round_trips, 1) if rtt_mean_us is not None and round_trips is not None else None
    server = round(server_us, 1) if server_us is not None and mean_us is not None else None
    return {"mean_us": mean_us, "server_us": server,
            "rest_us": round(mean_us - server, 1) if server is not None else None,
            "round_trips": round_trips, "network_us": network,
            "not_measured": None if server is not None else (why or "no calls in the window")}


def round_trip_figures(f: Figures) -> dict:
    """``round_trip``, ``round_trips`` and ``latency_split`` of summary.json (docs/results.md)."""
    facts, counters = f.facts, f.counters
    probe = facts.round_trip
    rtt = dict(probe) if probe else {"not_measured": "no round-trip probe ran"}
    completions = f.complete_h.get_total_count()
    trips = round_trips_per_job(counters, facts.cfg.batch)
    trips["per_completion"] = _ratio(counters["complete_round_trips"], completions)
    if facts.cfg.library_mode == "worker":
        trips = {key: None for key in trips} | {"not_measured": LIBRARY_NOT_COUNTED,
                                                "minimum_per_job": trips["minimum_per_job"]}
    pgss = facts.run_info.get("pg_stat_statements") or {}
    why = pgss.get("unavailable")
    rtt_mean = rtt.get("mean_us")
    claim_mean = metrics.latency_summary(f.claim)["mean"]
    complete_mean = metrics.latency_summary(f.complete_h)["mean"]
    claim_server = pgss["mean_ms"] * 1000 if pgss.get("mean_ms") is not None else None
    complete_server = (pgss["completion_exec_ms"] * 1000 / completions
                       if pgss.get("completion_exec_ms") is not None and completions else None)
    split = {"claim": _split(claim_mean, claim_server, trips["per_claim"], rtt_mean, why),
             "complete": _split(complete_mean, complete_server, trips["per_completion"], rtt_mean,
                                why or pgss.get("completion_unavailable")),
             "rest_label": REST_LABEL}
    return {"round_trip": rtt, "round_trips": trips, "latency_split": split}


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.3f} ms"


def round_trip_lines(s: dict) -> list[str]:
    """The terminal's lines for the three blocks (none for a summary without them)."""
    rtt, trips, split = s.get("round_trip"), s.get("round_trips"), s.get("latency_split")
    lines = []
    if rtt is not None:
        lines.append(f"round trip: not measured ({rtt['not_measured']})" if "not_measured" in rtt else
                     f"round trip (empty query every {rtt['period_ms']:g} ms"
                     f"{' (back to back: each took longer)' if (rtt['p50_us'] or 0) > rtt['period_ms'] * 1000 else ''}"
                     " on its own connection, the workers' path): "
                     f"p50 {_ms(rtt['p50_us'])}, p99 {_ms(rtt['p99_us'])}, mean {_ms(rtt['mean_us'])} "
                     f"({rtt['samples']} sample{'' if rtt['samples'] == 1 else 's'}"
                     f"{', %d failed' % rtt['errors'] if rtt['errors'] else ''})")
    if trips is not None:
        if trips["not_measured"]:
            lines.append(f"round trips per job: not measured ({trips['not_measured']})")
        else:
            producers = ("" if trips["producer_per_job"] is None
                         else f"; producers {trips['producer_per_job']:g} per job produced")
            lines.append(f"round trips per job: {_num(trips['per_job'])} (minimum path {trips['minimum_per_job']:g}; "
                         f"{_num(trips['per_claim'])} per claim, {_num(trips['per_completion'])} per completion"
                         f"{producers})")
    for name, label in (("claim", "claim"), ("complete", "completion")) if split else ():
        part = split[name]
        if part["mean_us"] is None:
            continue
        network = "" if part["network_us"] is None else (
            f"; network about {_ms(part['network_us'])} = {part['round_trips']:g} round trip"
            f"{'' if part['round_trips'] == 1 else 's'} × the mean round trip")
        if part["server_us"] is None:
            lines.append(f"time per {label}: mean {_ms(part['mean_us'])}, server execution not measured "
                         f"({part['not_measured']}){network}")
        else:
            lines.append(f"time per {label}: mean {_ms(part['mean_us'])} = server execution {_ms(part['server_us'])}"
                         f" + {split['rest_label']} {_ms(part['rest_us'])}{network}")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
