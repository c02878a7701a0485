"""The run page's round-trip rows, from summary.json's ``round_trip``, ``round_trips`` and ``latency_split``
(docs/network.md, "The round trip and where a claim's time goes"); none for a run written before them."""

from __future__ import annotations

from bench.report.format import fmt_num


def _row(label: str, value: str) -> dict:
    return {"label": label, "value": value, "bad": False}


def _ms(us) -> str:
    return fmt_num(None if us is None else us / 1000, 3, "ms")


def round_trip_rows(summary: dict) -> list[dict]:
    """Rows ``{"label", "value", "bad"}``: the measured round trip, round trips per job beside the minimum path,
    and the claim's and the completion's mean split into server execution and the rest."""
    rtt, trips, split = summary.get("round_trip"), summary.get("round_trips"), summary.get("latency_split")
    rows = []
    if rtt is not None:
        rows.append(_row("round trip p50 / p99 (empty query on its own connection, the workers' path)",
                         f"not measured: {rtt['not_measured']}" if "not_measured" in rtt else
                         f"{_ms(rtt['p50_us'])} / {_ms(rtt['p99_us'])} (mean {_ms(rtt['mean_us'])}, "
                         f"{fmt_num(rtt['samples'])} samples every {fmt_num(rtt['period_ms'])} ms"
                         + (f", {fmt_num(rtt['errors'])} failed)" if rtt["errors"] else ")")))
    if trips is not None:
        producers = ("" if trips.get("producer_per_job") is None
                     else f"; producers {fmt_num(trips['producer_per_job'], 2)} per job produced")
        rows.append(_row("round trips per job (the workers' sessions; minimum path)",
                         f"not measured: {trips['not_measured']}" if trips.get("not_measured") else
                         f"{fmt_num(trips['per_job'], 2)} (minimum {fmt_num(trips['minimum_per_job'], 2)}; "
                         f"{fmt_num(trips['per_claim'], 2)} per claim, {fmt_num(trips['per_completion'], 2)} per "
                         f"completion{producers})"))
    for name, label in (("claim", "claim"), ("complete", "completion")) if split else ():
        part = split[name]
        if part.get("mean_us") is None:
            continue
        network = ("" if part.get("network_us") is None else
                   f"; network about {_ms(part['network_us'])} ({fmt_num(part['round_trips'], 2)} round trips × "
                   "the mean round trip)")
        value = (f"{_ms(part['mean_us'])}: server not measured ({part['not_measured']}){network}"
                 if part.get("server_us") is None else
                 f"{_ms(part['mean_us'])} = {_ms(part['server_us'])} + {_ms(part['rest_us'])}{network}")
        rows.append(_row(f"{label} mean = server execution + {split['rest_label']}", value))
    return rows
