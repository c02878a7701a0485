"""Recovery's rule (bench/results/recovery.py) on made-up seconds: the rate and the SLO's per-second figures, five
seconds in a row, from the event's second on; the failover's line that says it; and the reaper's loop resuming at
once after it reopened a lost connection."""

from __future__ import annotations

import pytest

from bench.results.failover_line import failover_line, recovery_text
from bench.results.recovery import HOLD_S, PER_SECOND, RATE_HELD_SHARE, holds, recovery
from bench.results.slo import KEYS


def _second(t: int, jobs: int = 200, pickup_ms: float | None = 50.0, age_s: float | None = 0.1) -> dict:
    return {"t_s": t, "jobs_completed": jobs, "pickup_p99_ms": pickup_ms, "oldest_eligible_age_s": age_s,
            "claim_p99_us": 2000, "complete_p99_us": 1000}


def test_a_second_holds_at_95_percent_of_the_rate_with_each_per_second_objective_within_it():
    assert RATE_HELD_SHARE == 0.95 and set(PER_SECOND) <= set(KEYS)
    assert holds(_second(0, jobs=190), 200, "") and not holds(_second(0, jobs=189), 200, "")
    assert holds(_second(0, pickup_ms=1000.0), 200, "pickup_p99<=1s")
    assert not holds(_second(0, pickup_ms=1000.5), 200, "pickup_p99<=1s")
    assert not holds(_second(0, pickup_ms=None), 200, "pickup_p99<=1s")  # no job claimed: it does not hold
    assert not holds(_second(0, age_s=2.5), 200, "age_max<=2s") and holds(_second(0, age_s=2.0), 200, "age_max<=2s")
    assert holds(_second(0, jobs=0), None, "error_rate<=1%")  # nothing to compare the rate with, nothing per second


def test_recovery_is_the_end_of_the_first_second_that_begins_five_that_hold_after_the_event():
    # the kill at 4.3 s: seconds 4-6 empty, 7 drains a little, 8 holds, 9 misses the SLO, 10-14 hold
    rows = [_second(t) for t in range(4)] + [_second(t, jobs=0, pickup_ms=None) for t in (4, 5, 6)]
    rows += [_second(7, jobs=120), _second(8, pickup_ms=900.0), _second(9, pickup_ms=2500.0)]
    rows += [_second(t) for t in range(10, 10 + HOLD_S)]
    r = recovery(rows, 4.3, rate=200, slo_text="pickup_p99<=1s,error_rate<=1%")
    assert r == {"recovered_at_s": 11, "recovery_s": 6.7, "hold_s": HOLD_S, "rate_jobs_per_s": 200,
                 "judged_by": ["pickup_p99"], "not_judged": ["error_rate"]}
    # one second fewer at the end: not recovered within the window
    assert recovery(rows[:-1], 4.3, rate=200, slo_text="pickup_p99<=1s")["recovered_at_s"] is None
    # a queue that never stopped holding: by the end of the event's own second (to the second)
    steady = [_second(t) for t in range(12)]
    assert recovery(steady, 4.3, rate=200, slo_text="")["recovered_at_s"] == 5
    assert recovery(steady, 4.3, rate=200, slo_text="")["recovery_s"] == 0.7


def test_closed_loop_recovery_compares_with_the_seconds_before_the_event():
    rows = [_second(t, jobs=300) for t in range(4)] + [_second(t, jobs=0) for t in (4, 5)]
    rows += [_second(t, jobs=280) for t in range(6, 12)]  # under 95 % of 300
    assert recovery(rows, 4.0, rate=0.0, slo_text="")["recovered_at_s"] is None
    rows = rows[:6] + [_second(t, jobs=290) for t in range(6, 12)]
    r = recovery(rows, 4.0, rate=0.0, slo_text="")
    assert r["rate_jobs_per_s"] == 300 and r["recovered_at_s"] == 7 and r["recovery_s"] == 3.0


