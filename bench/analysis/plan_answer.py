"""A capacity plan's answer, from its ``plan.json`` records alone: the cheapest design that meets the SLO (ties within
noise, :data:`HEADROOM_NOISE`, to the simpler design; docs/capacity-plan.md), its sentence, or the closest miss."""

from __future__ import annotations

import math
from typing import Any, Mapping

from bench.errors import EXIT_OK, EXIT_SLO, EXIT_SUSPECT, first_status
from bench.results.values import fmt_sig
from bench.usage import option, setting

#: Headroom rates within 15 % of each other are not told apart (the plan's repeatability goal).
HEADROOM_NOISE = 0.15
WORKERS_NOISE = 0.10
#: The share of the database server's cores the cost estimate sizes for: a planning choice, not a measurement,
#: printed in the sentence beside the cores busy at 100 % so a reader can redo it at their own (docs/capacity-plan.md).
DB_CPU_UTILISATION = 0.70


def short_design(config: Mapping[str, Any]) -> str:
    """'skip_locked, batch 1, partial index' (with the queue's name when it is not the built-in one)."""
    queue = config.get("queue")
    named = "" if queue in (None, "builtin") else f"queue {queue}: "
    return f"{named}{config['policy']}, batch {config['batch']}, {config['index']} index"


def _ties(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    wa, wb = a["workers"]["needed"], b["workers"]["needed"]
    ha, hb = a["headroom"]["rate_jobs_per_s"], b["headroom"]["rate_jobs_per_s"]
    return abs(wa - wb) <= max(1, math.floor(WORKERS_NOISE * max(wa, wb))) and abs(ha - hb) <= HEADROOM_NOISE * max(ha, hb)


def _step_at(record: Mapping[str, Any], workers: int) -> Mapping[str, Any]:
    return next(s for s in record["workers"]["steps"] if s["workers"] == workers)


def slo_at(step: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each objective at a step, the worst repetition's value: ``[{"key", "threshold_text", "measured",
    "measured_text", "status"}]`` (status ``fail`` when one repetition failed, ``inconclusive`` when one was)."""
    rows: dict[str, dict[str, Any]] = {}
    for run in step["runs"]:
        for o in (run.get("slo") or {}).get("objectives", []):
            worse = o["measured"] is not None and (
                o["key"] not in rows or rows[o["key"]]["measured"] is None
                or (o["measured"] > rows[o["key"]]["measured"] if o["op"] == "<=" else o["measured"] < rows[o["key"]]["measured"]))
            order = {"pass": 0, "inconclusive": 1, "fail": 2}
            status = max(o["status"], rows.get(o["key"], {}).get("status", "pass"), key=order.get)
            if o["key"] not in rows or worse:
                rows[o["key"]] = dict(o)
            rows[o["key"]]["status"] = status
    return list(rows.values())


def _slo_text(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['key']} {r['measured_text']} (SLO {r['threshold_text'].split(r['op'])[1]})" for r in rows)


def choose(designs: list[Mapping[str, Any]], target_rate: float,
           confirmations: list[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The plan's answer (:func:`_choose`) with ``vacuum_note`` (:func:`vacuum_note`)."""
    return {**_choose(designs, target_rate, confirmations), "vacuum_note": vacuum_note(designs, confirmations),
            "network_note": network_note(designs, confirmations)}


