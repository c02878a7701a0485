"""gevent's monkey-patching, applied once at each entry point of a process that runs load.

Call :func:`patch` before anything imports a database driver: psycopg 3 picks its wait function
when it is imported, a cooperative one (``wait_poll``/``wait_select`` on the patched ``select``)
only if ``select`` is already patched; the C ``wait_c`` would freeze every greenlet of the process
while one waits on a row lock (psycopg ``psycopg/waiting.py``, ``_is_select_patched``). The
engine's ``check_cooperative`` verifies it and the run refuses to start otherwise.

The entry points: ``qbench``'s :func:`bench.cli.main.main` for the commands that run load,
``python -m bench.load.worker_process``, and the test suite's ``tests/conftest.py``. Imports
nothing from queue-bench, so every layer may import it.
"""

from __future__ import annotations


def patch() -> None:
    """Monkey-patch the standard library for gevent (a no-op when already done), and let a Ctrl-C
    through gevent's hub unprinted: it is the user's, not a failure of the greenlet it lands in
    (it still reaches the main greenlet as KeyboardInterrupt, and the command says one line)."""
    import gevent  # here, not at the top: qbench imports this module for every command, --help too, and
    from gevent import monkey  # gevent takes ~0.2 s to import, which only the commands that run load pay

    if not monkey.is_module_patched("select"):
        monkey.patch_all()
    hub = gevent.get_hub()
    if KeyboardInterrupt not in hub.NOT_ERROR:
        hub.NOT_ERROR = (*hub.NOT_ERROR, KeyboardInterrupt)
