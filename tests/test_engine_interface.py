"""The engine seam: PostgreSQL implements every method of bench.engines.base.Engine, and an
engine's capabilities table refuses a parameter value it cannot honour with one line."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.run_config import build_config
from bench.engines.base import Capabilities, Engine
from bench.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _protocol_members() -> set[str]:
    return {name for name, _ in inspect.getmembers(Engine) if not name.startswith("_")} | set(Engine.__annotations__)


def test_postgres_implements_the_whole_engine_interface():
    code = ("from bench.load import swarm\nfrom bench.engines import get_engine\nimport inspect\n"
            "e = get_engine('postgres')\n"
            "print(' '.join(sorted(n for n in dir(e) if not n.startswith('_'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    missing = _protocol_members() - set(proc.stdout.split())
    assert not missing, f"PostgresEngine lacks {sorted(missing)}"


def test_the_interface_names_every_need_of_a_run():
    """The issue's list: connect and check, prepare and seed, sessions, reaper, mover, monitor,
    audit, plans and statement statistics, fault actions, capabilities."""
    for name in ("connect", "claim_schema", "prepare", "sessions", "reaper", "mover", "monitor", "audit",
                 "capture_plans", "workers_plan", "statement_stats_read", "hold_snapshot", "kill_one_worker",
                 "capabilities"):
        assert name in _protocol_members(), name


def test_a_value_the_engine_cannot_honour_is_refused_with_one_line():
    cfg = build_config("default", {"index": "partial"}).public()
    caps = Capabilities(engine="someengine", allowed={"index": ("none", "status", "composite")},
                        reasons={"index": "it has no partial indexes"})
    with pytest.raises(ConfigError) as err:
        caps.check(cfg)
    line = str(err.value)
    assert line.startswith("INDEX: 'partial' is not supported on someengine (it has no partial indexes)")
    assert "allowed: none, status, composite" in line and "\n" not in line
    caps.check(build_config("default", {"index": "composite"}).public())  # a value it has: no error
    Capabilities(engine="postgres").check(cfg)
