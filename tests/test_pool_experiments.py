"""Experiments 21-23 (issue 39, part 6: what breaks behind a connection pooler), each run through the catalogue
driver on the real PostgreSQL and the real PgBouncer (the embedded one, started and stopped by each probe and
run): the advisory lock and LISTEN probes show the transaction-mode failure and the session-mode control from
their raw facts, and their verdicts follow; the many-workers experiment at a small size gives its figures and a
verdict that its runs' own trust verdicts allow."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from bench.engines import get_engine
from bench.engines.postgres.pooler import binary
from bench.experiments.catalogue import EXPERIMENTS_DIR, load_experiment
from bench.experiments.driver import run_catalogue
from bench.results.model import problems
from cli_in_process import qbench_in_process
from conftest import CLEAN_INVARIANTS

VERDICTS = ("holds", "does not hold", "inconclusive")


def _catalogue(names: list[str], dsn: str, out: Path, paths: dict[str, Path] | None = None) -> dict[str, dict]:
    """Run the experiments ``names`` (their catalogue files, or ``paths``) on ``dsn`` through the catalogue driver
    with the engine's probes; returns each one's ``outcome.json``."""
    engine = get_engine("postgres")
    experiments = [load_experiment((paths or {}).get(n, EXPERIMENTS_DIR / f"{n}.toml"), dsn=dsn) for n in names]
    catalogue = run_catalogue(experiments, dsn, "postgres", out,
                              probe_runner=lambda kind: getattr(engine, f"{kind}_probe")(dsn, "qbench_pool_exp"),
                              log=lambda _line: None)
    return {e.name: json.loads((catalogue / e.name / "outcome.json").read_text()) for e in experiments}


def _advisory_locks(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                            "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchone()[0]


def test_a_session_advisory_lock_through_a_transaction_pool_excludes_nobody_and_through_a_session_pool_it_does(
        dsn, tmp_path):
    """Experiment 21. Transaction pool: A got the lock, and then B got it too (on the server connection that holds
    it) or A's next transaction ran on a server connection that does not hold it; session pool (the control): B
    is refused on its own server connection, and A's next transaction is still on the one holding the lock. The
    verdict follows from those facts; no lock is left once the probe's poolers are gone."""
    outcome = _catalogue(["pool_advisory_lock"], dsn, tmp_path)["pool_advisory_lock"]
    facts = outcome["probe_result"]
    t = {k.removeprefix("transaction_"): v for k, v in facts.items() if k.startswith("transaction_")}
    s = {k.removeprefix("session_"): v for k, v in facts.items() if k.startswith("session_")}
    assert t["a_got"] is True and t["holder_pids"] == [t["a_pid"]], facts
    assert (t["b_got"] and t["b_pid"] == t["a_pid"]) or t["a_later_pid"] not in t["holder_pids"], facts
    assert t["excluded"] == 0
    assert s["a_got"] is True and s["b_got"] is False and s["b_pid"] != s["a_pid"], facts
    assert s["holder_pids"] == [s["a_pid"]] and s["a_later_pid"] == s["a_pid"], facts
    assert s["excluded"] == 1
    assert outcome["verdict"] == "holds", outcome["reasons"]
    assert [f["values"] for f in outcome["figures"]] == [[0.0], [1.0]]
    assert _advisory_locks(dsn) == 0


def test_listen_through_a_transaction_pool_loses_wake_ups_and_through_a_session_pool_gets_them_all(dsn, tmp_path):
    """Experiment 22. The listener LISTENs through each pool while a direct producer sends its notifications:
    through the transaction pool some never arrive (lost = sent - received > 0); through the session pool every
    one arrives, each within a fraction of the wait the probe allows. The verdict follows."""
    outcome = _catalogue(["pool_listen"], dsn, tmp_path)["pool_listen"]
    facts = outcome["probe_result"]
    for mode in ("transaction", "session"):
        assert facts[f"{mode}_sent"] > 0 and isinstance(facts[f"{mode}_listen_pid"], int), facts
        assert facts[f"{mode}_lost"] == facts[f"{mode}_sent"] - facts[f"{mode}_received"], facts
    assert facts["transaction_lost"] > 0, facts
    assert facts["session_received"] == facts["session_sent"] and facts["session_lost"] == 0, facts
    assert 0 < facts["session_pickup_ms_p50"] <= facts["session_pickup_ms_max"] < facts["drain_s"] * 1000, facts
    assert outcome["verdict"] == "holds", outcome["reasons"]
    assert [f["values"] for f in outcome["figures"]] == [[float(facts["transaction_lost"])], [0.0]]


