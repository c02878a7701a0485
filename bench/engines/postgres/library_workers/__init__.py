"""A queue library's own worker (``LIBRARY_MODE=worker``) in processes of its own,
``python -m bench.engines.postgres.library_workers <package>``, speaking JSON lines on its standard streams
(the messages: docs/architecture.md, "The load layer")."""

from __future__ import annotations

import sys

#: The environment variable that carries the DSN to a library worker process.
DSN_ENV = "QBENCH_LIBRARY_DSN"
#: The libraries' own command lines (standalone_*): the tool's schema and each job's sleep (ms).
SCHEMA_ENV, WORK_MS_ENV = "QBENCH_LIBRARY_SCHEMA", "QBENCH_LIBRARY_WORK_MS"
#: The libraries whose own worker is built here: package -> module of this package.
ADAPTERS = {"procrastinate": "procrastinate_worker", "pgqueuer": "pgqueuer_worker"}


def command(package: str) -> list[str]:
    """The argv of one library worker process for ``package`` (a key of :data:`ADAPTERS`)."""
    return [sys.executable, "-m", __name__, package]
