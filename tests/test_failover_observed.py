"""Observe-only failover (docs/failover.md, "Observe-only: a failover your provider does"): the run is given a
multi-host DSN and causes nothing; the test kills the primary and promotes the standby itself, as a provider does."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg

from bench.config.run_config import build_config
from bench.engines.postgres.embedded import PostgresRecipe
from bench.engines.postgres.failover import Failover, failover_record
from bench.engines.postgres.failover_watch import WATCH_EVERY_S, FailoverWatch, watch_for
from bench.engines.postgres.standby import embedded_standby
from bench.results.failover_line import failover_line
from bench.run_summary.failover import event_times, failover_figures, without_primary
from conftest import ADMIN_DSN, REPO
from quiet import wait_for_quiet
from test_failover import _standby_cfg

#: What the watch may add to the test's kill-to-promotion time besides its two reads' spacing: a read's and a
#: connection's own time and the run's event loop (s).
SLACK_S = 0.5


def _wait_for_workers(dsn: str, n: int, within_s: float = 60) -> None:
    """Until ``n`` of the run's workers hold a session on the server ``dsn``."""
    deadline = time.monotonic() + within_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'queue-bench w%'"
                           ).fetchone()[0] < n:
            assert time.monotonic() < deadline, f"the run's {n} workers never connected"
            time.sleep(0.2)


