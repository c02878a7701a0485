"""Where the data files shipped inside the package live: the one place that names them (docs/architecture.md,
"The repository's directories"). No code here: every layer may import these paths."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
WORKLOADS_DIR = DATA_DIR / "workloads"
SWEEPS_DIR = WORKLOADS_DIR / "sweeps"
EXPERIMENTS_DIR = WORKLOADS_DIR / "experiments"
SCHEMAS_DIR = DATA_DIR / "schemas"
QUEUES_DIR = DATA_DIR / "queues"
TEMPLATES_DIR = DATA_DIR / "templates"