def _steps(designs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every step of ``designs``' workers and headroom searches, in order."""
    return [s for d in designs for part in ("workers", "headroom") for s in (d.get(part) or {}).get("steps", [])]


def _runs(designs: list[Mapping[str, Any]], confirmations: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for s in [*_steps(designs), *confirmations] for r in s.get("runs") or []]


def network_note(designs: list[Mapping[str, Any]], confirmations: list[Mapping[str, Any]] = ()) -> str | None:
    """'measured across a round trip of … ms (p50 …)': the round trip the plan's runs measured between their
    workers and the database (each run's ``round_trip_p50_us``; the delay relay's setting when it ran), which the
    answer holds for; None when no run measured one (docs/network.md)."""
    runs = _runs(designs, confirmations)
    p50s = sorted(r["round_trip_p50_us"] for r in runs if r.get("round_trip_p50_us") is not None)
    if not p50s:
        return None
    low, high = fmt_sig(p50s[0] / 1000), fmt_sig(p50s[-1] / 1000)
    span = f"{low} ms" if low == high else f"{low}–{high} ms"
    delays = sorted({r["net_delay_ms"] for r in runs if r.get("net_delay_ms") is not None})
    relay = f", through the delay relay at {setting('net_delay_ms', f'{delays[0]:g}')} each way" if len(delays) == 1 else ""
    return (f"measured across a round trip of {span} between the workers and the database (p50 of each run's "
            f"probe{relay}); a job pays it on every statement, so across a longer round trip the same rate needs "
            f"more workers")


def connections_note(runs: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The connections the answer's runs needed against what the server had (docs/capacity-plan.md, "Connections in
    the answer"): ``{"needed", "available", "max_connections", "reserved", "in_use", "embedded", "room_for_workers",
    "sentence"}`` from the first of ``runs`` (the step or confirmation the answer is read from) whose record has
    ``connections`` (:func:`bench.plan.steps.connections_of`); None when none has."""
    found = next((r["connections"] for r in runs if r.get("connections")), None)
    if found is None:
        return None
    room, needed = found["room"], found["needed"]
    spare = room["available"] - needed["server"] + 1  # the admin connection was already in use when it was read
    reserved = f" − {room['reserved']} reserved" if room["reserved"] else ""
    server = (f"the plan's own embedded server had {room['available']} free (max_connections "
              f"{room['max_connections']}{reserved} − {room['in_use']} in use), which says nothing of yours: "
              f"check that yours has {needed['server']} free"
              if found["embedded"] else
              f"the server had {room['available']} free as the run started (max_connections {room['max_connections']}"
              f"{reserved} − {room['in_use']} in use): "
              + (f"{spare} to spare" if spare >= 0 else f"{-spare} short"))
    return {"needed": needed["server"], "clients": needed["clients"], "direct": needed["direct"],
            "available": room["available"], "max_connections": room["max_connections"], "reserved": room["reserved"],
            "in_use": room["in_use"], "embedded": found["embedded"], "spare": None if found["embedded"] else spare,
            "sentence": f"{needed['sentence']}, the tool's own among the direct ones; {server}"}


def vacuum_note(designs: list[Mapping[str, Any]], confirmations: list[Mapping[str, Any]] = ()) -> str | None:
    """'autovacuum never runs on this server (autovacuum = off), …' when a run of the plan recorded that the
    server's settings kept autovacuum from the queue table (its record's ``autovacuum_never_runs``), else None."""
    runs = _runs(designs, confirmations)
    blocked = next((r["autovacuum_never_runs"] for r in runs if r.get("autovacuum_never_runs")), None)
    if blocked is None:
        return None
    return (f"autovacuum never runs on this server ({blocked}), whatever the queue table's autovacuum_enabled "
            f"says: each step's dead rows stayed until it ended, unless {option('vacuum_every_s')} vacuumed them")


def _choose(designs: list[Mapping[str, Any]], target_rate: float,
            confirmations: list[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The plan's answer: ``{"met", "exit_status", "design_index", "workers", "headroom", "slo", "sentence",
    "harness_note", "unmeasured", …}``; ``confirmations``: the confirmation runs made, in order (the last decides).
    What it claims is :func:`what_passed`'s. A design whose search stopped at a step that could not be measured
    (``unmeasured``) makes the plan's status :data:`bench.errors.EXIT_SUSPECT`: the plan cannot say whether it
    met the SLO, nor that the answer is the cheapest."""
    met = [i for i, d in enumerate(designs) if (d.get("workers") or {}).get("needed") and d.get("headroom")]
    confirmation = confirmations[-1] if confirmations else None
    note = harness_note(designs, confirmation)
    stops = [(d, what_passed(d)["unmeasured"]) for d in designs if d.get("workers")]
    stops = [(d, stop) for d, stop in stops if stop]
    stopped_text = " ".join(_unmeasured_sentence(d, stop, target_rate) for d, stop in stops)
    if not met and stops:
        others = "" if len(stops) == len(designs) else f" No other design met the SLO at {fmt_sig(target_rate)} jobs/s."
        return {"met": False, "exit_status": EXIT_SUSPECT, "design_index": None, "sentence": stopped_text + others,
                "slo": [], "unmeasured": [stop for _, stop in stops], "harness_note": note}
    if not met:
        return {"met": False, "exit_status": EXIT_SLO, "design_index": None, **_closest(designs, target_rate),
                "harness_note": note, "unmeasured": []}
    ranked = sorted(met, key=lambda i: (designs[i]["workers"]["needed"], -designs[i]["headroom"]["rate_jobs_per_s"]))
    tied = [i for i in ranked if _ties(designs[i], designs[ranked[0]])]
    best = min(tied, key=lambda i: (designs[i]["batch"] != 1, designs[i]["policy"] != "skip_locked", ranked.index(i)))
    d, claim = designs[best], what_passed(designs[best], confirmations)
    at = confirmation if claim["confirmed"] else _step_at(d, claim["workers_from_steps"])
    rows = slo_at(at)
    status = EXIT_SUSPECT if claim["unmeasured"] else EXIT_SLO if claim["confirmed"] is False else EXIT_OK
    sentence = _sentence(d, claim, rows, target_rate, confirmation)
    if stops:  # the answer stands for the designs measured; the others were not compared
        status, sentence = first_status([status, EXIT_SUSPECT]), f"{sentence} Not compared: {stopped_text}"
    return {"met": claim["confirmed"] is not False, "exit_status": status,
            "design_index": best, "label": d["label"], **claim, "slo": rows,
            "slo_from": f"the {_seconds(at)} confirmation at {at['workers']} workers" if claim["confirmed"]
            else f"{_steps_text(d, at['workers'])} at {at['workers']} workers",
            "sentence": sentence, "harness_note": note, "cost": cost_estimate(at["runs"], target_rate),
            "connections": connections_note(at["runs"]),
            "unmeasured": [stop for _, stop in stops] + ([claim["unmeasured"]] if claim["unmeasured"] else [])}


