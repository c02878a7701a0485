"""The child process of tests/test_swarm.py: ``python tests/unpatched_child.py``.

A process that imports psycopg before anything patches gevent (what the entry point's patching
prevents), then asks the PostgreSQL engine whether its sessions would wait cooperatively: it must
raise NotCooperativeError naming psycopg's blocking ``wait_c``, and the process exits non-zero.
"""

from __future__ import annotations

import psycopg  # noqa: F401 - first, before gevent patches select: psycopg picks wait_c

from bench.config.run_config import build_config
from bench.engines import get_engine

if __name__ == "__main__":
    get_engine("postgres").sessions("", build_config()).check_cooperative()
