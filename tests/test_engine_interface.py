"""The engine seam, over every engine and every queue kind: each gives what bench.engines.base.Engine's shared
flows need, answers the calls a run makes before the load, and keeps the one schema rule; an engine's
capabilities refuse a parameter value it cannot honour with one line, and are what the callers read."""

from __future__ import annotations

import dataclasses
import inspect
import secrets

import pytest

from bench.config.run_config import build_config
from bench.engines import ENGINES, capabilities, engine_for, get_engine
from bench.engines.base import Engine
from bench.engines.ownership import SCHEMA_MARK
from bench.errors import ConfigError
from conftest import MARIADB_DSN

PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DSNS = {"postgres": PG_DSN, "mariadb": MARIADB_DSN}


def _installed(package: str) -> bool:
    try:
        __import__(package)
    except ImportError:
        return False
    return True


#: (engine, QUEUE): the built-in queue on each engine, a queue definition, and each library adapter installed.
KINDS = [("postgres", "builtin"), ("mariadb", "builtin"), ("postgres", "tasks")] + [
    ("postgres", library) for library in ("procrastinate", "pgqueuer") if _installed(library)]
#: What an engine must give the shared flows of :class:`Engine` (its adapter), and the methods each engine
#: writes itself (the base has no flow for them).
ADAPTER = ("name", "capabilities", "driver", "db", "plans", "probes", "faults", "worker_session",
           "producer_session", "cooperative_wait", "reaper_task")
OWN = ("monitor", "workers_plan", "plans_summary", "audit", "completed_per_queue")

@pytest.mark.parametrize(("engine", "queue"), KINDS)
def test_every_engine_and_queue_kind_gives_the_whole_interface(engine, queue):
    """Every member of Engine is there, the methods the base leaves to an engine are written, and its driver
    waits cooperatively (this process is patched for gevent before any driver import, by conftest.py)."""
    cfg = build_config("default", {"engine": engine, "queue": queue})
    found = engine_for(cfg)
    members = [n for n in dir(Engine) if not n.startswith("_")] + list(Engine.__annotations__)
    assert [n for n in members if not hasattr(found, n)] == []
    assert [n for n in OWN if getattr(type(found), n) is getattr(Engine, n)] == []
    assert found.sessions(DSNS[engine], cfg).check_cooperative()
    assert found.capabilities.recorded()["engine"] == engine


@pytest.mark.parametrize("name", ENGINES)
def test_each_engine_sets_its_adapter_and_its_flags_once(name):
    engine = get_engine(name)
    assert isinstance(engine, Engine) and engine.name == name
    assert all(getattr(engine, a, None) is not None for a in ADAPTER), [a for a in ADAPTER if getattr(engine, a, None) is None]
    assert engine.capabilities is capabilities(name)
    recorded = engine.capabilities.recorded()
    assert {"vacuum", "statement_stats", "table_rows_estimated", "kill_reaches_other_processes", "calibrator",
            "nowait_error", "label"} <= set(recorded) and "allowed" not in recorded
    # an engine without the archive layout or the periodic VACUUM refuses them before anything runs
    if type(engine).mover is Engine.mover:
        assert engine.capabilities.allowed.get("layout") and "archive" not in engine.capabilities.allowed["layout"]
    if type(engine).vacuumer is Engine.vacuumer:
        assert engine.capabilities.allowed.get("vacuum_every_s") == ("n/a",)


#: The counter key and the first line each engine's driver gives a syntax error.
SYNTAX_ERROR = {"postgres": ("42601", "syntax error"), "mariadb": ("mysql_1064", "You have an error in your SQL syntax")}
#: A statement of one second, and the counter key of its cancellation by a statement timeout.
SLEEP = {"postgres": ("SELECT pg_sleep(1)", "57014"), "mariadb": ("SELECT SLEEP(1)", "mysql_1969")}


@pytest.mark.parametrize("name", ENGINES)
def test_each_engines_driver_adapter_runs_a_statement_and_names_its_error(name):
    """The driver adapter on a real server: a statement runs and its rows come back; a bad one raises one of its
    errors, whose kind is the server's code and whose first line is the server's message; a statement timeout
    cancels a longer statement; a closed connection is broken and not alive."""
    driver = get_engine(name).driver
    conn = driver.connect(DSNS[name], application_name="queue-bench driver test")
    driver.execute(conn, "SELECT 1")
    with pytest.raises(driver.errors) as err:
        driver.execute(conn, "SELEC 1")
    kind, message = SYNTAX_ERROR[name]
    assert driver.error_kind(err.value, conn) == kind
    assert driver.first_line(err.value).startswith(message) and "\n" not in driver.first_line(err.value)
    driver.after_error(conn)
    assert driver.is_alive(conn) and not driver.is_broken(conn)
    assert driver.fetch(conn, "SELECT 1, 2", None, False) == (1, 2)
    assert [tuple(r) for r in driver.fetch(conn, "SELECT 1 UNION ALL SELECT 2", None, True)] == [(1,), (2,)]
    driver.statement_timeout(conn, 50)
    sleep, cancelled = SLEEP[name]
    with pytest.raises(driver.errors) as err:
        driver.fetch(conn, sleep, None, False)
    assert driver.error_kind(err.value, conn) == cancelled
    conn.close()
    assert not driver.is_alive(conn) and driver.is_broken(conn)