def answer_lines(answer: Mapping[str, Any]) -> list[str]:
    """The answer as the terminal prints it: its sentence first (so an unconfirmed answer's first word says so),
    then ``cost: …``, ``connections: …`` and ``note: …`` lines (the harness's, the server's autovacuum) when it has them."""
    return [answer["sentence"], *([f"cost: {answer['cost']['sentence']}"] if answer.get("cost") else []),
            *([f"connections: {answer['connections']['sentence']}"] if answer.get("connections") else []),
            *([f"note: {answer['harness_note']}"] if answer.get("harness_note") else []),
            *([f"note: {answer['vacuum_note']}"] if answer.get("vacuum_note") else []),
            *([f"network: {answer['network_note']}"] if answer.get("network_note") else [])]


def what_passed(design: Mapping[str, Any], confirmations: list[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What an answer from ``design`` may claim, given its confirmation runs (none: none ran), the one rule behind
    the terminal's line, ``plan.json`` and ``plan.html``: ``{"confirmed": True | False | None (none ran),
    "workers": the count the answer names (the confirmation's that passed, else the workers search's),
    "workers_from_steps", "confirmation_failed_at": [workers of each failed confirmation], "headroom": the design's
    headroom record with its ``workers``, only when measured at the answer's workers and they passed (else None),
    "headroom_why_not": why it is not quoted, or None, "unmeasured": the step the design's plan stopped at because
    it could not be measured (its record's ``untrusted_why``: ``{"phase": "workers" | "confirm", "workers",
    "rate_jobs_per_s", "why", "retried"}``), or None}. A step that could not be measured is claimed as neither a
    miss nor a pass: no count is claimed from it."""
    needed, head = design["workers"]["needed"], design.get("headroom")
    stop = _unmeasured(design, confirmations)
    if stop and stop["phase"] == "workers":
        return {"confirmed": None, "workers": None, "workers_from_steps": None, "confirmation_failed_at": [],
                "headroom": None, "headroom_why_not": "the workers search stopped at a step that could not be measured",
                "unmeasured": stop}
    confirmed = confirmations[-1]["passed"] if confirmations else None
    failed = [c["workers"] for c in confirmations if not c["passed"] and not c.get("untrusted_why")]
    workers = confirmations[-1]["workers"] if confirmed else needed
    why_not = None
    if head is None:
        why_not = f"no headroom search ran at {needed} workers"
    elif stop:
        why_not = f"the {_seconds(confirmations[-1])} confirmation could not be measured"
    elif confirmed is False:
        why_not = f"no worker count passed the {_seconds(confirmations[-1])} confirmation"
    elif workers != needed:
        why_not = (f"the headroom search ran at {needed} workers, which fell behind in the "
                   f"{_seconds(confirmations[-1])} confirmation")
    return {"confirmed": confirmed, "workers": workers, "workers_from_steps": needed, "confirmation_failed_at": failed,
            "headroom": None if why_not else {**head, "workers": needed}, "headroom_why_not": why_not,
            "unmeasured": stop}


def _unmeasured(design: Mapping[str, Any], confirmations: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The step ``design``'s plan stopped at because it could not be measured: the workers search's (its
    ``unmeasured`` workers) or the last confirmation's, when it failed so."""
    workers = design["workers"].get("unmeasured")
    phase, step = ("workers", _step_at(design, workers)) if workers is not None else \
        ("confirm", confirmations[-1] if confirmations and confirmations[-1].get("untrusted_why") else None)
    if step is None:
        return None
    return {"phase": phase, "workers": step["workers"], "rate_jobs_per_s": step["rate_jobs_per_s"],
            "why": step["untrusted_why"], "retried": bool(step.get("retried"))}