def test_a_failover_the_provider_does_is_noticed_and_its_losses_reported(tmp_path):
    """``SYNC_COMMIT=off`` behind ``host=P,S target_session_attrs=read-write``: the test stops the standby's WAL
    receiver, 2 s later kills every process of the primary, 2 s later promotes the standby; the run notices the new
    primary (same system, next timeline), reconnects, audits on it, counts the acknowledged work missing apart and
    exits 0; the gap it reports covers the test's kill-to-promotion time."""
    wait_for_quiet("an observed failover")  # the gap is timed
    with PostgresRecipe.server(30, log=lambda _l: None) as primary, \
            embedded_standby(primary, _standby_cfg("server"), 2, log=lambda _l: None) as standby:
        servers = Failover(primary, standby, 2)  # its multi-host DSN and its kill; the run causes nothing
        proc = subprocess.Popen([sys.executable, "-m", "bench.cli.main", "run", "--dsn", servers.dsn, "--sync-commit",
                                 "off", "--rate", "200", "--workers", "4", "--warmup", "1s", "--duration", "12s",
                                 "--results", str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            _wait_for_workers(primary, 4)
            time.sleep(2)
            receiver = servers.stop_receiver()  # the standby falls behind what the primary acknowledges
            time.sleep(2)
            killed = time.monotonic()
            servers.kill_primary()
            receiver.resume()
            time.sleep(2)
            with psycopg.connect(standby, autocommit=True) as conn:
                promoting = time.monotonic()
                assert conn.execute("SELECT pg_promote(true, 60)").fetchone()[0] is True
                promoted = time.monotonic()
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, out
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    info = json.loads((run_dir / "run.json").read_text())
    f = summary["failover"]
    assert f["caused"] is False and info["failover"]["caused"] is False and f["killed_at_s"] is None
    before, after = f["before"], f["after"]
    assert after["system_identifier"] == before["system_identifier"] and after["timeline"] == before["timeline"] + 1
    assert after["postmaster_start_unix"] != before["postmaster_start_unix"]
    # the old primary last answered before the kill began, the new one first after pg_promote was called; each read
    # is WATCH_EVERY_S from the last, so each end is at most that (and the read's own time) away from the event
    assert f["gap_s"] == round(f["new_primary_first_answered_s"] - f["old_primary_last_answered_s"], 3)
    assert promoting - killed < f["gap_s"] <= promoted - killed + 2 * WATCH_EVERY_S + SLACK_S, (f, promoting - killed)
    assert f["noticed_at_s"] == f["new_primary_first_answered_s"]
    # claims resume in a second that ends after the promotion (no earlier than the old primary's last answer plus
    # the test's own kill-to-promotion time), whether or not the watch has noticed by then; no reconnection figure
    assert f["claims_resumed_at_s"] is not None, f
    assert f["claims_resumed_at_s"] + 1 > f["old_primary_last_answered_s"] + (promoting - killed), f
    assert f["reconnection_s"] is None
    losses = f["losses"]
    assert 0 < losses["position"] == f["log_position"]
    # 2 s acknowledged at off while the standby received nothing: some of it is missing on the new primary
    assert losses["acknowledged_claims_missing"] + losses["acknowledged_completions_missing"] > 0, losses
    assert losses["jobs_run_twice"] <= losses["acknowledged_claims_missing"] + losses["acknowledged_completions_missing"]
    assert all(v == 0 for v in summary["invariants"].values()), summary["invariants"]  # the promotion explains them
    assert summary["reconnects"] >= 4 and summary["errors"]
    assert "failover: observed, not caused: the primary changed (timeline 1 → 2)" in out, out
    assert "database went away" not in out


def test_one_host_or_no_primary_only_target_means_no_watch():
    """Nothing changes for a single-host DSN, nor for several hosts that do not keep to the primary (parsed only:
    these hosts are never connected to)."""
    assert watch_for("host=127.0.0.1 port=1 dbname=x target_session_attrs=read-write") is None
    assert watch_for("host=127.0.0.1,127.0.0.2 port=1,2 dbname=x") is None
    assert watch_for("host=127.0.0.1,127.0.0.2 port=1,2 dbname=x target_session_attrs=any") is None
    assert watch_for("postgresql://u@127.0.0.1:1/x") is None


def test_an_observed_failover_is_judged_from_the_old_primary_s_last_answer_and_said_in_one_line():
    """Claims stop after the old primary's last answer (3.02 s) and resume in the second of the new one's first
    (7.02 s): 4 seconds without a claim, recovery counted from the last answer; the line says it was observed."""
    record = failover_record(caused=False, noticed_at_s=7.02, old_primary_last_answered_s=3.02,
                             new_primary_first_answered_s=7.02, gap_s=4.0, log_position=600,
                             before={"system_identifier": "7", "timeline": 1, "postmaster_start_unix": 1.0},
                             after={"system_identifier": "7", "timeline": 2, "postmaster_start_unix": 2.0})
    rows = [{"t_s": t, "claims": 0 if 3 <= t <= 6 else 400, "jobs_completed": 0 if 3 <= t <= 6 else 200}
            for t in range(14)]
    f = failover_figures({"failover": record, "config": {"rate": 200.0, "slo": ""}}, rows,
                         {"acknowledged_claims_missing": 2, "acknowledged_completions_missing": 0,
                          "produced_jobs_missing": 0, "jobs_run_twice": 1})
    # the promotion's time is not known (somewhere in the gap): no reconnection figure
    assert (f["claimless_s"], f["claims_resumed_at_s"], f["reconnection_s"]) == (4, 7, None)
    assert f["recovery"]["recovered_at_s"] == 8 and f["recovery"]["recovery_s"] == 4.98
    assert failover_line(f) == (
        "failover: observed, not caused: the primary changed (timeline 1 → 2), noticed at 7.02 s, the old last "
        "answered at 3.02 s, the new first at 7.02 s (gap 4 s); claims resumed at 7 s (4 s without a claim); "
        "recovered at 8 s, 4.98 s after the old primary last answered "
        "(5 seconds in a row with ≥ 95 % of 200 jobs/s); 2 acknowledged claims missing, 1 jobs run twice")
    # the workers reached the new primary before the watch's next read: claims resume in their own second
    late = {**record, "new_primary_first_answered_s": 9.07, "noticed_at_s": 9.07, "gap_s": 6.05}
    rows = [{"t_s": t, "claims": 0 if 3 <= t <= 7 else 400, "jobs_completed": 0 if 3 <= t <= 7 else 200}
            for t in range(16)]
    f = failover_figures({"failover": late, "config": {"rate": 200.0, "slo": ""}}, rows)
    assert (f["claimless_s"], f["claims_resumed_at_s"]) == (5, 8)
    caused = failover_record(caused=True, killed_at_s=3.5, promoted_at_s=6.0)
    assert event_times(caused) == (3.5, 6.0) and event_times(record) == (3.02, 7.02)
    assert event_times({"killed_at_s": 3.5, "promoted_at_s": 6.0}) == (3.5, 6.0)  # a record from before `caused`
    # the monitor cannot sample between the old primary's last answer and the new one's first: not a suspect run
    assert [t for t in range(12) if without_primary({"failover": record}, t)] == [3, 4, 5, 6, 7]


def test_the_watch_s_connection_is_counted_in_the_run_s_budget():
    """A DSN kept to the primary gets one more direct connection (the watch's); a plain one does not."""
    plain = build_config("default", dsn="postgresql://postgres@127.0.0.1:5432/postgres")
    kept = build_config("default", dsn="host=127.0.0.1,127.0.0.1 port=5432,5433 user=postgres "
                                       "target_session_attrs=read-write")
    assert kept.direct_connections() == plain.direct_connections() + 1


def test_the_audit_s_position_is_after_the_last_failed_read_else_at_the_notice():
    """On the test server, its identity taken for an old primary's: a read that answers the old identity clears the
    split, a read that fails (an unreachable port, the connection terminated) sets it to the claim log's length
    then, and the change is recorded with it; with no failed read since the old answer, the length as the change was noticed."""
    log_length = iter(range(100, 1000, 100))  # the claim log's length at each look
    watch = FailoverWatch(ADMIN_DSN)
    watch.position = lambda: next(log_length)
    real, lines = watch.before, []
    watch.dsn, reachable = "postgresql://postgres@127.0.0.1:1/postgres", watch.dsn
    watch.sample(1.0, lines.append)  # fails: the log's length now, 100
    watch.dsn = reachable
    watch.sample(2.0, lines.append)  # the old identity answers: the split forgotten
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:  # the watch's connection broken
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE application_name = 'queue-bench failover watch'")
    watch.sample(3.0, lines.append)  # fails: 200
    watch.dsn, watch.before = reachable, {**real, "timeline": real["timeline"] - 1}
    watch.sample(4.5, lines.append)
    r = watch.record
    assert (r["caused"], r["log_position"], r["old_primary_last_answered_s"], r["noticed_at_s"], r["gap_s"]) == (
        False, 200, 2.0, 4.5, 2.5)
    assert r["after"] == real and watch.failures == 2 and len(lines) == 1
    watch.close()
    fresh = FailoverWatch(ADMIN_DSN)
    fresh.position, fresh.before = lambda: 700, {**real, "postmaster_start_unix": 0.0}
    fresh.sample(0.5, lines.append)  # changed at the first read: no old answer, the length as noticed
    fresh.close()
    assert (fresh.record["log_position"], fresh.record["old_primary_last_answered_s"], fresh.record["gap_s"]) == (
        700, None, None)
