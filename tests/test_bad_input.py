"""Bad input to ``qbench`` is refused before anything is written.

Each bad parameter of ``qbench run`` must exit with status 2 and print exactly one
line on stderr naming the parameter and what is allowed, write no results
directory, and create nothing in the database. ``qbench report`` on a directory
without result files exits 2 with one line. A schema that exists and was not
created by queue-bench is refused and left intact.

Input refused before the load is checked in this process (:mod:`cli_in_process`: the CLI's entry
function, with the engines and the embedded servers out of reach); what needs the database, and a few
cases of each kind as end-to-end checks, run ``qbench`` as a subprocess.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from bad_values import BAD_VALUES
from bench.config.parameters import PARAMETERS
from bench.usage import typed
from cli_in_process import qbench_in_process
from conftest import qbench

UNREACHABLE_DSN = "postgresql://postgres@127.0.0.1:1/x"
MALFORMED_DSN = "host=127.0.0.1 port"

# (test id, qbench run arguments, parameter named, text saying what is allowed).
# A None dsn slot means "use the test database's DSN".
BAD_RUN_INPUT = [
    ("policy", ["--policy", "fastest"], "POLICY", "wait, nowait, skip_locked"),
    ("index", ["--index", "btree"], "INDEX", "none, status, composite, partial"),
    ("txn", ["--txn", "long"], "TXN", "short, hold"),
    ("workers-0", ["--workers", "0"], "WORKERS", "from 1 to 1000"),
    ("workers-neg", ["--workers", "-3"], "WORKERS", "from 1 to 1000"),
    ("workers-abc", ["--workers", "abc"], "WORKERS", "from 1 to 1000"),
    ("batch-0", ["--batch", "0"], "BATCH", "from 1 to 10000"),
    ("duration-soon", ["--duration", "soon"], "DURATION", "30s"),
    ("duration-0s", ["--duration", "0s"], "DURATION", "at least 1s"),
    # the run measures in whole seconds: a fraction is refused, not rounded away
    ("duration-fraction", ["--duration", "2500ms"], "DURATION", "whole seconds"),
    ("warmup-fraction", ["--warmup", "500ms"], "WARMUP", "whole seconds"),
    ("dsn-unreachable", ["--dsn", UNREACHABLE_DSN], "DSN", "a reachable PostgreSQL DSN"),
    ("dsn-malformed", ["--dsn", MALFORMED_DSN], "DSN", "postgresql://"),
    ("schema", ["--schema", "Bad-Name"], "SCHEMA", "[a-z_][a-z0-9_]*"),
    ("workload", ["--workload", "no_such_workload"], "WORKLOAD", "default, "),
    # 1,000 workers exceed the test server's max_connections (100 here): refused with the numbers.
    ("too-many-connections", ["--workers", "1000"], "WORKERS", "free (max_connections"),
    ("lease-0", ["--lease-s", "0"], "LEASE_S", "a number > 0"),
    ("work-ms-negative", ["--work-ms", "-5"], "WORK_MS", "a number >= 0"),
    ("work-ms-nan", ["--work-ms", "nan"], "WORK_MS", "is not a finite number; allowed: a number >= 0"),
    ("history-negative", ["--history", "-1"], "HISTORY", "an integer from 0 to"),
    ("schema-public", ["--schema", "public"], "SCHEMA", "dedicated"),
    # libpq connects to hostaddr, not host: the loopback check must look at it, without connecting.
    ("dsn-hostaddr-remote", ["--dsn", "host=localhost hostaddr=10.1.2.3 dbname=x user=u"], "DSN",
     "--allow-remote"),
    ("results-not-a-directory", ["--results", "/etc/passwd/runs"], "RESULTS", "a writable directory"),
    # root passes os.access everywhere: /proc must be caught by a real mkdir.
    ("results-in-proc", ["--results", "/proc/qbench-results"], "RESULTS", "a writable directory"),
    # a libpq service file names its host elsewhere: not checkable, so it needs the confirmation.
    ("dsn-service", ["--dsn", "service=somewhere dbname=x"], "DSN", "--allow-remote"),
    ("faults-kind", ["--faults", "meltdown@1-2"], "FAULTS", "crash_after_claim, crash_before_complete, late_worker, long_transaction, migration"),
    ("faults-window", ["--faults", "long_transaction@5-2"], "FAULTS", "0 <= start < end"),
    # the fault as it was typed, and what is wrong with it
    ("faults-no-window", ["--faults", "long_transaction"], "FAULTS",
     "'long_transaction' is not a fault (the start of its window start-end is missing)"),
    ("faults-option-not-a-number", ["--faults", "backend_kill@1-3:every_s=abc"], "FAULTS",
     "(every_s 'abc' is not a number)"),
    # a migration's refusals say what its option allows (not another option's meaning)
    ("faults-migration-retry-negative", ["--faults", "migration@1-2:ddl=add_column,retry_ms=-5"], "FAULTS",
     "retry_ms >= 0 (ms: the pause after an attempt that timed out, before the next)"),
    ("faults-migration-option-unknown", ["--faults", "migration@1-2:ddl=add_column,share=0.5"], "FAULTS",
     "allowed for migration: ddl, lock_timeout_ms, retry_ms (sql only in a workload file)"),
    ("faults-migration-no-ddl", ["--faults", "migration@1-2"], "FAULTS",
     "a migration's ddl is missing; allowed: migration@start-end:ddl=add_column|"),
    ("rate-negative", ["--rate", "-1"], "RATE", "a number >= 0"),
    ("bursts", ["--bursts", "5-2@100"], "BURSTS", "start-end@rate"),
    ("bursts-infinite", ["--bursts", "1-2@inf"], "BURSTS", "rate >= 0"),
    ("priority-mix-duplicate", ["--priority-mix", "0:1,0:1"], "PRIORITY_MIX", "0:0.9,1:0.1"),
]


#: BAD_RUN_INPUT cases refused only once the command reaches the database (or its DSN is parsed by the
#: driver): they run qbench as a subprocess.
AT_THE_DATABASE = {"dsn-unreachable", "dsn-malformed", "too-many-connections", "dsn-hostaddr-remote", "dsn-service"}


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_' "
                            "AND nspname <> 'information_schema'").fetchall()
    return {r[0] for r in rows}


def _relations(dsn: str) -> set[tuple[str, str, str]]:
    """(schema, name, kind) of every relation outside the system schemas."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("""
            SELECT n.nspname, c.relname, c.relkind::text FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'""").fetchall()
    return set(rows)


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one stderr line, got:\n{stderr}"
    return lines[0]