def test_the_failover_line_says_the_kill_the_promotion_the_resumption_recovery_and_losses():
    f = {"error": None, "killed_at_s": 4.2, "processes_killed": 7, "promoted": True, "promoted_at_s": 6.3,
         "promotion_s": 0.21, "claims_resumed_at_s": 7, "claimless_s": 3, "reconnection_s": 1.7,
         "recovery": {"recovered_at_s": 8, "recovery_s": 3.8, "hold_s": 5, "rate_jobs_per_s": 200.0,
                      "judged_by": ["pickup_p99"], "not_judged": []},
         "losses": {"acknowledged_claims_missing": 3, "acknowledged_completions_missing": 0,
                    "produced_jobs_missing": 2, "jobs_run_twice": 3}}
    line = failover_line(f)
    assert line.startswith("failover: primary killed at 4.2 s (7 processes), standby promoted at 6.3 s")
    assert "claims resumed at 7 s (3 s without a claim, reconnection ≤ 1.7 s after the promotion)" in line
    assert "recovered at 8 s, 3.8 s after the kill (5 seconds in a row with ≥ 95 % of 200 jobs/s and pickup_p99)" in line
    assert line.endswith("3 acknowledged claims missing, 2 produced jobs missing, 3 jobs run twice")
    assert failover_line({**f, "losses": dict.fromkeys(f["losses"], 0)}).endswith("nothing lost")
    assert recovery_text({**f["recovery"], "recovered_at_s": None, "not_judged": ["age_slope"]}) == (
        "not recovered within the window (5 seconds in a row with ≥ 95 % of 200 jobs/s and pickup_p99); "
        "not judged per second: age_slope")
    repointed = {**f, "repointed_at_s": 7.4, "promotion_to_repoint_s": 1.1, "repoint_s": 0.003,
                 "errors_kill_to_repoint": {"08P01": 52, "connection_lost": 4}}
    assert ("standby promoted at 6.3 s (pg_promote 0.21 s); pooler re-pointed at 7.4 s (1.1 s after the promotion, "
            "PAUSE to RESUME 0.003 s; errors from the kill: 08P01 52, connection_lost 4); claims resumed at 7 s"
            ) in failover_line(repointed)
    assert "re-pointed" not in line
    assert failover_line({"error": "the standby could not be promoted: boom"}) == (
        "failover: the standby could not be promoted: boom")


@pytest.mark.parametrize("key", sorted(PER_SECOND))
def test_each_per_second_key_names_an_intervals_column(key):
    from bench.results.run_files import INTERVAL_COLUMNS
    assert PER_SECOND[key][0] in INTERVAL_COLUMNS


def test_a_periodic_pass_that_lost_its_connection_runs_again_at_once_after_reopening(monkeypatch):
    """The reaper's loop (bench.engines.common.Periodic) on a fake driver and clock: a pass fails on a lost
    connection, it is reopened and the pass runs again without waiting the interval; a connection lost again right
    after waits the interval (no loop without a pause)."""
    from bench.engines import common

    slept: list[float] = []

    class Lost(Exception):
        pass

    class Driver:
        errors = (Lost,)

        @staticmethod
        def error_kind(err, conn):
            return "connection_lost"

        @staticmethod
        def after_error(conn):
            pass

        @staticmethod
        def is_broken(conn):
            return conn == "broken"

    class Recorder:
        def __init__(self):
            self.errors = []

        def error(self, kind):
            self.errors.append(kind)

    outcomes = iter(["lost", "ok", "lost", "lost", "ok"])
    events: list[str] = []

    class Pass(common.Periodic):
        driver = Driver

        def once(self):
            outcome = next(outcomes, None)
            if outcome is None:
                self.stopping = True
                return
            events.append(outcome)
            if outcome == "lost":
                self.conn = "broken"
                raise Lost()

    monkeypatch.setattr(common.gevent, "sleep", lambda s: (slept.append(s), events.append("sleep")))
    periodic = Pass("conn", 1.0, Recorder())
    periodic.reopen = lambda: "conn"
    periodic.run()
    # the last "sleep": after the pass that stopped the loop
    assert events == ["lost", "ok", "sleep", "lost", "lost", "sleep", "ok", "sleep", "sleep"], events
    assert slept == [1.0] * 4 and periodic.recorder.errors == ["connection_lost"] * 3