def unmeasured_text(workers: int, why: str, retried: bool, over: str = "") -> str:
    """'could not be measured at 6 workers: <why> (measured twice)' (``over``: ' over 120 s' after the workers): a
    step that failed only by the harness."""
    return f"could not be measured at {_workers(workers)}{over}: {why}{' (measured twice)' if retried else ''}"


def _unmeasured_sentence(d: Mapping[str, Any], stop: Mapping[str, Any], target_rate: float) -> str:
    """'Could not be measured at 6 workers: <why> (measured twice); the workers search of <design> at 100 jobs/s
    stopped there, neither a miss nor a pass.'"""
    text = unmeasured_text(stop["workers"], stop["why"], stop["retried"])
    return (f"{text[0].upper()}{text[1:]}; the workers search of {d['short']} at {fmt_sig(target_rate)} jobs/s stopped "
            "there, neither a miss nor a pass.")


def headroom_text(claim: Mapping[str, Any], target_rate: float) -> str:
    """The headroom as every page says it: 'headroom ×1.06 of 500 jobs/s (4 workers held up to 531 jobs/s)', 'headroom
    at least ×2 of …', or 'no headroom quoted: <why>'."""
    head = claim["headroom"]
    if head is None:
        return f"no headroom quoted: {claim['headroom_why_not']}"
    bound = "at least " if head["at_least"] else ""
    return (f"headroom {bound}×{fmt_sig(head['factor'])} of {fmt_sig(target_rate)} jobs/s ({_workers(head['workers'])} "
            f"held {bound or 'up to '}{fmt_sig(head['rate_jobs_per_s'])} jobs/s)")


