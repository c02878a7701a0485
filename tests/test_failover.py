"""SYNC_COMMIT against real servers: the commit mode a worker's session has, read back, over a queue definition's
``[settings]`` and a DSN's ``options``, through both session variants; the embedded primary's synchronous standby;
the refusals (docs/failover.md)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import psycopg
import pytest

from bench.config.run_config import build_config
from bench.engines.failover_losses import (LOSS_KEYS, effect_losses, explain, failover_losses, recount_redeliveries,
                                          reused_redeliveries)
from bench.engines.postgres import builtin_queue, commit_mode
from bench.engines.postgres.embedded import PostgresRecipe
from bench.engines.postgres.pooler.console import console_rows
from bench.engines.postgres.pooler.pgbouncer import embedded_pgbouncer
from bench.engines.postgres.pooler.repoint import repoint
from bench.engines.postgres.standby import embedded_standby
from bench.results import verdict
from bench.run_summary.failover import without_primary
from cli_in_process import qbench_in_process
from conftest import qbench, run_and_load
from quiet import wait_for_quiet
from test_replica import _cfg as _standby_cfg_of


def _standby_cfg(sync_commit: str):
    """The embedded standby's parameters with ``SYNC_COMMIT`` ``sync_commit``."""
    return _standby_cfg_of(sync_commit=sync_commit)


@pytest.fixture(scope="module")
def primary():
    """A throwaway server (its DSN)."""
    with PostgresRecipe.server(30, log=lambda _l: None) as dsn:
        yield dsn


def _with_options(dsn: str, value: str) -> str:
    """``dsn`` whose start-up packet sets ``synchronous_commit`` to ``value`` (libpq's ``options``)."""
    return f"{dsn}?options=-c%20synchronous_commit%3D{value}"


@pytest.mark.parametrize("pool_mode", ["none", "transaction"])
def test_the_run_s_mode_wins_over_a_definition_s_settings_and_the_dsn_s_options(primary, pool_mode):
    """A definition asking ``remote_write`` and a DSN asking ``local``: a worker's session has ``off``, the run's,
    whether it keeps its settings (``SET``) or sets them in each transaction (``SET LOCAL``, a transaction pool);
    with ``server`` it has the DSN's."""
    dsn = _with_options(primary, "local")
    cfg = dataclasses.replace(build_config(overrides={"sync_commit": "off"}), pool_mode=pool_mode)
    defn = dataclasses.replace(builtin_queue.definition(cfg), settings={"synchronous_commit": "remote_write"})
    with psycopg.connect(primary, autocommit=True) as admin:
        got = commit_mode.applied(dsn, admin, cfg, defn)
        assert got["asked"] == "off" and got["synchronous_commit"] == "off"
        assert got["synchronous_standby_names"] == ""
        kept = dataclasses.replace(cfg, sync_commit="server")
        assert commit_mode.applied(dsn, admin, kept, builtin_queue.definition(kept))["synchronous_commit"] == "local"


def test_a_run_records_the_mode_its_workers_had(primary, tmp_path):
    """A short run over a DSN asking ``local``: ``run.json`` ``commit_mode`` has ``off`` as read back."""
    run_dir, _summary, _proc = run_and_load(_with_options(primary, "local"), tmp_path, "--sync-commit", "off",
                                            "--duration", "2s", "--warmup", "0s", "--workers", "2")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["commit_mode"]["synchronous_commit"] == "off" and info["commit_mode"]["asked"] == "off"
    assert info["server_settings"]["synchronous_commit"] == "local"  # the server's, as the admin connection has it