SMALL = {'workers = 300': 'workers = 20', 'rate = 250': 'rate = 100', 'work_ms = 1000': 'work_ms = 100',
         'pool_size = 20': 'pool_size = 4', 'poll_ms = 200': 'poll_ms = 50', 'duration = "20s"': 'duration = "3s"',
         'warmup = "5s"': 'warmup = "1s"', 'producers = 2': 'producers = 1',
         'processes = 2': 'processes = 1'}


@pytest.mark.slow
def test_many_workers_through_a_small_pool_at_a_small_size_gives_its_figures_and_a_verdict_its_runs_allow(
        dsn, tmp_path):
    """Experiment 23 with 20 workers through a pool of 4 (its thresholds as written): each side's jobs/s, claim
    p99 and server backends are in the outcome; the direct run's backends are at least its workers, the pooled
    run's at most the pool plus the tool's few direct connections; the verdict is inconclusive exactly when a run
    is untrusted by its own summary (problems(), saturated), else the one its figures give."""
    text = (EXPERIMENTS_DIR / "pool_many_workers.toml").read_text()
    for old, new in SMALL.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "pool_many_workers.toml"
    path.write_text(text)
    outcome = _catalogue(["pool_many_workers"], dsn, tmp_path / "results", {"pool_many_workers": path})[
        "pool_many_workers"]
    assert outcome["verdict"] in VERDICTS, outcome
    runs = {r["cell"]: r for r in outcome["runs"]}
    assert len(runs) == 2, outcome["runs"]
    for run in runs.values():
        assert run["throughput_jobs_per_s"] > 0 and run["claim_p99_us"] > 0 and run["server_backends_max"] > 0, run
    sweep_runs = tmp_path / "results"
    summaries, configs = {}, {}
    for run in runs.values():
        run_dir = next(sweep_runs.glob(f"experiments/*/pool_many_workers/sweeps/*/runs/{run['run_id']}"))
        summaries[run["run_id"]] = json.loads((run_dir / "summary.json").read_text())
        configs[run["run_id"]] = json.loads((run_dir / "run.json").read_text())["config"]
    pooled = next(r for r in runs.values() if configs[r["run_id"]]["pooler"] == "pgbouncer")
    direct = next(r for r in runs.values() if configs[r["run_id"]]["pooler"] == "none")
    assert configs[pooled["run_id"]]["dsn_direct"] and configs[pooled["run_id"]]["pool_size"] == 4
    assert direct["server_backends_max"] >= 20
    assert pooled["server_backends_max"] <= 4 + 3, pooled
    for summary in summaries.values():
        assert summary["invariants"] == CLEAN_INVARIANTS
    assert all(f["values"] and None not in f["values"] for f in outcome["figures"]), outcome["figures"]
    untrusted = [p for s in summaries.values() for p in problems(s)] + [
        "saturated" for s in summaries.values() if s.get("saturated") is True]
    outcomes = [f["outcome"] for f in outcome["figures"]]
    expected = ("inconclusive" if untrusted else "does not hold" if "does not hold" in outcomes
                else "inconclusive" if "inconclusive" in outcomes else "holds")
    assert outcome["verdict"] == expected, (outcome["verdict"], untrusted, outcome["reasons"])


@pytest.mark.parametrize("name", ["pool_listen", "pool_many_workers"])
def test_a_pooler_experiment_without_pgbouncer_is_refused_in_one_line_before_any_server(monkeypatch, tmp_path, name):
    """No pgbouncer on PATH or in the search directories: a probe through PgBouncer (22) and runs with a pooled
    cell (23) are refused in one line naming POOLER, before a server starts (in process, where reaching one fails
    the test) and before the results directory is made."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(binary, "SEARCH_DIRS", (str(tmp_path),))
    proc = qbench_in_process("experiments", name, "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stdout == "", proc
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("qbench: --pooler: pgbouncer: no pgbouncer binary") and "Debian package pgbouncer" in line
    assert not (tmp_path / "results" / "experiments").exists()
