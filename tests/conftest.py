"""Shared fixtures: a throwaway PostgreSQL database per test module, and a helper
that runs ``qbench`` as a user would (a subprocess), against the real server.

The server is the one on 127.0.0.1:5432 (trust auth) unless QBENCH_TEST_DSN names
another maintenance database to create throwaway databases from.

The test process is patched for gevent here, once, before anything imports a database driver, as
``qbench`` patches itself at its entry point (:mod:`bench.gevent_patch`): the tests import the load,
the run and the engines at the top of their modules and call them in this process.
"""

from __future__ import annotations

from bench.gevent_patch import patch

patch()  # first: psycopg picks its wait function when it is imported

import json
import contextlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
import pymysql
import pytest
from psycopg import sql

from bench.engines.mariadb.dsn import connect_args
from bench.run_summary.suspect import busiest_others
from quiet import WAITS, judged_busy, wait_for_quiet

ADMIN_DSN = os.environ.get("QBENCH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
REPO = Path(__file__).resolve().parent.parent

# Tests that run `make` want what a user's shell gives it, not what `make test` passes its children:
# MAKELEVEL adds "Entering directory" lines, MAKEFLAGS carries the outer command line's variables.
# DATABASE_URL would pick the database of every qbench and make command a test runs. QBENCH_VIA_MAKE (which
# `make test` exports) would write every hint of a qbench command a test runs in Make syntax (bench/usage.py).
for _name in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "DATABASE_URL", "QBENCH_VIA_MAKE"):
    os.environ.pop(_name, None)


def _dsn_for(dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**params)


@contextlib.contextmanager
def fresh_database():
    """DSN of a new database, dropped (with its connections) after the block."""
    name = f"qbench_test_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _dsn_for(name)
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def dsn():
    """DSN of a fresh database, dropped (with its connections) after the module."""
    with fresh_database() as fresh:
        yield fresh


def qbench(*args: str, timeout: float = 300, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m bench.cli.main ARGS`` and return the completed process (text output);
    ``env``: the whole environment it gets (default: this process's)."""
    return subprocess.run([sys.executable, "-m", "bench.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, env=env)


def run_and_load(dsn: str, results: Path, *args: str, timeout: float = 300, expect: int = 0,
                 quiet: bool = False) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """Run ``qbench run`` against ``dsn`` writing into ``results``; return (run_dir, summary, process).

    Fails the test with qbench's output when it exits with another status than ``expect``
    (3: invariants broken, 4: an SLO missed; ``bench.errors``). ``quiet``: for a test whose figures another
    program's load would move: wait for a quiet machine first, and run once more when the run was judged busy
    (tests/quiet.py).
    """
    if quiet:
        wait_for_quiet(" ".join(args))
    run_dir, summary, proc = _run_and_load(dsn, results, args, timeout, expect)
    if quiet and judged_busy(summary):
        wait_for_quiet(f"{' '.join(args)} (judged busy)")
        run_dir, summary, proc = _run_and_load(dsn, results, args, timeout, expect)
    return run_dir, summary, proc


def _run_and_load(dsn: str, results: Path, args: tuple[str, ...], timeout: float,
                  expect: int) -> tuple[Path, dict, subprocess.CompletedProcess]:
    proc = qbench("run", "--dsn", dsn, "--results", str(results), *args, timeout=timeout)
    assert proc.returncode == expect, f"qbench run exited {proc.returncode}, not {expect}:\n{proc.stdout}\n{proc.stderr}"
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    assert runs, "no run directory written"
    run_dir = runs[-1]
    return run_dir, json.loads((run_dir / "summary.json").read_text()), proc


#: The end-of-run audit's invariants, all zero on a correct run.
CLEAN_INVARIANTS = {"double_claims": 0, "lost_jobs": 0, "duplicated_jobs": 0, "over_claims": 0,
                    "stale_completions_applied": 0, "double_completions": 0}


#: The MariaDB server the MariaDB tests use (its own databases are the tool's "schemas").
MARIADB_DSN = os.environ.get("QBENCH_TEST_MARIADB_DSN", "mysql://root@127.0.0.1:3306/")


@pytest.fixture
def maria_schema():
    """(MariaDB DSN, a fresh schema name); the database of that name is dropped after the test."""
    name = f"qbench_m_{secrets.token_hex(4)}"
    yield MARIADB_DSN, name
    conn = pymysql.connect(**connect_args(MARIADB_DSN), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


def pytest_terminal_summary(terminalreporter):
    """Every wait for a quiet machine (tests/quiet.py), with the busiest processes seen as it began."""
    for what, waited_s, quiet, busiest in WAITS:
        named = busiest_others({"outside_processes": busiest}) or " (none named)"
        terminalreporter.write_line(f"waited {waited_s:.0f} s for a quiet machine before {what}"
                                    f"{'' if quiet else ' (the budget ran out: measured busy)'}{named}")