def _sentence(d: Mapping[str, Any], claim: Mapping[str, Any], rows: list[dict[str, Any]], target_rate: float,
              confirmation: Mapping[str, Any] | None) -> str:
    """The answer's sentence: what it may claim (:func:`what_passed`), its status first when it is unconfirmed."""
    workers, needed, rate = claim["workers"], claim["workers_from_steps"], fmt_sig(target_rate)
    steps, head = _steps_text(d, needed), headroom_text(claim, target_rate)
    failed = _and(claim["confirmation_failed_at"])
    if claim["unmeasured"]:
        stop, before = claim["unmeasured"], f" after it failed at {failed} workers" if failed else ""
        text = unmeasured_text(stop["workers"], stop["why"], stop["retried"], over=f" over {_seconds(confirmation)}")
        return (f"{text[0].upper()}{text[1:]}; the confirmation of {d['short']} at "
                f"{rate} jobs/s stopped there{before}, neither a miss nor a pass; {_workers(needed)} passed {steps}; "
                f"{head}.")
    if claim["confirmed"] is False:
        return (f"UNCONFIRMED: {d['short']} needs more than {_workers(max(claim['confirmation_failed_at']))} to hold "
                f"{rate} jobs/s over {_seconds(confirmation)} (the confirmation failed at {failed} workers; at "
                f"{confirmation['workers']}, {confirmation['runs'][0]['why']}); {_workers(needed)} passed {steps}; "
                f"{head}.")
    if claim["confirmed"] is None:
        return (f"Unconfirmed (no confirmation run): {_workers(workers)} of {d['short']} held {rate} jobs/s with "
                f"{_slo_text(rows)} in {steps}; {head}.")
    moved = f" ({_workers(needed)} passed {steps}; the longer run failed at {failed} workers)" if failed else ""
    return (f"{_workers(workers)} of {d['short']} hold {rate} jobs/s with {_slo_text(rows)}, confirmed over "
            f"{_seconds(confirmation)}{moved}; {head}.")


def _workers(n: int) -> str:
    return f"{n} worker{'' if n == 1 else 's'}"


def _and(values: list[Any]) -> str:
    """'', '3', '3 and 4', '3, 4 and 5'."""
    text = [str(v) for v in values]
    return ", ".join(text[:-1]) + " and " + text[-1] if len(text) > 1 else "".join(text)


def _seconds(confirmation: Mapping[str, Any]) -> str:
    """A confirmation run's length: '120 s'."""
    return f"{confirmation['duration_s']:g} s"


def _steps_text(design: Mapping[str, Any], workers: int) -> str:
    """'the 10 s steps' (the measured window of the workers search's step at ``workers``), or 'the steps'."""
    step_s = _step_at(design, workers)["runs"][0].get("measured_s")
    return "the steps" if step_s is None else f"the {round(step_s):d} s steps"


def _mean_cost(runs: list[Mapping[str, Any]], key: str) -> float | None:
    values = [(r.get("cost_per_job") or {}).get(key) for r in runs]
    return None if not values or None in values else sum(values) / len(values)