@pytest.mark.parametrize("name", ENGINES)
def test_before_the_load_an_engine_answers_the_run(name):
    """connect, server_info (with the capabilities run.json records), is_alive, check_schema on an absent schema."""
    engine = get_engine(name)
    conn = engine.connect(DSNS[name], "queue-bench interface test")
    try:
        info = engine.server_info(conn)
        assert info["server_version"] and info["engine_capabilities"] == engine.capabilities.recorded()
        assert engine.is_alive(conn)
        room = engine.check_schema(conn, f"qbench_if_{secrets.token_hex(4)}", 1)
        assert room["available"] >= 1 and room["max_connections"] >= room["available"]
        with pytest.raises(ConfigError) as err:
            engine.check_schema(conn, f"qbench_if_{secrets.token_hex(4)}", 10**6)
        assert err.value.param == "WORKERS"
    finally:
        conn.close()


_DEPENDENT = {  # (create the tool's schema with a table, a dependent outside it, drop both)
    "postgres": (["CREATE SCHEMA {s}", "COMMENT ON SCHEMA {s} IS '{mark}'", "CREATE TABLE {s}.jobs (id bigint PRIMARY KEY)",
                  "CREATE SCHEMA {s}_user", "CREATE VIEW {s}_user.v AS SELECT id FROM {s}.jobs"],
                 "view {s}_user.v", ["DROP SCHEMA IF EXISTS {s}_user CASCADE", "DROP SCHEMA IF EXISTS {s} CASCADE"]),
    "mariadb": (["CREATE DATABASE {s} COMMENT '{mark}'", "CREATE TABLE {s}.jobs (id BIGINT PRIMARY KEY)",
                 "CREATE DATABASE {s}_user", "CREATE VIEW {s}_user.v AS SELECT id FROM `{s}`.jobs"],
                "view {s}_user.v", ["DROP DATABASE IF EXISTS {s}_user", "DROP DATABASE IF EXISTS {s}"]),
}


@pytest.mark.parametrize("name", ENGINES)
def test_the_tools_schema_others_depend_on_is_refused_before_anything_is_created(name):
    """One rule on every engine: the tool's own schema with a dependent outside it is refused when it is
    checked (check_schema, claim_schema: a sweep's and a run's first step), not only when it would be dropped;
    the lock is not taken, and nothing is dropped."""
    engine, schema = get_engine(name), f"qbench_dep_{secrets.token_hex(3)}"
    create, dependent, drop = _DEPENDENT[name]
    conn = engine.connect(DSNS[name], "queue-bench interface test")
    run = lambda text: _execute(engine, conn, text.format(s=schema, mark=SCHEMA_MARK))  # noqa: E731
    try:
        for text in create:
            run(text)
        for call in (engine.check_schema, engine.claim_schema):
            with pytest.raises(ConfigError) as err:
                call(conn, schema, 1)
            assert err.value.param == "SCHEMA" and dependent.format(s=schema) in str(err.value), str(err.value)
        assert engine.db.OWNERSHIP.try_lock(conn, schema)  # the refused claim did not take it
        engine.db.OWNERSHIP.unlock(conn, schema)
        with pytest.raises(ConfigError):
            engine.db.OWNERSHIP.drop(conn, schema)
        assert engine.db.OWNERSHIP.state(conn, schema) == "ours"
    finally:
        for text in drop:
            run(text)
        conn.close()


def _execute(engine, conn, text: str) -> bool:
    if engine.name == "mariadb":
        engine.db.execute(conn, text)
    else:
        conn.execute(text)
    return True


def test_the_interface_names_every_need_of_a_run():
    """The issue's list: connect and check, prepare and seed, sessions, reaper, mover, monitor,
    audit, plans and statement statistics, fault actions, capabilities."""
    members = {name for name, _ in inspect.getmembers(Engine) if not name.startswith("_")} | set(Engine.__annotations__)
    for name in ("connect", "claim_schema", "prepare", "sessions", "reaper", "mover", "monitor", "audit",
                 "capture_plans", "workers_plan", "statement_stats_read", "hold_snapshot", "kill_one_worker",
                 "capabilities"):
        assert name in members, name


def test_a_value_the_engine_cannot_honour_is_refused_with_one_line():
    cfg = build_config("default", {"index": "partial"}).public()
    caps = dataclasses.replace(capabilities("postgres"), engine="someengine",
                               allowed={"index": ("none", "status", "composite")},
                               reasons={"index": "it has no partial indexes"})
    with pytest.raises(ConfigError) as err:
        caps.check(cfg)
    line = str(err.value)
    assert line.startswith("--index: 'partial' is not supported on someengine (it has no partial indexes)")
    assert "allowed: none, status, composite" in line and "\n" not in line
    caps.check(build_config("default", {"index": "composite"}).public())  # a value it has: no error
    dataclasses.replace(caps, allowed={}).check(cfg)


def test_the_configuration_reads_the_flag_not_the_name():
    """backend_kill with PROCESSES > 1 is refused where the engine's kill cannot reach other processes."""
    faults = {"processes": 2, "workers": 2, "faults": "backend_kill@1-2"}
    assert capabilities("postgres").kill_reaches_other_processes
    build_config("default", {**faults, "engine": "postgres"})
    assert not capabilities("mariadb").kill_reaches_other_processes
    with pytest.raises(ConfigError) as err:
        build_config("default", {**faults, "engine": "mariadb"})
    assert str(err.value).startswith("--faults: backend_kill on MariaDB")