def _no_results(results: Path) -> None:
    assert not results.exists() or not any(results.iterdir()), list(results.rglob("*"))


@pytest.mark.parametrize("case, args, param, allowed", BAD_RUN_INPUT, ids=[c[0] for c in BAD_RUN_INPUT])
def test_bad_run_input_exits_2_with_one_line_and_touches_nothing(dsn, tmp_path, case, args, param, allowed):
    """Bad value: exit 2, one stderr line naming the parameter and what is allowed,
    no results written, no schema or relation created in the test database."""
    schemas_before, relations_before = _schemas(dsn), _relations(dsn)
    results = tmp_path / "results"
    dsn_args = [] if "--dsn" in args else ["--dsn", dsn]
    run = qbench if case in AT_THE_DATABASE else qbench_in_process
    proc = run("run", *dsn_args, "--results", str(results), *args)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith(f"qbench: {typed(param)}: ") and allowed in line, line
    assert proc.stdout == ""
    _no_results(results)
    assert "qbench" not in _schemas(dsn) and "Bad-Name" not in _schemas(dsn)
    assert _schemas(dsn) == schemas_before
    assert _relations(dsn) == relations_before


def test_report_on_directory_without_result_files_exits_2(tmp_path):
    """qbench report on an empty directory: exit 2, one line naming RUN_DIR and the
    missing file, and nothing written into the directory."""
    empty = tmp_path / "not_a_run"
    empty.mkdir()
    proc = qbench_in_process("report", str(empty))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert "RUN_DIR" in line and "run.json" in line, line
    assert proc.stdout == ""
    assert list(empty.iterdir()) == []


def test_report_on_missing_directory_exits_2(tmp_path):
    """qbench report on a path that does not exist: exit 2, one line naming RUN_DIR."""
    proc = qbench_in_process("report", str(tmp_path / "absent"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert "RUN_DIR" in line and "not a directory" in line, line
    assert not (tmp_path / "absent").exists()


def test_foreign_schema_is_refused_and_left_intact(dsn, tmp_path):
    """An existing schema not created by queue-bench: exit 2 with one SCHEMA line,
    its table and row survive, and neither results nor the qbench schema appear."""
    foreign = "someone_elses"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(foreign)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, note text)").format(sql.Identifier(foreign, "precious")))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'keep me')").format(sql.Identifier(foreign, "precious")))
    try:
        relations_before = _relations(dsn)
        results = tmp_path / "results"
        proc = qbench("run", "--dsn", dsn, "--results", str(results), "--schema", foreign,
                      "--duration", "1s", "--warmup", "0s", "--workers", "1", timeout=60)

        assert proc.returncode == 2, proc.stdout + proc.stderr
        line = _one_line(proc.stderr)
        assert line.startswith("qbench: --schema: ") and foreign in line, line
        _no_results(results)
        assert _relations(dsn) == relations_before
        assert "qbench" not in _schemas(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(sql.SQL("SELECT id, note FROM {}").format(sql.Identifier(foreign, "precious"))).fetchall()
            comment = conn.execute("SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
                                   (foreign,)).fetchone()[0]
        assert rows == [(1, "keep me")]
        assert comment is None  # not marked as the tool's
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(foreign)))


