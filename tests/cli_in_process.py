"""``qbench`` run in the test process, for input refused before any load: the CLI's entry function
(:func:`bench.cli.main.main`) with ``argv``, its stdout, stderr and exit status captured.

The load needs gevent's monkey-patching (:mod:`bench.load.swarm`, imported before any database
driver), which must never happen in the pytest process: while a call runs, importing that module
raises ImportError, so input that reaches the load fails the test instead of patching. After the
call, ``select`` must still be the unpatched one.
"""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SWARM = "bench.load.swarm"
_MISSING = object()


def _patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and monkey.is_module_patched("select"))


@contextlib.contextmanager
def _load_forbidden():
    """Within the block, ``from bench.load import swarm`` raises ImportError."""
    import bench.load as load_package

    module = sys.modules.get(SWARM, _MISSING)
    attribute = load_package.__dict__.pop("swarm", _MISSING)
    sys.modules[SWARM] = None  # the import system's "halted" marker
    try:
        yield
    finally:
        if module is _MISSING:
            sys.modules.pop(SWARM, None)
        else:
            sys.modules[SWARM] = module
        if attribute is not _MISSING:
            load_package.swarm = attribute


def qbench_in_process(*argv: str) -> subprocess.CompletedProcess:
    """``qbench ARGV`` through :func:`bench.cli.main.main` in this process, from the repository's
    directory; returns a CompletedProcess (returncode, stdout, stderr as text) like
    :func:`conftest.qbench`. Signal handlers main() installs are put back."""
    from bench.cli.main import main

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    try:
        with _load_forbidden(), contextlib.chdir(REPO), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's errors and --help
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert not _patched(), "gevent patched select in the pytest process"
    return subprocess.CompletedProcess(["qbench", *argv], code, out.getvalue(), err.getvalue())
