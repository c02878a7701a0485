"""The child process of tests/test_compare_report.py: ``python tests/render_child.py SWEEP_DIR``.

Renders the sweep's report in a fresh interpreter (the test process has imported the drivers and is
patched for gevent) and prints the page's path, then the sorted list of the database and load modules
the rendering imported: ``[]`` when data flows one way (a report needs its files alone).
"""

from __future__ import annotations

import sys

from bench.report.sweep_page import render_sweep_report

#: Modules a report must never import: a driver, an engine's database code, the run, the load.
FORBIDDEN = ("psycopg", "pymysql", "bench.engines.postgres.db", "bench.runner", "bench.load.swarm")

if __name__ == "__main__":
    print(render_sweep_report(sys.argv[1]))
    print(sorted(m for m in FORBIDDEN if m in sys.modules))
