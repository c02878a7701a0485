"""``qbench`` run in the test process, for input refused before any load: the CLI's entry function
(:func:`bench.cli.main.main`) with ``argv``, its stdout, stderr and exit status captured.

The test process is patched for gevent once, by ``conftest.py``, as ``qbench`` patches itself at its
entry point. A refusal must come before the command reaches a database: while a call runs, getting an
engine or an embedded server (:func:`bench.engines.get_engine`, :func:`~bench.engines.engine_for`,
:func:`~bench.engines.embedded_server`, which the run, the sweep, the plan and the capacity search all
go through, and which load bench/engines/<name>/'s modules through one function) fails the test
instead of connecting, starting a server or running load.
"""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
from pathlib import Path

import bench.engines as engines
from bench.cli.main import main

REPO = Path(__file__).resolve().parent.parent
#: The submodules of bench/engines/<name>/ that reach a server: the engine (built-in or a queue definition's),
#: the embedded server and the embedded pooler.
REACHING = ("engine", "defined_engine", "embedded", "pooler")


@contextlib.contextmanager
def _database_forbidden():
    """Within the block, getting an engine or an embedded server raises AssertionError."""
    module = engines._module  # noqa: SLF001 - the one door to bench/engines/<name>/

    def guarded_module(name: str, sub: str = ""):
        assert sub not in REACHING, f"input reached the database (bench.engines.{name}.{sub}) instead of a refusal"
        return module(name, sub)

    engines._module = guarded_module  # noqa: SLF001
    try:
        yield
    finally:
        engines._module = module  # noqa: SLF001


def qbench_in_process(*argv: str) -> subprocess.CompletedProcess:
    """``qbench ARGV`` through :func:`bench.cli.main.main` in this process, from the repository's
    directory; returns a CompletedProcess (returncode, stdout, stderr as text) like
    :func:`conftest.qbench`. Signal handlers main() installs are put back."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    try:
        with _database_forbidden(), contextlib.chdir(REPO), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's errors and --help
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["qbench", *argv], code, out.getvalue(), err.getvalue())