def test_second_run_on_a_schema_in_use_is_refused(dsn, tmp_path):
    """While a run holds the schema (its advisory lock), another run on it exits 2 and drops nothing."""
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('queue-bench:qbench'))")
        before = _relations(dsn)
        proc = qbench("run", "--dsn", dsn, "--results", str(tmp_path / "results"))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        line = _one_line(proc.stderr)
        assert line.startswith("qbench: --schema: ") and "in use by another queue-bench run" in line
        _no_results(tmp_path / "results")
        assert _relations(dsn) == before


def test_calibrate_refuses_a_remote_dsn_without_connecting(tmp_path):
    """qbench calibrate writes heavy load too: a non-loopback DSN is refused at once, exit 2, one line."""
    proc = qbench("calibrate", "--dsn", "postgresql://u@10.1.2.3/x", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("qbench: --dsn: ") and "10.1.2.3" in line and "--allow-remote" in line


BAD_CALIBRATE_INPUT = [
    ("processes-0", ["--processes", "0"], "PROCESSES", "from 1 to 64, or a comma-separated list"),
    ("processes-not-a-number", ["--processes", "1,two"], "PROCESSES", "from 1 to 64, or a comma-separated list"),
    ("processes-twice", ["--processes", "2,2"], "PROCESSES", "each once"),
    # 3 processes need 3 workers: every configuration of the grid is checked before anything runs
    ("processes-above-workers", ["--processes", "1,3", "--workers", "50,2"], "PROCESSES",
     "--processes from 1 to --workers"),
    ("batch-0", ["--batch", "0"], "BATCH", "from 1 to 10000, or a comma-separated list"),
    ("batch-empty-item", ["--batch", "1,,10"], "BATCH", "from 1 to 10000, or a comma-separated list"),
    ("workers-not-a-number", ["--workers", "50,abc", "--processes", "1"], "WORKERS",
     "from 1 to 1000, or a comma-separated list"),
    ("workers-list-0", ["--workers", "0,50"], "WORKERS", "from 1 to 1000, or a comma-separated list"),
    ("grid-duration", ["--processes", "1,2", "--duration", "2500ms"], "DURATION", "whole seconds"),
]


@pytest.mark.parametrize("args, param, allowed", [c[1:] for c in BAD_CALIBRATE_INPUT],
                         ids=[c[0] for c in BAD_CALIBRATE_INPUT])
def test_bad_calibration_grid_input_exits_2_with_one_line_and_touches_nothing(dsn, tmp_path, args, param, allowed):
    """``qbench calibrate --processes / --workers / --batch`` lists: a bad value is one stderr line
    naming the parameter and what is allowed, exit 2, no calibration directory, nothing in the database."""
    schemas_before = _schemas(dsn)
    results = tmp_path / "results"
    proc = qbench("calibrate", "--dsn", dsn, "--results", str(results), *args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith(f"qbench: {typed(param)}: ") and allowed in line, line
    assert proc.stdout == ""
    assert not results.exists()
    assert _schemas(dsn) == schemas_before


def test_calibration_grid_on_mariadb_is_refused_in_one_line(tmp_path):
    """The grid compares with pgbench: ``--engine mariadb`` with ``--processes`` is refused before connecting."""
    proc = qbench("calibrate", "--engine", "mariadb", "--dsn", "mysql://root@127.0.0.1:1/", "--processes", "1,2",
                  "--results", str(tmp_path / "results"), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("qbench: --processes:") and "--engine postgres" in line, line
    assert not (tmp_path / "results").exists()


# ---- Every parameter's bad values (tests/bad_values.py), through the three ways in -------------


def _toml_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def _other_axis(key: str) -> str:
    return "txn = [\"short\"]" if key != "txn" else "policy = [\"skip_locked\"]"


TABLE_CASES = [(source, p, value) for p in PARAMETERS for value in BAD_VALUES[p.key]
               for source in ("cli", "workload", "sweep")]
#: Table cases also run as a subprocess (end to end): the first parameter's first bad value, each way in.
END_TO_END = [(source, p, value) for source, p, value in TABLE_CASES if p is PARAMETERS[0] and value == BAD_VALUES[p.key][0]]


def _table_case(run, tmp_path, dsn, source, param, value):
    """``qbench run``/``sweep`` (through ``run``) with ``param`` = ``value`` given ``source``'s way."""
    results = tmp_path / "results"
    common = ["--dsn", dsn] + ([] if param.key == "results" else ["--results", str(results)])
    if source == "cli":
        return run("run", *common, f"{param.option}={value}")
    if source == "workload":
        path = tmp_path / "bad_workload.toml"
        path.write_text(f"{param.key} = {_toml_literal(value)}\n")
        return run("run", *common, "--workload", str(path))
    path = tmp_path / "bad_sweep.toml"
    path.write_text(f"[fixed]\n{param.key} = {_toml_literal(value)}\n\n[matrix]\n{_other_axis(param.key)}\n")
    return run("sweep", str(path), *common)


_RUNS = [(*case, qbench_in_process) for case in TABLE_CASES] + [(*case, qbench) for case in END_TO_END]


@pytest.mark.parametrize("source, param, value, run", _RUNS,
                         ids=[f"{s}-{p.key}-{v!r}{'' if r is qbench_in_process else '-subprocess'}"
                              for s, p, v, r in _RUNS])
def test_every_parameters_bad_values_are_refused_from_cli_workload_and_sweep_files(dsn, tmp_path, source, param, value,
                                                                                   run):
    """Each parameter's bad values (tests/bad_values.py), given on the command line, in a workload
    file or in a sweep file's [fixed] table: exit 2, one stderr line naming the parameter and what
    is allowed, nothing written, nothing created in the database. In this process; the END_TO_END cases as a
    subprocess too."""
    schemas_before, relations_before = _schemas(dsn), _relations(dsn)
    results = tmp_path / "results"
    proc = _table_case(run, tmp_path, dsn, source, param, value)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert re.match(rf"qbench( run)?: {re.escape(param.option)}: ", line) and "allowed" in line, line
    _no_results(results)
    assert _schemas(dsn) == schemas_before
    assert _relations(dsn) == relations_before


def test_the_table_gives_at_least_40_bad_input_cases():
    assert len(TABLE_CASES) >= 40 and all(BAD_VALUES.get(p.key) for p in PARAMETERS)


def test_a_refused_value_in_a_sweep_matrix_names_the_matrix_and_the_file(dsn, tmp_path):
    """A value the file's type check lets through and the parameter's range refuses: the line says where it was."""
    path = tmp_path / "far.toml"
    path.write_text('[fixed]\nworkers = 2\n\n[matrix]\nnet_delay_ms = [0, 99999]\n')
    proc = qbench_in_process("sweep", str(path), "--dsn", dsn, "--results", str(tmp_path / "results"))
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    assert "--net-delay-ms: 99999 is out of range" in line and "(in [matrix] of far.toml: net_delay_ms = 99999)" in line


# ---- Contradictory combinations and loose file types ---------------------------------------------

CONTRADICTIONS = [
    ("lease-shorter-than-reaper", ["--lease-s", "2", "--reaper-interval-s", "5"], "LEASE_S", "allowed: --lease-s >= --reaper-interval-s"),
    ("retry-cap-below-base", ["--retry-base-s", "2", "--retry-cap-s", "1"], "RETRY_CAP_S", "allowed: --retry-cap-s >= --retry-base-s"),
    ("bursts-without-rate", ["--bursts", "1-2@100"], "BURSTS", "--bursts with --rate > 0"),
    ("fault-starts-at-end", ["--duration", "10s", "--faults", "backend_kill@10-12"], "FAULTS", "start < 10"),
    ("fault-starts-after-end", ["--duration", "5s", "--faults", "late_worker@7-9"], "FAULTS", "start < 5"),
    ("burst-starts-after-end", ["--duration", "5s", "--rate", "100", "--bursts", "6-8@200"], "BURSTS", "start < 5"),
    ("plan-cache-unprepared", ["--no-prepared", "--plan-cache", "force_generic_plan"], "PLAN_CACHE", "auto with --no-prepared"),
    ("dsn-empty", ["--dsn="], "DSN", "embedded"),
    ("schema-state-suffix", ["--schema", "qbench_state"], "SCHEMA", "_state"),
    ("schema-too-long-for-its-state", ["--schema", "s" * 58], "SCHEMA", "at most 57"),
    ("producers-without-rate", ["--producers", "3"], "PRODUCERS", "allowed: --rate > 0, or leave --producers out"),
    ("future-delay-without-share", ["--rate", "10", "--future-delay-ms", "50"], "FUTURE_DELAY_MS", "allowed: --future-share > 0"),
    ("sigma-without-lognormal", ["--work-sigma", "1"], "WORK_SIGMA", "allowed: --work-dist lognormal"),
    ("slow-share-without-bimodal", ["--slow-share", "0.5"], "SLOW_SHARE", "allowed: --work-dist bimodal"),
    ("crash-without-reaper", ["--faults", "crash_after_claim@1-2"], "FAULTS", "--reaper-interval-s > 0 (or --txn hold"),
    ("autovacuum-settings-with-autovacuum-off", ["--no-autovacuum", "--autovacuum-settings", "vacuum_threshold=100"],
     "AUTOVACUUM_SETTINGS", "allowed: --autovacuum with --autovacuum-settings"),
    ("fault-option-its-kind-ignores", ["--faults", "backend_kill@1-2:share=0.5"], "FAULTS", "every_s"),
    ("empty-option-value", ["--workers="], "WORKERS", "1–1,000"),
    ("empty-policy", ["--policy="], "POLICY", "skip_locked"),
    ("empty-workload", ["--workload="], "WORKLOAD", "a name looked up in ./workloads/"),
    ("policy-spelled-with-a-dash", ["--workers=1", "--policy=SKIP-LOCKED"], "POLICY", "skip_locked"),
]


@pytest.mark.parametrize("args, param, allowed", [c[1:] for c in CONTRADICTIONS], ids=[c[0] for c in CONTRADICTIONS])
def test_contradictory_combinations_are_refused_up_front(dsn, tmp_path, args, param, allowed):
    schemas_before = _schemas(dsn)
    results = tmp_path / "results"
    dsn_args = [] if any(a.startswith("--dsn") for a in args) else ["--dsn", dsn]
    proc = qbench_in_process("run", *dsn_args, "--results", str(results), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith(f"qbench: {typed(param)}: ") and allowed in line, line
    _no_results(results)
    assert _schemas(dsn) == schemas_before


LOOSE_FILE_VALUES = [("workers", '"10"'), ("work_ms", "true"), ("policy", "1"), ("prepared", "2"),
                     ("priority_mix", "[1, 2]"), ("faults", "7"), ("duration", "false")]


@pytest.mark.parametrize("key, literal", LOOSE_FILE_VALUES, ids=[k for k, _ in LOOSE_FILE_VALUES])
def test_a_file_value_of_the_wrong_toml_type_is_refused(tmp_path, key, literal):
    """workers = "10" in a workload file is a typo TOML can see: refused, naming the key and the type."""
    path = tmp_path / "loose.toml"
    path.write_text(f"{key} = {literal}\n")
    proc = qbench_in_process("run", "--workload", str(path), "--results", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith(f"qbench: {typed(key.upper())}: ") and "TOML" in line and "allowed" in line, line


def test_a_workload_file_that_is_not_utf8_is_refused_with_one_line(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"policy = \"w\xffit\"\n")
    proc = qbench_in_process("run", "--workload", str(path), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and _one_line(proc.stderr).startswith("qbench: --workload: "), proc.stderr


def test_a_bad_file_value_is_refused_even_when_an_option_overrides_it(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text('duration = "ten"\n')
    proc = qbench_in_process("run", "--workload", str(path), "--duration", "1s", "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and _one_line(proc.stderr).startswith("qbench: --duration: "), proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_window_past_the_end_is_clipped_with_a_note():
    from bench.config.run_config import build_config

    cfg = build_config("default", {"duration": "10s", "rate": "50", "faults": "backend_kill@8-15",
                                   "bursts": "9-20@100"})
    assert [(f.start_s, f.end_s) for f in cfg.faults] == [(8.0, 10.0)]
    assert cfg.bursts == ((9.0, 10.0, 100.0),)
    assert len(cfg.notes) == 2 and all("clipped to end at 10 s" in n for n in cfg.notes), cfg.notes
    inside = build_config("default", {"duration": "10s", "faults": "backend_kill@2-10"})
    assert inside.notes == () and inside.faults[0].end_s == 10.0