def cost_estimate(runs: list[Mapping[str, Any]], target_rate: float) -> dict[str, Any] | None:
    """What the answer's measured cost per job implies at ``target_rate`` jobs/s: ``{"server_cpu_us" (mean over
    ``runs``, the answer's repetitions), "cpu_from_statements" (True: the statements' time stands in, the
    server being elsewhere), "cores_busy", "cores", "utilisation", "wal_bytes", "wal_mb_per_s", "runs", "sentence"}``; None
    when the runs measured neither CPU nor WAL. An estimate from this server's cost, never a measurement of
    another: cores = rate x CPU per job / :data:`DB_CPU_UTILISATION`; MB = 10^6 bytes."""
    cpu, statements = _mean_cost(runs, "server_cpu_us"), False
    if cpu is None:
        cpu, statements = _mean_cost(runs, "statements_exec_us"), True
    wal = _mean_cost(runs, "wal_bytes")
    log = next(((r.get("cost_per_job") or {}).get("log") for r in runs), None) or "WAL"
    if cpu is None and wal is None:
        return None
    busy = None if cpu is None else target_rate * cpu / 1e6
    wal_mb_s = None if wal is None else target_rate * wal / 1e6
    parts = []
    if busy is not None:
        per_job = (f"{fmt_sig(cpu)} µs of statement time per job (pg_stat_statements; the server's CPU was not "
                   "measured, it is on another host, and statement time is not CPU time: it leaves out commit and "
                   "the WAL flush and counts waits inside statements)" if statements
                   else f"{fmt_sig(cpu)} µs of server CPU per job")
        parts.append(f"at {per_job}, {fmt_sig(target_rate)} jobs/s needs about "
                     f"{fmt_sig(busy / DB_CPU_UTILISATION)} cores of database CPU at {DB_CPU_UTILISATION:.0%} "
                     f"utilisation ({fmt_sig(busy)} cores busy){' if that time were CPU' if statements else ''}")
    if wal_mb_s is not None:
        parts.append(f"{'and ' if parts else f'{fmt_sig(target_rate)} jobs/s '}writes about {fmt_sig(wal_mb_s)} MB/s "
                     f"of {log} ({fmt_sig(wal)} B per job)")
    runs_text = f"the mean of {len(runs)} runs" if len(runs) > 1 else "one run"
    return {"server_cpu_us": cpu, "cpu_from_statements": statements, "cores_busy": busy,
            "cores": None if busy is None else busy / DB_CPU_UTILISATION, "utilisation": DB_CPU_UTILISATION,
            "wal_bytes": wal, "wal_mb_per_s": wal_mb_s, "runs": len(runs),
            "sentence": (f"Estimate from the cost measured at the answer ({runs_text}), not a measurement of another "
                         f"server: {', '.join(parts)}.")}


def _closest(designs: list[Mapping[str, Any]], target_rate: float) -> dict[str, Any]:
    """The step nearest the SLO over every design, and the sentence that says what it missed."""
    best = None
    for d in designs:
        for s in (d.get("workers") or {}).get("steps", []):
            ratio = s["slo_ratio"] if s["slo_ratio"] is not None else math.inf
            if best is None or ratio < best[0]:
                best = (ratio, d, s)
    if best is None:
        return {"sentence": "No step was measured.", "slo": []}
    _, d, s = best
    missed = [r for r in slo_at(s) if r["status"] != "pass"] or slo_at(s)
    why = next((r["why"] for r in s["runs"] if not r["passed"]), "")
    stopped = "; ".join(x["workers"]["stopped"] for x in designs if (x.get("workers") or {}).get("stopped"))
    return {"sentence": f"No design met the SLO at {fmt_sig(target_rate)} jobs/s. Closest: {_workers(s['workers'])} of "
                        f"{d['short']}, {why or _slo_text(missed)}" + (f"; the search stopped: {stopped}" if stopped else "") + ".",
            "slo": missed, "closest": {"label": d["label"], "workers": s["workers"]}}


def harness_note(designs: list[Mapping[str, Any]], confirmation: Mapping[str, Any] | None = None) -> str | None:
    """What to do when steps were harness-limited (the load generator shares its cores with the database)."""
    steps = [*_steps(designs), *([confirmation] if confirmation else [])]
    limited = [s for s in steps if s.get("harness_limited")]
    if not limited:
        return None
    # a step's record without its runs' host (a plan written before it was kept) counts as on this host
    local = any(r.get("server_on_this_host", True) for s in limited for r in s.get("runs") or [{}])
    head = (f"{len(limited)} of {len(steps)} steps {'was' if len(limited) == 1 else 'were'} harness-limited "
            f"({limited[0]['harness_limited']}): ")
    if all(any(r.get("machine_busy") for r in s.get("runs") or []) for s in limited):
        return head + ("another program shared the machine's cores and may have set the pace of those steps, not "
                       "the queue nor the load generator; run the plan again on a quieter machine")
    if not local:
        return head + (f"the load generator set the pace of those steps; run with {setting('processes', 2)} or "
                       "more, or from more hosts (qbench master / qbench worker)")
    return head + ("the load generator shares its cores with the database, so those steps measured it too; run "
                   f"with {setting('processes', 2)} or more, or put the load generator on another host "
                   "(qbench master / qbench worker)")
