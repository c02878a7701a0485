"""Where the data files shipped inside the package live: the one place that names them.

``pip install`` (a wheel: ``[tool.setuptools.package-data]`` in ``pyproject.toml``) and an editable
install from a checkout both carry them here, so the tool runs from any directory:

- ``workloads/`` the named workload files, with ``sweeps/`` and ``experiments/`` under it;
- ``schemas/<engine>/`` the queue table's DDL, index variants and layouts, per engine;
- ``queues/<name>/queue.toml`` the shipped queue definitions;
- ``templates/`` the report pages' Jinja templates.

A user's own workloads, sweeps and queues are looked up in the working directory first
(:mod:`bench.config.lookup`). No code here: every layer may import these paths.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
WORKLOADS_DIR = DATA_DIR / "workloads"
SWEEPS_DIR = WORKLOADS_DIR / "sweeps"
EXPERIMENTS_DIR = WORKLOADS_DIR / "experiments"
SCHEMAS_DIR = DATA_DIR / "schemas"
QUEUES_DIR = DATA_DIR / "queues"
TEMPLATES_DIR = DATA_DIR / "templates"