def test_the_embedded_standby_is_named_synchronous_for_remote_apply_and_released():
    """``remote_apply`` with the embedded standby: the primary names it (``*``) and it reports ``sync``; afterwards
    the primary's ``synchronous_standby_names`` is empty again (a commit would otherwise wait forever)."""
    cfg = _standby_cfg("remote_apply")
    with PostgresRecipe.server(30, log=lambda _l: None) as dsn:
        with embedded_standby(dsn, cfg, 1, log=lambda _l: None):
            with psycopg.connect(dsn, autocommit=True) as conn:
                assert commit_mode.standby_names(conn) == "*"
                states = [r[0] for r in conn.execute("SELECT sync_state FROM pg_stat_replication")]
                assert states == ["sync"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert commit_mode.standby_names(conn) == ""


def test_a_dsn_s_server_with_no_synchronous_standby_is_refused_for_remote_write(primary, tmp_path):
    """``DSN`` + ``DSN_REPLICA`` whose primary names no synchronous standby: ``remote_write`` is refused in one
    line before anything is created."""
    cfg = _standby_cfg("server")
    results = tmp_path / "results"
    with embedded_standby(primary, cfg, 1, log=lambda _l: None) as standby:
        proc = qbench("run", "--dsn", primary, "--replica", "--dsn-replica", standby, "--sync-commit", "remote_write",
                      "--duration", "2s", "--results", str(results), "--schema", "qbench_refused")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qbench: --sync-commit: remote_write"), proc.stderr
    assert "synchronous_standby_names is empty" in proc.stderr
    assert not results.exists()
    with psycopg.connect(primary, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'qbench_refused'").fetchone()[0] == 0


@pytest.mark.parametrize("args, starts", [
    (("--sync-commit", "remote_apply"), "qbench: --sync-commit: remote_apply waits for a synchronous standby"),
    (("--sync-commit", "remote_write"), "qbench: --sync-commit: remote_write waits for a synchronous standby"),
    (("--sync-commit", "off", "--engine", "mariadb"), "qbench: --sync-commit: does not apply on mariadb"),
    (("--sync-commit", "on", "--queue", "procrastinate"), "qbench: --sync-commit: does not apply to queue"),
    (("--sync-commit", "always"), "qbench: --sync-commit:"),
])
def test_refusals_are_one_line(tmp_path, args, starts):
    results = tmp_path / "results"
    proc = qbench_in_process("run", *args, "--results", str(results))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(starts), proc.stderr
    assert not results.exists()


def _failover_run(tmp_path, sync_commit: str, *more: str, faults: str = "failover@4-14:wal_stop_s=2",
                  duration: str = "16s") -> tuple[dict, dict, list[dict]]:
    """One embedded run at ``sync_commit``: 200 jobs/s, 4 workers, by default the WAL receiver stopped at 2 s, the
    primary killed at 4 s, the standby promoted 2 s later, 16 s measured (``more``: other arguments); it must exit
    0. Its summary, run.json and intervals.csv rows. On a quiet machine: its seconds without a claim are timed
    (tests/quiet.py)."""
    wait_for_quiet(f"a failover at {sync_commit}")
    proc = qbench("run", "--replica", "--sync-commit", sync_commit, "--faults", faults, "--promote-after-s", "2",
                  "--rate", "200", "--workers", "4", "--warmup", "1s", "--duration", duration, *more,
                  "--results", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    with open(run_dir / "intervals.csv", newline="") as f:
        rows = [{k: float(v) if v else None for k, v in row.items()} for row in csv.DictReader(f)]
    return (json.loads((run_dir / "summary.json").read_text()), json.loads((run_dir / "run.json").read_text()), rows)


def test_a_failover_under_load_promotes_the_standby_and_every_worker_reconnects(tmp_path):
    """``remote_apply`` with the WAL receiver stopped 2 s before the kill: every process of the primary killed at
    4 s, the standby promoted 2 s later, the workers reconnect to it through the multi-host DSN and claim again;
    nothing acknowledged is missing (the audit runs on the new primary), the run exits 0."""
    summary, info, _rows = _failover_run(tmp_path, "remote_apply")
    f = summary["failover"]
    assert f["error"] is None and f["promoted"] is True and f["wal_stop_s"] == 2.0
    assert 4.0 <= f["killed_at_s"] < 4.5 and f["processes_killed"] >= 5  # postmaster, checkpointer, backends, ...
    assert 1.0 <= f["wal_receiver_stopped_at_s"] <= 2.5
    assert f["promoted_at_s"] >= f["killed_at_s"] + 2.0 and 0 < f["promotion_s"] < 10
    before, after = f["before"], f["after"]
    assert after["system_identifier"] == before["system_identifier"] and after["timeline"] == before["timeline"] + 1
    assert after["postmaster_start_unix"] != before["postmaster_start_unix"]
    # claims stopped from the kill until after the promotion, then resumed on the new primary: at least every whole
    # second between the two had none (the kill's second has claims from before it, the promotion's may have some)
    between = math.floor(f["promoted_at_s"]) - math.ceil(f["killed_at_s"])
    assert f["claimless_s"] >= between >= 1, (f["claimless_s"], f["killed_at_s"], f["promoted_at_s"])
    assert f["claims_resumed_at_s"] is not None and 0 < f["reconnection_s"] < 10
    # the arrivals due while the primary was gone were inserted once the producers reconnected, not dropped
    assert summary["jobs_produced"] >= 0.95 * 200 * summary["measured_s"], (summary["jobs_produced"], summary["measured_s"])
    assert summary["pickup_latency_ms"]["max"] >= 1000 * (f["promoted_at_s"] - f["killed_at_s"]) * 0.8
    # the rate held again (bench/results/recovery.py) once claims resumed, within the window
    r = f["recovery"]
    assert r["rate_jobs_per_s"] == 200 and r["judged_by"] == [] and r["hold_s"] == 5
    assert r["recovered_at_s"] is not None and r["recovered_at_s"] >= f["claims_resumed_at_s"], (r, f)
    assert r["recovery_s"] == pytest.approx(r["recovered_at_s"] - f["killed_at_s"], abs=0.001)
    assert summary["reconnects"] >= 4  # each worker's session re-made on the new primary
    assert set(summary["errors"]) <= {"connection_lost", "connect_failed", "57P01", "57P02", "57P03", "08006"}
    assert summary["errors"]
    assert all(v == 0 for v in summary["invariants"].values()), summary["invariants"]
    assert info["commit_mode"]["synchronous_commit"] == "remote_apply"
    # the new primary's backends serve the run: not counted as another program's CPU (the system server is idle)
    others = [p for p in info["outside_processes"] if "127.0.0.1(" in p["command"] and p["cpu_pct"] >= 1.0]
    assert not others, others
    assert info["commit_mode"]["synchronous_standby_names"] == "*"


@pytest.mark.parametrize("args, says", [
    (("--faults", "failover@4-20"), "needs the embedded standby"),
    (("--replica", "--faults", "failover@4-20;failover@5-20"), "one failover per run"),
    (("--replica", "--faults", "failover@4-20", "--pooler", "pgbouncer", "--promote-after-s", "10",
      "--repoint-after-s", "6"), "the pooler's re-point 6 s after the promotion (--repoint-after-s 6) comes at or"),
    (("--replica", "--faults", "failover@4-20", "--net-delay-ms", "1"), "the delay relay forwards to the old primary"),
    (("--replica", "--faults", "failover@4-20", "--processes", "2", "--workers", "4"), "in one process"),
    (("--replica", "--faults", "failover@4-20:wal_stop_s=5"), "wal_stop_s=5 stops the WAL receiver before"),
    (("--replica", "--faults", "failover@4-20", "--promote-after-s", "16"), "comes at or after the window's end"),
    (("--replica", "--dsn", "postgresql://postgres@127.0.0.1:5432/postgres", "--dsn-replica",
      "postgresql://postgres@127.0.0.1:5433/postgres", "--faults", "failover@4-20"), "never stops a user's server"),
])
def test_failover_refusals_are_one_line(tmp_path, args, says):
    results = tmp_path / "results"
    proc = qbench_in_process("run", *args, "--duration", "30s", "--results", str(results))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qbench: --faults: failover@"), proc.stderr
    assert says in proc.stderr, proc.stderr
    assert not results.exists()


def test_promote_after_s_without_a_failover_is_refused(tmp_path):
    proc = qbench_in_process("run", "--promote-after-s", "5", "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --promote-after-s: has no effect without")


@pytest.mark.parametrize("args", [("--replica", "--faults", "failover@4-20"), ("--pooler", "pgbouncer")])
def test_repoint_after_s_without_the_embedded_pooler_and_a_failover_is_refused(tmp_path, args):
    proc = qbench_in_process("run", *args, "--repoint-after-s", "1", "--results", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("qbench: --repoint-after-s: has no effect without --pooler pgbouncer and a failover")
    assert not (tmp_path / "results").exists()


def test_a_failover_through_a_pooler_of_yours_is_refused_before_anything_is_created(tmp_path):
    """``DSN`` a pooler of the user's (``DSN_DIRECT``, ``POOL_MODE``): the tool never changes it, so no failover;
    one line, no schema, no results directory."""
    server = "postgresql://postgres@127.0.0.1:5432/postgres"
    results = tmp_path / "results"
    proc = qbench_in_process("run", "--replica", "--dsn", "postgresql://postgres@127.0.0.1:6432/postgres",
                             "--dsn-direct", server, "--pool-mode", "transaction", "--dsn-replica",
                             "postgresql://postgres@127.0.0.1:5433/postgres", "--faults", "failover@4-20",
                             "--duration", "30s", "--schema", "qbench_refused_pooler", "--results", str(results))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qbench: --faults: failover@4-20: "), proc.stderr
    assert "the tool never changes a user's pooler" in proc.stderr, proc.stderr
    assert not results.exists()
    with psycopg.connect(server, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'qbench_refused_pooler'").fetchone()[0] == 0


def test_a_re_point_that_pause_would_wait_for_forever_kills_the_database_and_the_pool_follows(primary):
    """A client holds a transaction open through the embedded pooler, so PAUSE cannot return: after
    ``pause_wait_s`` the re-point sends KILL; the pooler then names the other server (the system one, port 5432) in
    its file and on its console, the holder's connection is gone, a new client is served by the other server, and
    ``server_login_retry`` is back to its value."""
    other = "postgresql://postgres@127.0.0.1:5432/postgres"
    with embedded_pgbouncer(primary, "transaction", 2, 5, log=lambda _l: None) as pooler:
        holder = psycopg.connect(pooler.dsn)
        holder.execute("SELECT 1")  # its transaction holds a server connection of the pool
        done = repoint(pooler, other, pause_wait_s=0.5, first_server_wait_s=0.2)
        assert done["killed"] is True and 0.5 <= done["pause_s"] <= done["repoint_s"] < 5, done
        assert (done["host"], done["port"]) == ("127.0.0.1", 5432)
        assert done["first_server_s"] is None  # KILL dropped every client: none asked for a server connection
        (db,) = [r for r in console_rows(pooler.admin_dsn, "SHOW DATABASES") if r["name"] == "postgres"]
        assert (db["host"], db["port"]) == ("127.0.0.1", 5432)
        assert "port=5432" in open(pooler.config_path).read()
        with pytest.raises(psycopg.OperationalError):
            holder.execute("SELECT 1")
        holder.close()
        with psycopg.connect(pooler.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT current_setting('port')::int").fetchone()[0] == 5432
        config = {row["key"]: row["value"] for row in console_rows(pooler.admin_dsn, "SHOW CONFIG")}
        assert config["server_login_retry"] == "15"


def test_a_failover_through_the_embedded_pooler_re_points_it_and_claims_resume(tmp_path):
    """``POOLER=pgbouncer`` in transaction mode: the primary killed at 3 s, the standby promoted 2 s later, the
    pooler re-pointed 1 s after that (PAUSE, its [databases] line, RELOAD, RESUME); the workers' queries failed or
    waited until then and claim again after it, through the same pooler; nothing acknowledged is missing on the
    new primary (remote_apply), the run exits 0."""
    summary, info, rows = _failover_run(tmp_path, "remote_apply", "--pooler", "pgbouncer", "--pool-mode",
                                        "transaction", "--repoint-after-s", "1", faults="failover@3-11",
                                        duration="12s")
    f = summary["failover"]
    assert f["error"] is None and f["promoted"] is True and f["repoint_after_s"] == 1.0
    assert f["repointed_at_s"] >= f["promoted_at_s"] + 1.0 and 0 <= f["repoint_s"] < 5, f
    assert f["promotion_to_repoint_s"] == pytest.approx(f["repointed_at_s"] - f["promoted_at_s"], abs=0.002)
    assert f["repoint_first_server_s"] is not None and f["repoint_kill"] is False
    # the workers' errors from the kill to the re-point: the pooler's own (08P01: it cannot reach the killed
    # primary), each counted in summary.json errors too
    errors = f["errors_kill_to_repoint"]
    assert errors and all(n <= summary["errors"].get(kind, 0) for kind, n in errors.items()), (errors, summary["errors"])
    # no claim from the second after the kill to the re-point's second; claims in every second after it
    for row in rows:
        if math.ceil(f["killed_at_s"]) <= row["t_s"] < math.floor(f["repointed_at_s"]):
            assert row["claims"] == 0, (row, f)
        elif row["t_s"] > f["repointed_at_s"]:
            assert row["claims"] > 0, (row, f)
    assert f["claims_resumed_at_s"] is not None and f["claims_resumed_at_s"] + 1 > f["repointed_at_s"]
    # the audit across the promotion ran on the new primary: nothing acknowledged missing, every invariant holds
    losses = f["losses"]
    assert losses["position"] > 0 and {k: losses[k] for k in LOSS_KEYS} == dict.fromkeys(LOSS_KEYS, 0), losses
    assert all(v == 0 for v in summary["invariants"].values()), summary["invariants"]
    # the workers went through the pooler (one host), not the multi-host DSN the tool's own connections used
    assert "," not in info["dsn_masked"], info["dsn_masked"]


def _log(*events):
    """Claim-log events ``(kind, id, token)`` with no times."""
    return [(kind, job, token, None, None) for kind, job, token in events]


def test_the_audit_across_a_promotion_counts_what_the_new_primary_lacks():
    """Job 1 survived; job 2's claim and completion were acknowledged and lost, it ran again after the promotion;
    job 3's insert was lost; job 4's insert was lost and its id (and token) taken by a job produced after it."""
    before = _log(("p", 1, None), ("p", 2, None), ("p", 3, None), ("p", 4, None),
                  ("c", 1, 11), ("a", 1, 11), ("c", 2, 12), ("a", 2, 12), ("c", 4, 14), ("a", 4, 14))
    after = _log(("c", 2, 20), ("a", 2, 20), ("p", 4, None), ("c", 4, 14), ("a", 4, 14))
    states = {1: (11, 1, True), 2: (20, 1, True), 4: (14, 1, True)}
    losses = failover_losses(before + after, len(before), states)
    assert losses["acknowledged_claims_missing"] == 2  # job 2's and job 4's first
    assert losses["acknowledged_completions_missing"] == 2
    assert losses["produced_jobs_missing"] == 2  # job 3, and job 4's first
    assert losses["jobs_run_twice"] == 1  # job 2 (job 4 after the promotion is another job)
    assert losses["explained"] == {"double_claims": 2, "double_completions": 2, "stale_completions_applied": 1,
                                   "lost_jobs": 1}
    # what the audit counted less what the losses explain; what they do not explain is left
    left = explain({"double_claims": 3, "double_completions": 2, "stale_completions_applied": 0, "lost_jobs": 1,
                    "over_claims": 0, "duplicated_jobs": None}, losses)
    assert left == {"double_claims": 1, "double_completions": 0, "stale_completions_applied": 0, "lost_jobs": 0,
                    "over_claims": 0, "duplicated_jobs": None}
    assert losses["explained"]["stale_completions_applied"] == 0  # never more than the audit counted


def test_the_effects_across_a_promotion_are_counted_from_the_client_log():
    """Job 1's effect row survived; job 2's was acknowledged and lost, and written again after the promotion; job 3
    produced again after the promotion (its id reused) is another job: not written twice. ``same_txn``'s writes are
    the applied completions; ``idempotent``'s only those that wrote a row."""
    before = _log(("p", 1, None), ("p", 2, None), ("p", 3, None), ("c", 1, 11), ("e", 1, 11), ("a", 1, 11),
                  ("c", 2, 12), ("e", 2, 12), ("a", 2, 12), ("c", 3, 13), ("e", 3, 13), ("a", 3, 13))
    after = _log(("c", 2, 20), ("e", 2, 20), ("a", 2, 20), ("p", 3, None), ("c", 3, 13), ("e", 3, 13), ("a", 3, 13))
    rows = {(1, 11), (2, 20), (3, 13)}
    for mode in ("outside", "idempotent", "same_txn"):
        assert effect_losses(before + after, len(before), mode, rows) == {
            "acknowledged_effects_missing": 2, "effects_written_twice": 1}, mode  # job 2's and job 3's first
    # nothing lost: no row missing, nothing twice
    assert effect_losses(before, len(before), "outside", {(1, 11), (2, 12), (3, 13)}) == {
        "acknowledged_effects_missing": 0, "effects_written_twice": 0}


def test_an_id_produced_again_after_the_promotion_is_not_a_redelivery():
    """Job 4 claimed before the promotion was lost and its id produced again and claimed after: the audit's
    redeliveries (claims beyond an id's first) count it once, and it is two jobs each claimed once; job 2 run again
    after its acknowledged claim was lost is a redelivery indeed."""
    before = _log(("p", 2, None), ("p", 4, None), ("c", 2, 12), ("c", 4, 14))
    after = _log(("c", 2, 20), ("p", 4, None), ("c", 4, 14), ("p", 5, None))
    assert reused_redeliveries(before + after, len(before)) == 1
    audit = {"redeliveries": 2, "effects": {"duplicate_jobs": 1, "redeliveries": 2,
                                            "duplicates_per_1000_redeliveries": 500.0}}
    out = recount_redeliveries(audit, 1)
    assert out["redeliveries"] == 1 and out["effects"]["redeliveries"] == 1
    assert out["effects"]["duplicates_per_1000_redeliveries"] == 1000.0
    assert recount_redeliveries(audit, 0) is audit


def test_the_invariants_card_names_what_the_promotion_explains():
    summary = {"invariants": dict.fromkeys(("double_claims", "lost_jobs"), 0),
               "failover": {"losses": {"explained": {"double_claims": 21, "lost_jobs": 4, "double_completions": 0}}}}
    (item,) = [i for i in verdict.items(summary) if i.name == "invariants"]
    assert item.ok is True and item.value == "2 hold"
    assert item.reason.endswith("besides, explained by the failover's lost acknowledged work: 21 doubled, 4 lost")


def test_the_seconds_with_no_primary_are_not_the_monitor_s_misses():
    """A sample missed from the kill's second to the promotion's is the failover's, not the monitor's fault."""
    info = {"failover": {"killed_at_s": 4.001, "promoted_at_s": 6.124}}
    assert [t for t in range(10) if without_primary(info, t)] == [4, 5, 6]
    assert [t for t in range(10) if without_primary({"failover": {"killed_at_s": 4.0, "promoted_at_s": None}}, t)] \
        == [4, 5, 6, 7, 8, 9]
    assert not any(without_primary({"failover": None}, t) for t in range(10))


def test_nothing_lost_is_counted_as_nothing():
    events = _log(("p", 1, None), ("c", 1, 11), ("a", 1, 11), ("p", 2, None), ("c", 2, 12))
    losses = failover_losses(events, 3, {1: (11, 1, True), 2: (12, 1, False)})
    assert {k: losses[k] for k in LOSS_KEYS} == dict.fromkeys(LOSS_KEYS, 0)
    assert set(losses["explained"].values()) == {0}


@pytest.mark.parametrize("txn, effects", [("short", "none"), ("hold", "outside")])
def test_an_asynchronous_failover_counts_its_losses_apart_and_exits_0(tmp_path, txn, effects):
    """``off`` with the WAL receiver stopped 2 s before the kill: acknowledged claims and completions are missing
    on the new primary, counted under their own names; they explain every broken invariant, so the run exits 0.
    Under ``TXN=hold`` a claim is acknowledged with its completion (one commit): as many of each are missing; with
    ``EFFECTS=outside`` the effect rows written before the promotion are missing too, and the client's log counts
    the jobs whose effect was written twice, which the effects table cannot show."""
    # with effects, 4 workers at 25 ms a job complete 160 of the 200 jobs/s: a backlog inserted before the WAL
    # stop is run after it, so its claims, completions and effects are lost and run again after the promotion
    slow = ("--work-ms", "25") if effects != "none" else ()
    summary, _info, _rows = _failover_run(tmp_path, "off", "--txn", txn, "--effects", effects, *slow)
    losses = summary["failover"]["losses"]
    # 2 s of acknowledged work at 200 jobs/s never reached the standby: some of it is missing
    assert losses["acknowledged_completions_missing"] > 0 and losses["acknowledged_claims_missing"] > 0
    assert losses["jobs_run_twice"] <= losses["acknowledged_claims_missing"] + losses["acknowledged_completions_missing"]
    assert losses["position"] > 0
    assert all(v == 0 for v in summary["invariants"].values()), summary["invariants"]
    if txn == "hold":  # no failures injected: every acknowledged claim came with its completion
        assert losses["acknowledged_claims_missing"] == losses["acknowledged_completions_missing"]
    if effects == "none":
        assert losses["effects"] is None
        return
    lost = losses["effects"]
    assert lost["acknowledged_effects_missing"] > 0 and losses["jobs_run_twice"] > 0, losses
    # a job run twice across the promotion wrote its effect on each side: the client's log counts it; the table
    # shows it only where the first row survived, and each one it misses is a row it lost
    assert summary["effects"]["duplicate_jobs"] < lost["effects_written_twice"], (summary["effects"], lost)
    assert lost["effects_written_twice"] - summary["effects"]["duplicate_jobs"] <= lost["acknowledged_effects_missing"]
