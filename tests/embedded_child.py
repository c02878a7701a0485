"""The child process of tests/test_embedded.py: ``python tests/embedded_child.py ENGINE MODE``.

Starts ENGINE's embedded server (postgres, mariadb; or ``pgbouncer``: the embedded pooler in front of the
test server, ``QBENCH_TEST_DSN`` or 127.0.0.1:5432), prints ``DSN DATA_DIR`` and then ends as MODE says: ``sigint`` and ``sigterm`` signal itself inside the block, ``atexit`` exits without leaving
the block (the atexit fallback must stop the server), ``sigkill`` waits to be killed by the test.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time

from bench.engines.mariadb.embedded import embedded_mariadb
from bench.engines.postgres.embedded import embedded_postgres
from bench.engines.postgres.pooler.pgbouncer import embedded_pgbouncer

#: The server the pooler is started in front of (conftest.py's ADMIN_DSN; conftest itself patches gevent).
UPSTREAM = os.environ.get("QBENCH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
START = {"postgres": embedded_postgres, "mariadb": embedded_mariadb,
         "pgbouncer": lambda clients, log: embedded_pgbouncer(UPSTREAM, "transaction", 2, clients, log=log)}


def main(engine: str, mode: str) -> None:
    lines: list[str] = []

    def announce(dsn: str) -> None:
        root = next(line for line in lines if "starting in " in line).split("starting in ")[1].split(" on port")[0]
        print(getattr(dsn, "dsn", dsn), pathlib.Path(root, "data"), flush=True)

    if mode == "atexit":
        cm = START[engine](10, log=lines.append)
        announce(cm.__enter__())  # never exited: the atexit fallback must stop it
        sys.exit(0)
    with START[engine](10, log=lines.append) as dsn:
        announce(dsn)
        if mode == "sigkill":
            time.sleep(60)  # the test kills this process
        os.kill(os.getpid(), signal.SIGINT if mode == "sigint" else signal.SIGTERM)
        time.sleep(30)


if __name__ == "__main__":
    main(*sys.argv[1:3])
